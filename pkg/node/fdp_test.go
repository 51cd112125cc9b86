package node

import (
	"context"
	"io"
	"log/slog"
	"math/rand"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/fdp"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// TestFDPService serves an FDP drive over gRPC on a real socket: admin
// calls need the admin credential, writes carry a placement id, the log
// pages and the zonefleet_fdp_* metrics follow, bad input comes back as
// typed errors.
func TestFDPService(t *testing.T) {
	dir := t.TempDir()
	zd, err := zns.Create(filepath.Join(dir, "dev0.zns"), testGeometry(), clock.Off())
	require.NoError(t, err)
	defer zd.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const token = "fdp-test-admin-token-0123456789abcdef"
	svc, err := New(Config{ID: "n1", AdminToken: token, Standalone: true}, []*zns.Device{zd}, nil, log)
	require.NoError(t, err)
	defer svc.Close()

	o := DefaultOptions()
	o.DataDir = dir
	o.Device = testGeometry()
	o.Device.BlocksPerChip = 64
	o.FDP.Devices = 1
	o.FDP.Handles = []string{"ii", "pi"}
	fdevs, err := OpenFDPDevices(o, clock.Off())
	require.NoError(t, err)
	require.Len(t, fdevs, 1)
	defer fdevs[0].Close()
	f := NewFDPService(fdevs, svc)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(f.FDPCollector()))

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(rpcerr.ServerOptions()...)
	RegisterFDP(srv, f)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), append(rpcerr.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	defer conn.Close()
	c := v1.NewFDPClient(conn)
	ctx := context.Background()

	_, err = c.Stats(ctx, &v1.FDPDeviceRequest{})
	require.ErrorIs(t, err, zerr.ErrUnauthenticated, "device-level calls need the admin credential")
	_, err = c.Write(wire.WithToken(ctx, "wrong"), &v1.FDPWriteRequest{Data: make([]byte, 4096)})
	require.ErrorIs(t, err, zerr.ErrUnauthenticated)

	actx := wire.WithToken(ctx, token)
	cfg, err := c.Configs(actx, &v1.FDPDeviceRequest{})
	require.NoError(t, err)
	require.Equal(t, []string{"initially-isolated", "persistently-isolated"}, cfg.HandleTypes)
	require.Equal(t, "greedy", cfg.Victim)

	data := make([]byte, 8*4096)
	for i := range data {
		data[i] = byte(i * 7)
	}
	_, err = c.Write(actx, &v1.FDPWriteRequest{Lba: 16, Data: data, Placement: &v1.PlacementID{Handle: 1}, Fua: true})
	require.NoError(t, err)
	rd, err := c.Read(actx, &v1.FDPReadRequest{Lba: 16, Count: 8})
	require.NoError(t, err)
	require.Equal(t, data, rd.Data)
	st, err := c.Stats(actx, &v1.FDPDeviceRequest{})
	require.NoError(t, err)
	require.Equal(t, uint64(len(data)), st.HostBytesWithMetadataWritten)
	us, err := c.Usage(actx, &v1.FDPDeviceRequest{})
	require.NoError(t, err)
	require.Len(t, us.Handles, 2)
	require.Equal(t, uint64(len(data)), us.Handles[1].HostBytesWritten)
	require.Equal(t, uint64(8), us.Handles[1].ValidLbas)
	require.Zero(t, us.Handles[0].HostBytesWritten)

	_, err = c.UpdateHandles(actx, &v1.FDPUpdateHandlesRequest{Placements: []*v1.PlacementID{{Handle: 1}}})
	require.NoError(t, err)
	ev, err := c.Events(actx, &v1.FDPEventsRequest{})
	require.NoError(t, err)
	require.NotEmpty(t, ev.Events)
	require.Equal(t, "ru-not-fully-written", ev.Events[len(ev.Events)-1].Type)
	_, err = c.Trim(actx, &v1.FDPTrimRequest{Lba: 16, Count: 8})
	require.NoError(t, err)
	_, err = c.Flush(actx, &v1.FDPDeviceRequest{})
	require.NoError(t, err)
	sts, err := c.Status(actx, &v1.FDPDeviceRequest{})
	require.NoError(t, err)
	require.Zero(t, sts.MappedLbas)
	require.True(t, sts.Enabled)

	ru := uint32(1)
	cfg, err = c.SetConfig(actx, &v1.FDPSetConfigRequest{Victim: "cost-benefit", RuChips: &ru})
	require.NoError(t, err)
	require.Equal(t, "cost-benefit", cfg.Victim)
	require.Equal(t, uint32(1), cfg.RuChips)

	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"unknown device", func() error { _, err := c.Stats(actx, &v1.FDPDeviceRequest{Device: 3}); return err }, zerr.ErrNotFound},
		{"unknown handle", func() error {
			_, err := c.Write(actx, &v1.FDPWriteRequest{Data: make([]byte, 4096), Placement: &v1.PlacementID{Handle: 2}})
			return err
		}, zerr.ErrInvalidArgument},
		{"handle past 16 bits", func() error {
			_, err := c.Write(actx, &v1.FDPWriteRequest{Data: make([]byte, 4096), Placement: &v1.PlacementID{Handle: 1 << 20}})
			return err
		}, zerr.ErrInvalidArgument},
		{"out of range", func() error {
			_, err := c.Read(actx, &v1.FDPReadRequest{Lba: 1 << 40, Count: 1})
			return err
		}, zerr.ErrOutOfRange},
		{"huge read", func() error { _, err := c.Read(actx, &v1.FDPReadRequest{Count: 1 << 30}); return err }, zerr.ErrInvalidArgument},
		{"bad victim", func() error { _, err := c.SetConfig(actx, &v1.FDPSetConfigRequest{Victim: "lru"}); return err }, zerr.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) { require.ErrorIs(t, tc.call(), tc.want) })
	}

	n, err := testutil.GatherAndCount(reg, "zonefleet_fdp_host_bytes_total", "zonefleet_fdp_free_reclaim_units", "zonefleet_fdp_media_bytes_total")
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP zonefleet_fdp_host_bytes_total Bytes the hosts wrote to the FDP drive.
# TYPE zonefleet_fdp_host_bytes_total counter
zonefleet_fdp_host_bytes_total{device="0"} 32768
`), "zonefleet_fdp_host_bytes_total"))
}

// TestFDPServiceAuthenticated: behind the real authenticator, with admin
// rules for the FDP methods (the rows DefaultPolicy needs), the operator's
// token reaches the drive and a caller without credentials does not; the
// handler sees the verified identity, not a bare metadata claim.
func TestFDPServiceAuthenticated(t *testing.T) {
	dir := t.TempDir()
	zd, err := zns.Create(filepath.Join(dir, "dev0.zns"), testGeometry(), clock.Off())
	require.NoError(t, err)
	defer zd.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// No legacy token: only the authenticator's verdict can make a caller admin.
	svc, err := New(Config{ID: "n1", Standalone: true, AdminToken: "unused-legacy-token-0123456789abcdef"}, []*zns.Device{zd}, nil, log)
	require.NoError(t, err)
	defer svc.Close()
	o := DefaultOptions()
	o.DataDir = dir
	o.Device = testGeometry()
	o.Device.BlocksPerChip = 64
	o.FDP.Devices = 1
	fdevs, err := OpenFDPDevices(o, clock.Off())
	require.NoError(t, err)
	defer fdevs[0].Close()

	pol := auth.DefaultPolicy()
	for _, m := range v1.FDP_ServiceDesc.Methods {
		pol["/"+v1.FDP_ServiceDesc.ServiceName+"/"+m.MethodName] = auth.Rule{Kinds: []auth.Kind{auth.KindAdmin}}
	}
	const admin = "fdp-auth-admin-token-0123456789abcdefXYZ"
	a, err := auth.New(auth.Config{AdminToken: admin, Insecure: true, Policy: pol, Logger: log})
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(append(a.ServerOptions(), rpcerr.ServerOptions()...)...)
	RegisterFDP(srv, NewFDPService(fdevs, svc))
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), append(rpcerr.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	defer conn.Close()
	c := v1.NewFDPClient(conn)
	ctx := context.Background()

	_, err = c.Stats(ctx, &v1.FDPDeviceRequest{})
	require.ErrorIs(t, err, zerr.ErrUnauthenticated)
	// The legacy token alone is not a credential the authenticator accepts.
	_, err = c.Stats(wire.WithToken(ctx, "unused-legacy-token-0123456789abcdef"), &v1.FDPDeviceRequest{})
	require.Error(t, err)

	actx := metadata.AppendToOutgoingContext(ctx, auth.AuthorizationKey, "Bearer "+admin)
	_, err = c.Write(actx, &v1.FDPWriteRequest{Data: make([]byte, 4096), Placement: &v1.PlacementID{Handle: 3}})
	require.NoError(t, err)
	st, err := c.Stats(actx, &v1.FDPDeviceRequest{})
	require.NoError(t, err)
	require.Equal(t, uint64(4096), st.HostBytesWithMetadataWritten)
}

// TestFDPCollectorCountsCollections: once garbage collection has run, the
// node exports how many reclaim units it reclaimed and how many blocks it
// moved, as the drive counts them.
func TestFDPCollectorCountsCollections(t *testing.T) {
	dir := t.TempDir()
	o := DefaultOptions()
	o.DataDir = dir
	o.Device = testGeometry()
	o.Device.BlocksPerChip = 64
	o.FDP.Devices = 1
	o.FDP.Handles = []string{"ii"}
	fdevs, err := OpenFDPDevices(o, clock.Off())
	require.NoError(t, err)
	require.Len(t, fdevs, 1)
	d := fdevs[0]
	defer d.Close()
	zd, err := zns.Create(filepath.Join(dir, "dev0.zns"), testGeometry(), clock.Off())
	require.NoError(t, err)
	defer zd.Close()
	svc, err := New(Config{ID: "n1", AdminToken: "fdp-test-admin-token-0123456789abcdef", Standalone: true}, []*zns.Device{zd}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	defer svc.Close()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(NewFDPService(fdevs, svc).FDPCollector()))

	// random overwrites of half the drive until a collection has run
	ctx := context.Background()
	bs := d.BlockSize()
	half := d.Capacity() / 2
	buf := make([]byte, bs)
	rng := rand.New(rand.NewSource(1))
	for d.Stats().RUsReclaimed == 0 {
		_, err := d.Write(ctx, uint64(rng.Int63n(int64(half))), buf, fdp.PlacementID{}, fdp.Flags{})
		require.NoError(t, err)
	}
	s := d.Stats()
	require.Positive(t, s.GCCopies, "random overwrites leave valid blocks to move")
	require.Equal(t, float64(s.RUsReclaimed), counterValue(t, reg, "zonefleet_fdp_gc_reclaimed_units_total"))
	require.Equal(t, float64(s.GCCopies), counterValue(t, reg, "zonefleet_fdp_gc_copies_total"))
}

// counterValue is the value of the one series of counter name in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			require.Len(t, mf.GetMetric(), 1)
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}
