package zctl

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/fdp"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/node"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// zctl fdp against a node's FDP service on a real socket: the admin token
// reads the log pages, a missing one is refused, -o json is the proto.
func TestFDPCommands(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("ZONEFLEET_CONFIG", filepath.Join(dir, "config.yaml"))
	t.Setenv("ZONEFLEET_CLUSTER", filepath.Join(dir, "cluster.json"))
	geo := flash.Small()
	zd, err := zns.Create(filepath.Join(dir, "dev0.zns"), geo, clock.Off())
	require.NoError(t, err)
	defer zd.Close()
	const token = "fdp-zctl-admin-token-0123456789abcdef"
	svc, err := node.New(node.Config{ID: "n1", AdminToken: token, Standalone: true}, []*zns.Device{zd}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	defer svc.Close()
	cfg := fdp.DefaultConfig()
	fd, err := fdp.Create(filepath.Join(dir, "fdp0.fdp"), cfg, clock.Off())
	require.NoError(t, err)
	defer fd.Close()
	_, err = fd.Write(context.Background(), 0, make([]byte, 4*4096), fdp.PlacementID{Handle: 2}, fdp.Flags{})
	require.NoError(t, err)
	require.NoError(t, fd.UpdateHandles(context.Background(), []fdp.PlacementID{{Handle: 2}}))

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(rpcerr.ServerOptions()...)
	node.RegisterFDP(srv, node.NewFDPService([]*fdp.Device{fd}, svc))
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	addr := lis.Addr().String()

	_, errOut, code := run(t, "", "fdp", "stats", "--addr", addr, "--insecure")
	require.NotEqual(t, 0, code, "no admin credential")
	require.Contains(t, errOut, "admin")

	t.Setenv("ZONEFLEET_TOKEN", token)
	out, errOut, code := run(t, "", "fdp", "stats", "--addr", addr, "--insecure")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "host bytes written:")
	require.Contains(t, out, "16384")

	out, errOut, code = run(t, "", "-o", "json", "fdp", "usage", "--addr", addr, "--insecure")
	require.Equal(t, 0, code, errOut)
	var usage struct {
		Handles []struct {
			Handle           uint32 `json:"handle"`
			HostBytesWritten string `json:"host_bytes_written"`
			ValidLbas        string `json:"valid_lbas"`
		} `json:"handles"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &usage))
	require.Len(t, usage.Handles, 4)
	require.Equal(t, "16384", usage.Handles[2].HostBytesWritten)
	require.Equal(t, "4", usage.Handles[2].ValidLbas)

	out, errOut, code = run(t, "", "fdp", "events", "--addr", addr, "--insecure")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "ru-not-fully-written")
	for _, sub := range []string{"configs", "status"} {
		out, errOut, code = run(t, "", "fdp", sub, "--addr", addr, "--insecure")
		require.Equal(t, 0, code, errOut)
		require.NotEmpty(t, out)
	}
	out, errOut, code = run(t, "", "fdp", "set", "--victim", "cost-benefit", "--addr", addr, "--insecure")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "cost-benefit")
	_, _, code = run(t, "", "fdp", "set", "--victim", "lru", "--addr", addr, "--insecure")
	require.Equal(t, 2, code, "a bad argument is a usage error")
	_, _, code = run(t, "", "fdp", "stats", "-d", "7", "--addr", addr, "--insecure")
	require.Equal(t, 3, code, "an unknown device is not found")
}
