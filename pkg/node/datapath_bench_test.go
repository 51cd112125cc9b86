package node

import (
	"context"
	"crypto/rand"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/daemon"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// benchNode runs a standalone node with one 16-chip drive (32 MiB zones) for
// the data path benchmarks; its clients dial with the transport buffers the
// cluster client uses (wire.TransportDialOptions: with gRPC's 32 KiB
// defaults the client makes 33 socket writes per MiB instead of ~2.5).
// Profile recipe:
//
//	go test -run '^$' -bench BenchmarkDataPath -benchtime 512x -cpuprofile cpu.out -memprofile mem.out ./pkg/node/
//	go tool pprof -top pkg/node/node.test cpu.out
var benchAddr string // of the last benchNode

func benchNode(b *testing.B, srvOpts []grpc.ServerOption, callOpts []grpc.CallOption) (v1.ZonedDeviceClient, *v1.IdentifyResponse) {
	c := flash.Defaults()
	c.BlocksPerChip, c.SpareBlocksPerChip = 68, 4 // 64 zones of 32 MiB
	c.MaxOpenZones, c.MaxActiveZones = 0, 0
	d, err := zns.Create(filepath.Join(b.TempDir(), "dev0.zns"), c, clock.Off())
	require.NoError(b, err)
	svc, err := New(Config{ID: "bench", Standalone: true}, []*zns.Device{d}, nil, quiet)
	require.NoError(b, err)
	dm, err := daemon.New(daemon.Config{Name: "ssdnode", GRPCListen: "127.0.0.1:0"}, quiet, srvOpts...)
	require.NoError(b, err)
	benchAddr = dm.GRPCAddr()
	RegisterGRPC(dm.GRPC, svc)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- dm.Run(ctx) }()
	conn, err := grpc.NewClient(dm.GRPCAddr(), append(append(rpcerr.DialOptions(), wire.TransportDialOptions(false)...), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(append(callOpts, grpc.MaxCallRecvMsgSize(wire.MaxMessageBytes), grpc.MaxCallSendMsgSize(wire.MaxMessageBytes))...))...)
	require.NoError(b, err)
	b.Cleanup(func() {
		cancel()
		<-done
		_ = conn.Close()
		svc.Close()
		_ = d.Close()
	})
	cl := v1.NewZonedDeviceClient(conn)
	id, err := cl.Identify(context.Background(), &v1.IdentifyRequest{})
	require.NoError(b, err)
	return cl, id
}

func benchWriteUnary(b *testing.B, srvOpts []grpc.ServerOption, callOpts []grpc.CallOption) {
	cl, id := benchNode(b, srvOpts, callOpts)
	ctx := wire.WithNamespace(context.Background(), "bench")
	buf := make([]byte, 1<<20)
	_, _ = rand.Read(buf)
	per := uint64(len(buf)) / uint64(id.GetBlockSize())
	zones := uint64(id.GetNumZones())
	zone, wp := uint64(0), uint64(0)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if wp+per > id.GetZoneCapacity() {
			zone, wp = (zone+1)%zones, 0
			if zone == 0 {
				_, err := cl.ZoneManagement(ctx, &v1.ZoneManagementRequest{SelectAll: true, Action: v1.ZoneAction_ZONE_ACTION_RESET})
				require.NoError(b, err)
			}
		}
		_, err := cl.Write(ctx, &v1.WriteRequest{Lba: zone*id.GetZoneSize() + wp, Data: buf})
		require.NoError(b, err)
		wp += per
	}
}

func BenchmarkDataPathWriteUnary(b *testing.B) { benchWriteUnary(b, nil, nil) }

func BenchmarkDataPathWriteUnaryCodec(b *testing.B) {
	benchWriteUnary(b, wire.ServerOptions(), wire.CallOptions())
}

// One WriteStream per zone, 1 MiB messages.
func BenchmarkDataPathWriteStreamCodec(b *testing.B) {
	benchWriteStream(b, wire.ServerOptions(), wire.CallOptions())
}

