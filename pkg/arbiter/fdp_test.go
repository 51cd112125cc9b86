package arbiter

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// testFDPLBAs is the LBAs of a test FDP drive (4 KiB each).
const testFDPLBAs = 1000

// fdpCluster is a leader over nodes n0..n(nodes-1), each with one zoned
// drive and one FDP drive of testFDPLBAs LBAs and four handles.
func fdpCluster(t *testing.T, nodes int) (*testCluster, *testArb) {
	tc := newTestCluster(t)
	for i := range nodes {
		id := fmt.Sprintf("n%d", i)
		rec := cluster.NodeRecord{ID: id, Addr: id + ":7000", Version: "test", Devices: []cluster.DeviceInfo{testDevice(0)}, StartedAt: tc.clock.Now(),
			FDPDevices: []cluster.FDPDeviceInfo{{Index: 0, BlockSize: 4096, LBAs: testFDPLBAs, ReclaimGroups: 1,
				Handles: []string{"initially-isolated", "initially-isolated", "persistently-isolated", "persistently-isolated"}}}}
		b, err := cluster.EncodeNode(rec)
		require.NoError(t, err)
		_, err = tc.cli.Put(context.Background(), cluster.NodeKey(id), string(b))
		require.NoError(t, err)
	}
	a := tc.start("arb-0:9000")
	tc.leader(a)
	tc.waitNodes(a, nodes)
	return tc, a
}

func fdpSpec(name string, lbas uint64, handles uint32) NamespaceSpec {
	return NamespaceSpec{Name: name, Kind: cluster.KindFDP, FDPBytes: lbas * 4096, FDPHandles: handles}
}

// An fdp namespace gets an LBA range and handles of its own on a drive
// with room (the emptiest), its grant goes to the node in the namespace
// record, no two grants share an LBA or a handle, a namespace that fits
// nowhere is refused typed and leaves nothing, and deleting one frees its
// range for the next.
func TestFDPNamespacePlacementAndQuota(t *testing.T) {
	tc, a := fdpCluster(t, 2)
	ctx := context.Background()
	z, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "z", MARLogical: 2, ZonesPerVZone: 4})
	require.NoError(t, err)
	essentials := z.Essentials

	fa, err := a.CreateNamespace(ctx, fdpSpec("fa", 600, 2))
	require.NoError(t, err)
	require.NotNil(t, fa.FDP)
	assert.Equal(t, cluster.KindFDP, fa.Kind)
	assert.Equal(t, uint64(600), fa.FDP.LBAs)
	assert.Equal(t, []uint32{0, 1}, fa.FDP.Handles)
	assert.Equal(t, fa.FDP.Node+":7000", fa.FDPAddr)
	assert.Equal(t, uint32(4096), fa.FDPDrive.BlockSize)
	assert.Zero(t, fa.Essentials, "an fdp namespace takes no essentials")
	z, err = a.GetNamespace(ctx, "z")
	require.NoError(t, err)
	assert.Equal(t, essentials, z.Essentials, "the zoned namespace keeps its share")

	resp, err := tc.cli.Get(ctx, cluster.NamespaceKey("fa"))
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	rec, err := cluster.DecodeNamespace(string(resp.Kvs[0].Key), resp.Kvs[0].Value)
	require.NoError(t, err)
	assert.Equal(t, fa.FDP, rec.FDP, "the node learns the grant from the namespace record")

	fb, err := a.CreateNamespace(ctx, fdpSpec("fb", 600, 1))
	require.NoError(t, err)
	assert.NotEqual(t, fa.FDP.Node, fb.FDP.Node, "the emptiest drive takes it")

	for _, tt := range []struct {
		name    string
		spec    NamespaceSpec
		resName string
	}{
		{"capacity", fdpSpec("big", 401, 1), "FDP capacity"},
		{"handles", fdpSpec("many", 10, 4), "handles"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := a.CreateNamespace(ctx, tt.spec)
			var nr *zerr.NoResourcesError
			require.ErrorAs(t, err, &nr)
			assert.Contains(t, nr.Resource, tt.resName)
			assert.Equal(t, codes.ResourceExhausted, status.Code(rpcerr.ToError(err)))
			_, err = a.GetNamespace(ctx, tt.spec.Name)
			assert.ErrorIs(t, err, zerr.ErrNotFound, "a refused namespace is not created")
		})
	}

	fc, err := a.CreateNamespace(ctx, fdpSpec("fc", 400, 2))
	require.NoError(t, err, "the rest of a drive")
	fd, err := a.CreateNamespace(ctx, fdpSpec("fd", 400, 2))
	require.NoError(t, err)
	exts := map[string]*cluster.FDPExtent{"fa": fa.FDP, "fb": fb.FDP, "fc": fc.FDP, "fd": fd.FDP}
	for n1, e1 := range exts {
		for n2, e2 := range exts {
			if n1 >= n2 || e1.Node != e2.Node || e1.Device != e2.Device {
				continue
			}
			assert.False(t, e1.Overlaps(*e2), "%s and %s share LBAs", n1, n2)
			assert.NotContains(t, e1.Handles, e2.Handles[0], "%s and %s share a handle", n1, n2)
		}
		assert.LessOrEqual(t, e1.FirstLBA+e1.LBAs, uint64(testFDPLBAs))
	}
	require.Eventually(t, func() bool { return testutil.ToFloat64(a.m.fdpGranted) == float64((600+600+400+400)*4096) },
		10*time.Second, 5*time.Millisecond, "zonefleet_arbiter_fdp_granted_bytes")

	require.NoError(t, a.DeleteNamespace(ctx, "fa", false))
	resp, err = tc.cli.Get(ctx, cluster.NamespaceKey("fa"))
	require.NoError(t, err)
	assert.Empty(t, resp.Kvs, "the grant goes with the record")
	fe, err := a.CreateNamespace(ctx, fdpSpec("fe", 600, 2))
	require.NoError(t, err, "the deleted namespace's range and handles are free again")
	assert.Equal(t, fa.FDP.Node, fe.FDP.Node)
}

