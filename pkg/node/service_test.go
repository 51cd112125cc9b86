package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/daemon"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const token = "s3cret"

// testGeometry: 4 chips, D_zone 4, 128-page blocks: 2048-block (8 MiB) zones, 4 zones.
func testGeometry() flash.Config {
	c := flash.Small()
	c.PagesPerBlock, c.DZone, c.BlocksPerChip, c.SpareBlocksPerChip = 128, 4, 6, 2
	c.WriteCacheBytes = 1 << 20
	return c
}

type testNode struct {
	svc    *Service
	addr   string
	http   string
	client v1.ZonedDeviceClient
	devs   []*zns.Device
	cancel context.CancelFunc
	done   chan error
	dir    string // startOwnerNode: where the device and its owner file are
}

// startNode runs a real node service (daemon skeleton, gRPC on loopback, real
// devices under a temp dir). withGrants: grants come from the test etcd.
func startNode(t *testing.T, id string, withGrants bool) *testNode {
	t.Helper()
	return startNodeCodecs(t, id, withGrants, true, true)
}

// startNodeCodec: bulk codec on both ends (wire.Codec) or the standard
// protobuf codec.
func startNodeCodec(t *testing.T, id string, withGrants, bulkCodec bool) *testNode {
	t.Helper()
	return startNodeCodecs(t, id, withGrants, bulkCodec, bulkCodec)
}

// startNodeCodecs: the bulk codec on the server, on the client, both or neither.
func startNodeCodecs(t *testing.T, id string, withGrants, serverCodec, clientCodec bool) *testNode {
	t.Helper()
	return startNodeCfg(t, id, withGrants, serverCodec, clientCodec, nil)
}

