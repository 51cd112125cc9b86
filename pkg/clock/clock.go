// Package clock is the single notion of time used by every ZoneFleet component
// that waits (drive emulator, node service, arbiter, client, file system).
//
// Time is a time.Duration since the clock's epoch (the moment the clock was
// made), not a wall-clock time.Time: modelled device times are durations, and a
// virtual clock has no wall-clock meaning. Three kinds exist:
//
//   - Realtime(scale): Now is the wall time elapsed since creation divided by
//     scale (scale 2 means the model runs at half speed, so a slow machine can
//     keep up). WaitUntil blocks until the modelled time is reached on a runtime
//     timer (the runtime keeps timers per processor: concurrent waiters share
//     no lock and no goroutine); every due callback is started on its own
//     goroutine, so a callback that blocks (on the clock, a lock, I/O) never
//     stops the clock.
//   - Virtual: Now only moves when someone advances it. WaitUntil(t) never
//     blocks: it moves the clock forward to t (monotonic max) and returns, so a
//     single-threaded driver gets bit-identical modelled times for identical
//     inputs. AfterFunc callbacks run on their own goroutines, one at a time
//     in deadline order: the goroutine advancing the clock waits until a
//     callback has returned or parked in a wait on the clock before firing
//     the next timer, so a callback may sleep on the clock and runs stay
//     deterministic. One goroutine advances at a time; others calling
//     WaitUntil meanwhile park until the clock reaches their time or the
//     driver stops. With several goroutines waiting at once, modelled times
//     depend on scheduling; for deterministic parallel submissions, submit
//     without waiting (zns.NoWait) and advance the clock explicitly.
//   - Off: Now is always 0, WaitUntil returns at once, AfterFunc runs the
//     callback at once (in a new goroutine). Components skip their timing models.
//
// The rule for every clock: nothing that runs as a clock callback can block
// the clock. A callback may sleep on the clock that called it; with the
// virtual clock it must wait with WaitUntil/Sleep (tracked), not by receiving
// from a channel made by After (the clock cannot see that wait).
package clock

import (
	"container/heap"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Kind says which implementation a Clock is.
type Kind int

const (
	KindOff Kind = iota
	KindVirtual
	KindRealtime
)

func (k Kind) String() string {
	switch k {
	case KindOff:
		return "off"
	case KindVirtual:
		return "virtual"
	case KindRealtime:
		return "realtime"
	}
	return "unknown"
}

// Clock is the time source. All times are durations since the clock's epoch.
type Clock interface {
	// Now is the current modelled time.
	Now() time.Duration
	// Kind tells the implementation.
	Kind() Kind
	// WaitUntil returns once the modelled time is >= t, or with ctx.Err().
	WaitUntil(ctx context.Context, t time.Duration) error
	// AfterFunc calls f once the modelled time is >= t. The returned stop
	// function cancels the call and reports whether it did so.
	AfterFunc(t time.Duration, f func()) (stop func() bool)
}

// After returns a channel closed once the modelled time reaches now+d.
func After(c Clock, d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	c.AfterFunc(c.Now()+d, func() { close(ch) })
	return ch
}

// Sleep waits d of modelled time.
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	return c.WaitUntil(ctx, c.Now()+d)
}

// Parse returns a clock by name: "off", "virtual", "realtime" (scale 1).
func Parse(name string, scale float64) (Clock, bool) {
	switch name {
	case "off":
		return Off(), true
	case "virtual":
		return NewVirtual(), true
	case "realtime", "":
		return Realtime(scale), true // a *RealtimeClock: call Stop when done
	}
	return nil, false
}

// ---- off ----

type offClock struct{}

// Off returns the clock that does not model time.
func Off() Clock { return offClock{} }

func (offClock) Now() time.Duration { return 0 }
func (offClock) Kind() Kind         { return KindOff }
func (offClock) WaitUntil(ctx context.Context, _ time.Duration) error {
	return ctx.Err()
}
func (offClock) AfterFunc(_ time.Duration, f func()) func() bool {
	go f()
	return func() bool { return false }
}

// ---- the virtual clock's timer heap ----

type timer struct {
	at    time.Duration
	seq   uint64
	f     func()
	wake  chan struct{} // a waiter of WaitUntil, closed instead of calling f
	index int           // -1 once removed
}

