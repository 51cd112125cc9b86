package client

import (
	"context"
	"sync"
	"time"
)

// congestion is the read congestion control of one stripe group (eZNS
// §4.5.1, Algorithm 1 lines 1–10). The window counts outstanding device
// commands, one per physical zone a read touches (ReadUnits): it starts at
// the group's width (one command per die), grows additively while reads
// complete under lat_thresh (cwnd += io/cwnd, capped at 4 × width), and
// shrinks multiplicatively by lat_thresh / (2 × latency) when a read's
// latency exceeds it (never below 1). The latency is the node's: from its
// request for a device slot (the WRR wait) to the drive's completion, the
// NVMe command latency the paper measures. A read that finds nothing
// outstanding always passes, so one large read never deadlocks.
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

// ReadUnits is what a read I/O that touches legs physical zones of a stripe
// group costs in the group's window: one unit per device command (the I/O's
// stripes on one physical zone are coalesced into one command, §4.5.2), so a
// window equal to the width is "one outstanding I/O per die" (§4.5.1)
// whatever the stripe size. Exported for the paper harness, like
// CongestionAdmits.
func ReadUnits(legs int) float64 { return float64(legs) }

// CongestionAdmits is Algorithm 1 line 3 with the floor: a read of units
// may go when it fits the window or nothing is outstanding. Exported, with
// CongestionUpdate, so that the deterministic paper harness (zctl bench
// paper) runs this window logic rather than a copy.
func CongestionAdmits(cwnd, inflight, units float64) bool {
	return inflight == 0 || inflight+units <= cwnd
}

// CongestionUpdate is the window after a read of units completed with
// latency lat (Algorithm 1 lines 5–10): multiplicative decrease by
// thresh/(2·lat) above thresh (never below 1), else additive increase by
// units/cwnd up to 4 × width.
func CongestionUpdate(cwnd float64, width int, units float64, lat, thresh time.Duration) float64 {
	if lat > thresh {
		return max(1, cwnd*float64(thresh)/(2*float64(lat)))
	}
	return min(float64(4*width), cwnd+units/cwnd)
}

func (c *congestion) acquire(ctx context.Context, units float64) error {
	for {
		c.mu.Lock()
		if !c.enabled || CongestionAdmits(c.cwnd, c.inflight, units) {
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
			c.m.ccDecreases.Inc()
		}
		c.cwnd = CongestionUpdate(c.cwnd, c.width, units, lat, c.thresh)
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
