package arbiter

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// A raid5 namespace gets stripe groups of width data legs + a parity leg
// on width+1 distinct nodes, plus two partial-parity log zones on the parity
// leg's node; all width+3 zones are active zones of the namespace, and
// reclaim leaves the groups alone.
func TestParityNamespaceLayout(t *testing.T) {
	for _, tc := range []struct {
		name     string
		nodes    int
		maxWidth uint32
	}{
		{"2 nodes: width 1", 2, 1},
		{"3 nodes: width 2", 3, 2},
		{"5 nodes: width 4", 5, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, a := oneLeader(t, tc.nodes) // 16 essentials + 16 spares per node
			ctx := context.Background()
			info, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "p", MARLogical: 2, ZonesPerVZone: 8, Redundancy: cluster.Redundancy{Copies: 1, Parity: true}})
			require.NoError(t, err)
			assert.Equal(t, "raid5", Redundancy(info.NamespaceSpec).String())
			assert.True(t, Redundancy(info.NamespaceSpec).Parity)
			wantMin := max(pow2Floor(info.Essentials/2-3), 1)
			assert.Equal(t, min(wantMin, 8), info.MinWidth)
			var zones uint32
			for id := uint64(0); id < 2; id++ {
				l, err := a.OpenVZone(ctx, "p", id)
				require.NoError(t, err)
				g := l.Groups[0]
				require.True(t, g.Parity)
				require.LessOrEqual(t, g.Width, tc.maxWidth, "data legs + parity need width+1 nodes")
				require.Equal(t, int(g.Width+3), len(g.Zones))
				zones += g.Width + 3
				checkInvariants(t, cl, a, "open "+tc.name)
			}
			got, err := a.GetNamespace(ctx, "p")
			require.NoError(t, err)
			assert.Equal(t, zones, got.EssentialsInUse+got.SparesInUse, "every zone of a parity group is an active zone")
			l, err := a.NextStripeGroup(ctx, "p", 0)
			if err == nil {
				require.True(t, l.Groups[len(l.Groups)-1].Parity)
			}
			checkInvariants(t, cl, a, "next "+tc.name)
		})
	}
}

// One node cannot hold a parity group: the open fails, typed, naming the
// minimum, and changes nothing.
func TestParityNamespaceNeedsNodes(t *testing.T) {
	_, a := oneLeader(t, 1)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "p", MARLogical: 1, ZonesPerVZone: 4, Redundancy: cluster.Redundancy{Copies: 1, Parity: true}})
	require.NoError(t, err)
	_, err = a.OpenVZone(ctx, "p", 0)
	require.ErrorIs(t, err, zerr.ErrNoResources)
	require.Contains(t, err.Error(), "at least 2 nodes")
	l, err := a.Layout(ctx, "p", 0)
	require.NoError(t, err)
	require.Equal(t, VZoneEmpty, l.State)
}

// A node holding a leg of a parity group goes down and the compactor
// cannot rebuild parity legs (no parityRebuilder: the node RPC is what
// rebuilds them, pkg/localcluster TestRaid5Rebuild*): the v-zone counts as
// degraded, nothing is rebuilt (typed as unsupported: RebuildResult and
// ClusterStatus say how many zones), and the state stays consistent.
func TestParityLegOnADownNodeIsNotRebuilt(t *testing.T) {
	tc := newTestCluster(t)
	tc.comp = newMemCompactor()
	tc.cfg = func(c *Config) { c.NodeDownAfter = 10 * time.Minute }
	leases := map[string]clientv3.LeaseID{}
	for _, id := range []string{"n0", "n1", "n2"} {
		leases[id] = tc.addNode(id, []cluster.DeviceInfo{testDevice(0)}, true)
	}
	a := tc.start("arb-0:9000")
	tc.leader(a)
	tc.waitNodes(a, 3)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "p", MARLogical: 2, ZonesPerVZone: 4, Redundancy: cluster.Redundancy{Copies: 1, Parity: true}})
	require.NoError(t, err)
	l0, err := a.OpenVZone(ctx, "p", 0)
	require.NoError(t, err)
	g0 := l0.Groups[0]
	require.True(t, g0.Parity)
	victim := g0.Zones[0].Node // a data leg
	lost := 0
	for _, z := range g0.Zones {
		if z.Node == victim {
			lost++
		}
	}
	_, err = tc.cli.Revoke(ctx, leases[victim])
	require.NoError(t, err)
	tc.waitNodes(a, 2)
	require.Eventually(t, func() bool { return testutil.ToFloat64(a.m.degradedVZones.WithLabelValues("p")) > 0 },
		10*time.Second, 10*time.Millisecond, "a parity v-zone with a zone on the lost node counts as degraded")
	tc.clock.Advance(11 * time.Minute)
	require.NoError(t, a.CheckNodes(ctx))
	res, err := a.CheckRebuild(ctx)
	require.NoError(t, err)
	require.Equal(t, RebuildResult{Unsupported: lost}, res)
	st, err := a.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, lost, st.LostParityZones)
	require.Zero(t, st.LostCopies)
	l, err := a.Layout(ctx, "p", 0)
	require.NoError(t, err)
	require.Equal(t, g0.Zones, l.Groups[0].Zones, "the layout keeps the lost zone (no rebuild)")
	require.ErrorIs(t, ErrParityRebuild, zerr.ErrZoneState)
	checkInvariants(t, tc, a, "parity leg down")
}

