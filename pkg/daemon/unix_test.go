package daemon

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	grpclocal "google.golang.org/grpc/credentials/local"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Config.UnixSocket serves the services on a unix socket too, its owner's
// only; the socket goes away when the daemon stops.
func TestUnixSocketServes(t *testing.T) {
	log, _ := NewLogger(io.Discard, "text", "error")
	sock := filepath.Join(t.TempDir(), "grpc.sock")
	d, err := New(Config{Name: "test", GRPCListen: "127.0.0.1:0", UnixSocket: sock}, log)
	require.NoError(t, err)
	assert.Equal(t, sock, d.UnixSocket())
	st, err := os.Stat(sock)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(grpclocal.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	require.Eventually(t, func() bool {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
	}, 30*time.Second, 20*time.Millisecond)

	cancel()
	require.NoError(t, <-done)
	_, err = os.Stat(sock)
	assert.ErrorIs(t, err, os.ErrNotExist, "the socket file is removed at shutdown")
}

func TestUnixSocketPath(t *testing.T) {
	log, _ := NewLogger(io.Discard, "text", "error")
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	require.NoError(t, err)
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, l.Close()) // a socket file nobody serves: a process that died
	live := filepath.Join(dir, "live.sock")
	ll, err := net.Listen("unix", live)
	require.NoError(t, err)
	defer ll.Close()
	file := filepath.Join(dir, "data")
	require.NoError(t, os.WriteFile(file, []byte("keep me"), 0o644))

	for _, tc := range []struct {
		name, path, err string
	}{
		{"stale socket replaced", stale, ""},
		{"regular file refused", file, "not a socket"},
		{"socket in use refused", live, "in use"},
		{"path too long", filepath.Join(dir, strings.Repeat("x", 120)), "longer than"},
		{"no such directory", filepath.Join(dir, "nodir", "grpc.sock"), "listen on unix socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := New(Config{Name: "test", GRPCListen: "127.0.0.1:0", UnixSocket: tc.path}, log)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			st, err := os.Stat(tc.path)
			require.NoError(t, err)
			assert.Equal(t, os.ModeSocket, st.Mode().Type())
			require.NoError(t, d.unixLis.Close())
			require.NoError(t, d.grpcLis.Close())
		})
	}
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, "keep me", string(b), "a file in the way is left alone")
	c, err := net.Dial("unix", live)
	require.NoError(t, err, "a served socket is left alone")
	require.NoError(t, c.Close())
}
