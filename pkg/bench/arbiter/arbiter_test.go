package arbiterbench

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func TestOptionsRejected(t *testing.T) {
	for _, o := range []Options{{Nodes: []int{0}}, {Workers: 100}, {ZonesPerNode: 4}, {DBMutations: -1}, {FillVZones: -1}} {
		_, err := Run(context.Background(), o)
		require.ErrorIs(t, err, zerr.ErrInvalidArgument, "%+v", o)
	}
}

// TestSmallRun runs the benchmark on two small clusters: every figure is
// measured (non-zero) and bytes per mutation do not depend on the size.
func TestSmallRun(t *testing.T) {
	res, err := Run(context.Background(), Options{Dir: t.TempDir(), Nodes: []int{4, 32}, Cycles: 20, Warmup: 2, Repeats: 1, Workers: 2, DBMutations: 80, FillVZones: 3})
	require.NoError(t, err)
	require.Len(t, res.Rows, 2)
	for _, r := range res.Rows {
		assert.Positive(t, r.AllocationsPerSecond)
		assert.Positive(t, r.BytesPerMutation)
		assert.Less(t, r.BytesPerMutation, 8192.0)
		assert.GreaterOrEqual(t, r.TxnsPerMutation, 1.0)
	}
	assert.InDelta(t, res.Rows[0].BytesPerMutation, res.Rows[1].BytesPerMutation, res.Rows[0].BytesPerMutation*0.25,
		"bytes per mutation independent of the cluster size")
	require.NotNil(t, res.DB)
	assert.Positive(t, res.DB.DBSizeBytes)
	assert.Equal(t, int64(80), res.DB.Mutations)
}