// startNodeCfg is startNodeCodecs with a hook on the service's Config.
func startNodeCfg(t *testing.T, id string, withGrants, serverCodec, clientCodec bool, tune func(*Config)) *testNode {
	t.Helper()
	var srvOpts []grpc.ServerOption
	var callOpts []grpc.CallOption
	if serverCodec {
		srvOpts = wire.ServerOptions()
	}
	if clientCodec {
		callOpts = wire.CallOptions()
	}
	dir := t.TempDir()
	var devs []*zns.Device
	d, err := zns.Create(filepath.Join(dir, "dev0.zns"), testGeometry(), clock.Off())
	require.NoError(t, err)
	devs = append(devs, d)
	ctx, cancel := context.WithCancel(context.Background())
	var grants *Grants
	var svc *Service
	svcReady := make(chan struct{})
	if withGrants {
		cli := etcdClient(t)
		clearGrants(t, cli, id)
		grants, err = WatchGrantsFunc(ctx, cli, id, quiet, func(dev, zone uint32) {
			<-svcReady
			svc.ResetRevoked(dev, zone)
		})
		require.NoError(t, err)
	}
	cfg := Config{ID: id, AdminToken: token, Standalone: !withGrants, Admission: AdmissionConfig{Enabled: true}}
	if tune != nil {
		tune(&cfg)
	}
	svc, err = New(cfg, devs, grants, quiet)
	require.NoError(t, err)
	close(svcReady)
	dm, err := daemon.New(daemon.Config{Name: "ssdnode", GRPCListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0"}, quiet, srvOpts...)
	require.NoError(t, err)
	require.NoError(t, svc.Collector().Register(dm.Registry))
	RegisterGRPC(dm.GRPC, svc)
	n := &testNode{svc: svc, addr: dm.GRPCAddr(), http: dm.HTTPAddr(), devs: devs, cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- dm.Run(ctx) }()
	conn, err := grpc.NewClient(n.addr, append(rpcerr.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(append(callOpts, grpc.MaxCallRecvMsgSize(wire.MaxMessageBytes), grpc.MaxCallSendMsgSize(wire.MaxMessageBytes))...))...)
	require.NoError(t, err)
	n.client = v1.NewZonedDeviceClient(conn)
	t.Cleanup(func() {
		cancel()
		<-n.done
		_ = conn.Close()
		svc.Close()
		for _, d := range devs {
			_ = d.Close()
		}
	})
	return n
}

func grant(t *testing.T, node string, zone uint32, ns string) {
	t.Helper()
	v, err := cluster.EncodeGrant(cluster.Grant{Namespace: ns, VZone: uint64(zone)})
	require.NoError(t, err)
	_, err = etcdClient(t).Put(context.Background(), cluster.GrantKey(node, 0, zone), string(v))
	require.NoError(t, err)
}

func waitGrant(t *testing.T, n *testNode, zone uint32, ns string) {
	t.Helper()
	require.Eventually(t, func() bool { return n.svc.grants.Check(ns, 0, zone) == nil }, 30*time.Second, 5*time.Millisecond)
}

func asNS(ns string) context.Context { return wire.WithNamespace(context.Background(), ns) }
func asAdmin() context.Context       { return wire.WithToken(context.Background(), token) }

func randBlocks(t *testing.T, n int) []byte {
	b := make([]byte, n*4096)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

func zoneWP(t *testing.T, c v1.ZonedDeviceClient, zone uint32) uint64 {
	t.Helper()
	r, err := c.ReportZones(asAdmin(), &v1.ReportZonesRequest{StartZone: zone, MaxZones: 1})
	require.NoError(t, err)
	require.Len(t, r.GetZones(), 1)
	return r.GetZones()[0].GetWritePointer()
}

// The data path with the bulk codec on either end, both or neither (the
// standard protobuf codec is what grpcurl and other protobuf clients use).
func TestDataPathUnaryAndStreams(t *testing.T) {
	for _, tt := range []struct {
		name           string
		server, client bool
	}{
		{"bulk codec", true, true},
		{"standard codec", false, false},
		{"standard client (grpcurl), bulk server", true, false},
		{"bulk client, standard server", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) { testDataPath(t, startNodeCodecs(t, "dp", false, tt.server, tt.client)) })
	}
}

func testDataPath(t *testing.T, n *testNode) {
	ctx := asNS("a")
	id, err := n.client.Identify(ctx, &v1.IdentifyRequest{})
	require.NoError(t, err)
	require.Equal(t, uint64(2048), id.GetZoneSize())
	assert.Equal(t, uint32(4096), id.GetBlockSize())
	assert.Equal(t, v1.Media_MEDIA_MLC, id.GetMedia())

	// Unary write of 1 MiB: one round trip.
	data := randBlocks(t, 256)
	w, err := n.client.Write(ctx, &v1.WriteRequest{Lba: 0, Data: data})
	require.NoError(t, err)
	assert.Equal(t, uint64(256), w.GetBlocks())
	assert.Equal(t, uint64(256), w.GetWritePointer())
	r, err := n.client.Read(ctx, &v1.ReadRequest{Lba: 0, Blocks: 256})
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, r.GetData()))

	// Append returns the LBA.
	a, err := n.client.Append(ctx, &v1.AppendRequest{Zone: 0, Data: randBlocks(t, 2)})
	require.NoError(t, err)
	assert.Equal(t, uint64(256), a.GetLba())

	// A 6 MiB write and read through the streams: past gRPC's 4 MiB default.
	big := randBlocks(t, 1536)
	ws, err := n.client.WriteStream(ctx)
	require.NoError(t, err)
	for off := 0; off < len(big); off += 768 << 10 { // uneven pieces on purpose
		end := min(off+(768<<10), len(big))
		req := &v1.WriteRequest{Data: big[off:end]}
		if off == 0 {
			req.Lba, req.TotalBlocks = 2048, 1536
		}
		require.NoError(t, ws.Send(req))
	}
	wr, err := ws.CloseAndRecv()
	require.NoError(t, err)
	assert.Equal(t, uint64(1536), wr.GetBlocks())
	rs, err := n.client.ReadStream(ctx, &v1.ReadRequest{Lba: 2048, Blocks: 1536})
	require.NoError(t, err)
	var got []byte
	for {
		m, err := rs.Recv()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		require.LessOrEqual(t, len(m.GetData()), StreamChunkBytes)
		got = append(got, m.GetData()...)
	}
	assert.True(t, bytes.Equal(big, got), "6 MiB round trip")

	// Simple copy to the write pointer of zone 2.
	sc, err := n.client.SimpleCopy(ctx, &v1.SimpleCopyRequest{Sources: []*v1.LBARange{{Lba: 0, Blocks: 4}, {Lba: 8, Blocks: 4}}, DestLba: 4096})
	require.NoError(t, err)
	assert.Equal(t, uint64(8), sc.GetBlocks())
	r, err = n.client.Read(ctx, &v1.ReadRequest{Lba: 4096, Blocks: 8})
	require.NoError(t, err)
	assert.True(t, bytes.Equal(append(append([]byte{}, data[:4*4096]...), data[8*4096:12*4096]...), r.GetData()))

	// Flush, finish, reset.
	_, err = n.client.Flush(ctx, &v1.FlushRequest{})
	require.NoError(t, err)
	_, err = n.client.ZoneManagement(ctx, &v1.ZoneManagementRequest{Zone: 2, Action: v1.ZoneAction_ZONE_ACTION_FINISH})
	require.NoError(t, err)
	rep, err := n.client.ReportZones(ctx, &v1.ReportZonesRequest{State: v1.ZoneState_ZONE_STATE_FULL})
	require.NoError(t, err)
	require.Len(t, rep.GetZones(), 1)
	assert.Equal(t, uint32(2), rep.GetZones()[0].GetIndex())
	_, err = n.client.ZoneManagement(ctx, &v1.ZoneManagementRequest{Zone: 2, Action: v1.ZoneAction_ZONE_ACTION_RESET})
	require.NoError(t, err)
	assert.Equal(t, uint64(4096), zoneWP(t, n.client, 2))

	lg, err := n.client.GetLog(asAdmin(), &v1.GetLogRequest{})
	require.NoError(t, err)
	assert.Equal(t, uint64(256+2+1536), lg.GetHostBlocksWritten(), "host writes; the simple copy is internal")

	m, err := n.client.IdentifyMapping(ctx, &v1.IdentifyMappingRequest{})
	require.NoError(t, err)
	assert.Equal(t, uint32(4), m.GetBlocksPerChunk())
	assert.Contains(t, m.GetFormula(), "chunk = LBA >> 2")
}

