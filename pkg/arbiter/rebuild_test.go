package arbiter

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zonefleet/zonefleet/pkg/cluster"
)

// writeCopies fills the first n logical blocks of every copy of a mirrored group.
func (c *memCompactor) writeCopies(g StripeGroup, block uint32, n uint64) {
	for k := uint32(0); k < g.copies(); k++ {
		cg := g
		cg.Zones = g.Zones[k*g.Width : (k+1)*g.Width]
		c.write(cg, block, n)
	}
}

// A node holding copies of mirrored legs goes down: the copies of finished
// groups are rebuilt node to node on nodes without a copy of the leg, the
// layout swaps them in, and the node can then be removed; an open group is
// rebuilt and stays open; a failed copy rolls back and is retried.
func TestRebuildMirroredCopies(t *testing.T) {
	tc := newTestCluster(t)
	mem := newMemCompactor()
	tc.comp = mem
	tc.cfg = func(c *Config) { c.NodeDownAfter = 10 * time.Minute }
	leases := map[string]clientv3.LeaseID{}
	for _, id := range []string{"n0", "n1", "n2"} {
		leases[id] = tc.addNode(id, []cluster.DeviceInfo{testDevice(0)}, true)
	}
	a := tc.start("arb-0:9000")
	tc.leader(a)
	tc.waitNodes(a, 3)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "m", MARLogical: 2, ZonesPerVZone: 4, Redundancy: cluster.Redundancy{Copies: 2}})
	require.NoError(t, err)

	// v-zone 0: written and finished; v-zone 1: open
	l0, err := a.OpenVZone(ctx, "m", 0)
	require.NoError(t, err)
	g0 := l0.Groups[0]
	written := uint64(g0.Width) * 300
	mem.writeCopies(g0, l0.BlockSize, written)
	_, err = a.FinishVZone(ctx, "m", 0)
	require.NoError(t, err)
	l1, err := a.OpenVZone(ctx, "m", 1)
	require.NoError(t, err)

	victim := g0.Zones[0].Node
	onVictim := func(l Layout) int {
		n := 0
		for _, g := range l.Groups {
			for _, z := range g.Zones {
				if z.Node == victim {
					n++
				}
			}
		}
		return n
	}
	lost0 := onVictim(l0)
	require.Positive(t, lost0)

	// nothing to do while the node is up, or only gone (not down yet)
	res, err := a.CheckRebuild(ctx)
	require.NoError(t, err)
	require.Equal(t, RebuildResult{}, res)
	_, err = tc.cli.Revoke(ctx, leases[victim])
	require.NoError(t, err)
	tc.waitNodes(a, 2)
	require.Eventually(t, func() bool { return testutil.ToFloat64(a.m.degradedVZones.WithLabelValues("m")) > 0 },
		10*time.Second, 10*time.Millisecond, "the namespace's v-zones on the lost node count as degraded")
	res, err = a.CheckRebuild(ctx)
	require.NoError(t, err)
	require.Equal(t, RebuildResult{}, res, "an unavailable node is not lost yet")

	// down: the first copy fails (injected), rolls back, and is retried
	tc.clock.Advance(11 * time.Minute)
	require.NoError(t, a.CheckNodes(ctx))
	var src cluster.PhysZone
	for k := uint32(1); k < g0.copies(); k++ {
		src = g0.Zones[k*g0.Width]
	}
	mem.failSrc[src] = true
	res, err = a.CheckRebuild(ctx)
	require.NoError(t, err)
	require.Positive(t, res.Failed)
	checkInvariants(t, tc, a, "after a failed rebuild")
	l, err := a.Layout(ctx, "m", 0)
	require.NoError(t, err)
	require.Positive(t, onVictim(l), "a failed rebuild leaves the lost copy in place")
	require.LessOrEqual(t, lost0-onVictim(l), res.Rebuilt)
	delete(mem.failSrc, src)

	res, err = a.CheckRebuild(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Failed)
	checkInvariants(t, tc, a, "after the rebuild")
	l, err = a.Layout(ctx, "m", 0)
	require.NoError(t, err)
	require.Zero(t, onVictim(l), "every copy of the finished v-zone left the down node")
	require.Greater(t, l.Generation, l0.Generation, "clients see a new layout")
	var total uint64
	for _, g := range l.Groups {
		for i := uint32(0); i < g.Width; i++ {
			want := mem.data[g.Zones[i]]
			for c := uint32(1); c < g.copies(); c++ {
				require.Equal(t, want, mem.data[g.Zones[c*g.Width+i]], "copies of leg %d differ after the rebuild", i)
			}
			total += uint64(len(want))
		}
	}
	require.Equal(t, written, total)
	require.Positive(t, res.Blocks)
	require.Equal(t, len(mem.calls), mem.rebuildCalls, "every rebuild copy is sent as a rebuild (throttled by the nodes)")

	// the open v-zone is rebuilt too and stays open
	l, err = a.Layout(ctx, "m", 1)
	require.NoError(t, err)
	require.Zero(t, onVictim(l), "the open v-zone's copies left the down node")
	require.Equal(t, VZoneOpen, l.State)
	_ = l1
	res, err = a.CheckRebuild(ctx)
	require.NoError(t, err)
	require.Equal(t, RebuildResult{}, res, "nothing left to do")
	checkInvariants(t, tc, a, "all rebuilt")
	require.Eventually(t, func() bool { return testutil.ToFloat64(a.m.degradedVZones.WithLabelValues("m")) == 0 },
		10*time.Second, 10*time.Millisecond, "no v-zone degraded after the rebuild")
	require.Positive(t, testutil.ToFloat64(a.m.rebuildBlocks))
	require.NoError(t, a.RemoveNode(ctx, victim), "the node holds nothing any more")
	nodes, err := a.Nodes(ctx)
	require.NoError(t, err)
	require.False(t, slices.ContainsFunc(nodes, func(n NodeInfo) bool { return n.Record.ID == victim }))
}
