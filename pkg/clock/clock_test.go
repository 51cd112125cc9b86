package clock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestVirtualDeterministic(t *testing.T) {
	v := NewVirtual()
	require.Equal(t, KindVirtual, v.Kind())
	var order []time.Duration
	v.AfterFunc(30, func() { order = append(order, v.Now()) })
	v.AfterFunc(10, func() { order = append(order, v.Now()) })
	stop := v.AfterFunc(20, func() { order = append(order, -1) })
	require.True(t, stop())
	require.NoError(t, v.WaitUntil(context.Background(), 25))
	require.Equal(t, time.Duration(25), v.Now())
	require.NoError(t, v.WaitUntil(context.Background(), 5)) // never goes back
	require.Equal(t, time.Duration(25), v.Now())
	v.Advance(10)
	require.Equal(t, []time.Duration{10, 30}, order)
	require.Equal(t, time.Duration(35), v.Now())
}

func TestOff(t *testing.T) {
	c := Off()
	require.Equal(t, KindOff, c.Kind())
	require.Equal(t, time.Duration(0), c.Now())
	require.NoError(t, c.WaitUntil(context.Background(), time.Hour))
	<-After(c, time.Hour)
}

func TestRealtimeHeap(t *testing.T) {
	c := Realtime(1)
	defer c.Stop()
	require.Equal(t, KindRealtime, c.Kind())
	var n atomic.Int32
	done := make(chan struct{}, 3)
	for _, d := range []time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond} {
		c.AfterFunc(c.Now()+d, func() { n.Add(1); done <- struct{}{} })
	}
	for i := 0; i < 3; i++ {
		<-done
	}
	require.Equal(t, int32(3), n.Load())
	target := c.Now() + time.Millisecond
	require.NoError(t, c.WaitUntil(context.Background(), target))
	require.GreaterOrEqual(t, c.Now(), target)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.Error(t, c.WaitUntil(ctx, c.Now()+time.Hour))
	c2, ok := Parse("virtual", 1)
	require.True(t, ok)
	require.Equal(t, KindVirtual, c2.Kind())
}

// TestRealtimeStop: after Stop a pending timer never fires and a wait not
// yet over lasts until its context ends; a scaled clock's wait returns at
// or after its modelled target.
func TestRealtimeStop(t *testing.T) {
	c := Realtime(1)
	fired := make(chan struct{})
	c.AfterFunc(c.Now()+time.Hour, func() { close(fired) })
	stopOK := c.AfterFunc(c.Now()+time.Hour, func() {})
	require.True(t, stopOK(), "a pending timer stops")
	require.False(t, stopOK(), "a stopped timer stops once")
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() { waited <- c.WaitUntil(ctx, c.Now()+time.Hour) }()
	c.Stop()
	cancel()
	require.ErrorIs(t, <-waited, context.Canceled, "a wait over a stopped clock ends with its context")
	select {
	case <-fired:
		t.Fatal("a timer fired after Stop")
	default:
	}

	s := Realtime(3) // one modelled ms takes 3 wall ms
	defer s.Stop()
	target := s.Now() + time.Millisecond
	require.NoError(t, s.WaitUntil(context.Background(), target))
	require.GreaterOrEqual(t, s.Now(), target)
	done := make(chan time.Duration, 1)
	at := s.Now() + time.Millisecond
	s.AfterFunc(at, func() { done <- s.Now() })
	require.GreaterOrEqual(t, <-done, at)
}

// BenchmarkRealtimeWaitParallel: many goroutines waiting on one realtime
// clock at once (a node's timed drive operations, a server's send
// deadlines).
func BenchmarkRealtimeWaitParallel(b *testing.B) {
	c := Realtime(1)
	defer c.Stop()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			_ = c.WaitUntil(ctx, c.Now()+20*time.Microsecond)
			stop := c.AfterFunc(c.Now()+time.Hour, func() {})
			stop()
		}
	})
}
