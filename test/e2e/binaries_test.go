// Package e2e starts the real ZoneFleet binaries and talks to them over
// loopback sockets. The binaries come from $ZONEFLEET_BIN_DIR (make test sets
// it to bin/) or are built into a temporary directory by TestMain.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/etcdlocal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

var binDir string

func TestMain(m *testing.M) {
	binDir = os.Getenv("ZONEFLEET_BIN_DIR")
	if binDir == "" {
		dir, err := os.MkdirTemp("", "zonefleet-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		cmd := exec.Command("go", "build", "-o", dir+"/", "../../cmd/arbiter", "../../cmd/ssdnode", "../../cmd/zctl")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building binaries: %v\n%s", err, out)
			os.Exit(1)
		}
		binDir = dir
		code := m.Run()
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// proc is a running binary whose JSON log is scanned for the "serving" line.
type proc struct {
	cmd      *exec.Cmd
	grpcAddr string
	httpAddr string
	done     chan error
	logs     *strings.Builder
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	base := []string{"--log-format=json", "--listen=127.0.0.1:0", "--http-listen=127.0.0.1:0"}
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--pki-dir") }) {
		// These tests are about other things (secure_test.go covers TLS and
		// authentication): plaintext and, explicitly, no authentication.
		base = append(base, "--insecure", "--insecure-open-access")
	}
	cmd := exec.Command(filepath.Join(binDir, name), append(base, args...)...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &proc{cmd: cmd, done: make(chan error, 1), logs: &strings.Builder{}}
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.logs.WriteString(line + "\n")
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "serving" && p.grpcAddr == "" {
				p.grpcAddr, _ = rec["grpc"].(string)
				p.httpAddr, _ = rec["http"].(string)
				close(serving)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	select {
	case <-serving:
	case err := <-p.done:
		t.Fatalf("%s exited before serving (%v); log:\n%s", name, err, p.logs.String())
	case <-time.After(2 * time.Minute): // a hang guard only: a start takes about a second
		t.Fatalf("%s did not log 'serving' within 2 min; log:\n%s", name, p.logs.String())
	}
	return p
}

func TestServerBinaries(t *testing.T) {
	etcd, err := etcdlocal.Start(t.TempDir(), "")
	require.NoError(t, err)
	defer etcd.Close()
	for _, name := range []string{"arbiter", "ssdnode"} {
		t.Run(name, func(t *testing.T) {
			var args []string
			if name == "arbiter" {
				args = append(args, "--etcd-endpoints="+etcd.Endpoints()[0])
			}
			if name == "ssdnode" {
				args = append(args, "--data="+t.TempDir(), "--standalone", "--channels=2", "--ways=2", "--blocks-per-chip=8", "--pages-per-block=8", "--dzone=2")
			}
			p := start(t, name, args...)

			conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			require.NoError(t, err)
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard only
			defer cancel()
			require.Eventually(t, func() bool {
				resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
				return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
			}, 60*time.Second, 50*time.Millisecond, "gRPC health must report SERVING")

			body := httpGet(t, "http://"+p.httpAddr+"/metrics")
			assert.Contains(t, body, "zonefleet_build_info{")
			assert.Contains(t, body, `component="`+name+`"`)
			assert.Equal(t, "ok\n", httpGet(t, "http://"+p.httpAddr+"/healthz"))

			require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
			select {
			case err := <-p.done:
				require.NoError(t, err, "exit status after SIGTERM; log:\n%s", p.logs.String())
			case <-time.After(time.Minute): // a hang guard only: the exit takes well under a second
				t.Fatalf("%s did not exit within a minute of SIGTERM", name)
			}
		})
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	return string(b)
}

func run(t *testing.T, env []string, name string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, name), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return string(out), code
}

func TestFlagsVersionAndEnv(t *testing.T) {
	for _, name := range []string{"arbiter", "ssdnode", "zctl"} {
		t.Run(name, func(t *testing.T) {
			out, code := run(t, nil, name, "--version")
			assert.Equal(t, 0, code)
			assert.Contains(t, out, "revision")

			out, code = run(t, nil, name, "--help")
			assert.Equal(t, 0, code)
			assert.Contains(t, out, "[$ZONEFLEET_", "every flag names its environment variable")

			_, code = run(t, nil, name, "--no-such-flag")
			assert.Equal(t, 2, code, "usage errors exit 2")
		})
	}
	// A bad value in the environment is a usage error naming the variable.
	out, code := run(t, []string{"ZONEFLEET_LOG_LEVEL=loud"}, "arbiter", "--listen=127.0.0.1:0", "--http-listen=")
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "log level")
	out, code = run(t, []string{"ZONEFLEET_OUTPUT=xml"}, "zctl", "version")
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "-o \"xml\"")
}
