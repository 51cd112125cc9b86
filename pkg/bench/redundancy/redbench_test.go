package redbench

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// A short run measures every point, reads every byte back (also degraded,
// mirrored and raid5, and after the rebuild) and rebuilds the stopped node's copies; no speed
// is asserted (the machine is shared).
func TestRunShort(t *testing.T) {
	res, err := Run(context.Background(), Options{Dir: t.TempDir(), MiB: 6, Runs: 1, LoadMiB: 16, LoadOps: 4, RebuildRate: 8})
	require.NoError(t, err)
	for name, v := range map[string]float64{"none write": res.NoneWriteMiBps, "none read": res.NoneReadMiBps,
		"mirror write": res.MirrorWriteMiBps, "mirror read": res.MirrorReadMiBps, "degraded read": res.DegradedReadMiBps,
		"write ratio": res.MirrorWriteRatio, "rebuild s/GiB": res.RebuildSecondsPerGi,
		"raid5 write": res.ParityWriteMiBps, "raid5 read": res.ParityReadMiBps, "raid5 degraded read": res.ParityDegradedMiB,
		"raid5 write ratio": res.ParityWriteRatio} {
		require.Positive(t, v, name)
	}
	require.Positive(t, res.RebuiltCopies)
	require.Positive(t, res.ParityRebuiltLegs, "the lost node held raid5 legs of the kept bytes")
	require.Positive(t, res.ParityRebuildSecondsPer)
	var buf bytes.Buffer
	require.NoError(t, res.WriteTable(&buf))
	require.Contains(t, buf.String(), "mirror:2, one node stopped")
	require.Contains(t, buf.String(), "raid5, a data leg's node stopped")
	require.Contains(t, buf.String(), "rebuild (raid5)")

	// tenant throughput during a rebuild: both points measured, every
	// mirrored byte read back after each rebuild (loadPoint fails
	// otherwise); the throttled one waited for its rate
	require.NotNil(t, res.Throttled)
	require.NotNil(t, res.Unthrottled)
	require.Equal(t, 8.0, res.Throttled.RateMiBps)
	require.Zero(t, res.Unthrottled.RateMiBps)
	for _, lp := range []*LoadPoint{res.Throttled, res.Unthrottled} {
		require.Positive(t, lp.BaselineMiBps)
		require.Positive(t, lp.RebuiltMiB)
		require.Positive(t, lp.RebuildSeconds)
	}
	require.Positive(t, res.Throttled.ThrottledSeconds)
	require.Zero(t, res.Unthrottled.ThrottledSeconds)
	// the rebuild took at least its bytes (less a burst per node) at the rate
	// (one 1 MiB burst per node, 4 nodes)
	require.GreaterOrEqual(t, res.Throttled.RebuildSeconds, (res.Throttled.RebuiltMiB-4)/8)
	require.Contains(t, buf.String(), "mirror:2 rebuild at 8 MiB/s")
}

func TestRejectsBadOptions(t *testing.T) {
	_, err := Run(context.Background(), Options{Nodes: 2})
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)
}
