package arbiter

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/cluster"
)

// Creating a namespace writes the record nodes take its weight from, in the
// same transaction; deleting it removes the record; a refused create writes none.
func TestNamespaceRecordForNodes(t *testing.T) {
	tc, a := oneLeader(t, 2)
	ctx := context.Background()
	get := func(name string) (cluster.NamespaceRecord, bool) {
		resp, err := tc.cli.Get(ctx, cluster.NamespaceKey(name))
		require.NoError(t, err)
		if len(resp.Kvs) == 0 {
			return cluster.NamespaceRecord{}, false
		}
		rec, err := cluster.DecodeNamespace(string(resp.Kvs[0].Key), resp.Kvs[0].Value)
		require.NoError(t, err)
		return rec, true
	}
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "w3", MARLogical: 2, ZonesPerVZone: 4, Weight: 3})
	require.NoError(t, err)
	rec, ok := get("w3")
	require.True(t, ok)
	assert.Equal(t, cluster.NamespaceRecord{Name: "w3", Weight: 3}, rec)
	_, err = a.CreateNamespace(ctx, NamespaceSpec{Name: "w1", MARLogical: 2, ZonesPerVZone: 4})
	require.NoError(t, err)
	rec, _ = get("w1")
	assert.Equal(t, uint32(1), rec.Weight, "weight 0 means 1")

	_, err = a.CreateNamespace(ctx, NamespaceSpec{Name: "huge", MARLogical: 1000, ZonesPerVZone: 4})
	require.Error(t, err)
	_, ok = get("huge")
	assert.False(t, ok, "a refused namespace leaves no record")

	require.NoError(t, a.DeleteNamespace(ctx, "w3", false))
	_, ok = get("w3")
	assert.False(t, ok)
}
