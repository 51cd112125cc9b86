package paper

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFig29c: with the node's device slots (node.WRR, two per chip; reads
// and writes take them as in the node) the paper's effect shows: with no
// scheduler the readers take the slots and the writers starve; CC+AC gives
// up read bandwidth and multiplies the writers' (paper: busy x2.98, regular
// x2.57). The same holds with an NVMe-deep queue.
func TestFig29c(t *testing.T) {
	t.Parallel() // an independent simulation: runs beside the other figures
	res, err := RunFig29c(context.Background(), t.TempDir(), DefaultFig29c())
	require.NoError(t, err)
	for _, r := range res.Runs {
		t.Logf("%+v", r)
	}
	t.Logf("gains over no scheduler: reader %v busy %v regular %v", res.ReaderGain, res.BusyGain, res.RegularGain)
	none := res.Runs[0]
	require.Equal(t, "none", none.Mode)
	require.Greater(t, none.ReaderMBps, 5*none.RegularMBps, "no scheduler: readers dominate, writers starve")
	require.Less(t, res.ReaderGain["cc"], 0.8)
	require.Less(t, res.ReaderGain["cc+ac"], 0.8)
	require.GreaterOrEqual(t, res.BusyGain["cc+ac"], 1.5, "paper: x2.98")
	require.GreaterOrEqual(t, res.RegularGain["cc+ac"], 1.5, "paper: x2.57")
	for _, r := range res.Runs {
		require.Positive(t, r.ReaderMBps, r.Mode)
		require.Positive(t, r.RegularMBps, r.Mode)
	}
	deep := res.DeepQueue
	require.NotNil(t, deep)
	for _, r := range deep.Runs {
		t.Logf("deep queue: %+v", r)
	}
	none = deep.Runs[0]
	require.Greater(t, none.ReaderMBps, 5*none.RegularMBps, "no scheduler: readers dominate, writers starve")
	require.Less(t, deep.ReaderGain["cc+ac"], 0.8)
	require.GreaterOrEqual(t, deep.BusyGain["cc+ac"], 1.5, "paper: x2.98")
	require.GreaterOrEqual(t, deep.RegularGain["cc+ac"], 1.5, "paper: x2.57")
}
