package arbiter

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// serve starts the gRPC adapter of a over an in-memory listener.
func serve(t *testing.T, a *Arbiter, typed bool) v1.ArbiterClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	v1.RegisterArbiterServer(srv, NewServer(a))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })}
	if typed {
		opts = append(opts, rpcerr.DialOptions()...)
	}
	conn, err := grpc.NewClient("passthrough:///bufnet", opts...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return v1.NewArbiterClient(conn)
}

func TestGRPCServer(t *testing.T) {
	tc := newTestCluster(t)
	tc.addNode("n0", []cluster.DeviceInfo{testDevice(0)}, false)
	tc.addNode("n1", []cluster.DeviceInfo{testDevice(0), testDevice(1)}, false)
	a0, a1 := tc.start("arb-0:9000"), tc.start("arb-1:9000")
	l := tc.leader(a0, a1)
	f := a0
	if l == a0 {
		f = a1
	}
	tc.waitNodes(l, 2)
	ctx := context.Background()
	lc, fc, raw := serve(t, l.Arbiter, true), serve(t, f.Arbiter, true), serve(t, l.Arbiter, false)

	// A follower answers NOT_LEADER with the leader's address.
	_, err := fc.ListNamespaces(ctx, &v1.ListNamespacesRequest{})
	var nl *zerr.NotLeaderError
	require.True(t, errors.As(err, &nl), "%v", err)
	assert.Equal(t, l.Addr(), nl.Leader)
	_, err = fc.ClusterStatus(ctx, &v1.ClusterStatusRequest{})
	require.ErrorIs(t, err, zerr.ErrNotLeader)

	ns, err := lc.CreateNamespace(ctx, &v1.CreateNamespaceRequest{Name: "a", MaxActiveVzones: 4, ZonesPerVzone: 16})
	require.NoError(t, err)
	assert.Equal(t, uint32(48), ns.Essentials)
	assert.Equal(t, uint32(8), ns.MinStripeWidth)
	assert.Equal(t, uint32(1), ns.Weight)
	assert.True(t, ns.Active)
	assert.NotNil(t, ns.Created)

	// Bad input: typed error with the table's code.
	_, err = raw.CreateNamespace(ctx, &v1.CreateNamespaceRequest{Name: "b/c", MaxActiveVzones: 1, ZonesPerVzone: 1})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	_, err = raw.CreateNamespace(ctx, &v1.CreateNamespaceRequest{Name: "a", MaxActiveVzones: 1, ZonesPerVzone: 1})
	assert.Equal(t, codes.AlreadyExists, status.Code(err))
	_, err = raw.GetNamespace(ctx, &v1.GetNamespaceRequest{Name: "zz"})
	assert.Equal(t, codes.NotFound, status.Code(err))
	_, err = lc.CreateNamespace(ctx, &v1.CreateNamespaceRequest{Name: "big", MaxActiveVzones: 100, ZonesPerVzone: 1})
	require.ErrorIs(t, err, zerr.ErrNoResources)

	vz, err := lc.OpenVZone(ctx, &v1.OpenVZoneRequest{Namespace: "a"})
	require.NoError(t, err)
	assert.Equal(t, uint64(0), vz.Id)
	assert.Equal(t, v1.VZoneState_VZONE_STATE_OPEN, vz.State)
	assert.Equal(t, uint64(16*1000), vz.Capacity)
	require.Len(t, vz.Groups, 1)
	g := vz.Groups[0]
	assert.Equal(t, uint32(16), g.Width)
	assert.Equal(t, uint32(4), g.StripeBlocks, "16 KiB stripes of 4 KiB blocks")
	assert.Equal(t, uint64(16*1000), g.Capacity)
	assert.Equal(t, uint32(16), vz.ZonesUsed)
	for _, z := range g.Zones {
		assert.Equal(t, z.Node+":7000", z.Addr)
		assert.True(t, z.Available)
		assert.Len(t, z.Dies, 1)
	}
	vz1, err := lc.OpenVZone(ctx, &v1.OpenVZoneRequest{Namespace: "a"})
	require.NoError(t, err)
	assert.Equal(t, uint64(1), vz1.Id)
	_, err = lc.NextStripeGroup(ctx, &v1.VZoneRequest{Namespace: "a", Id: 0})
	require.ErrorIs(t, err, zerr.ErrZoneFull)
	got, err := lc.GetVZone(ctx, &v1.VZoneRequest{Namespace: "a", Id: 1})
	require.NoError(t, err)
	assert.Equal(t, vz1.Generation, got.Generation)
	list, err := lc.ListVZones(ctx, &v1.ListVZonesRequest{Namespace: "a"})
	require.NoError(t, err)
	assert.Len(t, list.Vzones, 2)
	fin, err := lc.FinishVZone(ctx, &v1.VZoneRequest{Namespace: "a", Id: 0})
	require.NoError(t, err)
	assert.Equal(t, v1.VZoneState_VZONE_STATE_FULL, fin.State)
	rst, err := lc.ResetVZone(ctx, &v1.VZoneRequest{Namespace: "a", Id: 0})
	require.NoError(t, err)
	assert.Equal(t, v1.VZoneState_VZONE_STATE_EMPTY, rst.State)
	assert.Empty(t, rst.Groups)
	_, err = lc.ReportActivity(ctx, &v1.ReportActivityRequest{Namespace: "a", BlocksWritten: 8})
	require.NoError(t, err)

	nodes, err := lc.ListNodes(ctx, &v1.ListNodesRequest{})
	require.NoError(t, err)
	require.Len(t, nodes.Nodes, 2)
	assert.Len(t, nodes.Nodes[1].Devices, 2)
	node, err := lc.GetNode(ctx, &v1.GetNodeRequest{Id: "n0"})
	require.NoError(t, err)
	assert.Equal(t, "n0", node.Id)
	_, err = lc.GetNode(ctx, &v1.GetNodeRequest{Id: "nope"})
	require.ErrorIs(t, err, zerr.ErrNotFound)

	cs, err := lc.ClusterStatus(ctx, &v1.ClusterStatusRequest{})
	require.NoError(t, err)
	assert.Equal(t, l.Addr(), cs.Leader)
	assert.Len(t, cs.Arbiters, 2)
	assert.True(t, cs.Arbiters[0].Leader)
	assert.Equal(t, l.Addr(), cs.Arbiters[0].Addr)
	assert.Equal(t, uint32(3), cs.Devices)
	assert.Equal(t, uint32(48), cs.Dies)
	assert.Equal(t, uint32(96), cs.ActiveZoneSlots)
	assert.Equal(t, uint32(0), cs.EssentialsFree)
	assert.Equal(t, uint64(3*1024*1000), cs.CapacityBlocks)
	assert.Equal(t, cs.CapacityBlocks-uint64(vz1.ZonesUsed)*1000, cs.FreeBlocks)

	_, err = lc.DeleteNamespace(ctx, &v1.DeleteNamespaceRequest{Name: "a"})
	require.ErrorIs(t, err, zerr.ErrZoneState, "v-zone 1 is open")
	_, err = lc.DeleteNamespace(ctx, &v1.DeleteNamespaceRequest{Name: "a", Force: true})
	require.NoError(t, err)
	nl2, err := lc.ListNamespaces(ctx, &v1.ListNamespacesRequest{})
	require.NoError(t, err)
	assert.Empty(t, nl2.Namespaces)
}
