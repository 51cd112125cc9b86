package znsplus

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// pgcConfigs is Small in host-copy mode at 95 % utilization with P-GC off
// and with 2 workers, for workload wl.
func pgcConfigs(wl string) []Config {
	var out []Config
	for _, w := range []int{1, 2} {
		c := Small()
		c.Workload, c.Utilizations, c.Modes, c.NoCABRun, c.Overwrite = wl, []float64{0.95}, []lfs.Mode{lfs.ModeZNS}, true, 0.3
		c.PGCWorkers = w
		out = append(out, c)
	}
	return out
}

// TestPGCOverlapsReads: on the harness's clock P-GC's workers overlap
// their reads in modelled time: host copy splits the victims more than half
// valid, their read phase is shorter than one worker's and the compaction
// with it, throughput rises, and the run replays exactly (the fileserver
// here; package paper's P-GC figure runs varmail too).
func TestPGCOverlapsReads(t *testing.T) {
	for _, wl := range []string{Fileserver} {
		t.Run(wl, func(t *testing.T) {
			rs, err := RunAll(context.Background(), pgcConfigs(wl))
			require.NoError(t, err)
			one, two := rs[0].Utils[0].ZNS, rs[1].Utils[0].ZNS
			t.Logf("1 worker: %v MB/s, compaction %v ms %v, split %d; 2 workers: %v MB/s, compaction %v ms %v, split %d",
				one.ThroughputMBps, one.CompactionMs, one.CompactionPhasesMs, one.PGCSplit, two.ThroughputMBps, two.CompactionMs, two.CompactionPhasesMs, two.PGCSplit)
			require.Zero(t, one.PGCSplit, "one worker never splits")
			require.NotZero(t, one.CompactedSegments)
			require.NotZero(t, two.PGCSplit, "victims more than half valid are split")
			require.Less(t, two.CompactionPhasesMs["read"], 0.9*one.CompactionPhasesMs["read"], "the workers' reads overlap")
			require.Less(t, two.CompactionMs, one.CompactionMs)
			require.Greater(t, two.ThroughputMBps, one.ThroughputMBps)
			again, err := RunAll(context.Background(), pgcConfigs(wl)[1:])
			require.NoError(t, err)
			require.Equal(t, rs[1], again[0], "P-GC's turns replay exactly")
		})
	}
}