func TestBadInputsAreTypedAndChangeNothing(t *testing.T) {
	n := startNode(t, "bad", false)
	ctx := asNS("a")
	_, err := n.client.Write(ctx, &v1.WriteRequest{Lba: 0, Data: randBlocks(t, 8)})
	require.NoError(t, err)

	tests := []struct {
		name string
		call func() error
		is   error
		code codes.Code
	}{
		{"write off the write pointer", func() error {
			_, err := n.client.Write(ctx, &v1.WriteRequest{Lba: 4, Data: randBlocks(t, 1)})
			return err
		}, zerr.ErrWritePointer, codes.FailedPrecondition},
		{"write past the end", func() error {
			_, err := n.client.Write(ctx, &v1.WriteRequest{Lba: 4 * 2048, Data: randBlocks(t, 1)})
			return err
		}, zerr.ErrOutOfRange, codes.OutOfRange},
		{"read past the end", func() error {
			_, err := n.client.Read(ctx, &v1.ReadRequest{Lba: 4*2048 - 1, Blocks: 2})
			return err
		}, zerr.ErrOutOfRange, codes.OutOfRange},
		{"huge LBA does not overflow", func() error {
			_, err := n.client.Read(ctx, &v1.ReadRequest{Lba: ^uint64(0), Blocks: 2})
			return err
		}, zerr.ErrOutOfRange, codes.OutOfRange},
		{"zero-length write", func() error {
			_, err := n.client.Write(ctx, &v1.WriteRequest{Lba: 8})
			return err
		}, zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"unaligned write", func() error {
			_, err := n.client.Write(ctx, &v1.WriteRequest{Lba: 8, Data: make([]byte, 4097)})
			return err
		}, zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"zero-length read", func() error {
			_, err := n.client.Read(ctx, &v1.ReadRequest{Lba: 0})
			return err
		}, zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"unary read over the limit", func() error {
			_, err := n.client.Read(ctx, &v1.ReadRequest{Lba: 0, Blocks: 1 << 20})
			return err
		}, zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"unknown device", func() error {
			_, err := n.client.Read(ctx, &v1.ReadRequest{Device: 9, Lba: 0, Blocks: 1})
			return err
		}, zerr.ErrNotFound, codes.NotFound},
		{"unknown zone action", func() error {
			_, err := n.client.ZoneManagement(ctx, &v1.ZoneManagementRequest{Zone: 0, Action: 42})
			return err
		}, zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"zone index past the end", func() error {
			_, err := n.client.ZoneManagement(ctx, &v1.ZoneManagementRequest{Zone: 99, Action: v1.ZoneAction_ZONE_ACTION_RESET})
			return err
		}, zerr.ErrOutOfRange, codes.OutOfRange},
		{"malformed bitmap", func() error {
			_, err := n.client.TLOpen(ctx, &v1.TLOpenRequest{Zone: 1, ValidBitmap: []byte{1, 2, 3}})
			return err
		}, zerr.ErrInvalidBitmap, codes.InvalidArgument},
		{"select-all without the token", func() error {
			_, err := n.client.ZoneManagement(ctx, &v1.ZoneManagementRequest{SelectAll: true, Action: v1.ZoneAction_ZONE_ACTION_RESET})
			return err
		}, zerr.ErrUnauthenticated, codes.Unauthenticated},
		{"GetLog without the token", func() error {
			_, err := n.client.GetLog(ctx, &v1.GetLogRequest{})
			return err
		}, zerr.ErrUnauthenticated, codes.Unauthenticated},
		{"offline without the token", func() error {
			_, err := n.client.ZoneManagement(ctx, &v1.ZoneManagementRequest{Zone: 3, Action: v1.ZoneAction_ZONE_ACTION_OFFLINE})
			return err
		}, zerr.ErrUnauthenticated, codes.Unauthenticated},
		{"empty compaction", func() error {
			_, err := n.client.ZoneCompaction(ctx, &v1.ZoneCompactionRequest{})
			return err
		}, zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"wait for an unknown compaction", func() error {
			_, err := n.client.WaitCompaction(ctx, &v1.WaitCompactionRequest{OperationId: "nope"})
			return err
		}, zerr.ErrNotFound, codes.NotFound},
		{"peer write without the token", func() error {
			s, err := n.client.PeerWrite(ctx)
			require.NoError(t, err)
			_ = s.Send(&v1.PeerWriteRequest{Namespace: "a", Extents: []*v1.PeerExtent{{DstLba: 8, Data: randBlocks(t, 1)}}})
			_, err = s.CloseAndRecv()
			return rpcerr.FromError(err)
		}, zerr.ErrUnauthenticated, codes.Unauthenticated},
		{"empty write stream", func() error {
			s, err := n.client.WriteStream(ctx)
			require.NoError(t, err)
			_, err = s.CloseAndRecv()
			return rpcerr.FromError(err)
		}, zerr.ErrInvalidArgument, codes.InvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.is)
			assert.Equal(t, tc.code, rpcerr.Code(err))
			assert.Equal(t, uint64(8), zoneWP(t, n.client, 0), "zone 0 unchanged")
		})
	}
	var wp *zerr.WritePointerError
	_, err = n.client.Write(ctx, &v1.WriteRequest{Lba: 4, Data: randBlocks(t, 1)})
	require.ErrorAs(t, err, &wp)
	assert.Equal(t, uint64(8), wp.Expected)
	assert.Equal(t, uint64(4), wp.Got)
}