// The kind and the FDP fields are checked where they enter, typed, and an
// fdp namespace has no v-zones.
func TestFDPNamespaceValidation(t *testing.T) {
	tc, a := fdpCluster(t, 1)
	ctx := context.Background()
	srv := NewServer(a.Arbiter)
	_, err := srv.CreateNamespace(ctx, &v1.CreateNamespaceRequest{Name: "x", Kind: "zfs", FdpCapacityBytes: 4096})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "unknown kind")

	for _, tt := range []struct {
		name  string
		spec  NamespaceSpec
		field string
	}{
		{"fdp with v-zones", NamespaceSpec{Name: "x", Kind: cluster.KindFDP, FDPBytes: 4096, MARLogical: 2}, "kind"},
		{"fdp with a quota in v-zones", NamespaceSpec{Name: "x", Kind: cluster.KindFDP, FDPBytes: 4096, VZones: 2}, "kind"},
		{"fdp with redundancy", NamespaceSpec{Name: "x", Kind: cluster.KindFDP, FDPBytes: 4096, Redundancy: cluster.Redundancy{Copies: 2}}, "redundancy"},
		{"fdp without capacity", NamespaceSpec{Name: "x", Kind: cluster.KindFDP}, "fdp_capacity_bytes"},
		{"fdp with too many handles", NamespaceSpec{Name: "x", Kind: cluster.KindFDP, FDPBytes: 4096, FDPHandles: maxFDPHandles + 1}, "fdp_handles"},
		{"zoned with an FDP capacity", NamespaceSpec{Name: "x", MARLogical: 2, ZonesPerVZone: 4, FDPBytes: 4096}, "fdp_capacity_bytes"},
		{"kind out of range", NamespaceSpec{Name: "x", Kind: cluster.KindFDP + 1, FDPBytes: 4096}, "kind"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := a.CreateNamespace(ctx, tt.spec)
			var ia *zerr.InvalidArgumentError
			require.ErrorAs(t, err, &ia)
			assert.Equal(t, tt.field, ia.Field)
		})
	}

	n, err := srv.CreateNamespace(ctx, &v1.CreateNamespaceRequest{Name: "f", Kind: "fdp", FdpCapacityBytes: 10*4096 + 1})
	require.NoError(t, err)
	assert.Equal(t, "fdp", n.GetKind())
	assert.Equal(t, uint64(11), n.GetFdp().GetLbas(), "capacity rounds up to whole LBAs")
	assert.Equal(t, "n0:7000", n.GetFdp().GetAddr())
	assert.Equal(t, uint32(4096), n.GetFdp().GetBlockSize())
	_, err = a.OpenNewVZone(ctx, "f")
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument, "an fdp namespace has no v-zones")
	_, err = a.TLOpenVZone(ctx, "f", 0, 0)
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
	w := uint32(3)
	u, err := a.UpdateNamespace(ctx, "f", NamespaceUpdate{Weight: &w})
	require.NoError(t, err, "the weight of an fdp namespace may change")
	assert.Equal(t, n.GetFdp().GetLbas(), u.FDP.LBAs, "and its grant stays")
	resp, err := tc.cli.Get(ctx, cluster.NamespaceKey("f"))
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	rec, err := cluster.DecodeNamespace(string(resp.Kvs[0].Key), resp.Kvs[0].Value)
	require.NoError(t, err)
	assert.Equal(t, cluster.NamespaceRecord{Name: "f", Weight: 3, FDP: u.FDP}, rec, "the node keeps the grant")
	mar := uint32(2)
	_, err = a.UpdateNamespace(ctx, "f", NamespaceUpdate{MARLogical: &mar})
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)

	z, err := srv.CreateNamespace(ctx, &v1.CreateNamespaceRequest{Name: "z", MaxActiveVzones: 1, ZonesPerVzone: 1})
	require.NoError(t, err)
	assert.Equal(t, "zoned", z.GetKind())
	assert.Nil(t, z.GetFdp())
}

