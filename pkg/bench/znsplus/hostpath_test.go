package znsplus

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// The thread clock fires timers in deadline order at their own time, inline,
// and a thread switched to an earlier time does not see later timers.
func TestThreadClock(t *testing.T) {
	ctx := context.Background()
	c := &threadClock{}
	var got []time.Duration
	c.AfterFunc(30, func() { got = append(got, c.Now()) })
	c.AfterFunc(10, func() {
		got = append(got, c.Now())
		c.AfterFunc(20, func() { got = append(got, c.Now()) }) // scheduled by a callback
	})
	stop := c.AfterFunc(25, func() { t.Fatal("stopped timer ran") })
	require.True(t, stop())
	require.False(t, stop())
	require.NoError(t, c.WaitUntil(ctx, 22))
	require.Equal(t, []time.Duration{10, 20}, got)
	require.Equal(t, time.Duration(22), c.Now())
	c.switchTo(5) // another thread, earlier
	require.Equal(t, time.Duration(5), c.Now())
	require.Len(t, got, 2, "the timer at 30 waits for a thread to reach it")
	c.switchTo(40)
	require.Equal(t, []time.Duration{10, 20, 30}, got)
	ran := false
	c.AfterFunc(40, func() { ran = true }) // due now: runs before AfterFunc returns
	require.True(t, ran)
	require.Error(t, c.WaitUntil(canceled(), 50))
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestPool(t *testing.T) {
	p := newPool(2)
	require.Equal(t, time.Duration(10), p.book(0, 10))
	require.Equal(t, time.Duration(10), p.book(0, 10), "the second CPU runs in parallel")
	require.Equal(t, time.Duration(20), p.book(0, 10), "a third request waits for a CPU")
	require.Equal(t, time.Duration(105), p.book(100, 5))
}

// The model's constants are the paper's: the link at 1.2 GB/s, four host
// CPUs, 8.4 us of submission and 53 us of transfer latency per request, and
// the manifest names each with its source.
func TestCalibrations(t *testing.T) {
	require.Equal(t, int64(1_200_000_000), LinkBytesPerSec)
	require.Equal(t, 4, HostCPUs)
	require.InDelta(t, 8.43, HostSubmission.Seconds()*1e6, 0.01)
	require.InDelta(t, 52.98, TransferLatency.Seconds()*1e6, 0.01)
	c := Default()
	require.Equal(t, LinkBytesPerSec, c.flashConfig().HostLinkBytesPerSec)
	require.Equal(t, 3*time.Millisecond*4/128, c.flashConfig().EraseLatency, "erase per page as on 128-page blocks")
	names := map[string]bool{}
	for _, k := range Calibrations() {
		require.NotEmpty(t, k.Source, k.Name)
		names[k.Name] = true
	}
	for _, n := range []string{"host link bandwidth", "host CPUs", "host submission/completion per request", "device-to-host transfer latency per request", "threads", "erase time per block"} {
		require.True(t, names[n], n)
	}
}

// Threads overlap their I/O: the same host-copy run with 8 threads moves
// more than with 1 (each thread's requests wait on the host path's
// per-request latency; the others fill the chips meanwhile), and keeps the
// chips busier; erase time charged per block of the small blocks (the
// ablation) costs throughput.
func TestThreadsOverlap(t *testing.T) {
	run := func(threads int, unscaled bool) ModeResult {
		c := Small()
		c.Utilizations, c.Overwrite, c.NoCABRun, c.Threads = []float64{0.80}, 0.4, true, threads
		c.Modes, c.UnscaledErase = []lfs.Mode{lfs.ModeZNS}, unscaled
		r, err := Run(context.Background(), c)
		require.NoError(t, err)
		return r.Utils[0].ZNS
	}
	one, eight, slowErase := run(1, false), run(8, false), run(8, true)
	t.Logf("1 thread %.1f MB/s (chips %.2f), 8 threads %.1f MB/s (chips %.2f), unscaled erase %.1f MB/s",
		one.ThroughputMBps, one.ChipUtilization, eight.ThroughputMBps, eight.ChipUtilization, slowErase.ThroughputMBps)
	require.Greater(t, eight.ThroughputMBps, 1.3*one.ThroughputMBps, "threads overlap their I/O")
	require.Less(t, eight.ThroughputMBps, 16*one.ThroughputMBps)
	require.Greater(t, eight.ChipUtilization, one.ChipUtilization)
	require.Less(t, slowErase.ThroughputMBps, 0.9*eight.ThroughputMBps, "erases at 3 ms per 4-page block cost throughput")
}

// ZNS+ Fig. 9: with Config.LBAOrderedUtil zns+ also runs with LBA-ordered
// plugging at that utilization, beside the PPA-ordered default. The paper's
// PPA-ordered plugging keeps the chips busier; here the two orders differ by
// a few percent either way (docs/paper-figures.md).
func TestLBAOrderedRun(t *testing.T) {
	c := Small()
	c.Utilizations, c.Overwrite, c.NoCABRun, c.Threads = []float64{0.85}, 0.4, true, 8
	c.Modes, c.LBAOrderedUtil = []lfs.Mode{lfs.ModeZNS, lfs.ModeZNSPlus}, 0.85
	r, err := Run(context.Background(), c)
	require.NoError(t, err)
	u := r.Utils[0]
	require.NotNil(t, u.ZNSPlusLBAOrdered)
	lp := u.ZNSPlusLBAOrdered
	t.Logf("PPA-ordered: %.1f MB/s, chips %.2f; LBA-ordered: %.1f MB/s, chips %.2f", u.ZNSPlus.ThroughputMBps, u.ZNSPlus.ChipUtilization, lp.ThroughputMBps, lp.ChipUtilization)
	require.Positive(t, lp.TLRecycledSegments)
	require.InDelta(t, u.ZNSPlus.ChipUtilization, lp.ChipUtilization, 0.1)
}

// ZNS+ §3.3.2: with Config.TunablesUtil zns+ also runs at other θ_PI and
// without hybrid segment recycling. A larger θ_PI checkpoints no more often
// (fewer here, 8 times the default); without HSR the cost model never picks
// compaction.
func TestTunablesRuns(t *testing.T) {
	c := Small()
	c.Utilizations, c.Overwrite, c.NoCABRun, c.Threads = []float64{0.85}, 0.4, true, 8
	c.Modes, c.TunablesUtil, c.ThetaPIScales, c.NoHSRRun = []lfs.Mode{lfs.ModeZNS, lfs.ModeZNSPlus}, 0.85, []float64{0.125, 8}, true
	r, err := Run(context.Background(), c)
	require.NoError(t, err)
	u := r.Utils[0]
	require.Len(t, u.ThetaPI, 2)
	small, large := u.ThetaPI[0], u.ThetaPI[1]
	for _, p := range u.ThetaPI {
		t.Logf("θ_PI x%g: %d blocks (default %d), %d checkpoints (default %d), %d periodic, throughput x%.3f",
			p.Scale, p.Run.ThetaPIBlocks, u.ZNSPlus.ThetaPIBlocks, p.Run.Checkpoints, u.ZNSPlus.Checkpoints, p.Run.PreInvalidCheckpoints, p.VsDefault)
		require.InDelta(t, p.Run.ThroughputMBps/u.ZNSPlus.ThroughputMBps, p.VsDefault, 0.001)
		require.Equal(t, 128*p.Scale, p.PaperMiB)
	}
	require.Equal(t, u.ZNSPlus.ThetaPIBlocks/8, small.Run.ThetaPIBlocks)
	require.Equal(t, u.ZNSPlus.ThetaPIBlocks*8, large.Run.ThetaPIBlocks)
	require.GreaterOrEqual(t, small.Run.Checkpoints, u.ZNSPlus.Checkpoints)
	require.GreaterOrEqual(t, u.ZNSPlus.Checkpoints, large.Run.Checkpoints)
	require.Greater(t, small.Run.Checkpoints, large.Run.Checkpoints, "a larger θ_PI checkpoints less often")
	require.NotNil(t, u.NoHSR)
	t.Logf("HSR off: throughput x%.3f, HSR chose compaction 0 vs %d", *u.NoHSRVsHSR, u.ZNSPlus.HSRCompaction)
	require.Zero(t, u.NoHSR.HSRCompaction, "no cost model without HSR")
	require.Positive(t, u.NoHSR.TLRecycledSegments)
}

// ZNS+ Table 4: with Config.MediaUtil zns and izc also run per flash
// medium, izc once per forced policy for chunks cached clean on the host.
// IZC-D copies every clean block on the drives (the host writes only dirty
// ones); IZC-H writes fully cached chunks from the host, so more of what it
// moves goes from the host. The medium is the drive's: a faster medium
// makes the same zns workload faster. The default medium reuses the main
// zns run.
func TestMediaRuns(t *testing.T) {
	c := Small()
	c.Utilizations, c.Overwrite, c.NoCABRun, c.Threads = []float64{0.85}, 0.4, true, 8
	c.Overwrite = 0.25
	c.Modes, c.MediaUtil, c.Media = []lfs.Mode{lfs.ModeZNS}, 0.85, []string{"TLC", "MLC", "ZNAND"}
	r, err := Run(context.Background(), c)
	require.NoError(t, err)
	u := r.Utils[0]
	require.Len(t, u.Media, 3)
	by := map[string]MediaPoint{}
	for _, p := range u.Media {
		t.Logf("%s: zns %.1f MB/s, IZC-H x%.3f (host share %.3f), IZC-D x%.3f (host share %.3f), H/D %.3f", p.Media, p.ZNS.ThroughputMBps,
			p.IZCHvsZNS, p.IZCH.HostWrittenShare, p.IZCDvsZNS, p.IZCD.HostWrittenShare, p.IZCHvsIZCD)
		by[p.Media] = p
		require.Zero(t, p.IZCD.MovedHostCached, "IZC-D writes no clean cached block from the host")
		require.Positive(t, p.IZCH.MovedHostCached, "IZC-H writes fully cached chunks from the host")
		require.Greater(t, p.IZCH.HostWrittenShare, p.IZCD.HostWrittenShare)
		require.Positive(t, p.IZCH.MovedIZC, "IZC-H still copies the chunks it does not hold")
		require.InDelta(t, p.IZCH.ThroughputMBps/p.IZCD.ThroughputMBps, p.IZCHvsIZCD, 0.001)
	}
	require.Equal(t, u.ZNS, by["MLC"].ZNS, "the default medium reuses the main zns run")
	require.Greater(t, by["ZNAND"].ZNS.ThroughputMBps, by["MLC"].ZNS.ThroughputMBps)
	require.Greater(t, by["MLC"].ZNS.ThroughputMBps, by["TLC"].ZNS.ThroughputMBps)

	c.Media = []string{"QLC"}
	_, err = Run(context.Background(), c)
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)
}
