package znsplus

import (
	"container/heap"
	"context"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
)

// threadClock is the harness's clock: one goroutine plays every logical
// thread of a workload, and each thread has its own modelled time (its
// cursor). Now is the running thread's cursor; WaitUntil moves it forward
// without blocking. The drives book their chips and the host link at the
// running thread's time, so requests of different threads whose modelled
// times overlap contend for the same chips and link exactly as outstanding
// requests do; the harness always runs the thread with the earliest cursor
// next (one file system operation at a time), so a thread never books a
// resource more than one operation ahead of the others.
//
// Timers (the drives' job steps and background plugging) fire in deadline
// order, inline on the one goroutine, once a cursor passes them: a timer
// runs at its own time, never before some thread has reached it. A callback
// that waits moves only its own time. The clock reports KindVirtual, so
// the file system and the drives take their single-goroutine paths.
//
// Not safe for concurrent use: one goroutine owns it.
type threadClock struct {
	now     time.Duration
	h       tcHeap
	seq     uint64
	driving bool
}

type tcTimer struct {
	at   time.Duration
	seq  uint64
	f    func()
	dead bool
}

type tcHeap []*tcTimer

func (h tcHeap) Len() int { return len(h) }
func (h tcHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h tcHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *tcHeap) Push(x any)   { *h = append(*h, x.(*tcTimer)) }
func (h *tcHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (c *threadClock) Now() time.Duration { return c.now }
func (c *threadClock) Kind() clock.Kind   { return clock.KindVirtual }

// WaitUntil fires the timers due by t and moves the running time to t.
func (c *threadClock) WaitUntil(ctx context.Context, t time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.fire(t, c.now)
	c.now = max(c.now, t)
	return nil
}

// AfterFunc schedules f at t; a timer already due runs before AfterFunc
// returns unless a timer is running (then it runs next).
func (c *threadClock) AfterFunc(t time.Duration, f func()) func() bool {
	c.seq++
	tm := &tcTimer{at: t, seq: c.seq, f: f}
	heap.Push(&c.h, tm)
	if t <= c.now && !c.driving {
		c.fire(c.now, c.now)
	}
	return func() bool {
		if tm.dead {
			return false
		}
		tm.dead = true
		return true
	}
}

// fire runs every live timer due by t, each at its own time but not before
// floor (a timer set for the past runs when it was set), restoring the
// running time afterwards.
func (c *threadClock) fire(t, floor time.Duration) {
	outer := c.driving
	c.driving = true
	saved := c.now
	for len(c.h) > 0 && c.h[0].at <= t {
		tm := heap.Pop(&c.h).(*tcTimer)
		if tm.dead {
			continue
		}
		tm.dead = true
		c.now = max(floor, tm.at)
		tm.f()
	}
	c.now = saved
	c.driving = outer
}

// switchTo makes t the running time (a thread's cursor, possibly earlier
// than the last one) after firing what is due by it.
func (c *threadClock) switchTo(t time.Duration) {
	c.now = t
	c.fire(t, 0)
}

// SetNow makes t the running time (lfs.TurnClock: P-GC's workers take
// turns on the one goroutine, each at its own modelled time).
func (c *threadClock) SetNow(t time.Duration) { c.switchTo(t) }

// pool is n serially used units (the host's CPUs): a booking takes the one
// free first.
type pool struct{ free []time.Duration }

func newPool(n int) *pool { return &pool{free: make([]time.Duration, max(n, 1))} }

// book reserves d on the unit free first, no earlier than at, and returns
// the end.
func (p *pool) book(at, d time.Duration) time.Duration {
	i := 0
	for j := range p.free {
		if p.free[j] < p.free[i] {
			i = j
		}
	}
	end := max(at, p.free[i]) + d
	p.free[i] = end
	return end
}
