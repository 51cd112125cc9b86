package daemon

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestNewLogger(t *testing.T) {
	tests := []struct {
		format, level string
		ok            bool
		want          string
	}{
		{"text", "info", true, "msg=hello"},
		{"json", "debug", true, `"msg":"hello"`},
		{"xml", "info", false, ""},
		{"text", "loud", false, ""},
	}
	for _, tc := range tests {
		var buf bytes.Buffer
		l, err := NewLogger(&buf, tc.format, tc.level)
		if !tc.ok {
			assert.Error(t, err, "%s/%s", tc.format, tc.level)
			continue
		}
		require.NoError(t, err)
		l.Info("hello")
		assert.Contains(t, buf.String(), tc.want)
	}
}

func TestHealthFollowsChecks(t *testing.T) {
	log, _ := NewLogger(io.Discard, "text", "error")
	d, err := New(Config{Name: "test", GRPCListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0"}, log)
	require.NoError(t, err)
	var broken atomic.Bool
	d.AddHealthCheck("device0", func() error {
		if broken.Load() {
			return errors.New("backing file gone")
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()

	conn, err := grpc.NewClient(d.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	statusIs := func(want healthpb.HealthCheckResponse_ServingStatus) func() bool {
		return func() bool {
			r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
			return err == nil && r.GetStatus() == want
		}
	}
	require.Eventually(t, statusIs(healthpb.HealthCheckResponse_SERVING), 10*time.Second, 20*time.Millisecond)
	code, _ := get(t, "http://"+d.HTTPAddr()+"/healthz")
	assert.Equal(t, http.StatusOK, code)

	broken.Store(true)
	code, body := get(t, "http://"+d.HTTPAddr()+"/healthz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "device0: backing file gone")
	require.Eventually(t, statusIs(healthpb.HealthCheckResponse_NOT_SERVING), 10*time.Second, 20*time.Millisecond)

	_, metrics := get(t, "http://"+d.HTTPAddr()+"/metrics")
	assert.Contains(t, metrics, `zonefleet_build_info{component="test"`)

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestListenErrors(t *testing.T) {
	log, _ := NewLogger(io.Discard, "text", "error")
	_, err := New(Config{Name: "x", GRPCListen: "256.0.0.1:1"}, log)
	assert.ErrorContains(t, err, "gRPC listen")
	_, err = New(Config{Name: "x", GRPCListen: "127.0.0.1:0", HTTPListen: "nope:-1"}, log)
	assert.ErrorContains(t, err, "HTTP listen")
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The metrics listener is unauthenticated: a daemon says so when it is
// reachable beyond loopback, and not when it is not.
func TestMetricsBeyondLoopbackWarns(t *testing.T) {
	for _, tc := range []struct {
		listen string
		warn   bool
	}{
		{"127.0.0.1:0", false},
		{"[::1]:0", false},
		{"0.0.0.0:0", true},
		{"", false},
	} {
		t.Run(tc.listen, func(t *testing.T) {
			var buf syncBuf
			log, _ := NewLogger(&buf, "text", "info")
			d, err := New(Config{Name: "test", GRPCListen: "127.0.0.1:0", HTTPListen: tc.listen}, log)
			if err != nil && tc.listen == "[::1]:0" {
				t.Skipf("no IPv6 loopback: %v", err)
			}
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- d.Run(ctx) }()
			require.Eventually(t, func() bool { return bytes.Contains(buf.Bytes(), []byte("msg=serving")) }, 10*time.Second, 10*time.Millisecond)
			cancel()
			require.NoError(t, <-done)
			assert.Equal(t, tc.warn, bytes.Contains(buf.Bytes(), []byte("without authentication")), "%s", buf.Bytes())
		})
	}
}

// syncBuf is a bytes.Buffer safe for a logger and a reader at once.
type syncBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuf) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf.Bytes()...)
}
