package testcluster

import (
	"context"
	"sync"
	"time"

	"github.com/zonefleet/zonefleet/internal/goid"
	"github.com/zonefleet/zonefleet/pkg/clock"
)

// RetryClock is the clock of a test client's retries (client.Config.Clock,
// WithClock): a retry loop measures its deadline and sleeps its backoff on
// it. Its time counts backoff, not wall time, so a retry deadline is a
// number of attempts that no scheduling changes: on a saturated machine an
// attempt may take seconds, and a wall-clock deadline then allows fewer
// attempts than on an idle one (down to one), failing calls that retry
// through a transient outage.
//
//   - A call that must succeed sleeps each backoff on the wall clock, and
//     its time moves on by that backoff: it makes the attempts of its
//     client's retry deadline, over at least that deadline in real time.
//     Give such clients a generous deadline (at least ten times what a
//     retry normally needs).
//   - A call that must fail (its ctx from MustFail: a node or the arbiter
//     is down) does not sleep: each backoff moves its time on by
//     FailScale times the backoff at once. It gives up after the attempts
//     of 1/FailScale of the deadline's backoff and never waits the
//     deadline out on the wall.
//
// Time is kept per goroutine: a retry loop reads the clock (its deadline,
// the start of each backoff) and sleeps on it in the goroutine that runs
// it, so one call's backoff never shortens the deadline of a call running
// beside it, and a goroutine's time only moves forward. It therefore suits
// only clients whose clock serves their retry loops alone (pkg/client's
// retries; not a mount lease, whose age is read in other goroutines).
type RetryClock struct {
	mu  sync.Mutex
	own map[uint64]time.Duration // goroutine id → its time
}

// FailScale is how much faster than its backoff a must-fail call's time
// moves: with a 20 s retry deadline it gives up after the attempts of 2 s
// of backoff (about 7 to a node, 5 to the arbiter).
const FailScale = 10

// NewRetryClock returns a RetryClock at time 0 in every goroutine.
func NewRetryClock() *RetryClock {
	return &RetryClock{own: map[uint64]time.Duration{}}
}

type mustFailKey struct{}

// MustFail marks ctx: the calls made with it are expected to fail after
// retrying (or may fail, their result ignored), and a RetryClock lets them
// retry without sleeping.
func MustFail(ctx context.Context) context.Context {
	return context.WithValue(ctx, mustFailKey{}, true)
}

func isMustFail(ctx context.Context) bool { v, _ := ctx.Value(mustFailKey{}).(bool); return v }

// Now is the calling goroutine's time.
func (r *RetryClock) Now() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.own[goid.Get()]
}

// Kind is realtime: a client measures its deadlines on Now.
func (r *RetryClock) Kind() clock.Kind { return clock.KindRealtime }

// WaitUntil sleeps until the calling goroutine's time reaches t: on the
// wall clock, or at once for a MustFail ctx (see RetryClock).
func (r *RetryClock) WaitUntil(ctx context.Context, t time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	id := goid.Get()
	r.mu.Lock()
	now := r.own[id]
	r.mu.Unlock()
	d := t - now
	if d <= 0 {
		return nil
	}
	if isMustFail(ctx) {
		d *= FailScale
	} else {
		tm := time.NewTimer(d)
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.mu.Lock()
	r.own[id] = max(r.own[id], now+d)
	r.mu.Unlock()
	return nil
}

// AfterFunc calls f after the wall time from the caller's time to t
// (the client waits with WaitUntil only; this serves the interface).
func (r *RetryClock) AfterFunc(t time.Duration, f func()) func() bool {
	return time.AfterFunc(max(t-r.Now(), 0), f).Stop
}
