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
	res, err := Run(context.Background(), Options{Dir: t.TempDir(), MiB: 6, Runs: 1})
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
}

func TestRejectsBadOptions(t *testing.T) {
	_, err := Run(context.Background(), Options{Nodes: 2})
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)
}
