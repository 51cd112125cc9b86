package client

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeWall is a wall clock that moves only when the renewal loop waits.
type fakeWall struct {
	mu    sync.Mutex
	t     time.Time
	waits []time.Duration
}

func (f *fakeWall) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeWall) after(d time.Duration) <-chan time.Time {
	time.Sleep(time.Millisecond) // let the test look between steps
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.waits = append(f.waits, d)
	f.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- f.t
	return ch
}

type swapToken struct {
	mu  sync.Mutex
	tok string
}

func (s *swapToken) Token(context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tok, nil
}
func (s *swapToken) set(t string) { s.mu.Lock(); s.tok = t; s.mu.Unlock() }

// The schedule and the failure handling of the renewal, on a fake wall
// clock: no renewal before 2/3 of the lifetime minus the jitter bound;
// transient failures retried with growing delays and counted; a refusal is
// final and makes Token fail with UNAUTHENTICATED; a new base token is
// adopted and renewed again.
func TestRenewingSourceSchedule(t *testing.T) {
	wall := &fakeWall{t: time.Unix(1_800_000_000, 0)}
	sk, err := auth.GenerateSigningKey()
	require.NoError(t, err)
	iss, err := auth.NewIssuer(sk, wall.now)
	require.NoError(t, err)
	first, fcl, err := iss.Issue(auth.TokenRoleNamespace, "ns", 0, 15*time.Minute)
	require.NoError(t, err)
	base := &swapToken{tok: first}

	var mu sync.Mutex
	var calls []time.Time
	var presented []string
	fail := 2        // transient failures before a success
	var refuse error // set: every call is refused
	r := &renewingSource{base: base, log: slog.New(slog.DiscardHandler), count: renewalCounter(nil),
		now: wall.now, after: wall.after, wake: make(chan struct{}, 1)}
	r.issue = func(ctx context.Context, ns string, ttl time.Duration) (string, error) {
		tok, _ := r.Token(ctx) // what the per-RPC credentials of the call present
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, wall.now())
		presented = append(presented, tok)
		assert.Equal(t, "ns", ns)
		assert.Equal(t, 15*time.Minute, ttl)
		if refuse != nil {
			return "", refuse
		}
		if fail > 0 {
			fail--
			return "", &zerr.UnavailableError{What: "arbiter", Reason: "test"}
		}
		tok, _, err := iss.Issue(auth.TokenRoleNamespace, ns, 0, ttl)
		return tok, err
	}
	got, err := r.Token(context.Background())
	require.NoError(t, err)
	require.Equal(t, first, got)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	require.Eventually(t, func() bool { return testutil.ToFloat64(r.count.WithLabelValues("ok")) >= 1 }, 10*time.Second, time.Millisecond)
	mu.Lock()
	require.GreaterOrEqual(t, len(calls), 3)
	earliest := fcl.IssuedAt.Add(10 * time.Minute).Add(-90 * time.Second)
	assert.False(t, calls[0].Before(earliest), "first attempt at %v, not before 2/3 of the lifetime minus 1/10 (%v)", calls[0], earliest)
	assert.False(t, calls[0].After(fcl.IssuedAt.Add(10*time.Minute)), "first attempt by 2/3 of the lifetime")
	assert.GreaterOrEqual(t, calls[1].Sub(calls[0]), renewalRetryMin, "retry after at least 1 s")
	assert.Greater(t, calls[2].Sub(calls[1]), calls[1].Sub(calls[0]), "backoff grows")
	assert.Equal(t, first, presented[0], "the renewal presents the current token")
	mu.Unlock()
	assert.Equal(t, float64(2), testutil.ToFloat64(r.count.WithLabelValues("error")))
	renewed, err := r.Token(context.Background())
	require.NoError(t, err)
	assert.NotEqual(t, first, renewed)

	// Revoked: the next renewal is refused; calls fail at once, clearly.
	mu.Lock()
	refuse = &zerr.UnauthenticatedError{Reason: "token revoked"}
	mu.Unlock()
	require.Eventually(t, func() bool { return testutil.ToFloat64(r.count.WithLabelValues("refused")) == 1 }, 10*time.Second, time.Millisecond)
	_, err = r.Token(context.Background())
	assert.Equal(t, codes.Unauthenticated, status.Code(err))
	assert.ErrorIs(t, rpcerr.FromError(err), zerr.ErrUnauthenticated, "round-trips through the one error table as a typed error")
	assert.Contains(t, err.Error(), "can no longer be renewed")
	assert.Contains(t, err.Error(), "token revoked")
	mu.Lock()
	n := len(calls)
	mu.Unlock()
	// many fake minutes: the loop goes on waking (each wait moves the fake
	// wall clock) and would have retried by then
	wall.mu.Lock()
	w0 := len(wall.waits)
	wall.mu.Unlock()
	require.Eventually(t, func() bool {
		wall.mu.Lock()
		defer wall.mu.Unlock()
		return len(wall.waits) >= w0+24
	}, time.Minute, time.Millisecond, "the renewal loop runs on")
	mu.Lock()
	assert.Equal(t, n, len(calls), "a refused token is not retried")
	refuse = nil
	mu.Unlock()

	// The operator rotates the file: the new token is used and renewed.
	rotated, _, err := iss.Issue(auth.TokenRoleNamespace, "ns", 1, 15*time.Minute)
	require.NoError(t, err)
	base.set(rotated)
	got, err = r.Token(context.Background())
	require.NoError(t, err)
	assert.Equal(t, rotated, got)
	require.Eventually(t, func() bool { return testutil.ToFloat64(r.count.WithLabelValues("ok")) >= 2 }, 10*time.Second, time.Millisecond)
	mu.Lock()
	assert.Equal(t, rotated, presented[len(presented)-1])
	mu.Unlock()
}

// Tokens that are not namespace tokens pass through and are never renewed.
func TestRenewingSourcePassesOtherTokens(t *testing.T) {
	wall := &fakeWall{t: time.Now()}
	issued := 0
	r := &renewingSource{base: auth.StaticToken("zfa_not-a-namespace-token"), log: slog.New(slog.DiscardHandler), count: renewalCounter(nil),
		now: wall.now, after: wall.after, wake: make(chan struct{}, 1),
		issue: func(context.Context, string, time.Duration) (string, error) { issued++; return "", nil }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.run(ctx); close(done) }()
	// the loop has decided (and would have renewed) several times over
	require.Eventually(t, func() bool {
		wall.mu.Lock()
		defer wall.mu.Unlock()
		return len(wall.waits) >= 3
	}, time.Minute, time.Millisecond, "the renewal loop runs")
	cancel()
	<-done
	tok, err := r.Token(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "zfa_not-a-namespace-token", tok)
	assert.Zero(t, issued)
}