// parityComp is a memCompactor that rebuilds raid5 legs: it records the
// requests and fails the first failFirst of them (an injected node failure).
type parityComp struct {
	*memCompactor
	pmu       sync.Mutex
	reqs      []ParityRebuild
	failFirst int
}

func (c *parityComp) RebuildParityLeg(_ context.Context, _ string, r ParityRebuild) (uint64, error) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	c.reqs = append(c.reqs, r)
	if len(c.reqs) <= c.failFirst {
		return 0, &zerr.UnavailableError{What: "node " + r.Target.Node, Reason: "injected rebuild failure"}
	}
	return 42, nil
}

// A lost data leg, or a lost parity leg with its two PP logs, of an open
// raid5 group: a failed rebuild leaves the layout as it was and drops the
// target's grants (invariants hold); the next check rebuilds it on the
// node outside the group — the parity leg and the PP logs together on one
// node — and the request names the survivors and their write pointers.
func TestRebuildParityLegs(t *testing.T) {
	for _, parityLeg := range []bool{false, true} {
		t.Run(map[bool]string{false: "data leg", true: "parity leg"}[parityLeg], func(t *testing.T) {
			tc := newTestCluster(t)
			pc := &parityComp{memCompactor: newMemCompactor(), failFirst: 1}
			tc.comp = pc
			tc.cfg = func(c *Config) { c.NodeDownAfter = 10 * time.Minute }
			leases := map[string]clientv3.LeaseID{}
			for _, id := range []string{"n0", "n1", "n2", "n3"} {
				leases[id] = tc.addNode(id, []cluster.DeviceInfo{testDevice(0)}, true)
			}
			a := tc.start("arb-0:9000")
			tc.leader(a)
			tc.waitNodes(a, 4)
			ctx := context.Background()
			_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "p", MARLogical: 2, ZonesPerVZone: 2, Redundancy: cluster.Redundancy{Copies: 1, Parity: true}})
			require.NoError(t, err)
			l0, err := a.OpenVZone(ctx, "p", 0)
			require.NoError(t, err)
			g0 := l0.Groups[0]
			require.True(t, g0.Parity)
			k := g0.Width
			require.Less(t, int(k)+1, 4, "a node outside the group")
			pos := uint32(0)
			if parityLeg {
				pos = k
			}
			for i, z := range g0.Zones {
				pc.data[z] = make([]uint64, 10+i) // write pointers the request must carry
			}
			victim := g0.Zones[pos].Node
			groupNodes := map[string]bool{}
			for _, z := range g0.Zones {
				groupNodes[z.Node] = true
			}
			_, err = tc.cli.Revoke(ctx, leases[victim])
			require.NoError(t, err)
			tc.waitNodes(a, 3)
			tc.clock.Advance(11 * time.Minute)
			require.NoError(t, a.CheckNodes(ctx))

			res, err := a.CheckRebuild(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.Failed, "%+v", res)
			require.Zero(t, res.Rebuilt)
			l, err := a.Layout(ctx, "p", 0)
			require.NoError(t, err)
			require.Equal(t, g0.Zones, l.Groups[0].Zones, "a failed rebuild changes no layout")
			checkInvariants(t, tc, a, "failed raid5 rebuild")

			res, err = a.CheckRebuild(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.Rebuilt, "%+v", res)
			require.Equal(t, uint64(42), res.Blocks)
			l, err = a.Layout(ctx, "p", 0)
			require.NoError(t, err)
			g := l.Groups[0]
			require.Greater(t, l.Generation, l0.Generation, "clients see a new generation")
			target := g.Zones[pos].Node
			require.False(t, groupNodes[target], "rebuilt on %s, a node of the group", target)
			for i, z := range g.Zones {
				switch {
				case uint32(i) == pos:
				case parityLeg && i > int(k):
					require.Equal(t, target, z.Node, "the new PP logs are on the new parity leg's node")
					require.NotEqual(t, g0.Zones[i], z)
				default:
					require.Equal(t, g0.Zones[i], z, "zone %d kept", i)
				}
			}
			pc.pmu.Lock()
			req := pc.reqs[len(pc.reqs)-1]
			pc.pmu.Unlock()
			require.Equal(t, g.Zones[pos], req.Target)
			require.Equal(t, pos, req.Lost)
			require.Equal(t, k, req.Width)
			require.False(t, req.Sealed, "an open group")
			require.Equal(t, uint64(g0.StripeSize)/uint64(l0.BlockSize), req.StripeBlocks)
			for i := uint32(0); i <= k; i++ {
				if i != pos {
					require.Equal(t, g0.Zones[i], req.Legs[i])
					require.Equal(t, uint64(10+i), req.Written[i], "leg %d's write pointer", i)
				}
			}
			if parityLeg {
				require.Equal(t, g.Zones[k+1], req.PPTarget)
				require.Equal(t, g.Zones[k+2], req.PPTargetB)
			} else {
				require.Equal(t, g0.Zones[k+1], req.PPLog)
				require.Equal(t, uint64(10+k+1), req.PPWritten)
				require.Equal(t, g0.Zones[k+2], req.PPLogB)
				require.Equal(t, uint64(10+k+2), req.PPWrittenB)
			}
			st, err := a.Status(ctx)
			require.NoError(t, err)
			require.Zero(t, st.LostParityZones)
			require.Zero(t, st.Rebuilding)
			checkInvariants(t, tc, a, "raid5 leg rebuilt")
		})
	}
}

