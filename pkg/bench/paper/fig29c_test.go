//go:build !race

// The paper-parameter runs of Fig. 29 are simulations on the virtual clock
// that the race detector makes ten times slower; `make test` runs them
// without it (its second command). The race detector covers the same code
// in every figure's short run (TestOutput, TestDeterministic).

package paper

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFig29c: with the node's device slots (node.WRR, two per chip; reads
// and writes take them as in the node) and dies that serve reads ahead of
// queued programs, the paper's effect shows: with no scheduler the readers
// take the slots and the writers starve; CC+AC gives up part of the read
// bandwidth (paper: 71.6 % of max) and multiplies the writers' (busy x2.98,
// regular x2.57), and AC is visible on top of CC: it paces the busy writer,
// which gives the readers their window back. The same holds with an
// NVMe-deep queue.
func TestFig29c(t *testing.T) {
	t.Parallel() // an independent simulation: runs beside the other figures
	c := DefaultFig29c()
	res, err := RunFig29c(context.Background(), t.TempDir(), c)
	require.NoError(t, err)
	for _, r := range []*Fig29cResult{res, res.DeepQueue} {
		require.NotNil(t, r, "the deep queue's run")
		for _, run := range r.Runs {
			t.Logf("%d slots: %+v", r.Config.QueueSlots, run)
			require.Positive(t, run.ReaderMBps, run.Mode)
			require.Positive(t, run.RegularMBps, run.Mode)
		}
		t.Logf("gains over no scheduler: reader %v busy %v regular %v", r.ReaderGain, r.BusyGain, r.RegularGain)
		none := r.Runs[0]
		require.Equal(t, "none", none.Mode)
		require.Greater(t, none.ReaderMBps, 5*none.RegularMBps, "no scheduler: readers dominate, writers starve")
		require.InDelta(t, 0.6, r.ReaderGain["cc+ac"], 0.25, "paper: readers at 71.6 %% of max")
		require.InDelta(t, 3.0, r.BusyGain["cc+ac"], 1.0, "paper: x2.98")
		require.GreaterOrEqual(t, r.RegularGain["cc+ac"], 2.0, "paper: x2.57")
		require.LessOrEqual(t, r.RegularGain["cc+ac"], 5.5, "at most the regular writers' demand")
		require.Greater(t, r.ReaderGain["cc+ac"], 2*r.ReaderGain["cc"], "AC on top of CC gives the readers bandwidth back")
	}
}
