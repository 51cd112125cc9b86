package lfs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// TestThetaPIAndHSROptions: θ_PI sets the pre-invalid blocks that trigger a
// periodic checkpoint (a smaller one checkpoints more often for that
// cause), and with hybrid segment recycling off the cost model never
// chooses compaction over threaded logging.
func TestThetaPIAndHSROptions(t *testing.T) {
	run := func(opts lfs.Options) lfs.Stats {
		opts.Mode = lfs.ModeZNSPlus
		fs := mkfsMount(t, newVol(t, 64, 8), opts)
		fillOverwrite(t, fs, 11, 2, nil)
		s := fs.Stats()
		require.NoError(t, fs.Unmount(bg))
		t.Logf("θ_PI %d, HSR off %v: checkpoints %v, TL %d, compacted %d, HSR chose compaction %d",
			s.PreInvalidThreshold, opts.NoHSR, s.CheckpointsByCause, s.TLRecycledSegments, s.CompactedSegments, s.HSRCompaction)
		return s
	}
	def := run(lfs.Options{})
	small := run(lfs.Options{ThetaPIBlocks: def.PreInvalidThreshold / 8})
	require.Equal(t, def.PreInvalidThreshold/8, small.PreInvalidThreshold, "the option is the threshold")
	require.Greater(t, small.CheckpointsByCause["pre_invalid"], def.CheckpointsByCause["pre_invalid"],
		"a smaller θ_PI checkpoints more often for pre-invalid blocks")

	noHSR := run(lfs.Options{NoHSR: true})
	require.Zero(t, noHSR.HSRCompaction, "no cost model: threaded logging whenever a candidate exists")
	require.Positive(t, noHSR.TLRecycledSegments)
}
