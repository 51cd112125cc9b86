package paper

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The hardware-parallelism figure at the short scale (4 and 16 chips; 1 and
// 2 lanes with 8 and 16 chips): the zone spans the chips and the drive
// keeps its size; copyback-aware allocation makes more of izc's copies by
// copyback than unaware allocation at every chip count; the gains of izc
// and zns+ over zns grow with the chips and with lanes and chips together,
// while zns leaves more of the chips' time idle.
func TestScalingFigure(t *testing.T) {
	t.Parallel() // an independent simulation: runs beside the other figures
	res, _ := sharedShort(t, "zns_plus_scaling")
	r, ok := res.Figures["zns_plus_scaling"].(*ScalingResult)
	require.True(t, ok)
	require.Len(t, r.Chips, 2)
	require.Len(t, r.Link, 2)
	for _, p := range append(append([]ScalingPoint(nil), r.Chips...), r.Link...) {
		t.Logf("%d chips, %d lanes (%.0f MB/s): %d zones of %g MiB, fs %.1f MiB, zns %.1f MB/s, izc x%.3f (cub x%.3f), zns+ x%.3f; copyback cab %.3f cub %.3f zns+ plugging %.3f; chips zns %.2f izc %.2f zns+ %.2f",
			p.Chips, p.Lanes, p.LinkMBps, p.Zones, p.ZoneMiB, p.FSMiB, p.ZNSMBps, p.IZCvsZNS, p.IZCCUBvsZNS, p.PlusVsZN, p.CopybackCAB, p.CopybackCUB, p.PlusPlugCopyback,
			p.ChipUtilZNS, p.ChipUtilIZC, p.ChipUtilZNSPlus)
		require.Positive(t, p.ZNSMBps)
		if p.Chips >= 16 { // on few chips the paper finds the schemes alike
			require.Greater(t, p.PlusVsZN, 1.0, "%d chips: zns+ above zns", p.Chips)
		}
	}
	small, large := r.Chips[0], r.Chips[1]
	require.Equal(t, 4*small.ZoneMiB, large.ZoneMiB, "the zone spans the chips")
	require.Equal(t, float64(small.Zones)*small.ZoneMiB, float64(large.Zones)*large.ZoneMiB, "the drive keeps its size")
	for _, p := range r.Chips {
		require.Greater(t, p.CopybackCAB, p.CopybackCUB, "%d chips: CAB copies more by copyback", p.Chips)
		require.Greater(t, p.PlusPlugCopyback, p.CopybackCUB, "%d chips: plugging copies whole chunks on their chip", p.Chips)
		require.Positive(t, p.IZCCUBvsZNS)
	}
	// ZNS+ §4.4-4.5: the gain of in-storage copies and threaded logging
	// grows with the hardware's parallelism, as host copy leaves more of the
	// chips idle
	for _, pair := range [][2]ScalingPoint{{small, large}, {r.Link[0], r.Link[1]}} {
		lo, hi := pair[0], pair[1]
		require.Greater(t, hi.IZCvsZNS, lo.IZCvsZNS, "%d -> %d chips: IZC's gain grows", lo.Chips, hi.Chips)
		require.Greater(t, hi.PlusVsZN, lo.PlusVsZN, "%d -> %d chips: ZNS+'s gain grows", lo.Chips, hi.Chips)
		require.Less(t, hi.ChipUtilZNS, lo.ChipUtilZNS, "%d -> %d chips: host copy leaves more chip time idle", lo.Chips, hi.Chips)
	}
	require.Greater(t, r.Link[1].LinkMBps, r.Link[0].LinkMBps)
	require.Zero(t, r.Link[0].IZCCUBvsZNS, "the link sweep runs no CUB")
	require.NoError(t, plotFigure("zns_plus_scaling", r, t.TempDir()+"/scaling.png"))
}
