// Package sim is the deterministic scheduler of the paper harness: a
// clock.Clock on which simulated actors (writers, readers, monitor ticks) run
// one at a time, so that a simulation prints the same numbers on every run.
//
// # Design
//
// Actors are goroutines started with Go. Exactly one goroutine of the
// simulation runs at any moment: it holds the baton until it waits on the
// clock (WaitUntil/Sleep, or Cond.Wait) or returns. The scheduler loop (Run)
// then takes the earliest pending event — an actor's wake-up time or an
// AfterFunc callback, ties broken by the order they were scheduled — moves the
// clock to its time and hands the baton to it. Time therefore advances only
// when every actor waits, and the order of events depends only on the
// program, never on the Go scheduler or the wall clock (nothing here reads it).
//
// clock.Virtual cannot give this on its own: its WaitUntil makes the caller
// the driver, so with several goroutines waiting at once the modelled times
// depend on scheduling (see its package doc). Sim implements the same
// clock.Clock interface, so the components under test (the pkg/zns drive
// model, node.Admission) run unchanged on it.
//
// # Rules for code running on a Sim
//
// A simulated goroutine may block only on the Sim (WaitUntil, Sleep, Cond).
// Blocking on anything else while holding the baton — a channel another actor
// will fill, a mutex a parked actor holds — deadlocks the simulation (the
// test timeout catches it). Components that block on channels (the node's WRR
// scheduler, the client's congestion window) are driven through Cond-based
// adapters in the harness.
//
// # Failure behaviour
//
// Run returns when no event is left before its horizon. Stop cancels every
// parked actor: their waits return context.Canceled (they then run
// concurrently, outside the deterministic schedule, and must only clean up),
// and Stop waits for all actors to return. A panic in an actor is not
// recovered: it is a harness bug.
package sim

import (
	"container/heap"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
)

type event struct {
	at    time.Duration
	seq   uint64
	wake  chan struct{} // a parked goroutine
	f     func()        // or a callback to start
	index int
}

type events []*event

func (h events) Len() int { return len(h) }
func (h events) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h events) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *events) Push(x any) {
	e := x.(*event)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *events) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}

// Sim is a deterministic cooperative clock. The zero value is not usable; use New.
type Sim struct {
	now atomic.Int64

	mu      sync.Mutex
	h       events
	seq     uint64
	running bool          // Run is dispatching: waits park and yield the baton
	horizon time.Duration // Run's horizon (while running)
	stopped bool          // Stop was called
	yield   chan struct{} // the baton holder parked or returned
	done    chan struct{} // closed by Stop
	wg      sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc
	steps   uint64
	// post serialises the goroutines Stop releases, so that their clean-up
	// also runs one at a time.
	post sync.Mutex
}

var _ clock.Clock = (*Sim)(nil)

// New returns a simulation at time 0.
func New() *Sim {
	ctx, cancel := context.WithCancel(context.Background())
	return &Sim{yield: make(chan struct{}), done: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// Context is cancelled by Stop; actors pass it to the components they call.
func (s *Sim) Context() context.Context { return s.ctx }

// Now is the simulated time.
func (s *Sim) Now() time.Duration { return time.Duration(s.now.Load()) }

// Kind reports a virtual clock: components model time on it.
func (s *Sim) Kind() clock.Kind { return clock.KindVirtual }

// Steps is the number of events dispatched so far (a determinism fingerprint).
func (s *Sim) Steps() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.steps
}

func (s *Sim) push(e *event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.h, e)
}

