package fsvol_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/internal/testcluster"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// TestMirroredFSRidesThroughNodeLoss, in process: the file system
// over a mirror:2 namespace of 4 real nodes. The node holding the metadata
// log's zone stops; every fsync and checkpoint afterwards succeeds (writes
// continue in v-zones on the live nodes, the checkpoint in a new metadata
// zone), every file reads back while the node is down; the node is declared
// lost, its copies are rebuilt node to node, and a fresh mount reads every
// file with fsck clean.
func TestMirroredFSRidesThroughNodeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and stops a node")
	}
	h := newLossFS(t, "mirror:2", 9, 1)
	ctx, cl, admin, mount, check := h.ctx, h.cl, h.admin, h.mount, h.check
	vol, fs, closeFS := mount()
	ops := fsOps{fs}
	write := func(prefix string, n int) { h.write(ops, prefix, n) }
	write("before", 40) // more than a segment: finished v-zones with data

	// the victim: a node with a copy of a finished v-zone's data, and of
	// the metadata log if one such node holds both
	ml, err := vol.Locate(ctx, fs.Stats().MetaZone, 0)
	require.NoError(t, err)
	metaNodes := map[string]bool{ml.Node: true}
	holders := map[string]bool{}
	arb, err := admin.Arbiter(ctx)
	require.NoError(t, err)
	list, err := arb.ListVZones(ctx, &v1.ListVZonesRequest{Namespace: "fs"})
	require.NoError(t, err)
	for _, l := range list.GetVzones() {
		for _, g := range l.GetGroups() {
			for _, z := range g.GetZones() {
				if uint64(l.GetId()) == uint64(fs.Stats().MetaZone) {
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
	t.Logf("stopped %s (metadata log copy: %v)", victimID, metaNodes[victimID])

	check(ops, "node down")
	write("during", 16)
	require.NoError(t, fs.Sync(ctx), "a checkpoint with a copy of the metadata log gone")
	ro, _ := fs.ReadOnly()
	require.False(t, ro)
	check(ops, "node down, after writes")

	// declared lost: its copies of finished v-zones are rebuilt elsewhere
	require.Eventually(t, func() bool {
		nodes, err := admin.ListNodes(ctx)
		if err != nil {
			return false
		}
		for _, n := range nodes {
			if n.GetId() == victimID {
				return !n.GetAvailable()
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond)
	err = admin.RemoveNode(ctx, victimID)
	require.ErrorIs(t, err, zerr.ErrZoneState)
	require.NoError(t, fs.Unmount(ctx))
	closeFS()
	require.Eventually(t, func() bool {
		st, err := admin.ClusterStatus(ctx)
		return err == nil && st.GetRebuilding() == 0 && st.GetLostCopies() == 0
	}, 60*time.Second, 100*time.Millisecond, "every copy on the lost node rebuilt")

	_, fs2, close2 := mount()
	defer close2()
	check(fsOps{fs2}, "after the rebuild, fresh mount")
	rep, err := fs2.Fsck(ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs2.Unmount(ctx))
	require.NoError(t, admin.RemoveNode(ctx, victimID), "nothing left on the lost node")
}

// A v-zone whose node is down is finished in the background: the arbiter
// gives its active resources back at once, the drives' part waits out the
// retry deadline. An open that needs those resources gets them without
// waiting for the drives (or failing with the finish's error): it returns
// while the finish is still in flight.
func TestOpenZoneWhileAFinishWaitsForADeadNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and stops a node")
	}
	ctx := context.Background()
	// The finish's drives' part retries the dead node this long: far
	// longer than an open takes on a saturated machine, so the open
	// returns first unless it waits for the finish.
	const retry = 30 * time.Second
	// The node stops gracefully and revokes its registration lease at
	// once, and no arbiter stops: the leases keep the harness's TTLs.
	cl, c := testcluster.Tenant(t, localcluster.Config{Nodes: 3}, &v1.CreateNamespaceRequest{Name: "two", MaxActiveVzones: 2, ZonesPerVzone: 1},
		testcluster.RetryDeadline(retry))
	admin := testcluster.Client(t, cl, "")
	vol, err := fsvol.New(ctx, c, fsvol.Options{MaxZones: 20, OpenAhead: -1})
	require.NoError(t, err)
	// the finish left retrying the dead node ends with the test
	t.Cleanup(func() { fsvol.StopBackground(vol) })
	a, err := vol.OpenZone(ctx)
	require.NoError(t, err)
	b, err := vol.OpenZone(ctx)
	require.NoError(t, err)
	require.NoError(t, vol.Write(ctx, a, 0, bytes.Repeat([]byte{1}, 4096), false))
	require.NoError(t, vol.Write(ctx, b, 0, bytes.Repeat([]byte{2}, 4096), false))
	la, err := vol.Locate(ctx, a, 0)
	require.NoError(t, err)
	victim := -1
	for i, n := range cl.Info().Nodes {
		if n.ID == la.Node {
			victim = i
		}
	}
	require.NoError(t, cl.StopNode(victim))
	require.Eventually(t, func() bool {
		nodes, err := admin.ListNodes(ctx)
		if err != nil {
			return false
		}
		for _, n := range nodes {
			if n.GetId() == la.Node {
				return !n.GetAvailable()
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, vol.Finish(ctx, a)) // in the background; its node part waits for the dead node
	z, err := vol.OpenZone(ctx)
	require.NoError(t, err, "the finish gave the active v-zone back at the arbiter")
	require.True(t, fsvol.FinishInFlight(vol, a), "the open did not wait out the finish's retries")
	require.NoError(t, vol.Write(ctx, z, 0, bytes.Repeat([]byte{3}, 4096), false))
}