// Two zones of one raid5 group on down nodes: nothing can rebuild either
// (a parity group survives one node), so the check waits — no target is
// granted, no request reaches a node, the layout and the invariants hold.
func TestRebuildParityWaitsForASecondLoss(t *testing.T) {
	tc := newTestCluster(t)
	pc := &parityComp{memCompactor: newMemCompactor()}
	tc.comp = pc
	tc.cfg = func(c *Config) { c.NodeDownAfter = 10 * time.Minute }
	leases := map[string]clientv3.LeaseID{}
	for _, id := range []string{"n0", "n1", "n2", "n3"} {
		leases[id] = tc.addNode(id, []cluster.DeviceInfo{testDevice(0)}, true)
	}
	a := tc.start("arb-0:9000")
	tc.leader(a)
	tc.waitNodes(a, 4)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "p", MARLogical: 2, ZonesPerVZone: 2, Redundancy: cluster.Redundancy{Copies: 1, Parity: true}})
	require.NoError(t, err)
	l0, err := a.OpenVZone(ctx, "p", 0)
	require.NoError(t, err)
	g0 := l0.Groups[0]
	for _, z := range g0.Zones[:2] { // two data legs
		_, err = tc.cli.Revoke(ctx, leases[z.Node])
		require.NoError(t, err)
	}
	tc.waitNodes(a, 2)
	tc.clock.Advance(11 * time.Minute)
	require.NoError(t, a.CheckNodes(ctx))
	res, err := a.CheckRebuild(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Rebuilt)
	require.Zero(t, res.Failed)
	require.Equal(t, 2, res.Waiting, "%+v", res)
	pc.pmu.Lock()
	require.Empty(t, pc.reqs, "no node was asked to rebuild")
	pc.pmu.Unlock()
	l, err := a.Layout(ctx, "p", 0)
	require.NoError(t, err)
	require.Equal(t, g0.Zones, l.Groups[0].Zones)
	st, err := a.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, st.LostParityZones)
	checkInvariants(t, tc, a, "two zones of a raid5 group lost")
}