func TestNamespacesCannotTouchEachOthersZones(t *testing.T) {
	n := startNode(t, "iso", true)
	grant(t, "iso", 0, "a")
	grant(t, "iso", 1, "b")
	waitGrant(t, n, 0, "a")
	waitGrant(t, n, 1, "b")

	secret := randBlocks(t, 4)
	_, err := n.client.Write(asNS("a"), &v1.WriteRequest{Lba: 0, Data: secret})
	require.NoError(t, err)

	calls := map[string]func(ctx context.Context) error{
		"read": func(ctx context.Context) error {
			_, err := n.client.Read(ctx, &v1.ReadRequest{Lba: 0, Blocks: 4})
			return err
		},
		"write": func(ctx context.Context) error {
			_, err := n.client.Write(ctx, &v1.WriteRequest{Lba: 4, Data: randBlocks(t, 1)})
			return err
		},
		"append": func(ctx context.Context) error {
			_, err := n.client.Append(ctx, &v1.AppendRequest{Zone: 0, Data: randBlocks(t, 1)})
			return err
		},
		"reset": func(ctx context.Context) error {
			_, err := n.client.ZoneManagement(ctx, &v1.ZoneManagementRequest{Zone: 0, Action: v1.ZoneAction_ZONE_ACTION_RESET})
			return err
		},
		"read across into zone 0": func(ctx context.Context) error {
			_, err := n.client.Read(ctx, &v1.ReadRequest{Lba: 2047, Blocks: 2})
			return err
		},
		"copy out of zone 0": func(ctx context.Context) error {
			_, err := n.client.SimpleCopy(ctx, &v1.SimpleCopyRequest{Sources: []*v1.LBARange{{Lba: 0, Blocks: 4}}, DestLba: 2048})
			return err
		},
		"compact out of zone 0": func(ctx context.Context) error {
			_, err := n.client.ZoneCompaction(ctx, &v1.ZoneCompactionRequest{Copies: []*v1.CompactionCopy{{SrcLba: 0, Blocks: 4, DstLba: 2048}}})
			return err
		},
	}
	for name, call := range calls {
		for _, who := range []string{"b", ""} {
			t.Run(name+" as "+who, func(t *testing.T) {
				err := call(asNS(who))
				require.ErrorIs(t, err, zerr.ErrNotOwner)
				assert.Equal(t, codes.PermissionDenied, status.Code(rpcerr.ToError(err)))
			})
		}
	}
	assert.Equal(t, uint64(4), zoneWP(t, n.client, 0), "nothing changed")
	r, err := n.client.Read(asNS("a"), &v1.ReadRequest{Lba: 0, Blocks: 4})
	require.NoError(t, err)
	assert.Equal(t, secret, r.GetData())

	// b sees only its own zone in a report; an admin sees all.
	rep, err := n.client.ReportZones(asNS("b"), &v1.ReportZonesRequest{})
	require.NoError(t, err)
	require.Len(t, rep.GetZones(), 1)
	assert.Equal(t, uint32(1), rep.GetZones()[0].GetIndex())
	rep, err = n.client.ReportZones(asAdmin(), &v1.ReportZonesRequest{})
	require.NoError(t, err)
	assert.Len(t, rep.GetZones(), 4)
}