// A stored spec keeps its kind as text; one stored without a kind reads
// back as zoned.
func TestNamespaceSpecKindPersistence(t *testing.T) {
	var old NamespaceSpec
	require.NoError(t, json.Unmarshal([]byte(`{"name":"o","mar_logical":2,"zones_per_vzone":4}`), &old))
	assert.Equal(t, cluster.KindZoned, old.Kind)

	b, err := json.Marshal(NamespaceSpec{Name: "z", MARLogical: 2, ZonesPerVZone: 4})
	require.NoError(t, err)
	assert.NotContains(t, string(b), "kind", "zoned is left out, as before kinds existed")

	f := fdpSpec("f", 10, 2)
	f.Redundancy = Redundancy(f) // as CreateNamespace stores it
	b, err = json.Marshal(f)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"kind":"fdp"`)
	var back NamespaceSpec
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, f, back)

	assert.Error(t, json.Unmarshal([]byte(`{"name":"b","kind":"zfs"}`), &back), "an unknown stored kind is an error, not zoned")
}

// A node whose FDP drive holds an fdp namespace is kept while it is gone
// (marked down, not forgotten) and an operator cannot remove it until the
// namespace is deleted.
func TestFDPGrantKeepsItsNode(t *testing.T) {
	tc, a := fdpCluster(t, 2)
	ctx := context.Background()
	f, err := a.CreateNamespace(ctx, fdpSpec("f", 10, 1))
	require.NoError(t, err)
	held := f.FDP.Node
	for _, id := range []string{"n0", "n1"} {
		_, err = tc.cli.Delete(ctx, cluster.NodeKey(id))
		require.NoError(t, err)
	}
	tc.waitNodes(a, 0)
	tc.clock.Advance(time.Hour)
	require.NoError(t, a.CheckNodes(ctx))
	nodes, err := a.Nodes(ctx)
	require.NoError(t, err)
	require.Len(t, nodes, 1, "the node without grants is forgotten")
	assert.Equal(t, held, nodes[0].Record.ID)
	assert.True(t, nodes[0].Down)
	g, err := a.GetNamespace(ctx, "f")
	require.NoError(t, err)
	assert.True(t, g.Degraded, "its node is gone")

	assert.ErrorIs(t, a.RemoveNode(ctx, held), zerr.ErrZoneState)
	require.NoError(t, a.DeleteNamespace(ctx, "f", false))
	require.NoError(t, a.RemoveNode(ctx, held))
}
