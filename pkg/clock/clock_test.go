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