type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *timerHeap) Push(x any) {
	t := x.(*timer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}

// ---- virtual ----

// Virtual is a deterministic clock that moves only when advanced.
//
// Advancing (Advance, AdvanceTo, WaitUntil) is done by one goroutine at a
// time, the driver. The driver fires due timers in deadline order; each
// AfterFunc callback runs on its own goroutine and sees Now() equal to its
// deadline, and the driver waits until that callback has settled — returned,
// or parked in a wait on this clock — before it fires the next timer. So a
// callback may itself wait on the clock (Sleep, WaitUntil: the driver moves
// time on and wakes it at its deadline) without deadlocking, and the order of
// events stays the same from run to run. While callbacks it started are still
// parked, the driver keeps advancing past its own target until they return,
// as if they had advanced the clock themselves.
//
// The driver cannot tell a callback's goroutine from another one, so it counts
// every goroutine parked on the clock toward "settled": with goroutines other
// than callbacks waiting at the same time it may fire the next timer before a
// running callback parks or returns (modelled times then depend on
// scheduling, as for any concurrent waiters), and it never deadlocks on a
// callback that hands its clock wait to another goroutine (an RPC whose
// handler waits on the same clock). A single goroutine driving the clock gets
// the same order of events, and the same modelled times, on every run. A
// callback blocked on anything but the clock (a lock the driver holds, a
// channel filled by After) still blocks the driver: don't.
type Virtual struct {
	now atomic.Int64
	mu  sync.Mutex // guards everything below
	h   timerHeap
	seq uint64

	driving bool          // a goroutine is advancing the clock
	running int           // callbacks started and not returned
	parked  int           // goroutines blocked in WaitUntil while another drives
	settle  chan struct{} // cap 1: a callback returned or a waiter parked
	idle    chan struct{} // closed (and replaced) whenever a driver stops
}

// NewVirtual returns a virtual clock at time 0.
func NewVirtual() *Virtual {
	return &Virtual{settle: make(chan struct{}, 1), idle: make(chan struct{})}
}

func (v *Virtual) Now() time.Duration { return time.Duration(v.now.Load()) }
func (v *Virtual) Kind() Kind         { return KindVirtual }

// setNow moves now forward to t (never back). Called with v.mu held.
func (v *Virtual) setNow(t time.Duration) {
	if int64(t) > v.now.Load() {
		v.now.Store(int64(t))
	}
}

func (v *Virtual) signalSettle() {
	select {
	case v.settle <- struct{}{}:
	default:
	}
}

// WaitUntil moves the clock forward to t (if it is behind) and returns. If
// another goroutine is advancing the clock at the time (for example because
// the caller is an AfterFunc callback), the caller parks until that driver
// reaches t, or until the driver stops and the caller can advance the clock
// itself; ctx cancels the wait.
func (v *Virtual) WaitUntil(ctx context.Context, t time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	v.mu.Lock()
	var w *timer // our wake-up timer while parked
	for {
		if t <= v.Now() {
			v.mu.Unlock()
			return nil
		}
		if !v.driving {
			v.driveLocked(t)
			v.mu.Unlock()
			return nil
		}
		// Park: the driver fires w at t (decrementing parked) and waits for us
		// to settle again.
		v.seq++
		w = &timer{at: t, seq: v.seq, wake: make(chan struct{})}
		heap.Push(&v.h, w)
		v.parked++
		idle := v.idle
		v.signalSettle()
		v.mu.Unlock()
		select {
		case <-w.wake:
			v.mu.Lock()
		case <-idle:
			v.mu.Lock()
			v.unpark(w)
		case <-ctx.Done():
			v.mu.Lock()
			v.unpark(w)
			v.mu.Unlock()
			return ctx.Err()
		}
	}
}

// unpark removes a parked waiter that was not fired. Called with v.mu held.
func (v *Virtual) unpark(w *timer) {
	if w.index >= 0 {
		heap.Remove(&v.h, w.index)
		v.parked--
	}
}

// driveLocked makes the caller the driver and advances to t. Called with v.mu
// held and no driver; returns with v.mu held.
func (v *Virtual) driveLocked(t time.Duration) {
	v.driving = true
	for {
		for v.running > v.parked {
			v.mu.Unlock()
			<-v.settle
			v.mu.Lock()
		}
		limit := t
		if now := v.Now(); now > limit {
			limit = now
		}
		if v.running > 0 {
			limit = time.Duration(1<<63 - 1) // callbacks still parked: go on until they return
		}
		if len(v.h) == 0 || v.h[0].at > limit {
			if v.running > 0 {
				// only reachable if parked counts a waiter that left: wait for news
				v.mu.Unlock()
				<-v.settle
				v.mu.Lock()
				continue
			}
			v.setNow(t)
			break
		}
		tm := heap.Pop(&v.h).(*timer)
		v.setNow(tm.at)
		if tm.wake != nil {
			v.parked--
			close(tm.wake)
			continue
		}
		v.running++
		go v.run(tm.f)
	}
	v.driving = false
	close(v.idle)
	v.idle = make(chan struct{})
}

func (v *Virtual) run(f func()) {
	defer func() {
		v.mu.Lock()
		v.running--
		v.mu.Unlock()
		v.signalSettle()
	}()
	f()
}

// Advance moves the clock forward by d.
func (v *Virtual) Advance(d time.Duration) { v.AdvanceTo(v.Now() + d) }

// AdvanceTo moves the clock to t if t is later than now, firing due timers in
// deadline order (each callback sees Now() equal to its deadline). It returns
// once every callback it started has returned.
func (v *Virtual) AdvanceTo(t time.Duration) { _ = v.WaitUntil(context.Background(), t) }

// AfterFunc registers f to run on its own goroutine when the clock reaches t.
// If t is not in the future and nobody is advancing the clock, f runs (and
// returns, or parks on the clock) before AfterFunc returns; if a driver is
// active, that driver runs it.
func (v *Virtual) AfterFunc(t time.Duration, f func()) func() bool {
	v.mu.Lock()
	v.seq++
	tm := &timer{at: t, seq: v.seq, f: f}
	heap.Push(&v.h, tm)
	if t <= v.Now() && !v.driving {
		v.driveLocked(v.Now())
	}
	v.mu.Unlock()
	return func() bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		if tm.index < 0 {
			return false
		}
		heap.Remove(&v.h, tm.index)
		return true
	}
}

