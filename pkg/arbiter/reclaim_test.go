package arbiter

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// memCompactor models the zones' contents: each block holds the logical
// block number that was written there. Compact appends like zone_compaction.
type memCompactor struct {
	mu    sync.Mutex
	data  map[cluster.PhysZone][]uint64
	calls []cluster.PhysZone
	// rebuildCalls: calls whose context was marked a rebuild (the nodes
	// throttle those: ZoneCompactionRequest.Rebuild).
	rebuildCalls int
	// failSrc: compactions reading these zones fail (injected node failure).
	failSrc map[cluster.PhysZone]bool
}

func newMemCompactor() *memCompactor {
	return &memCompactor{data: map[cluster.PhysZone][]uint64{}, failSrc: map[cluster.PhysZone]bool{}}
}

func (c *memCompactor) WrittenBlocks(ctx context.Context, _ string, zones []cluster.PhysZone) ([]uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]uint64, len(zones))
	for i, z := range zones {
		out[i] = uint64(len(c.data[z]))
	}
	return out, nil
}

func (c *memCompactor) Compact(ctx context.Context, _ string, dst cluster.PhysZone, ranges []CopyRange) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range ranges {
		if c.failSrc[r.Src] {
			return &zerr.UnavailableError{What: "node " + r.Src.Node, Reason: "injected compaction failure"}
		}
	}
	c.calls = append(c.calls, dst)
	if isRebuild(ctx) {
		c.rebuildCalls++
	}
	for _, r := range ranges {
		src := c.data[r.Src]
		if r.SrcBlock+r.Blocks > uint64(len(src)) {
			return &zerr.OutOfRangeError{LBA: r.SrcBlock, Count: r.Blocks, Limit: uint64(len(src))}
		}
		c.data[dst] = append(c.data[dst], src[r.SrcBlock:r.SrcBlock+r.Blocks]...)
	}
	return nil
}

// locate maps a logical block of a stripe group to (zone, offset).
func locate(g StripeGroup, block uint32, b uint64) (cluster.PhysZone, uint64) {
	s := uint64(g.StripeSize / block)
	u := b / s
	return g.Zones[u%uint64(g.Width)], (u/uint64(g.Width))*s + b%s
}

// write fills the first n logical blocks of g as a client striping RAID-0 would.
func (c *memCompactor) write(g StripeGroup, block uint32, n uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for b := uint64(0); b < n; b++ {
		z, off := locate(g, block, b)
		if uint64(len(c.data[z])) != off {
			panic(fmt.Sprintf("non-sequential write to %s at %d", z, off))
		}
		c.data[z] = append(c.data[z], b)
	}
}

// read returns the logical block b of the data stored in groups, filled in order.
func (c *memCompactor) read(groups []StripeGroup, block uint32, zoneCap uint64, b uint64) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range groups {
		capa := uint64(g.Width) * zoneCap
		if b >= capa {
			b -= capa
			continue
		}
		z, off := locate(g, block, b)
		if off >= uint64(len(c.data[z])) {
			return 0, false
		}
		return c.data[z][off], true
	}
	return 0, false
}

