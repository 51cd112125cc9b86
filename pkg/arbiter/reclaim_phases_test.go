package arbiter

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// gateCompactor blocks every Compact until release is closed.
type gateCompactor struct {
	*memCompactor
	started chan struct{}
	once    sync.Once
	release chan struct{}
}

func (g *gateCompactor) Compact(ctx context.Context, ns string, dst cluster.PhysZone, ranges []CopyRange) error {
	g.once.Do(func() { close(g.started) })
	select {
	case <-g.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.memCompactor.Compact(ctx, ns, dst, ranges)
}

// TestReclaimCopyOutsideTheQueue: while a reclaim copies data, other
// namespaces allocate, finish and reset without waiting for it; the
// reclaiming v-zone itself refuses changes; the commit then swaps the layout.
func TestReclaimCopyOutsideTheQueue(t *testing.T) {
	tc := newTestCluster(t)
	gc := &gateCompactor{memCompactor: newMemCompactor(), started: make(chan struct{}), release: make(chan struct{})}
	tc.comp = gc
	tc.addNode("n0", []cluster.DeviceInfo{testDevice(0)}, false)
	tc.addNode("n1", []cluster.DeviceInfo{testDevice(0)}, false)
	a := tc.start("arb-0:9000")
	tc.leader(a)
	tc.waitNodes(a, 2)
	ctx := context.Background()
	for _, n := range []string{"f", "g"} {
		_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: n, MARLogical: 2, ZonesPerVZone: 1024})
		require.NoError(t, err)
	}
	l, err := a.OpenVZone(ctx, "f", 0)
	require.NoError(t, err)
	fi, err := a.GetNamespace(ctx, "f")
	require.NoError(t, err)
	require.Greater(t, l.Groups[0].Width, fi.MinWidth, "overdriven")
	gc.write(l.Groups[0], l.BlockSize, 50)

	tc.clock.Advance(2 * time.Minute)
	require.NoError(t, a.ReportWrite(ctx, "g"))
	type out struct {
		res []ReclaimResult
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := a.CheckReclaim(ctx)
		done <- out{res, err}
	}()
	select {
	case <-gc.started:
	case <-time.After(60 * time.Second):
		t.Fatal("reclaim never started copying")
	}
	// The copy is in progress: the queue is free for everyone else.
	octx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	lg, err := a.OpenVZone(octx, "g", 0)
	require.NoError(t, err, "another namespace's OpenVZone waits for no reclaim copy")
	_, err = a.NextStripeGroup(octx, "g", 0)
	require.NoError(t, err)
	_, err = a.FinishVZone(octx, "g", 0)
	require.NoError(t, err)
	require.NoError(t, a.ResetVZone(octx, "g", 0))
	require.ErrorIs(t, a.ResetVZone(octx, "f", 0), zerr.ErrZoneState, "the reclaiming v-zone refuses changes")
	st, _ := leaderState(t, a)
	require.True(t, st.Namespaces["f"].VZones[0].Reclaiming)
	require.NotEmpty(t, lg.Groups)
	// The source zones are sealed for the copy (the nodes refuse the
	// namespace's writes to them), the targets are not.
	grants := tc.grants()
	for _, z := range l.Groups[0].Zones {
		assert.True(t, grants[z].Sealed, "source %s sealed during the copy", z)
	}
	for _, g := range st.Namespaces["f"].VZones[0].Pending {
		for _, z := range g.Zones {
			assert.False(t, grants[z].Sealed, "target %s", z)
		}
	}
	select {
	case o := <-done:
		t.Fatalf("reclaim finished before its copy was released: %+v", o)
	default:
	}

	close(gc.release)
	var o out
	select {
	case o = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("reclaim did not finish")
	}
	require.NoError(t, o.err)
	require.Len(t, o.res, 1)
	assert.Equal(t, uint64(50), o.res[0].MovedBlocks)
	got, err := a.Layout(ctx, "f", 0)
	require.NoError(t, err)
	require.Len(t, got.Groups, 1)
	assert.Equal(t, fi.MinWidth, got.Groups[0].Width)
	checkInvariants(t, tc, a, "after a phased reclaim")
}

