package fsvol_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
)

// TestParityFSRidesThroughNodeLoss is the file-system test for a
// raid5 namespace (2 data legs + a parity leg + the two partial-parity logs per
// group, on 4 real nodes). The node holding a data leg of finished v-zones
// (and of the metadata log's, when one node holds both) stops: every file
// reads back (reconstructed from parity or from partial-parity records),
// fsyncs and a checkpoint succeed (writes move to groups on the live
// nodes, the degraded ones are finished and give their active zones back,
// so 8 active v-zones are enough); the node returns and a fresh mount reads
// every file with fsck clean. Parity legs are not rebuilt (the arbiter says
// so), so the test ends with the node's return. A fresh mount while the
// node is down records the finished v-zones at capacity; the node's zones
// missed their FINISH, and the client finishes them when it first derives
// such a v-zone's write pointer after the node returns (without that, the
// last mount found "a write pointer behind the data" and went read-only).
func TestParityFSRidesThroughNodeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and stops a node")
	}
	h := newLossFS(t, "raid5", 8, 2) // 8 × 4 zones (width 1: data, parity, two PP logs): the 4 nodes' 32 essentials
	ctx, cl, admin, mount, check := h.ctx, h.cl, h.admin, h.mount, h.check
	_, fs, closeFS := mount()
	ops := fsOps{fs}
	write := func(prefix string, n int) { h.write(ops, prefix, n) }
	write("before", 40) // more than a segment: finished v-zones with data

	// the victim: a node with a DATA leg of a finished v-zone (parity
	// legs are never read while all data legs answer), preferring one that
	// also holds a data leg of the metadata log's v-zone
	meta := uint64(fs.Stats().MetaZone)
	arb, err := admin.Arbiter(ctx)
	require.NoError(t, err)
	list, err := arb.ListVZones(ctx, &v1.ListVZonesRequest{Namespace: "fs"})
	require.NoError(t, err)
	metaNodes, holders := map[string]bool{}, map[string]bool{}
	for _, l := range list.GetVzones() {
		for _, g := range l.GetGroups() {
			require.True(t, g.GetParity(), "v-zone %d: a raid5 namespace's group without parity", l.GetId())
			require.Len(t, g.GetZones(), int(g.GetWidth())+3, "k data legs + parity + two partial-parity logs")
			for _, z := range g.GetZones()[:g.GetWidth()] {
				if uint64(l.GetId()) == meta {
					metaNodes[z.GetNode()] = true
				} else if l.GetState() == v1.VZoneState_VZONE_STATE_FULL {
					holders[z.GetNode()] = true
				}
			}
		}
	}
	require.NotEmpty(t, holders, "no finished v-zone")
	victimID := ""
	for n := range holders {
		if victimID == "" || metaNodes[n] && !metaNodes[victimID] || metaNodes[n] == metaNodes[victimID] && n < victimID {
			victimID = n
		}
	}
	victim := h.nodeIndex(victimID)
	require.NoError(t, cl.StopNode(victim))
	t.Logf("stopped %s (data leg of the metadata log: %v)", victimID, metaNodes[victimID])

	check(ops, "node down")
	write("during", 16)
	require.NoError(t, fs.Sync(ctx), "a checkpoint with a data leg of the metadata log gone")
	ro, _ := fs.ReadOnly()
	require.False(t, ro)
	check(ops, "node down, after writes")
	require.NoError(t, fs.Unmount(ctx))
	closeFS()

	_, fsDown, closeDown := mount()
	check(fsOps{fsDown}, "node down, fresh mount")
	require.NoError(t, fsDown.Unmount(ctx))
	closeDown()

	require.NoError(t, cl.StartNode(ctx, victim))
	_, fs2, close2 := mount()
	defer close2()
	check(fsOps{fs2}, "node back, fresh mount")
	rep, err := fs2.Fsck(ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs2.Unmount(ctx))
}