func benchWriteStream(b *testing.B, srvOpts []grpc.ServerOption, callOpts []grpc.CallOption) {
	cl, id := benchNode(b, srvOpts, callOpts)
	ctx := wire.WithNamespace(context.Background(), "bench")
	buf := make([]byte, 1<<20)
	_, _ = rand.Read(buf)
	per := uint64(len(buf)) / uint64(id.GetBlockSize())
	perZone := int(id.GetZoneCapacity() / per)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for i, zone := 0, uint64(0); i < b.N; zone = (zone + 1) % uint64(id.GetNumZones()) {
		if zone == 0 && i > 0 {
			_, err := cl.ZoneManagement(ctx, &v1.ZoneManagementRequest{SelectAll: true, Action: v1.ZoneAction_ZONE_ACTION_RESET})
			require.NoError(b, err)
		}
		ws, err := cl.WriteStream(ctx)
		require.NoError(b, err)
		for k := 0; k < perZone && i < b.N; k, i = k+1, i+1 {
			req := &v1.WriteRequest{Data: buf}
			if k == 0 {
				req.Lba = zone * id.GetZoneSize()
			}
			require.NoError(b, ws.Send(req))
		}
		_, err = ws.CloseAndRecv()
		require.NoError(b, err)
	}
}

// Eight clients, each on its own connection, streaming 1 MiB messages into
// its own zones (zone i, i+8, ...); compare with BenchmarkDataPathWriteStreamCodec.
func BenchmarkDataPathWriteStream8Clients(b *testing.B) {
	const clients = 8
	_, id := benchNode(b, wire.ServerOptions(), wire.CallOptions())
	addr := benchAddr
	ctx := wire.WithNamespace(context.Background(), "bench")
	buf := make([]byte, 1<<20)
	_, _ = rand.Read(buf)
	var cls []v1.ZonedDeviceClient
	for range clients {
		conn, err := grpc.NewClient(addr, append(wire.TransportDialOptions(false), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(append(wire.CallOptions(), grpc.MaxCallSendMsgSize(wire.MaxMessageBytes))...))...)
		require.NoError(b, err)
		b.Cleanup(func() { _ = conn.Close() })
		cl := v1.NewZonedDeviceClient(conn)
		_, err = cl.Identify(ctx, &v1.IdentifyRequest{})
		require.NoError(b, err)
		cls = append(cls, cl)
	}
	perZone := int(id.GetZoneCapacity() / 256)
	msgs := min(b.N/clients, perZone*int(id.GetNumZones())/clients)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	var wg sync.WaitGroup
	for i, cl := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k, zone := 0, uint64(i); k < msgs; zone += clients {
				ws, err := cl.WriteStream(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				for j := 0; j < perZone && k < msgs; j, k = j+1, k+1 {
					req := &v1.WriteRequest{Data: buf}
					if j == 0 {
						req.Lba = zone * id.GetZoneSize()
					}
					if err := ws.Send(req); err != nil {
						break
					}
				}
				if _, err := ws.CloseAndRecv(); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// benchRead reads size bytes per call from a written zone: Read (size up
// to the unary limit) or, with ranges > 1, ReadV of that many ranges of
// size/ranges bytes in different zones (a client's stripe legs on one node).
func benchRead(b *testing.B, size, ranges int) {
	cl, id := benchNode(b, wire.ServerOptions(), wire.CallOptions())
	ctx := wire.WithNamespace(context.Background(), "bench")
	bs := uint64(id.GetBlockSize())
	buf := make([]byte, 4<<20)
	_, _ = rand.Read(buf)
	for z := uint64(0); z < 4; z++ {
		_, err := cl.Write(ctx, &v1.WriteRequest{Lba: z * id.GetZoneSize(), Data: buf})
		require.NoError(b, err)
	}
	blocks := uint64(size) / bs / uint64(ranges)
	span := uint64(len(buf))/bs - blocks
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		off := (uint64(i) * 7919 * blocks) % span
		if ranges == 1 {
			_, err := cl.Read(ctx, &v1.ReadRequest{Lba: off, Blocks: uint32(blocks)})
			require.NoError(b, err)
			continue
		}
		req := &v1.ReadVRequest{}
		for r := 0; r < ranges; r++ {
			req.Ranges = append(req.Ranges, &v1.ReadRange{Lba: uint64(r%4)*id.GetZoneSize() + off, Blocks: uint32(blocks)})
		}
		_, err := cl.ReadV(ctx, req)
		require.NoError(b, err)
	}
}

func BenchmarkDataPathRead4K(b *testing.B)      { benchRead(b, 4096, 1) }
func BenchmarkDataPathRead128K(b *testing.B)    { benchRead(b, 128<<10, 1) }
func BenchmarkDataPathReadV128Kx4(b *testing.B) { benchRead(b, 128<<10, 4) }
func BenchmarkDataPathRead1M(b *testing.B)      { benchRead(b, 1<<20, 1) }