// TestReclaimCopyDeadline: a copy that never finishes (a stuck node) is
// abandoned after ReclaimTimeout and the reclaim is rolled back.
func TestReclaimCopyDeadline(t *testing.T) {
	tc := newTestCluster(t)
	gc := &gateCompactor{memCompactor: newMemCompactor(), started: make(chan struct{}), release: make(chan struct{})}
	tc.comp = gc
	tc.cfg = func(c *Config) { c.ReclaimTimeout = 300 * time.Millisecond }
	tc.addNode("n0", []cluster.DeviceInfo{testDevice(0)}, false)
	tc.addNode("n1", []cluster.DeviceInfo{testDevice(0)}, false)
	a := tc.start("arb-0:9000")
	tc.leader(a)
	tc.waitNodes(a, 2)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "f", MARLogical: 2, ZonesPerVZone: 1024})
	require.NoError(t, err)
	l, err := a.OpenVZone(ctx, "f", 0)
	require.NoError(t, err)
	gc.write(l.Groups[0], l.BlockSize, 50)
	grants := tc.grants()
	tc.clock.Advance(2 * time.Minute)
	res, err := a.CheckReclaim(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Empty(t, res)
	st, _ := leaderState(t, a)
	vz := st.Namespaces["f"].VZones[0]
	assert.False(t, vz.Reclaiming)
	assert.Empty(t, vz.Pending)
	assert.Equal(t, l.Groups, vz.Groups, "layout unchanged")
	assert.Equal(t, grants, tc.grants(), "the targets' grants are gone")
	checkInvariants(t, tc, a, "after an abandoned reclaim")
}

func TestNodeToNodeOnly(t *testing.T) {
	c := func(node string, dev uint32) candidate { return candidate{die: dieKey{node, dev, 0}} }
	all := []candidate{c("a", 0), c("a", 1), c("b", 0), c("b", 1), c("c", 0)}
	z := func(node string, dev uint32) cluster.PhysZone { return cluster.PhysZone{Node: node, Device: dev} }
	tests := []struct {
		name string
		src  []cluster.PhysZone
		want []candidate
	}{
		{"sources on one device per node", []cluster.PhysZone{z("a", 1), z("b", 0)}, []candidate{c("a", 1), c("b", 0), c("c", 0)}},
		{"a node with sources on two devices is out", []cluster.PhysZone{z("a", 0), z("a", 1)}, []candidate{c("b", 0), c("b", 1), c("c", 0)}},
		{"no source on the node: any device", []cluster.PhysZone{z("c", 0)}, []candidate{c("a", 0), c("a", 1), c("b", 0), c("b", 1), c("c", 0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, nodeToNodeOnly(slices.Clone(all), tt.src))
		})
	}
}

// TestReclaimTargetsNeedNoHostCopy: with two devices per node, no target
// zone sits on a node's other device than the one holding its sources.
func TestReclaimTargetsNeedNoHostCopy(t *testing.T) {
	tc := newTestCluster(t)
	mem := newMemCompactor()
	tc.comp = mem
	tc.addNode("n0", []cluster.DeviceInfo{testDevice(0), testDevice(1)}, false)
	tc.addNode("n1", []cluster.DeviceInfo{testDevice(0), testDevice(1)}, false)
	tc.addNode("n2", []cluster.DeviceInfo{testDevice(0), testDevice(1)}, false)
	a := tc.start("arb-0:9000")
	tc.leader(a)
	tc.waitNodes(a, 3)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "f", MARLogical: 8, ZonesPerVZone: 1024})
	require.NoError(t, err)
	l, err := a.OpenVZone(ctx, "f", 0)
	require.NoError(t, err)
	fi, err := a.GetNamespace(ctx, "f")
	require.NoError(t, err)
	require.Greater(t, l.Groups[0].Width, fi.MinWidth)
	mem.write(l.Groups[0], l.BlockSize, 200)
	srcDevs := map[string]map[uint32]bool{}
	for _, z := range l.Groups[0].Zones {
		if srcDevs[z.Node] == nil {
			srcDevs[z.Node] = map[uint32]bool{}
		}
		srcDevs[z.Node][z.Device] = true
	}
	// Every node holds sources on both its devices: no target is possible
	// without a same-node cross-device copy, so the reclaim is refused.
	for n, d := range srcDevs {
		require.Len(t, d, 2, "node %s", n)
	}
	tc.clock.Advance(2 * time.Minute)
	_, err = a.CheckReclaim(ctx)
	require.ErrorIs(t, err, zerr.ErrNoResources, "refused rather than copied through the arbiter")
	st, _ := leaderState(t, a)
	require.False(t, st.Namespaces["f"].VZones[0].Reclaiming, "rolled back")

	// A node without sources joins: the targets go there, copies node to node.
	tc.addNode("n3", []cluster.DeviceInfo{testDevice(0), testDevice(1)}, false)
	tc.waitNodes(a, 4)
	res, err := a.CheckReclaim(ctx)
	require.NoError(t, err)
	require.Len(t, res, 1)
	got, err := a.Layout(ctx, "f", 0)
	require.NoError(t, err)
	for _, z := range got.Groups[0].Zones {
		assert.Equal(t, "n3", z.Node, "target %s needs a same-node cross-device copy", z)
	}
	checkInvariants(t, tc, a, "reclaimed without host copies")
}

