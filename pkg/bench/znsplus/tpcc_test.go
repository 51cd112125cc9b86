package znsplus_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/bench/znsplus"
)

// The OLTP-like workload (tpcc): small random page writes and an fsynced
// redo write per commit. It recycles in every mode, IZC copies inside the
// drives and writes less than host copy, threaded logging recycles most of
// zns+'s segments, and ZNS+ is ahead of ZNS (ZNS+ §4.2: for all
// benchmarks). Two runs print the same numbers.
func TestTPCC(t *testing.T) {
	c := small(znsplus.TPCC)
	c.NoCABRun, c.Overwrite = true, 0.3
	a, err := znsplus.Run(context.Background(), c)
	require.NoError(t, err)
	b, err := znsplus.Run(context.Background(), c)
	require.NoError(t, err)
	require.Equal(t, a, b, "two runs differ")
	u := a.Utils[0]
	t.Logf("tpcc %.0f%%: zns %.1f MB/s, izc x%.3f, zns+ x%.3f, WAF %v, TL share %.3f, compaction ms zns %.2f izc %.2f",
		100*u.Utilization, u.ZNS.ThroughputMBps, u.IZCvsZNS, u.ZNSPlusVsZNS, u.WAF, u.TLShare, u.ZNS.CompactionMs, u.IZC.CompactionMs)
	require.Equal(t, c.Threads, a.Threads)
	require.Positive(t, u.ZNS.CompactedSegments, "the measured phase recycles")
	require.Positive(t, u.IZC.MovedIZC)
	require.Less(t, u.IZC.WAF, u.ZNS.WAF, "IZC writes less than host copy")
	require.Positive(t, u.ZNSPlus.TLRecycledSegments)
	require.Greater(t, u.ZNSPlusVsZNS, 1.0, "ZNS+ > ZNS")
}
