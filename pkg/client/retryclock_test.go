package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
)

// retryClock is a client's clock (client.Config.Clock: the clock its retry
// deadlines and backoff sleeps run on) that a test switches per call. By
// default it is the wall clock, and a call that must succeed retries a
// transient failure until the client's generous deadline in real time,
// however busy the machine. failing runs a call on a fresh virtual clock
// that only the call's own backoff sleeps move: a call that must fail
// (its node or the arbiter stopped) gives up after the same number of
// attempts whatever the load, without waiting the deadline out on the wall.
// Switch only while no other call of the client is in flight.
type retryClock struct {
	wall clock.Clock
	mu   sync.Mutex
	cur  clock.Clock
}

func newRetryClock(t *testing.T) *retryClock {
	w := clock.Realtime(1)
	t.Cleanup(w.Stop)
	return &retryClock{wall: w, cur: w}
}

func (r *retryClock) get() clock.Clock {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

func (r *retryClock) Now() time.Duration { return r.get().Now() }
func (r *retryClock) Kind() clock.Kind   { return r.get().Kind() }
func (r *retryClock) WaitUntil(ctx context.Context, t time.Duration) error {
	return r.get().WaitUntil(ctx, t)
}
func (r *retryClock) AfterFunc(t time.Duration, f func()) func() bool {
	return r.get().AfterFunc(t, f)
}

// failing runs fn, a call expected to fail after retrying, on a virtual
// clock.
func (r *retryClock) failing(fn func()) {
	r.mu.Lock()
	r.cur = clock.NewVirtual()
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.cur = r.wall
		r.mu.Unlock()
	}()
	fn()
}