// gatedReclaim is a reclaim of namespace f's overdriven v-zone 0 (50
// blocks written) whose copy is blocked in the gate: it returns once the
// copy started; done gets CheckReclaim's result.
type gatedReclaim struct {
	tc     *testCluster
	a      *testArb
	gc     *gateCompactor
	l      Layout
	before map[cluster.PhysZone]cluster.Grant // the grants before the reclaim
	done   chan reclaimOut
}

type reclaimOut struct {
	res []ReclaimResult
	err error
}

func startGatedReclaim(t *testing.T) *gatedReclaim {
	t.Helper()
	tc := newTestCluster(t)
	gc := &gateCompactor{memCompactor: newMemCompactor(), started: make(chan struct{}), release: make(chan struct{})}
	tc.comp = gc
	tc.addNode("n0", []cluster.DeviceInfo{testDevice(0)}, false)
	tc.addNode("n1", []cluster.DeviceInfo{testDevice(0)}, false)
	a := tc.start("arb-0:9000")
	tc.leader(a)
	tc.waitNodes(a, 2)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "f", MARLogical: 2, ZonesPerVZone: 1024})
	require.NoError(t, err)
	l, err := a.OpenVZone(ctx, "f", 0)
	require.NoError(t, err)
	gc.write(l.Groups[0], l.BlockSize, 50)
	g := &gatedReclaim{tc: tc, a: a, gc: gc, l: l, before: tc.grants(), done: make(chan reclaimOut, 1)}
	tc.clock.Advance(2 * time.Minute)
	go func() {
		res, err := a.CheckReclaim(ctx)
		g.done <- reclaimOut{res, err}
	}()
	select {
	case <-gc.started:
	case <-time.After(60 * time.Second):
		t.Fatal("reclaim never started copying")
	}
	return g
}

// TestInterruptedReclaimUnseals: a leader lost in the middle of a reclaim's
// copy leaves the source zones sealed (the nodes refuse the namespace's
// writes to them); the next leader rolls the reclaim back and unseals them,
// so the namespace writes on where it was.
func TestInterruptedReclaimUnseals(t *testing.T) {
	g := startGatedReclaim(t)
	tc := g.tc
	require.True(t, tc.grants()[g.l.Groups[0].Zones[0]].Sealed)

	b := tc.start("arb-1:9000")
	g.a.stop()
	tc.leader(b)
	require.Eventually(t, func() bool {
		st, _ := leaderState(t, b)
		return !st.Namespaces["f"].VZones[0].Reclaiming
	}, 30*time.Second, 10*time.Millisecond, "the next leader rolls the reclaim back")
	assert.Equal(t, g.before, tc.grants(), "the sources unsealed, the targets' grants gone")
	close(g.gc.release)
	checkInvariants(t, tc, b, "after an interrupted reclaim")
}

// TestReclaimGivesUpWhenTheNamespaceWrites: a write reported while the
// reclaim copies (its writers are refused by the sealed source zones and
// retry) gives the reclaim up at once — the copy is cancelled, the sources
// unsealed — instead of making the writers wait for the whole copy (up to
// ReclaimTimeout, 10 minutes by default, on a stuck node).
func TestReclaimGivesUpWhenTheNamespaceWrites(t *testing.T) {
	g := startGatedReclaim(t)
	require.NoError(t, g.a.ReportWrite(context.Background(), "f"))
	var o reclaimOut
	select {
	case o = <-g.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the reclaim went on copying after the namespace wrote")
	}
	require.ErrorIs(t, o.err, zerr.ErrZoneState)
	assert.Contains(t, o.err.Error(), "written during the reclaim copy")
	assert.Empty(t, o.res)
	st, _ := leaderState(t, g.a)
	vz := st.Namespaces["f"].VZones[0]
	assert.False(t, vz.Reclaiming)
	assert.Equal(t, g.l.Groups, vz.Groups, "layout unchanged")
	assert.Equal(t, g.before, g.tc.grants(), "the sources unsealed, the targets' grants gone")
	close(g.gc.release)
	checkInvariants(t, g.tc, g.a, "after a reclaim given up for a write")
}
