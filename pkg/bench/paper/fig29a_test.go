package paper

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFig29a asserts eZNS Fig. 29a per thread, as the paper reports it: with
// CC off the QD-32 zone B dominates (paper sc. 1: 76 vs 1,287 MB/s); with CC
// on (Algorithm 1: whole read I/Os admitted) scenario 1 is fair (paper: 290
// and 290 MB/s); in scenario 3 no read reaches lat_thresh and B keeps its
// full window (the paper: "the I/O scheduler chooses to max out the
// bandwidth"). Admitting every leg on its own (pkg/client today) collapses
// zone B once its window shrinks below one I/O.
func TestFig29a(t *testing.T) {
	c := DefaultFig29a()
	res, err := RunFig29a(context.Background(), t.TempDir(), c)
	require.NoError(t, err)
	rows := map[string]Fig29aRow{}
	for _, row := range res.Rows {
		t.Logf("%s: off %+v on %+v legs %+v", row.Scenario.Name, row.Off, row.On, row.OnLegs)
		rows[row.Scenario.Name] = row
		require.Less(t, row.Off.AOverB, 0.2, "%s: CC off, B dominates", row.Scenario.Name)
		require.Greater(t, row.On.AOverB, 2*row.Off.AOverB, "%s: CC gives A more", row.Scenario.Name)
	}
	sc1 := rows["1-a-w2-32k"]
	require.InDelta(t, 1.0, sc1.On.AOverB, 0.2, "scenario 1: the paper's A = B with CC on")
	require.Less(t, sc1.On.BWindow, float64(4*c.BWidth), "scenario 1: B's window shrank (reads past lat_thresh)")
	require.Less(t, sc1.OnLegs.BMBps, sc1.On.BMBps/2, "per-leg admission serializes B's legs")
	sc3 := rows["3-a-w8-8k"]
	require.InDelta(t, float64(4*c.BWidth), sc3.On.BWindow, 0.01, "scenario 3: no decrease, B maxes out")
}
