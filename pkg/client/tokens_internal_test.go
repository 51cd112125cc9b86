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

// fakeWall is a wall clock that the test steps. The renewal loop's wait
// (after) parks until step moves the clock by that wait and fires it; step
// returns once the loop waits again, so all the loop did at the new time
// (renewal attempts included) is complete when the test looks.
type fakeWall struct {
	mu      sync.Mutex
	t       time.Time
	waits   []time.Duration // the waits stepped through
	pending *parkedWait     // the loop's latest wait, not yet stepped
	parked  chan struct{}   // cap 1: the loop parked a wait
}

type parkedWait struct {
	d    time.Duration
	fire chan time.Time // cap 1
}

func newFakeWall(t0 time.Time) *fakeWall {
	return &fakeWall{t: t0, parked: make(chan struct{}, 1)}
}

func (f *fakeWall) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }

// after is the loop's wait. A wait the loop left for another event (its
// wake channel) is replaced by its next one.
func (f *fakeWall) after(d time.Duration) <-chan time.Time {
	w := &parkedWait{d: d, fire: make(chan time.Time, 1)}
	f.mu.Lock()
	f.pending = w
	f.mu.Unlock()
	select {
	case f.parked <- struct{}{}:
	default:
	}
	return w.fire
}

// take waits until the loop parks a wait and takes it. The bound only
// turns a loop that never waits again into a failure.
func (f *fakeWall) take(t *testing.T) *parkedWait {
	t.Helper()
	for {
		f.mu.Lock()
		w := f.pending
		f.pending = nil
		f.mu.Unlock()
		if w != nil {
			return w
		}
		select {
		case <-f.parked:
		case <-time.After(time.Minute):
			require.FailNow(t, "the renewal loop does not wait")
		}
	}
}

// step moves the clock by the loop's wait, fires it, and returns once the
// loop waits again.
func (f *fakeWall) step(t *testing.T) {
	t.Helper()
	w := f.take(t)
	f.mu.Lock()
	f.t = f.t.Add(w.d)
	f.waits = append(f.waits, w.d)
	now := f.t
	f.mu.Unlock()
	w.fire <- now
	f.await(t)
}

// await returns once the loop waits (without taking the wait).
func (f *fakeWall) await(t *testing.T) {
	t.Helper()
	w := f.take(t)
	f.mu.Lock()
	if f.pending == nil {
		f.pending = w
	}
	f.mu.Unlock()
}

// stepUntil steps until cond holds, at most max steps.
func (f *fakeWall) stepUntil(t *testing.T, max int, cond func() bool, msg string) {
	t.Helper()
	for i := 0; !cond(); i++ {
		require.Less(t, i, max, "after %d steps of the fake wall clock: %s", i, msg)
		f.step(t)
	}
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
	wall := newFakeWall(time.Unix(1_800_000_000, 0))
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

	// the first renewal is due 10 min in, the loop wakes every 5 s or less
	wall.stepUntil(t, 1000, func() bool { return testutil.ToFloat64(r.count.WithLabelValues("ok")) >= 1 }, "renewed")
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
	wall.stepUntil(t, 1000, func() bool { return testutil.ToFloat64(r.count.WithLabelValues("refused")) == 1 }, "refused")
	_, err = r.Token(context.Background())
	assert.Equal(t, codes.Unauthenticated, status.Code(err))
	assert.ErrorIs(t, rpcerr.FromError(err), zerr.ErrUnauthenticated, "round-trips through the one error table as a typed error")
	assert.Contains(t, err.Error(), "can no longer be renewed")
	assert.Contains(t, err.Error(), "token revoked")
	mu.Lock()
	n := len(calls)
	mu.Unlock()
	// two fake minutes and more: the loop goes on waking and would have
	// retried by then
	t0 := wall.now()
	for i := 0; i < 24; i++ {
		wall.step(t)
	}
	require.GreaterOrEqual(t, wall.now().Sub(t0), 2*time.Minute)
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
	wall.stepUntil(t, 1000, func() bool { return testutil.ToFloat64(r.count.WithLabelValues("ok")) >= 2 }, "the rotated token renewed")
	mu.Lock()
	assert.Equal(t, rotated, presented[len(presented)-1])
	mu.Unlock()
}

// Tokens that are not namespace tokens pass through and are never renewed.
func TestRenewingSourcePassesOtherTokens(t *testing.T) {
	wall := newFakeWall(time.Now())
	issued := 0
	r := &renewingSource{base: auth.StaticToken("zfa_not-a-namespace-token"), log: slog.New(slog.DiscardHandler), count: renewalCounter(nil),
		now: wall.now, after: wall.after, wake: make(chan struct{}, 1),
		issue: func(context.Context, string, time.Duration) (string, error) { issued++; return "", nil }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.run(ctx); close(done) }()
	// the loop has decided (and would have renewed) several times over:
	// the token's lifetime is unknown, it waits its watch period
	for i := 0; i < 3; i++ {
		wall.step(t)
	}
	cancel()
	<-done
	tok, err := r.Token(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "zfa_not-a-namespace-token", tok)
	assert.Zero(t, issued)
}
