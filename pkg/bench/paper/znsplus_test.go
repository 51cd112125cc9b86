package paper

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/bench/znsplus"
)

// The ZNS+ figure through the harness at the short scale (16 chips, an
// 18 MiB file system at 85 %): both workloads run and the paper's effects
// hold in direction and rough size — IZC above ZNS by more than the 10 %
// noise of a chip-bound drive (paper Fig. 7: 1.21-1.77), ZNS+ above IZC
// (1.33-2.91 over ZNS), threaded logging recycling most segments (Table 5:
// 85.8-94.8 %), fewer node and metadata blocks per user data block under
// ZNS+ than under IZC (Fig. 7b), IZC-H ahead of IZC-D on TLC and behind it
// on ZNAND (Table 4), and a table line per ratio.
func TestZNSPlusFigure(t *testing.T) {
	t.Parallel() // an independent simulation: runs beside the other figures
	res, _ := sharedShort(t, "zns_plus")
	r, ok := res.Figures["zns_plus"].(*ZNSPlusResult)
	require.True(t, ok)
	require.Len(t, r.Workloads, 3)
	for _, w := range r.Workloads {
		require.NotEmpty(t, w.Utils)
		require.Equal(t, 16, w.Chips, "the paper's 16 chips")
		for _, u := range w.Utils {
			t.Logf("%s %.0f%%: izc/zns %.3f, zns+/zns %.3f, TL share %.3f, WAF %v", w.Workload, 100*u.Utilization, u.IZCvsZNS, u.ZNSPlusVsZNS, u.TLShare, u.WAF)
			require.Greater(t, u.IZCvsZNS, 1.1, "%s: IZC > ZNS", w.Workload)
			require.Less(t, u.IZCvsZNS, 5.0, "%s: IZC/ZNS within a few times the paper's", w.Workload)
			require.Greater(t, u.ZNSPlusVsZNS, u.IZCvsZNS, "%s: ZNS+ > IZC", w.Workload)
			require.Greater(t, u.TLShare, 0.5, "%s: threaded logging recycles most segments", w.Workload)
			require.Less(t, u.WAF["zns+"], u.WAF["izc"], "%s: ZNS+ writes less than IZC (Fig. 8)", w.Workload)
			// Fig. 7b: threaded logging recycles without a checkpoint, so
			// ZNS+ writes fewer node and metadata blocks per user data
			// block than IZC.
			nm := func(name string, m znsplus.ModeResult) float64 {
				require.Positive(t, m.NodeOverhead, "%s %s: node blocks counted", w.Workload, name)
				require.Positive(t, m.MetaOverhead, "%s %s: metadata blocks counted", w.Workload, name)
				return m.NodeOverhead + m.MetaOverhead
			}
			require.Less(t, nm("zns+", u.ZNSPlus), nm("izc", u.IZC), "%s: ZNS+ node and metadata traffic below IZC's (Fig. 7b)", w.Workload)
		}
	}
	// Table 4 (fileserver): IZC-H writes fully cached chunks from the host,
	// IZC-D copies them on the drives; on slow flash (TLC) the host write
	// saves a chip read worth more than its request, on ZNAND the reverse
	// (paper: IZC-H / IZC-D 1.18 on TLC, 0.90 on ZNAND).
	fsr := r.Workloads[0].Utils[0]
	require.Equal(t, znsplus.Fileserver, r.Workloads[0].Workload)
	require.Len(t, fsr.Media, 2)
	hd := map[string]float64{}
	for _, p := range fsr.Media {
		t.Logf("table4 %s: zns %.1f MB/s, izc-h x%.3f, izc-d x%.3f, h/d %.3f", p.Media, p.ZNS.ThroughputMBps, p.IZCHvsZNS, p.IZCDvsZNS, p.IZCHvsIZCD)
		require.Greater(t, p.IZCHvsZNS, 1.0, "%s: IZC-H > ZNS", p.Media)
		require.Greater(t, p.IZCDvsZNS, 1.0, "%s: IZC-D > ZNS", p.Media)
		hd[p.Media] = p.IZCHvsIZCD
	}
	require.Greater(t, hd["TLC"], 1.0, "TLC: IZC-H ahead of IZC-D")
	require.Less(t, hd["ZNAND"], 1.0, "ZNAND: IZC-D ahead of IZC-H")
	require.Greater(t, hd["TLC"], hd["ZNAND"], "the host write pays off less as flash reads get faster")
	require.Len(t, res.Lines["zns_plus"], 4*3+2*6)
	require.NoError(t, plotFigure("zns_plus", r, t.TempDir()+"/zns_plus.png"))
}
