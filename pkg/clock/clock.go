// Package clock is the single notion of time used by every ZoneFleet component
// that waits (drive emulator, node service, arbiter, client, file system).
//
// Time is a time.Duration since the clock's epoch (the moment the clock was
// made), not a wall-clock time.Time: modelled device times are durations, and a
// virtual clock has no wall-clock meaning. Three kinds exist:
//
//   - Realtime(scale): Now is the wall time elapsed since creation divided by
//     scale (scale 2 means the model runs at half speed, so a slow machine can
//     keep up). WaitUntil blocks until the modelled time is reached; all
//     waiters and timers are served by ONE goroutine with a timer heap (no
//     time.Sleep per request).
//   - Virtual: Now only moves when someone advances it. WaitUntil(t) never
//     blocks: it moves the clock forward to t (monotonic max) and returns, so a
//     single-threaded driver gets bit-identical modelled times for identical
//     inputs. AfterFunc callbacks run synchronously inside Advance/AdvanceTo/
//     WaitUntil, in deadline order. With several goroutines waiting at once
//     the clock follows whichever waits first, so modelled times then depend
//     on scheduling; for deterministic parallel submissions, submit without
//     waiting (zns.NoWait) and advance the clock explicitly.
//   - Off: Now is always 0, WaitUntil returns at once, AfterFunc runs the
//     callback at once (in a new goroutine). Components skip their timing models.
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

// ---- timer heap shared by virtual and realtime ----

type timer struct {
	at    time.Duration
	seq   uint64
	f     func()
	index int // -1 once removed
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
type Virtual struct {
	now atomic.Int64
	mu  sync.Mutex // guards timers and serializes advancing
	h   timerHeap
	seq uint64
}

// NewVirtual returns a virtual clock at time 0.
func NewVirtual() *Virtual { return &Virtual{} }

func (v *Virtual) Now() time.Duration { return time.Duration(v.now.Load()) }
func (v *Virtual) Kind() Kind         { return KindVirtual }

// WaitUntil moves the clock forward to t (if it is behind) and returns.
func (v *Virtual) WaitUntil(ctx context.Context, t time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	v.AdvanceTo(t)
	return nil
}

// Advance moves the clock forward by d.
func (v *Virtual) Advance(d time.Duration) { v.AdvanceTo(v.Now() + d) }

// AdvanceTo moves the clock to t if t is later than now, firing due timers in
// deadline order (each callback sees Now() equal to its deadline).
func (v *Virtual) AdvanceTo(t time.Duration) {
	for {
		v.mu.Lock()
		if len(v.h) == 0 || v.h[0].at > t {
			for {
				cur := v.now.Load()
				if int64(t) <= cur || v.now.CompareAndSwap(cur, int64(t)) {
					break
				}
			}
			v.mu.Unlock()
			return
		}
		tm := heap.Pop(&v.h).(*timer)
		for {
			cur := v.now.Load()
			if int64(tm.at) <= cur || v.now.CompareAndSwap(cur, int64(tm.at)) {
				break
			}
		}
		v.mu.Unlock()
		tm.f()
	}
}

// AfterFunc registers f to run when the clock reaches t; if t is not in the
// future, f runs before AfterFunc returns.
func (v *Virtual) AfterFunc(t time.Duration, f func()) func() bool {
	if t <= v.Now() {
		f()
		return func() bool { return false }
	}
	v.mu.Lock()
	v.seq++
	tm := &timer{at: t, seq: v.seq, f: f}
	heap.Push(&v.h, tm)
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
type RealtimeClock struct {
	start time.Time
	scale float64
	mu    sync.Mutex
	h     timerHeap
	seq   uint64
	kick  chan struct{}
	stop  chan struct{}
	once  sync.Once
}

// Realtime returns a wall-clock driven clock. scale > 1 slows the model down
// (one modelled microsecond takes scale wall microseconds); scale <= 0 means 1.
// One goroutine serves every waiter and timer from a heap.
func Realtime(scale float64) *RealtimeClock {
	if scale <= 0 {
		scale = 1
	}
	r := &RealtimeClock{start: time.Now(), scale: scale, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	go r.loop()
	return r
}

// Stop ends the timer goroutine; pending timers never fire afterwards.
func (r *RealtimeClock) Stop() { r.once.Do(func() { close(r.stop) }) }

// Scale is the time-scale factor (wall time per modelled time).
func (r *RealtimeClock) Scale() float64 { return r.scale }

func (r *RealtimeClock) Now() time.Duration {
	return time.Duration(float64(time.Since(r.start)) / r.scale)
}
func (r *RealtimeClock) Kind() Kind { return KindRealtime }

func (r *RealtimeClock) wall(t time.Duration) time.Duration {
	return time.Duration(float64(t) * r.scale)
}

func (r *RealtimeClock) loop() {
	tmr := time.NewTimer(time.Hour)
	for {
		r.mu.Lock()
		now := r.Now()
		var due []*timer
		for len(r.h) > 0 && r.h[0].at <= now {
			due = append(due, heap.Pop(&r.h).(*timer))
		}
		wait := time.Hour
		if len(r.h) > 0 {
			wait = r.wall(r.h[0].at) - time.Since(r.start)
			if wait < 0 {
				wait = 0
			}
		}
		r.mu.Unlock()
		for _, t := range due {
			t.f()
		}
		if len(due) > 0 {
			continue
		}
		tmr.Reset(wait)
		select {
		case <-r.stop:
			tmr.Stop()
			return
		case <-tmr.C:
		case <-r.kick:
			if !tmr.Stop() {
				select {
				case <-tmr.C:
				default:
				}
			}
		}
	}
}

func (r *RealtimeClock) AfterFunc(t time.Duration, f func()) func() bool {
	r.mu.Lock()
	r.seq++
	tm := &timer{at: t, seq: r.seq, f: f}
	heap.Push(&r.h, tm)
	first := tm.index == 0
	r.mu.Unlock()
	if first {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
	return func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		if tm.index < 0 {
			return false
		}
		heap.Remove(&r.h, tm.index)
		return true
	}
}

func (r *RealtimeClock) WaitUntil(ctx context.Context, t time.Duration) error {
	if t <= r.Now() {
		return ctx.Err()
	}
	done := make(chan struct{})
	stop := r.AfterFunc(t, func() { close(done) })
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		stop()
		return ctx.Err()
	}
}
