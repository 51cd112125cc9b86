package client

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCongestionWindowFollowsAlgorithm1(t *testing.T) {
	m := newMetrics(nil)
	c := newCongestion(4, true, 500*time.Microsecond, m)
	assert.Equal(t, 4.0, c.window(), "starts at the stripe width")

	// Additive increase while reads stay under lat_thresh: cwnd += units/cwnd.
	require.NoError(t, c.acquire(context.Background(), 2))
	c.release(2, 100*time.Microsecond, true)
	assert.InDelta(t, 4.5, c.window(), 1e-9)
	for i := 0; i < 1000; i++ {
		require.NoError(t, c.acquire(context.Background(), 4))
		c.release(4, 100*time.Microsecond, true)
	}
	assert.Equal(t, 16.0, c.window(), "capped at 4 × width")

	// Multiplicative decrease by lat_thresh / (2 × latency).
	require.NoError(t, c.acquire(context.Background(), 1))
	c.release(1, 2*time.Millisecond, true)
	assert.InDelta(t, 16*0.5/(2*2.0), c.window(), 1e-9)
	for i := 0; i < 10; i++ {
		require.NoError(t, c.acquire(context.Background(), 1))
		c.release(1, 50*time.Millisecond, true)
	}
	assert.Equal(t, 1.0, c.window(), "never below 1")

	// A failed read leaves the window alone.
	require.NoError(t, c.acquire(context.Background(), 1))
	c.release(1, time.Second, false)
	assert.Equal(t, 1.0, c.window())
}

func TestCongestionWindowBlocksAndWakes(t *testing.T) {
	c := newCongestion(2, true, 500*time.Microsecond, newMetrics(nil))
	require.NoError(t, c.acquire(context.Background(), 2))
	// A big read passes when nothing is outstanding; a second one waits.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, c.acquire(ctx, 1), context.DeadlineExceeded)
	got := make(chan error, 1)
	go func() { got <- c.acquire(context.Background(), 1) }()
	c.release(2, 100*time.Microsecond, true)
	require.NoError(t, <-got)

	off := newCongestion(2, false, 500*time.Microsecond, newMetrics(nil))
	for i := 0; i < 10; i++ {
		require.NoError(t, off.acquire(context.Background(), 8), "switched off: no limit")
	}
}