func TestCrossNodeCompaction(t *testing.T) {
	src := startNode(t, "src", true)
	dst := startNode(t, "dst", true)
	grant(t, "src", 0, "a")
	grant(t, "src", 1, "a")
	grant(t, "dst", 2, "a")
	waitGrant(t, src, 0, "a")
	waitGrant(t, src, 1, "a")
	waitGrant(t, dst, 2, "a")
	ctx := asNS("a")

	data := randBlocks(t, 512) // 2 MiB: the push takes two stream messages
	_, err := src.client.Write(ctx, &v1.WriteRequest{Lba: 0, Data: data})
	require.NoError(t, err)

	// Half of the valid blocks move inside src (zone 0 → zone 1), half to dst's zone 2.
	op, err := src.client.ZoneCompaction(ctx, &v1.ZoneCompactionRequest{Copies: []*v1.CompactionCopy{
		{SrcLba: 0, Blocks: 256, DstLba: 2048},
		{SrcLba: 256, Blocks: 256, DstLba: 4096, Peer: &v1.PeerTarget{NodeId: "dst", Addr: dst.addr, Device: 0}},
	}})
	require.NoError(t, err)
	_, err = src.client.WaitCompaction(asNS("b"), &v1.WaitCompactionRequest{OperationId: op.GetOperationId()})
	require.ErrorIs(t, err, zerr.ErrNotFound, "another namespace cannot see the operation")
	res, err := src.client.WaitCompaction(ctx, &v1.WaitCompactionRequest{OperationId: op.GetOperationId()})
	require.NoError(t, err)
	assert.Equal(t, uint64(256), res.GetRemoteBlocks())
	assert.Equal(t, uint64(256), res.GetCopybackBlocks()+res.GetReadProgramBlocks())
	assert.Positive(t, res.GetCopybackBlocks(), "same-chip full chunks use copyback")

	r, err := src.client.Read(ctx, &v1.ReadRequest{Lba: 2048, Blocks: 256})
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data[:256*4096], r.GetData()), "local part")
	r, err = dst.client.Read(ctx, &v1.ReadRequest{Lba: 4096, Blocks: 256})
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data[256*4096:], r.GetData()), "remote part landed on the peer")

	body := scrape(t, src.http)
	assert.Contains(t, body, `zonefleet_node_peer_pushed_blocks_total{device="0"} 256`)
	assert.Contains(t, body, `zonefleet_node_compaction_blocks_total{device="0",path="copyback"}`)
	assert.Contains(t, scrape(t, dst.http), `zonefleet_node_io_total{device="0",namespace="a",op="peer_write"}`)

	// A push to a zone not granted on the peer fails with NotOwner and writes nothing.
	op, err = src.client.ZoneCompaction(ctx, &v1.ZoneCompactionRequest{Copies: []*v1.CompactionCopy{
		{SrcLba: 0, Blocks: 4, DstLba: 6144, Peer: &v1.PeerTarget{NodeId: "dst", Addr: dst.addr}},
	}})
	require.NoError(t, err)
	_, err = src.client.WaitCompaction(ctx, &v1.WaitCompactionRequest{OperationId: op.GetOperationId()})
	require.ErrorIs(t, err, zerr.ErrNotOwner)
	assert.Equal(t, uint64(6144), zoneWP(t, dst.client, 3))
}

