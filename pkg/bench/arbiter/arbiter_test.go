package arbiterbench

import (
	"context"
	"fmt"
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
		// group commit: the mutations of the two workers may share a
		// transaction, never more than two of them
		assert.GreaterOrEqual(t, r.TxnsPerMutation, 0.5)
		assert.LessOrEqual(t, r.TxnsPerMutation, 1.5)
	}
	assert.InDelta(t, res.Rows[0].BytesPerMutation, res.Rows[1].BytesPerMutation, res.Rows[0].BytesPerMutation*0.25,
		"bytes per mutation independent of the cluster size")
	require.NotNil(t, res.DB)
	assert.Positive(t, res.DB.DBSizeBytes)
	assert.Equal(t, int64(80), res.DB.Mutations)
}

// BenchmarkAllocationCycles is the benchmark's measured loop for profiling
// (go test -bench AllocationCycles -cpuprofile cpu.out ./pkg/bench/arbiter):
// 1000 simulated nodes, empty and with 1000 full v-zones allocated.
func BenchmarkAllocationCycles(b *testing.B) {
	for _, fill := range []int{0, 1000} {
		b.Run(fmt.Sprintf("nodes=1000/fill=%d", fill), func(b *testing.B) {
			o := Options{Dir: b.TempDir(), Nodes: []int{1000}, Warmup: 5, Repeats: 1, FillVZones: fill}
			require.NoError(b, o.defaults())
			b.ResetTimer()
			m, err := runOnce(context.Background(), b.TempDir()+"/run", 1000, o, b.N, 0)
			require.NoError(b, err)
			b.ReportMetric(m.cyclesPerSec, "cycles/s")
		})
	}
}