func TestReclaim(t *testing.T) {
	tc := newTestCluster(t)
	comp := newMemCompactor()
	tc.comp = comp
	tc.addNode("n0", []cluster.DeviceInfo{testDevice(0)}, false)
	tc.addNode("n1", []cluster.DeviceInfo{testDevice(0)}, false)
	a := tc.start("arb-0:9000")
	tc.leader(a)
	tc.waitNodes(a, 2)
	ctx := context.Background()
	for _, n := range []string{"f", "g", "h"} {
		_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: n, MARLogical: 2, ZonesPerVZone: 1024})
		require.NoError(t, err)
	}
	// f: E 11, m 4, S 11. Its first group overdrives: 4 + 11 → 8 wide.
	fi, err := a.GetNamespace(ctx, "f")
	require.NoError(t, err)
	m := fi.MinWidth
	require.Equal(t, uint32(4), m)
	l, err := a.OpenVZone(ctx, "f", 0)
	require.NoError(t, err)
	src := l.Groups[0]
	require.Greater(t, src.Width, m, "overdriven")
	l1, err := a.OpenVZone(ctx, "f", 1) // an overdriven group without data
	require.NoError(t, err)
	require.Greater(t, l1.Groups[0].Width, m)
	// h: a frozen namespace whose reclaim fails in the compactor.
	lh, err := a.OpenVZone(ctx, "h", 0)
	require.NoError(t, err)
	require.Greater(t, lh.Groups[0].Width, m)

	// Data: more than one minimum-width group's capacity, so reclaim needs two.
	total := uint64(m)*l.ZoneCapacity + 123
	comp.write(src, l.BlockSize, total)
	comp.write(lh.Groups[0], lh.BlockSize, 10)

	// Nothing is frozen before T_ReadOnly.
	tc.clock.Advance(30 * time.Second)
	res, err := a.CheckReclaim(ctx)
	require.NoError(t, err)
	assert.Empty(t, res)

	tc.clock.Advance(45 * time.Second) // 75 s > T_ReadOnly (1 min) since f's last write
	require.NoError(t, a.ReportWrite(ctx, "g"))
	comp.mu.Lock()
	for _, z := range lh.Groups[0].Zones { // h's compaction fails
		comp.failSrc[z] = true
	}
	comp.mu.Unlock()
	res, err = a.CheckReclaim(ctx)
	require.Error(t, err, "h's reclaim fails")
	assert.ErrorIs(t, err, zerr.ErrUnavailable)
	require.Len(t, res, 2, "f/0 and f/1 reclaimed")
	assert.Equal(t, uint64(0), res[0].VZone)
	assert.Equal(t, src.Width, res[0].FromWidth)
	assert.Equal(t, m, res[0].ToWidth)
	assert.Equal(t, total, res[0].MovedBlocks)
	assert.Equal(t, 2, res[0].TargetGroups)
	assert.Equal(t, 1, res[1].TargetGroups)
	assert.Equal(t, uint64(0), res[1].MovedBlocks)

	fi, err = a.GetNamespace(ctx, "f")
	require.NoError(t, err)
	assert.True(t, fi.Frozen)
	assert.Equal(t, uint32(0), fi.SparesInUse, "spares returned")
	gi, err := a.GetNamespace(ctx, "g")
	require.NoError(t, err)
	assert.False(t, gi.Frozen)
	hi, err := a.GetNamespace(ctx, "h")
	require.NoError(t, err)
	assert.True(t, hi.Frozen)
	assert.Positive(t, hi.SparesInUse, "failed reclaim rolled back")
	hl, err := a.Layout(ctx, "h", 0)
	require.NoError(t, err)
	assert.Equal(t, lh.Groups, hl.Groups, "h's layout unchanged")
	checkInvariants(t, tc, a, "after reclaim")

	// f/0's new layout: two minimum-width groups, all data readable in order.
	nl, err := a.Layout(ctx, "f", 0)
	require.NoError(t, err)
	require.Len(t, nl.Groups, 2)
	assert.Greater(t, nl.Generation, l.Generation)
	for i, g := range nl.Groups {
		assert.Equal(t, m, g.Width)
		assert.Equal(t, uint32(32<<10), g.StripeSize)
		assert.Equal(t, uint32(0), g.Spares)
		assert.Equal(t, i == 1, g.Open, "the last group stays open")
	}
	for b := uint64(0); b < total; b++ {
		v, ok := comp.read(nl.Groups, nl.BlockSize, nl.ZoneCapacity, b)
		require.True(t, ok, "block %d missing", b)
		require.Equal(t, b, v, "block %d", b)
	}
	_, ok := comp.read(nl.Groups, nl.BlockSize, nl.ZoneCapacity, total)
	assert.False(t, ok)
	assert.Positive(t, len(comp.calls))
	assert.Zero(t, comp.rebuildCalls, "a reclaim's copies are not rebuilds (the nodes do not throttle them)")
	gr := tc.grants()
	for _, z := range src.Zones {
		g, granted := gr[z]
		assert.False(t, granted && g.VZone == 0 && g.Namespace == "f", "source zone %s released (grant %+v)", z, g)
	}
	l1n, err := a.Layout(ctx, "f", 1)
	require.NoError(t, err)
	assert.Equal(t, m, l1n.Groups[0].Width)

	// Reclaim is idempotent (h is retried), and a write unfreezes.
	comp.mu.Lock()
	comp.failSrc = map[cluster.PhysZone]bool{}
	comp.mu.Unlock()
	res, err = a.CheckReclaim(ctx)
	require.NoError(t, err)
	require.Len(t, res, 1, "h retried")
	assert.Equal(t, "h", res[0].Namespace)
	require.NoError(t, a.ReportWrite(ctx, "f"))
	fi, err = a.GetNamespace(ctx, "f")
	require.NoError(t, err)
	assert.False(t, fi.Frozen)
	checkInvariants(t, tc, a, "end")
}