// ---- realtime ----

// RealtimeClock is the wall-clock driven clock returned by Realtime.
//
// Its timers and waits are the runtime's own (time.AfterFunc, time.Timer):
// the runtime keeps them per processor, so concurrent waiters — every
// timed drive operation of a node, every send deadline of a busy server —
// share no lock and no goroutine. Each callback runs on its own goroutine,
// so a callback that waits on this clock (or on I/O) delays nothing else.
type RealtimeClock struct {
	start   time.Time
	scale   float64
	stopped atomic.Bool
	stop    chan struct{}
	once    sync.Once
}

// Realtime returns a wall-clock driven clock. scale > 1 slows the model down
// (one modelled microsecond takes scale wall microseconds); scale <= 0 means 1.
func Realtime(scale float64) *RealtimeClock {
	if scale <= 0 {
		scale = 1
	}
	return &RealtimeClock{start: time.Now(), scale: scale, stop: make(chan struct{})}
}

// Stop ends the clock: pending timers never fire afterwards, and a wait
// not yet over lasts until its context ends.
func (r *RealtimeClock) Stop() {
	r.once.Do(func() {
		r.stopped.Store(true)
		close(r.stop)
	})
}

// Scale is the time-scale factor (wall time per modelled time).
func (r *RealtimeClock) Scale() float64 { return r.scale }

func (r *RealtimeClock) Now() time.Duration {
	return time.Duration(float64(time.Since(r.start)) / r.scale)
}
func (r *RealtimeClock) Kind() Kind { return KindRealtime }

// until is the wall time from now until modelled time t (<= 0 if past).
func (r *RealtimeClock) until(t time.Duration) time.Duration {
	return time.Duration(float64(t)*r.scale) - time.Since(r.start)
}

func (r *RealtimeClock) AfterFunc(t time.Duration, f func()) func() bool {
	var tm *time.Timer
	var fire func()
	fire = func() {
		if r.stopped.Load() {
			return
		}
		if d := r.until(t); d > 0 && r.Now() < t {
			// the scale's rounding left it short of t: the rest
			tm.Reset(d)
			return
		}
		f()
	}
	tm = time.AfterFunc(max(r.until(t), 0), fire)
	return tm.Stop
}

func (r *RealtimeClock) WaitUntil(ctx context.Context, t time.Duration) error {
	if t <= r.Now() {
		return ctx.Err()
	}
	tm := time.NewTimer(max(r.until(t), 0))
	defer tm.Stop()
	for {
		select {
		case <-tm.C:
			if r.stopped.Load() {
				<-ctx.Done()
				return ctx.Err()
			}
			if r.Now() >= t {
				return nil
			}
			tm.Reset(max(r.until(t), time.Nanosecond))
		case <-r.stop:
			<-ctx.Done()
			return ctx.Err()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