func TestMetricsAndHealth(t *testing.T) {
	n := startNode(t, "met", false)
	_, err := n.client.Write(asNS("a"), &v1.WriteRequest{Lba: 0, Data: randBlocks(t, 4)})
	require.NoError(t, err)
	_, _ = n.client.Write(asNS("a"), &v1.WriteRequest{Lba: 0, Data: randBlocks(t, 4)})
	body := scrape(t, n.http)
	for _, want := range []string{
		`zonefleet_node_io_total{device="0",namespace="a",op="write"} 1`,
		`zonefleet_node_io_errors_total{code="FailedPrecondition",device="0",op="write"} 1`,
		`zonefleet_node_zones{device="0",state="implicitly-open"} 1`,
		`zonefleet_node_max_active_zones{device="0"} 6`,
		`zonefleet_node_host_written_blocks_total{device="0"} 4`,
		`zonefleet_node_waf_ratio{device="0"}`,
		`zonefleet_node_admission_stalls_total{device="0"}`,
		`zonefleet_grpc_requests_total{code="OK",method="Write"} 1`,
	} {
		assert.True(t, strings.Contains(body, want), "metrics lack %s", want)
	}
	require.NoError(t, n.svc.Healthy())
	require.NoError(t, n.devs[0].Close())
	assert.Error(t, n.svc.Healthy(), "a closed device is unhealthy")
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func TestNewRejectsBadConfig(t *testing.T) {
	_, err := New(Config{ID: "x"}, nil, nil, quiet)
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
	d, err := zns.Create(filepath.Join(t.TempDir(), "d"), testGeometry(), clock.Off())
	require.NoError(t, err)
	defer d.Close()
	_, err = New(Config{ID: "x"}, []*zns.Device{d}, nil, quiet)
	assert.ErrorContains(t, err, "standalone")
}

func TestOpenDevicesGeometryMismatch(t *testing.T) {
	o := DefaultOptions()
	o.DataDir, o.Device = t.TempDir(), testGeometry()
	devs, err := OpenDevices(o, clock.Off())
	require.NoError(t, err)
	for _, d := range devs {
		require.NoError(t, d.Close())
	}
	o.Device.DZone = 2
	_, err = OpenDevices(o, clock.Off())
	require.ErrorIs(t, err, zerr.ErrGeometryMismatch)
	assert.True(t, strings.Contains(err.Error(), "dev0.zns"), err.Error())
	o.Devices = 0
	_, err = OpenDevices(o, clock.Off())
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
}

func TestRevokedGrantResetsTheZone(t *testing.T) {
	n := startNode(t, "revoke", true)
	grant(t, "revoke", 0, "a")
	waitGrant(t, n, 0, "a")
	_, err := n.client.Write(asNS("a"), &v1.WriteRequest{Lba: 0, Data: randBlocks(t, 8)})
	require.NoError(t, err)
	// The arbiter returns the zone to the pool: the node resets it for the next owner.
	_, err = etcdClient(t).Delete(context.Background(), cluster.GrantKey("revoke", 0, 0))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return zoneWP(t, n.client, 0) == 0 }, 30*time.Second, 10*time.Millisecond)
	grant(t, "revoke", 0, "b")
	waitGrant(t, n, 0, "b")
	_, err = n.client.Write(asNS("b"), &v1.WriteRequest{Lba: 0, Data: randBlocks(t, 1)})
	require.NoError(t, err, "the next owner finds the zone empty")
	r, err := n.client.Read(asNS("b"), &v1.ReadRequest{Lba: 1, Blocks: 1})
	require.NoError(t, err)
	assert.Equal(t, make([]byte, 4096), r.GetData(), "nothing of the previous owner is left")
	assert.Contains(t, scrape(t, n.http), `zonefleet_node_revoked_zone_resets_total{device="0"} 1`)

	// Zones written without a grant (here by the admin) are swept at start.
	_, err = n.client.Write(asAdmin(), &v1.WriteRequest{Lba: 2048, Data: randBlocks(t, 4)})
	require.NoError(t, err)
	n.svc.SweepUngranted()
	assert.Equal(t, uint64(2048), zoneWP(t, n.client, 1))
	assert.Equal(t, uint64(1), zoneWP(t, n.client, 0), "a granted zone is kept")
}