func TestCopyPlan(t *testing.T) {
	z := func(i int) cluster.PhysZone { return cluster.PhysZone{Node: "n", Device: 0, Zone: uint32(i)} }
	src := StripeGroup{Zones: []cluster.PhysZone{z(0), z(1), z(2), z(3)}, Width: 4, StripeSize: 4096}
	t1 := StripeGroup{Zones: []cluster.PhysZone{z(10), z(11)}, Width: 2, StripeSize: 8192}
	t2 := StripeGroup{Zones: []cluster.PhysZone{z(12), z(13)}, Width: 2, StripeSize: 8192}
	comp := newMemCompactor()
	const zoneCap = 6
	total := uint64(17) // > 2*6 → two targets
	comp.write(src, 4096, total)
	plan := copyPlan(src, total, []StripeGroup{t1, t2}, 4096, zoneCap)
	for _, g := range []StripeGroup{t1, t2} {
		for _, d := range g.Zones {
			require.NoError(t, comp.Compact(context.Background(), "ns", d, plan[d]))
		}
	}
	for b := uint64(0); b < total; b++ {
		v, ok := comp.read([]StripeGroup{t1, t2}, 4096, zoneCap, b)
		require.True(t, ok, "block %d", b)
		require.Equal(t, b, v)
	}
	// Adjacent runs of one source zone are merged.
	assert.Equal(t, []CopyRange{{Src: z(0), SrcBlock: 0, Blocks: 1}, {Src: z(1), SrcBlock: 0, Blocks: 1},
		{Src: z(0), SrcBlock: 1, Blocks: 1}, {Src: z(1), SrcBlock: 1, Blocks: 1}, {Src: z(0), SrcBlock: 2, Blocks: 1}, {Src: z(1), SrcBlock: 2, Blocks: 1}}, plan[z(10)])
}

// hookCompactor runs hook once, at the first Compact, and then fails it.
type hookCompactor struct {
	*memCompactor
	once sync.Once
	hook func()
}

func (h *hookCompactor) Compact(ctx context.Context, ns string, dst cluster.PhysZone, ranges []CopyRange) error {
	fired := false
	h.once.Do(func() { h.hook(); fired = true })
	if fired {
		return &zerr.UnavailableError{What: "node", Reason: "leader lost mid-reclaim"}
	}
	return h.memCompactor.Compact(ctx, ns, dst, ranges)
}

// TestLeaderLostMidReclaim: the leader loses its election key while a
// reclaim copies data; its rollback is fenced off (no write as a deposed
// leader), and the next leader rolls the half-done reclaim back and can redo it.
func TestLeaderLostMidReclaim(t *testing.T) {
	tc := newTestCluster(t)
	mem := newMemCompactor()
	hc := &hookCompactor{memCompactor: mem}
	tc.comp = hc
	tc.addNode("n0", []cluster.DeviceInfo{testDevice(0)}, false)
	tc.addNode("n1", []cluster.DeviceInfo{testDevice(0)}, false)
	a0 := tc.start("arb-0:9000")
	tc.leader(a0)
	tc.waitNodes(a0, 2)
	a1 := tc.start("arb-1:9000")
	ctx := context.Background()
	require.Eventually(t, func() bool { // a1 campaigns, so it is next in line
		ms, err := a0.Members(ctx)
		return err == nil && len(ms) == 2
	}, 60*time.Second, 5*time.Millisecond)
	_, err := a0.CreateNamespace(ctx, NamespaceSpec{Name: "f", MARLogical: 2, ZonesPerVZone: 64})
	require.NoError(t, err)
	l, err := a0.OpenVZone(ctx, "f", 0)
	require.NoError(t, err)
	mem.write(l.Groups[0], l.BlockSize, 100)
	before, _ := leaderState(t, a0)

	hc.hook = func() { // the leader's lease ends: its election key disappears
		a0.mu.RLock()
		key := a0.term.election.Key()
		a0.mu.RUnlock()
		_, err := tc.cli.Delete(ctx, key)
		require.NoError(t, err)
	}
	tc.clock.Advance(2 * time.Minute)
	_, err = a0.CheckReclaim(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, zerr.ErrNotLeader, "the rollback of a deposed leader is refused")

	nl := tc.leader(a0, a1)
	require.True(t, nl == a1, "a1 was next in line")
	after, _ := leaderState(t, nl)
	vz := after.Namespaces["f"].VZones[0]
	assert.False(t, vz.Reclaiming)
	assert.Empty(t, vz.Pending)
	assert.Equal(t, before.Namespaces["f"].VZones[0].Groups, vz.Groups, "layout as before the reclaim")
	checkInvariants(t, tc, nl, "rolled back by the new leader")

	res, err := nl.CheckReclaim(ctx)
	require.NoError(t, err)
	require.Len(t, res, 1)
	checkInvariants(t, tc, nl, "reclaimed by the new leader")
}

