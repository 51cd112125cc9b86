package localcluster

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpclocal "google.golang.org/grpc/credentials/local"
	"google.golang.org/grpc/status"
)

// Every node of a local cluster also serves a unix socket in its data
// directory, and a tenant's client of this process reaches the nodes through
// it: no TLS there, but every call still needs a token, and a tenant's token
// reaches its own data only.
func TestNodesServeUnixSockets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cl, err := Start(ctx, Config{Dir: dir, Nodes: 2, Clock: "off", Device: TinyDevice()})
	require.NoError(t, err)
	defer cl.Close()

	cfg := cl.ClientConfig("t")
	require.Len(t, cfg.LocalSockets, 2)
	for _, n := range cl.Info().Nodes {
		sock := cfg.LocalSockets[n.ID]
		require.Equal(t, filepath.Join(dir, n.ID, "grpc.sock"), sock, n.ID)
		assert.Equal(t, sock, n.Unix)
		st, err := os.Stat(sock)
		require.NoError(t, err)
		assert.Equal(t, os.ModeSocket, st.Mode().Type(), sock)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), sock)
	}
	admin, err := client.New(ctx, cl.AdminClientConfig())
	require.NoError(t, err)
	defer admin.Close()
	for _, ns := range []string{"t", "u"} {
		_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: ns, MaxActiveVzones: 2, ZonesPerVzone: 2})
		require.NoError(t, err)
	}

	tenant, err := client.New(ctx, cfg)
	require.NoError(t, err)
	defer tenant.Close()
	vz, err := tenant.OpenVZone(ctx)
	require.NoError(t, err)
	data := bytes.Repeat([]byte("unix"), 4096*2)
	require.NoError(t, vz.Write(ctx, 0, data))
	got, err := vz.Read(ctx, 0, 8)
	require.NoError(t, err)
	assert.Equal(t, data, got)

	// The data path takes the sockets: with every one pointing nowhere, the
	// tenant's I/O fails instead of going over TCP.
	lost := cl.ClientConfig("t")
	for id := range lost.LocalSockets {
		lost.LocalSockets[id] = filepath.Join(t.TempDir(), "gone.sock")
	}
	lost.RetryDeadline = time.Second
	lc, err := client.New(ctx, lost)
	require.NoError(t, err)
	defer lc.Close()
	lvz, err := lc.OpenVZone(ctx)
	if err == nil {
		err = lvz.Write(ctx, 0, data)
	}
	require.Error(t, err)
	assert.ErrorIs(t, err, zerr.ErrUnavailable)

	// Straight on the socket: the caller is whoever its token says.
	loc, err := vz.Locate(ctx, 0)
	require.NoError(t, err)
	cc, err := grpc.NewClient("unix://"+cfg.LocalSockets[loc.Node], grpc.WithTransportCredentials(grpclocal.NewCredentials()))
	require.NoError(t, err)
	defer cc.Close()
	dev := v1.NewZonedDeviceClient(cc)
	read := func(token string) ([]byte, error) {
		var opts []grpc.CallOption
		if token != "" {
			opts = append(opts, grpc.PerRPCCredentials(auth.PerRPC(auth.StaticToken(token), false)))
		}
		r, err := dev.Read(ctx, &v1.ReadRequest{Device: loc.Device, Lba: loc.LBA, Blocks: 1}, opts...)
		return r.GetData(), err
	}
	tokT, err := cl.MintToken("t", time.Hour)
	require.NoError(t, err)
	tokU, err := cl.MintToken("u", time.Hour)
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		token string
		code  codes.Code
	}{
		{"no token", "", codes.Unauthenticated},
		{"forged token", "zf1.not-a-token", codes.Unauthenticated},
		{"another tenant", tokU, codes.PermissionDenied},
	} {
		_, err := read(tc.token)
		assert.Equal(t, tc.code, status.Code(err), "%s: %v", tc.name, err)
	}
	b, err := read(tokT)
	require.NoError(t, err)
	assert.Equal(t, data[:len(b)], b)

	// A restarted node serves its socket again.
	require.NoError(t, cl.StopNode(0))
	require.NoError(t, cl.StartNode(ctx, 0))
	require.NoError(t, cl.WaitReady(ctx))
	got, err = vz.Read(ctx, 0, 8)
	require.NoError(t, err)
	assert.Equal(t, data, got)
}

// TCPOnly, or a data directory too deep for a socket path: no sockets, and
// clients dial the nodes' TCP addresses.
func TestNoUnixSocket(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tcpOnly bool
		sub     string
	}{
		{"TCPOnly", true, ""},
		{"path too long", false, strings.Repeat("d", 100)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dir := filepath.Join(t.TempDir(), tc.sub)
			cl, err := Start(ctx, Config{Dir: dir, Nodes: 1, Clock: "off", Device: TinyDevice(), TCPOnly: tc.tcpOnly})
			require.NoError(t, err)
			defer cl.Close()
			cfg := cl.ClientConfig("t")
			assert.Empty(t, cfg.LocalSockets)
			for _, n := range cl.Info().Nodes {
				assert.Empty(t, n.Unix)
				_, err := os.Stat(filepath.Join(dir, n.ID, "grpc.sock"))
				assert.ErrorIs(t, err, os.ErrNotExist)
			}
			admin, err := client.New(ctx, cl.AdminClientConfig())
			require.NoError(t, err)
			defer admin.Close()
			_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "t", MaxActiveVzones: 2, ZonesPerVzone: 1})
			require.NoError(t, err)
			tenant, err := client.New(ctx, cfg)
			require.NoError(t, err)
			defer tenant.Close()
			vz, err := tenant.OpenVZone(ctx)
			require.NoError(t, err)
			require.NoError(t, vz.Write(ctx, 0, bytes.Repeat([]byte("t"), 4096)))
		})
	}
}
