package paper

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/bench/znsplus"
)

// The P-GC figure at the short scale (an 18 MiB file system at 95 %): with
// two workers host copy splits the victims more than half valid, their
// read phase shrinks by more than a tenth (the workers' reads overlap in
// modelled time; the chips a single worker's runs already spread over
// bound the gain), a host copy takes less time and throughput rises; in
// the over-provisioning sweep more over-provisioning gives more
// throughput (seeds/004 Fig. 4).
func TestPGCFigure(t *testing.T) {
	t.Parallel() // an independent simulation: runs beside the other figures
	res, _ := sharedShort(t, "pgc")
	r, ok := res.Figures["pgc"].(*PGCResult)
	require.True(t, ok)
	one := map[string]PGCRun{}
	seen := map[string]bool{}
	for _, run := range r.Runs {
		t.Logf("%s %d workers: %.3f MB/s, host copy %.3f ms (read %.3f), %d compactions, %d split",
			run.Workload, run.Workers, run.ThroughputMBps, run.CompactionMs, run.ReadMs, run.Compactions, run.Split)
		require.NotZero(t, run.Compactions, "%s: 95 %% recycles", run.Workload)
		if run.Workers == 1 {
			one[run.Workload] = run
			require.Zero(t, run.Split, "one worker never splits")
			continue
		}
		seen[run.Workload] = true
		base := one[run.Workload]
		require.NotZero(t, run.Split, "%s: victims more than half valid are split", run.Workload)
		require.Less(t, run.ReadMs, 0.9*base.ReadMs, "%s: the workers' reads overlap", run.Workload)
		require.Less(t, run.CompactionOverOne, 0.99, "%s: a host copy takes less time", run.Workload)
		require.Greater(t, run.ThroughputOverOne, 1.01, "%s: throughput rises", run.Workload)
	}
	require.True(t, seen[znsplus.Fileserver] && seen[znsplus.Varmail], "both workloads run with P-GC")
	require.GreaterOrEqual(t, len(r.OPSweep), 2)
	for i := 1; i < len(r.OPSweep); i++ {
		lo, hi := r.OPSweep[i-1], r.OPSweep[i]
		t.Logf("OP %d %%: %.3f MB/s; OP %d %%: %.3f MB/s", lo.OPPercent, lo.ThroughputMBps, hi.OPPercent, hi.ThroughputMBps)
		require.Greater(t, hi.ThroughputMBps, lo.ThroughputMBps, "more over-provisioning, more throughput")
		require.Less(t, hi.FSMiB, lo.FSMiB, "at the cost of capacity")
	}
	require.NoError(t, plotFigure("pgc", r, t.TempDir()+"/pgc.png"))
}

// The ZMS figures run from the registry with the paper's numbers on the
// lines the paper states one for.
func TestZMSFigures(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"zms_ipu", "zms_l2p", "zms_iotailor"} {
		res, _ := sharedShort(t, id)
		require.NotEmpty(t, res.Lines[id], id)
		require.NoError(t, plotFigure(id, res.Figures[id], t.TempDir()+"/"+id+".png"), id)
	}
	refs := 0
	for _, id := range []string{"zms_ipu", "zms_iotailor"} {
		res, _ := sharedShort(t, id)
		for _, l := range res.Lines[id] {
			if l.Ref != 0 {
				refs++
			}
		}
	}
	require.Equal(t, len(zmsRefs), refs, "every paper number finds its line")
}