func TestWrittenPrefix(t *testing.T) {
	z := func(i int) cluster.PhysZone { return cluster.PhysZone{Node: "n", Zone: uint32(i)} }
	g := StripeGroup{Zones: []cluster.PhysZone{z(0), z(1), z(2), z(3)}, Width: 4, StripeSize: 2 * 4096}
	tests := []struct {
		name    string
		written []uint64
		want    uint64
	}{
		{"empty", []uint64{0, 0, 0, 0}, 0},
		{"first unit", []uint64{2, 0, 0, 0}, 2},
		{"half unit", []uint64{1, 0, 0, 0}, 1},
		{"one row", []uint64{2, 2, 2, 2}, 8},
		{"row and a half", []uint64{4, 2, 2, 2}, 10},
		{"torn: zone 2 ahead of zone 1", []uint64{2, 1, 2, 0}, 3},
		{"full", []uint64{10, 10, 10, 10}, 40},
		{"last zone short", []uint64{10, 10, 10, 9}, 39},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, writtenPrefix(g, tt.written, 4096, 10), tt.name)
	}
}

// writeDuringCopy appends blocks to the source group at the first Compact:
// the tenant wrote while the reclaim copied.
type writeDuringCopy struct {
	*memCompactor
	once  sync.Once
	write func()
}

func (w *writeDuringCopy) Compact(ctx context.Context, ns string, dst cluster.PhysZone, ranges []CopyRange) error {
	w.once.Do(w.write)
	return w.memCompactor.Compact(ctx, ns, dst, ranges)
}

// TestReclaimGivesUpWhenWrittenDuringTheCopy: blocks written to the source
// group after the reclaim read its write pointers are not in the copy; the
// reclaim rolls back (the layout stays, nothing released) instead of
// committing and losing them with the old zones' reset. Then, with no more
// writes, it goes through.
func TestReclaimGivesUpWhenWrittenDuringTheCopy(t *testing.T) {
	tc := newTestCluster(t)
	mem := newMemCompactor()
	wc := &writeDuringCopy{memCompactor: mem}
	tc.comp = wc
	tc.addNode("n0", []cluster.DeviceInfo{testDevice(0)}, false)
	tc.addNode("n1", []cluster.DeviceInfo{testDevice(0)}, false)
	a := tc.start("arb-0:9000")
	tc.leader(a)
	tc.waitNodes(a, 2)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "f", MARLogical: 2, ZonesPerVZone: 64})
	require.NoError(t, err)
	l, err := a.OpenVZone(ctx, "f", 0)
	require.NoError(t, err)
	mem.write(l.Groups[0], l.BlockSize, 100)
	wc.write = func() { // blocks 100..106, as the tenant's client would stripe them
		mem.mu.Lock()
		defer mem.mu.Unlock()
		for b := uint64(100); b < 107; b++ {
			z, off := locate(l.Groups[0], l.BlockSize, b)
			require.Equal(t, uint64(len(mem.data[z])), off)
			mem.data[z] = append(mem.data[z], b)
		}
	}
	before, _ := leaderState(t, a)

	tc.clock.Advance(2 * time.Minute)
	res, err := a.CheckReclaim(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, zerr.ErrZoneState)
	assert.Contains(t, err.Error(), "written during the reclaim copy")
	assert.Empty(t, res)
	after, _ := leaderState(t, a)
	vz := after.Namespaces["f"].VZones[0]
	assert.False(t, vz.Reclaiming)
	assert.Empty(t, vz.Pending)
	assert.Equal(t, before.Namespaces["f"].VZones[0].Groups, vz.Groups, "the layout as before: the late blocks stay where they were written")
	checkInvariants(t, tc, a, "rolled back")

	res, err = a.CheckReclaim(ctx)
	require.NoError(t, err)
	require.Len(t, res, 1)
	assert.Equal(t, uint64(107), res[0].MovedBlocks, "the next check moves every block")
	checkInvariants(t, tc, a, "reclaimed")
}