// A revocation's reset waits for I/O admitted under the grant, and I/O after
// the revocation is refused: no read of a half-reset zone returns zeroes, no
// write lands in a zone that no longer belongs to its writer.
func TestRevocationIsOrderedWithIO(t *testing.T) {
	n := startNode(t, "order", true)
	grant(t, "order", 1, "a")
	waitGrant(t, n, 1, "a")
	data := randBlocks(t, 8)
	_, err := n.client.Write(asNS("a"), &v1.WriteRequest{Lba: 2048, Data: data})
	require.NoError(t, err)

	d := n.svc.devs[0]
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(wire.NamespaceKey, "a"))
	unlock, err := n.svc.hold(ctx, d, 2048, 8) // an I/O in flight on zone 1
	require.NoError(t, err)
	_, err = etcdClient(t).Delete(context.Background(), cluster.GrantKey("order", 0, 1))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !n.svc.grants.Cached("a", 0, 1) }, 30*time.Second, 5*time.Millisecond)
	// The reset is waiting for the zone's write lock: a writer waiting on a
	// sync.RWMutex makes TryRLock fail. Only then can the zone's write
	// pointer tell that the reset waited.
	require.Eventually(t, func() bool {
		if d.zl[1].TryRLock() {
			d.zl[1].RUnlock()
			return false
		}
		return true
	}, time.Minute, time.Millisecond, "the revocation's reset reaches the zone lock")
	assert.Equal(t, uint64(2056), zoneWP(t, n.client, 1), "the reset waits for the I/O in flight")
	unlock()
	require.Eventually(t, func() bool { return zoneWP(t, n.client, 1) == 2048 }, 30*time.Second, 5*time.Millisecond, "then the zone is reset")

	_, err = n.svc.hold(ctx, d, 2048, 8)
	assert.ErrorIs(t, err, zerr.ErrNotOwner)
	_, err = n.client.Read(asNS("a"), &v1.ReadRequest{Lba: 2048, Blocks: 8})
	assert.ErrorIs(t, err, zerr.ErrNotOwner, "refused, not zeroes")
}

// A write stream that fails part way reports the typed error and leaves
// exactly what came before it written, with either codec; the receive-ahead
// goroutine does not hold it up.
func TestWriteStreamStopsAtTheFirstFailure(t *testing.T) {
	for _, codec := range []bool{true, false} {
		n := startNodeCodec(t, "ws", false, codec)
		ctx := asNS("a")
		tests := []struct {
			name   string
			zone   uint64
			pieces [][]byte
			is     error
			wp     uint64 // blocks written into the zone
		}{
			{"past the end of the drive", 3, repeat(randBlocks(t, 256), 10), zerr.ErrOutOfRange, 2048},
			{"a partial block at the end", 2, [][]byte{append(randBlocks(t, 256), 1, 2, 3)}, zerr.ErrInvalidArgument, 256},
		}
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/bulk=%v", tt.name, codec), func(t *testing.T) {
				s, err := n.client.WriteStream(ctx)
				require.NoError(t, err)
				for i, p := range tt.pieces {
					req := &v1.WriteRequest{Data: p}
					if i == 0 {
						req.Lba = tt.zone * 2048
					}
					if s.Send(req) != nil {
						break // the server has given up; CloseAndRecv says why
					}
				}
				_, err = s.CloseAndRecv()
				err = rpcerr.FromError(err)
				require.Error(t, err)
				assert.ErrorIs(t, err, tt.is)
				assert.Equal(t, tt.zone*2048+tt.wp, zoneWP(t, n.client, uint32(tt.zone)))
			})
		}
	}
}

func repeat(b []byte, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}
