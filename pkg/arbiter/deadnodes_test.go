package arbiter

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func TestDeadNodes(t *testing.T) {
	tc := newTestCluster(t)
	tc.cfg = func(c *Config) { c.NodeDownAfter = 10 * time.Minute }
	tc.addNode("n0", []cluster.DeviceInfo{testDevice(0)}, false)
	l1 := tc.addNode("n1", []cluster.DeviceInfo{testDevice(0)}, true)
	l2 := tc.addNode("n2", []cluster.DeviceInfo{testDevice(0)}, true)
	a := tc.start("arb-0:9000")
	tc.leader(a)
	tc.waitNodes(a, 3)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "a", MARLogical: 1, ZonesPerVZone: 64})
	require.NoError(t, err)
	l, err := a.OpenVZone(ctx, "a", 0)
	require.NoError(t, err)
	held := map[string]bool{}
	for _, z := range l.Groups[0].Zones {
		held[z.Node] = true
	}
	require.True(t, held["n1"] && held["n2"], "spread over every node")
	require.NoError(t, a.ResetVZone(ctx, "a", 0))
	l, err = a.OpenVZone(ctx, "a", 1)
	require.NoError(t, err)

	// A registered node cannot be removed.
	require.ErrorIs(t, a.RemoveNode(ctx, "n1"), zerr.ErrInvalidArgument)
	require.ErrorIs(t, a.RemoveNode(ctx, "nope"), zerr.ErrNotFound)

	for _, lease := range []clientv3.LeaseID{l1, l2} {
		_, err = tc.cli.Revoke(ctx, lease)
		require.NoError(t, err)
	}
	tc.waitNodes(a, 1)
	require.NoError(t, a.CheckNodes(ctx)) // too early: nothing changes
	nodes, err := a.Nodes(ctx)
	require.NoError(t, err)
	require.Len(t, nodes, 3)
	assert.False(t, nodes[1].Down)

	tc.clock.Advance(11 * time.Minute)
	require.NoError(t, a.CheckNodes(ctx))
	nodes, err = a.Nodes(ctx)
	require.NoError(t, err)
	require.Len(t, nodes, 3, "down nodes holding data stay")
	assert.True(t, nodes[1].Down)
	assert.True(t, nodes[2].Down)
	assert.Contains(t, tc.storeKeys(), nodeKey("n1"))
	require.ErrorIs(t, a.RemoveNode(ctx, "n1"), zerr.ErrZoneState, "holds zones")

	// Once its zones are gone the records go: automatically or by an operator.
	require.NoError(t, a.ResetVZone(ctx, "a", 1))
	require.NoError(t, a.RemoveNode(ctx, "n2"))
	require.NoError(t, a.CheckNodes(ctx))
	nodes, err = a.Nodes(ctx)
	require.NoError(t, err)
	require.Len(t, nodes, 1)
	assert.Equal(t, "n0", nodes[0].Record.ID)
	assert.NotContains(t, tc.storeKeys(), nodeKey("n1"))
	assert.NotContains(t, tc.storeKeys(), nodeKey("n2"))
	checkInvariants(t, tc, a, "dead nodes removed")

	// A removed node that comes back joins afresh.
	tc.addNode("n1", []cluster.DeviceInfo{testDevice(0)}, false)
	tc.waitNodes(a, 2)
}
