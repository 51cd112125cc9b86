package client

import (
	"context"
	"sync"
	"time"
)

// congestion is the read congestion control of one stripe group (eZNS
// §4.5.1, Algorithm 1 lines 1–10). The window counts outstanding stripes: it
// starts at the group's width (one stripe per die), grows additively while
// reads complete under lat_thresh (cwnd += io/cwnd, capped at 4 × width), and
// shrinks multiplicatively by lat_thresh / (2 × latency) when a read's
// modelled device latency exceeds it (never below 1). A read that finds
// nothing outstanding always passes, so one large read never deadlocks.
type congestion struct {
	mu       sync.Mutex
	enabled  bool
	width    int
	cwnd     float64
	inflight float64
	thresh   time.Duration
	wake     chan struct{}
	m        *metrics
}

func newCongestion(width int, enabled bool, thresh time.Duration, m *metrics) *congestion {
	return &congestion{enabled: enabled, width: width, cwnd: float64(width), thresh: thresh, wake: make(chan struct{}), m: m}
}

func (c *congestion) acquire(ctx context.Context, units float64) error {
	for {
		c.mu.Lock()
		if !c.enabled || c.inflight == 0 || c.inflight+units <= c.cwnd {
			c.inflight += units
			c.mu.Unlock()
			return nil
		}
		wake := c.wake
		c.mu.Unlock()
		c.m.ccWaits.Inc()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *congestion) release(units float64, lat time.Duration, ok bool) {
	c.mu.Lock()
	c.inflight -= units
	if c.enabled && ok {
		if lat > c.thresh {
			c.cwnd = max(1, c.cwnd*float64(c.thresh)/(2*float64(lat)))
			c.m.ccDecreases.Inc()
		} else {
			c.cwnd = min(float64(4*c.width), c.cwnd+units/c.cwnd)
		}
		c.m.cwnd.Observe(c.cwnd / float64(c.width))
	}
	close(c.wake)
	c.wake = make(chan struct{})
	c.mu.Unlock()
}

// window returns the current window (for tests and status).
func (c *congestion) window() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cwnd
}
