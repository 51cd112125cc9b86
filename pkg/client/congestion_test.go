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

// A read I/O is admitted to its groups' windows as a whole (Algorithm 1
// line 3), not leg by leg or call by call: a wide read whose stripes exceed
// the window goes at once when nothing is outstanding, and holds nothing when
// a later group's window makes it wait past its deadline.
func TestReadAdmittedOncePerIO(t *testing.T) {
	m := newMetrics(nil)
	g1 := &group{index: 1, width: 8, stripe: 2, cc: newCongestion(1, true, 500*time.Microsecond, m)}
	g0 := &group{index: 0, width: 8, stripe: 2, cc: newCongestion(1, true, 500*time.Microsecond, m)}
	var calls []*readCall
	for node := 0; node < 4; node++ { // 4 node calls, 2 legs each of group 1, then one leg of group 0
		c := &readCall{node: string(rune('a' + node))}
		for k := 0; k < 2; k++ {
			c.legs = append(c.legs, readLegRef{g: g1, l: &leg{blocks: 4}})
		}
		calls = append(calls, c)
	}
	calls[3].legs = append(calls[3].legs, readLegRef{g: g0, l: &leg{blocks: 2}})

	adms, err := admitRead(context.Background(), calls)
	require.NoError(t, err, "the whole I/O (8 legs) passes a window of 1 when nothing is outstanding")
	require.Len(t, adms, 2)
	assert.Equal(t, uint32(0), adms[0].index, "windows taken in group order")
	assert.Equal(t, 8.0, adms[1].units, "one admission for all 8 legs of group 1, one unit each")
	assert.Equal(t, 1.0, adms[0].units)

	// g0 is busy now: a second I/O over both groups waits on g0 and, past
	// its deadline, holds nothing in g1 (its window would otherwise leak).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = admitRead(ctx, calls)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	for _, a := range adms {
		a.cc.release(a.units, 100*time.Microsecond, true)
	}
	assert.Zero(t, g0.cc.inflight)
	assert.Zero(t, g1.cc.inflight)
}

// A read costs its group's window one unit per device command — per
// physical zone (leg) it touches, its stripes there coalesced — not one per
// stripe (eZNS §4.5.1: a window equal to the width is one outstanding I/O
// per die). eZNS Fig. 29a's zone B: width 8, 8 KiB stripes, 128 KiB reads.
func TestReadUnitsPerLeg(t *testing.T) {
	m := newMetrics(nil)
	for _, tc := range []struct {
		name                 string
		width                int
		stripe, off, n       uint64 // blocks
		wantLegs, wantStripe int
	}{
		{"zone B: 128 KiB over width 8, 8 KiB stripes", 8, 2, 0, 32, 8, 16},
		{"zone A sc. 1: 128 KiB over width 2, 32 KiB stripes", 2, 8, 0, 32, 2, 4},
		{"two legs, unaligned, two stripes each", 2, 2, 1, 6, 2, 4},
		{"three legs, one stripe each", 8, 2, 3, 5, 3, 3},
		{"one leg, one stripe", 8, 2, 4, 1, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &group{index: 0, width: tc.width, stripe: tc.stripe, cc: newCongestion(tc.width, true, 500*time.Microsecond, m)}
			c := &readCall{node: "a"}
			stripes := 0
			for _, l := range g.legs(tc.off, tc.n) {
				c.legs = append(c.legs, readLegRef{g: g, l: l})
				stripes += len(l.pieces)
			}
			require.Len(t, c.legs, tc.wantLegs)
			require.Equal(t, tc.wantStripe, stripes, "stripes the read covers (the former unit)")
			adms, err := admitRead(context.Background(), []*readCall{c})
			require.NoError(t, err)
			require.Len(t, adms, 1)
			assert.Equal(t, float64(tc.wantLegs), adms[0].units, "k legs cost k units")
			assert.Equal(t, float64(tc.wantLegs), g.cc.inflight)
			g.cc.release(adms[0].units, 100*time.Microsecond, true)
			assert.Zero(t, g.cc.inflight)
		})
	}

	// With the window at the width, zone B (width 8) has one 128 KiB read
	// in flight and a second waits; at the cap (4 × width) four fit — in
	// stripes (16 per read) the cap held two.
	g := &group{width: 8, stripe: 2, cc: newCongestion(8, true, 500*time.Microsecond, m)}
	read := func() []*readCall {
		c := &readCall{node: "a"}
		for _, l := range g.legs(0, 32) {
			c.legs = append(c.legs, readLegRef{g: g, l: l})
		}
		return []*readCall{c}
	}
	_, err := admitRead(context.Background(), read())
	require.NoError(t, err)
	assert.False(t, CongestionAdmits(g.cc.window(), g.cc.inflight, ReadUnits(8)), "window 8: one read of 8 legs")
	g.cc.mu.Lock()
	g.cc.cwnd, g.cc.inflight = 32, 0
	g.cc.mu.Unlock()
	for i := 0; i < 4; i++ {
		_, err := admitRead(context.Background(), read())
		require.NoError(t, err, "read %d fits the cap of 32 units", i+1)
	}
	assert.Equal(t, 32.0, g.cc.inflight)
	assert.False(t, CongestionAdmits(g.cc.window(), g.cc.inflight, ReadUnits(8)), "a fifth read waits")
}
