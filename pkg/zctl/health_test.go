package zctl

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/daemon"
)

func runZctl(args ...string) (string, int) {
	var out, errOut bytes.Buffer
	root := NewRoot(&out, &errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	if err != nil {
		errOut.WriteString(err.Error())
	}
	return out.String() + errOut.String(), ExitCode(err)
}

// zctl health follows a daemon's health checks over gRPC and HTTP, and fails
// on a closed port within its timeout.
func TestHealth(t *testing.T) {
	d, err := daemon.New(daemon.Config{Name: "t", GRPCListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	var healthy = make(chan bool, 1)
	healthy <- true
	state := true
	d.AddHealthCheck("probe", func() error {
		select {
		case state = <-healthy:
		default:
		}
		if !state {
			return errors.New("broken on purpose")
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	require.Eventually(t, func() bool { _, code := runZctl("health", "--insecure", d.GRPCAddr()); return code == ExitOK }, 5*time.Second, 50*time.Millisecond)
	out, code := runZctl("health", "--http", d.HTTPAddr())
	assert.Equal(t, ExitOK, code, out)
	assert.Contains(t, out, "SERVING")

	healthy <- false
	out, code = runZctl("health", "--http", d.HTTPAddr())
	assert.Equal(t, ExitFailed, code, out)
	assert.Contains(t, out, "broken on purpose")
	require.Eventually(t, func() bool { _, code := runZctl("health", "--insecure", d.GRPCAddr()); return code == ExitFailed }, 5*time.Second, 50*time.Millisecond)
	out, _ = runZctl("health", "--insecure", d.GRPCAddr())
	assert.Contains(t, out, "NOT_SERVING")

	// Nothing listening: exit 1 quickly, not a hang.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := l.Addr().String()
	require.NoError(t, l.Close())
	start := time.Now()
	_, code = runZctl("health", "--timeout", "500ms", dead)
	assert.Equal(t, ExitFailed, code)
	_, code = runZctl("health", "--http", dead+"/health")
	assert.Equal(t, ExitFailed, code)
	assert.Less(t, time.Since(start), 3*time.Second)
	_, code = runZctl("health")
	assert.Equal(t, ExitUsage, code)
}
