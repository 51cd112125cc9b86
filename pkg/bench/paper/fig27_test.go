package paper

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFig27 checks eZNS Fig. 27–28 at the short scale: with the paper's
// reclaim timing NS4 takes about 3x the spares while NS1–NS3 idle (up to 3x
// in the paper), its throughput grows toward the whole device's, and it
// gives the spares back when the others resume; with ZoneFleet's default
// T_ReadOnly (5 min, scaled) nothing is reclaimed and NS4 gains nothing.
func TestFig27(t *testing.T) {
	t.Parallel() // an independent simulation: runs beside the other figures
	res, _ := sharedShort(t, "fig27_28")
	r := res.Figures["fig27_28"].(*Fig27Result)
	p, d := r.Paper, r.Default
	t.Logf("paper timing: spares x%.2f, MB/s x%.2f, of device %.2f, resumed x%.2f (%d reclaims)",
		p.NS4SparesIdleOverBusy, p.NS4MBpsIdleOverBusy, p.NS4IdleOverTotalBusy, p.NS4SparesResumedOverBusy, p.Reclaims)
	t.Logf("default timing: spares x%.2f, MB/s x%.2f (%d reclaims)", d.NS4SparesIdleOverBusy, d.NS4MBpsIdleOverBusy, d.Reclaims)

	require.Greater(t, p.Reclaims, 0)
	require.InDelta(t, 3.0, p.NS4SparesIdleOverBusy, 0.75, "NS4 takes up to 3x more spares")
	require.Greater(t, p.NS4MBpsIdleOverBusy, 1.3, "NS4 gains bandwidth while the others idle")
	require.Greater(t, p.NS4IdleOverTotalBusy, 0.8, "NS4 alone gets near the device's busy-phase total")
	require.InDelta(t, 1.0, p.NS4SparesResumedOverBusy, 0.3, "the harvested spares are released")

	// the paper's timing is two cycles of global overdrive: the run's
	// T_ReadOnly is within a few times the time the busy phase took for
	// 2 x N_essential allocations; the default is far above it
	t.Logf("two overdrive cycles: %v (%.0f allocations/s); paper timing T_ReadOnly %v, default %v", p.TwoCycles, p.AllocationsPerSecondBusy, p.TReadOnly, d.TReadOnly)
	require.Positive(t, p.TwoCycles)
	require.Less(t, float64(p.TReadOnly), 4*float64(p.TwoCycles))
	require.Greater(t, float64(p.TReadOnly), float64(p.TwoCycles)/4)
	require.Greater(t, float64(d.TReadOnly), 10*float64(d.TwoCycles))
	require.Zero(t, d.Reclaims, "T_ReadOnly of 5 min (scaled) does not expire in the idle phase")
	require.Less(t, d.NS4SparesIdleOverBusy, 1.3)
	require.Less(t, d.NS4MBpsIdleOverBusy, 1.15)
}