// WaitUntil parks the calling actor until time t. Outside Run (set-up code)
// it just moves the clock forward.
func (s *Sim) WaitUntil(ctx context.Context, t time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if t <= s.Now() {
		s.mu.Unlock()
		return nil
	}
	if s.stopped {
		s.mu.Unlock()
		return context.Canceled
	}
	if !s.running {
		s.now.Store(int64(t))
		s.mu.Unlock()
		return nil
	}
	if t <= s.horizon && (len(s.h) == 0 || t < s.h[0].at) {
		// The wake-up would be the next event Run dispatches: dispatch it
		// here, without handing the baton to Run and back (the same
		// schedule, the same step count; a large share of the wall time
		// under the race detector is those hand-overs).
		s.steps++
		s.now.Store(int64(t))
		s.mu.Unlock()
		return nil
	}
	e := &event{at: t, wake: make(chan struct{})}
	s.push(e)
	s.mu.Unlock()
	return s.park(ctx, e)
}

// park hands the baton back to the scheduler and waits for e to fire.
func (s *Sim) park(ctx context.Context, e *event) error {
	s.yield <- struct{}{}
	select {
	case <-e.wake:
		return nil
	case <-s.done:
		s.post.Lock() // released when this goroutine returns
		return context.Canceled
	case <-ctx.Done():
		// Only at shutdown (actors get contexts derived from Context).
		s.post.Lock()
		return ctx.Err()
	}
}

// AfterFunc runs f as a simulated goroutine at time t.
func (s *Sim) AfterFunc(t time.Duration, f func()) func() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := &event{at: max(t, s.Now()), f: f}
	if s.stopped {
		return func() bool { return false }
	}
	s.push(e)
	return func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if e.index < 0 {
			return false
		}
		heap.Remove(&s.h, e.index)
		return true
	}
}

// Go starts f as an actor at the current time (after the events already due now).
func (s *Sim) Go(f func(ctx context.Context)) {
	s.AfterFunc(s.Now(), func() { f(s.ctx) })
}

// Run dispatches events until none is left at or before horizon, then sets
// the clock to horizon. Call it from one goroutine, not from an actor.
func (s *Sim) Run(horizon time.Duration) {
	s.mu.Lock()
	s.running, s.horizon = true, horizon
	for !s.stopped && len(s.h) > 0 && s.h[0].at <= horizon {
		e := heap.Pop(&s.h).(*event)
		s.steps++
		if e.at > s.Now() {
			s.now.Store(int64(e.at))
		}
		s.mu.Unlock()
		if e.wake != nil {
			close(e.wake)
		} else {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				e.f()
				select {
				case s.yield <- struct{}{}:
				case <-s.done:
					// Resumed by Stop: it held the post-stop baton.
					s.post.Unlock()
				}
			}()
		}
		<-s.yield
		s.mu.Lock()
	}
	if horizon > s.Now() {
		s.now.Store(int64(horizon))
	}
	s.running = false
	s.mu.Unlock()
}

// Stop cancels every parked actor and waits until all have returned; they
// return one at a time (their waits fail with context.Canceled). Call it
// after Run, from the goroutine that called Run.
func (s *Sim) Stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	for _, e := range s.h {
		e.index = -1
	}
	s.h = nil
	s.mu.Unlock()
	s.cancel()
	close(s.done)
	s.wg.Wait()
}

// Cond is a condition actors wait on without the clock moving: Broadcast
// makes every waiter runnable at the current time, in the order they waited.
type Cond struct {
	s       *Sim
	waiters []*event
}

// NewCond makes a condition on s.
func (s *Sim) NewCond() *Cond { return &Cond{s: s} }

// Wait parks the calling actor until Broadcast.
func (c *Cond) Wait(ctx context.Context) error {
	s := c.s
	s.mu.Lock()
	if s.stopped || !s.running {
		s.mu.Unlock()
		return context.Canceled
	}
	e := &event{wake: make(chan struct{}), index: -1}
	c.waiters = append(c.waiters, e)
	s.mu.Unlock()
	return s.park(ctx, e)
}

// Broadcast wakes every waiter (at the current time).
func (c *Cond) Broadcast() {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range c.waiters {
		e.at = s.Now()
		if !s.stopped {
			s.push(e)
		}
	}
	c.waiters = nil
}
