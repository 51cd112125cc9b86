package clock

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// hang bounds a wait that only a deadlock could make long; it is not a timing
// assertion.
const hang = 20 * time.Second

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(hang):
		t.Fatalf("%s: still blocked after %s (deadlock)", what, hang)
	}
}

// TestCallbackSleepsOnSameClock: a timer callback that backs off on the
// clock that runs it must complete (a periodic checkpoint retrying against an
// unavailable node does exactly that).
func TestCallbackSleepsOnSameClock(t *testing.T) {
	for _, tc := range []struct {
		name string
		mk   func() (Clock, func())
		// drive makes the clock reach the callback's deadline and beyond.
		drive func(c Clock)
	}{
		{"off", func() (Clock, func()) { return Off(), func() {} }, func(Clock) {}},
		{"virtual", func() (Clock, func()) { return NewVirtual(), func() {} }, func(c Clock) { c.(*Virtual).Advance(time.Millisecond) }},
		{"realtime", func() (Clock, func()) { r := Realtime(1); return r, r.Stop }, func(Clock) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, stop := tc.mk()
			defer stop()
			done := make(chan struct{})
			var errs []error
			c.AfterFunc(c.Now()+time.Millisecond, func() {
				defer close(done)
				for i := 0; i < 3; i++ { // a retry loop backing off on the same clock
					errs = append(errs, Sleep(context.Background(), c, time.Duration(1<<i)*time.Millisecond))
				}
			})
			tc.drive(c)
			waitClosed(t, done, "callback sleeping on its own clock")
			require.Equal(t, []error{nil, nil, nil}, errs)
			if c.Kind() != KindOff {
				require.GreaterOrEqual(t, c.Now(), 8*time.Millisecond, "the callback slept 1+1+2+4 ms of clock time")
			}
		})
	}
}

// TestRealtimeBlockedCallbackDoesNotStopClock: a callback that never returns
// does not keep later timers or waiters from firing.
func TestRealtimeBlockedCallbackDoesNotStopClock(t *testing.T) {
	c := Realtime(1)
	defer c.Stop()
	block := make(chan struct{})
	defer close(block)
	c.AfterFunc(c.Now(), func() { <-block })
	fired := make(chan struct{})
	c.AfterFunc(c.Now()+2*time.Millisecond, func() { close(fired) })
	waitClosed(t, fired, "timer behind a blocked callback")
	waited := make(chan struct{})
	go func() {
		_ = Sleep(context.Background(), c, time.Millisecond)
		close(waited)
	}()
	waitClosed(t, waited, "Sleep behind a blocked callback")
}

// TestVirtualCallbacksDeterministic: callbacks that sleep on the virtual clock
// interleave in deadline order, identically on every run.
func TestVirtualCallbacksDeterministic(t *testing.T) {
	run := func() ([]string, time.Duration, time.Duration) {
		v := NewVirtual()
		var mu sync.Mutex
		var trace []string
		rec := func(s string) {
			mu.Lock()
			trace = append(trace, fmt.Sprintf("%s@%d", s, v.Now()))
			mu.Unlock()
		}
		v.AfterFunc(10, func() {
			rec("a1")
			_ = v.WaitUntil(context.Background(), 25)
			rec("a2")
			v.AfterFunc(v.Now()+3, func() { rec("d") })
		})
		v.AfterFunc(20, func() { rec("b1"); _ = Sleep(context.Background(), v, 20); rec("b2") })
		v.AfterFunc(30, func() { rec("c") })
		v.Advance(22)
		first := v.Now()
		v.AdvanceTo(100)
		return trace, first, v.Now()
	}
	want := []string{"a1@10", "b1@20", "a2@25", "d@28", "c@30", "b2@40"}
	for i := 0; i < 30; i++ {
		trace, first, last := run()
		require.Equal(t, want, trace, "run %d", i)
		// the first Advance went on past 22 until its callbacks returned (b2 at 40)
		require.Equal(t, time.Duration(40), first)
		require.Equal(t, time.Duration(100), last)
	}
}

// TestVirtualParkedWaiterCancel: a goroutine parked while another drives the
// clock returns on ctx cancellation, and the driver carries on.
func TestVirtualParkedWaiterCancel(t *testing.T) {
	v := NewVirtual()
	release := make(chan struct{})
	woke := make(chan struct{})
	// c1 parks on the clock until 1000, then blocks (not on the clock);
	// c2 blocks at once: the driver then waits for them, with time at 1000
	v.AfterFunc(5, func() {
		_ = v.WaitUntil(context.Background(), 1000)
		close(woke)
		<-release
	})
	started := make(chan struct{})
	v.AfterFunc(6, func() { close(started); <-release })
	advanced := make(chan struct{})
	go func() { v.Advance(10); close(advanced) }()
	waitClosed(t, started, "second callback start")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- v.WaitUntil(ctx, 2000) }() // parks: a driver is active
	waitClosed(t, woke, "first callback woken at its time")
	cancel()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(hang):
		t.Fatal("parked waiter ignored cancellation")
	}
	close(release)
	waitClosed(t, advanced, "driver after the callbacks returned")
	require.Equal(t, time.Duration(1000), v.Now(), "the cancelled waiter's time was never reached")
}

// TestVirtualConcurrentWaiters: many goroutines waiting and arming callbacks
// that sleep, at once, all finish (run with -race).
func TestVirtualConcurrentWaiters(t *testing.T) {
	v := NewVirtual()
	var wg sync.WaitGroup
	var cbs sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed))
			for i := 0; i < 200; i++ {
				d := time.Duration(rng.Intn(50) + 1)
				if i%10 == 0 {
					cbs.Add(1)
					v.AfterFunc(v.Now()+d, func() {
						defer cbs.Done()
						_ = Sleep(context.Background(), v, d)
					})
				}
				require.NoError(t, v.WaitUntil(context.Background(), v.Now()+d))
			}
		}(int64(g))
	}
	all := make(chan struct{})
	go func() {
		wg.Wait()
		v.Advance(time.Second) // fire what is left
		cbs.Wait()
		close(all)
	}()
	waitClosed(t, all, "concurrent waiters")
}

// TestVirtualAfterFuncDue: a callback whose time has come runs before
// AfterFunc returns, even when it sleeps on the clock.
func TestVirtualAfterFuncDue(t *testing.T) {
	v := NewVirtual()
	v.Advance(7)
	var at []time.Duration
	v.AfterFunc(3, func() {
		at = append(at, v.Now())
		_ = Sleep(context.Background(), v, 5)
		at = append(at, v.Now())
	})
	require.Equal(t, []time.Duration{7, 12}, at)
	require.False(t, v.AfterFunc(0, func() {})(), "a fired callback cannot be stopped")
}
