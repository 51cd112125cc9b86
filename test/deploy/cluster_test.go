//go:build deploy

package deploy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/client"
)

// The compose cluster's addresses (deploy/docker-compose.yml, host network).
var (
	arbiters = []string{"127.0.0.1:7700", "127.0.0.1:7710"}
	etcd     = []string{"https://127.0.0.1:2379", "https://127.0.0.1:22379", "https://127.0.0.1:32379"}
	// pkiDir holds the cluster's CA, the admin certificate and the token
	// signing key, copied out of the compose volume `pki` (TestMain).
	pkiDir    string
	nodeCount = 4
	// service of each process by its gRPC address
	serviceOf = map[string]string{
		"127.0.0.1:7700": "arbiter-1", "127.0.0.1:7710": "arbiter-2",
		"127.0.0.1:7800": "ssdnode-1", "127.0.0.1:7810": "ssdnode-2", "127.0.0.1:7820": "ssdnode-3", "127.0.0.1:7830": "ssdnode-4",
	}
	metricsAddrs = []string{"127.0.0.1:2381", "127.0.0.1:22381", "127.0.0.1:32381", "127.0.0.1:7701", "127.0.0.1:7711",
		"127.0.0.1:7801", "127.0.0.1:7811", "127.0.0.1:7821", "127.0.0.1:7831"}
)

var composeCmd []string

func composeFile() string { return filepath.Join(repoRoot(), "deploy", "docker-compose.yml") }

func runCompose(args ...string) (string, error) {
	full := append(append(composeCmd[1:len(composeCmd):len(composeCmd)], "-f", composeFile()), args...)
	cmd := exec.Command(composeCmd[0], full...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", composeCmd[0], strings.Join(full, " "), err, out)
	}
	return string(out), nil
}

func compose(t testing.TB, args ...string) string {
	t.Helper()
	out, err := runCompose(args...)
	require.NoError(t, err)
	return out
}

func waitHealthy() error {
	cmd := exec.Command(filepath.Join(repoRoot(), "deploy", "wait-healthy.sh"))
	cmd.Env = append(os.Environ(), "WAIT_TIMEOUT=180")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

func TestMain(m *testing.M) {
	if os.Getenv("ZONEFLEET_DEPLOY_TEST") != "1" {
		fmt.Fprintln(os.Stderr, "test/deploy: this suite (re)creates the compose project zonefleet and DELETES its volumes;\n"+
			"run it with `make test-deploy` (or ZONEFLEET_DEPLOY_TEST=1 go test -tags deploy ./test/deploy/)")
		os.Exit(2)
	}
	composeCmd = strings.Fields(os.Getenv("ZONEFLEET_COMPOSE"))
	if len(composeCmd) == 0 {
		if exec.Command("docker", "compose", "version").Run() == nil {
			composeCmd = []string{"docker", "compose"}
		} else {
			composeCmd = []string{"docker-compose"}
		}
	}
	start := time.Now()
	if out, err := runCompose("--profile", "monitoring", "down", "-v", "--remove-orphans"); err != nil {
		fmt.Fprintln(os.Stderr, out, err)
		os.Exit(1)
	}
	if _, err := runCompose("up", "-d"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := waitHealthy(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster not healthy:", err)
		out, _ := runCompose("logs", "--tail", "30")
		fmt.Fprintln(os.Stderr, out)
		os.Exit(1)
	}
	fmt.Printf("test/deploy: compose cluster up and healthy in %s\n", time.Since(start).Round(time.Second))
	dir, err := fetchPKI()
	if err != nil {
		fmt.Fprintln(os.Stderr, "copying the cluster's PKI:", err)
		os.Exit(1)
	}
	pkiDir = dir
	defer os.RemoveAll(dir)
	code := m.Run()
	if code != 0 {
		out, _ := runCompose("ps")
		fmt.Println(out)
	}
	if os.Getenv("ZONEFLEET_DEPLOY_KEEP") == "" {
		if out, err := runCompose("down", "-v"); err != nil {
			fmt.Fprintln(os.Stderr, out, err)
		}
	}
	_ = os.RemoveAll(pkiDir)
	os.Exit(code)
}

// fetchPKI copies the compose volume `pki` (what `zctl cert init` wrote in
// the pki service) out of the exited pki container (no running container
// mounts it: it holds the CA key): the tests need the CA, the operator's
// certificate and the token signing key (to mint tenant tokens offline).
func fetchPKI() (string, error) {
	id, err := runCompose("ps", "-a", "-q", "pki")
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "zonefleet-deploy-pki-")
	if err != nil {
		return "", err
	}
	if out, err := exec.Command("docker", "cp", strings.TrimSpace(id)+":/data/.", dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("docker cp: %w: %s", err, out)
	}
	return dir, nil
}

// adminCreds are the operator's: TLS with the admin certificate.
func adminCreds() client.Credentials {
	return client.Credentials{CAFile: filepath.Join(pkiDir, auth.FileCA), CertFile: filepath.Join(pkiDir, "admin.crt"), KeyFile: filepath.Join(pkiDir, "admin.key")}
}

// namespaceToken mints a namespace token with the cluster's signing key
// (what `zctl cert token` does).
func namespaceToken(t testing.TB, ns string, ttl time.Duration) string {
	t.Helper()
	sk, err := auth.LoadSigningKey(filepath.Join(pkiDir, auth.FileSigningKey))
	require.NoError(t, err)
	iss, err := auth.NewIssuer(sk, nil)
	require.NoError(t, err)
	tok, _, err := iss.Issue(auth.TokenRoleNamespace, ns, 0, ttl)
	require.NoError(t, err)
	return tok
}

// tenantEnv is the environment of a host zctl acting as tenant ns: the CA
// and a namespace token file (12 h: longer than any drill).
func tenantEnv(t testing.TB, ns string) []string {
	p := filepath.Join(t.TempDir(), ns+".token")
	require.NoError(t, os.WriteFile(p, []byte(namespaceToken(t, ns, 12*time.Hour)+"\n"), 0o600))
	return []string{"ZONEFLEET_CA_FILE=" + filepath.Join(pkiDir, auth.FileCA), "ZONEFLEET_TOKEN_FILE=" + p}
}

// adminEnv is the environment of a host zctl acting as the operator.
func adminEnv() []string {
	c := adminCreds()
	return []string{"ZONEFLEET_CA_FILE=" + c.CAFile, "ZONEFLEET_CERT_FILE=" + c.CertFile, "ZONEFLEET_KEY_FILE=" + c.KeyFile}
}

// newClient connects to the compose cluster from the host.
func newClient(t testing.TB, ns string, retry time.Duration, opts ...func(*client.Config)) *client.Client {
	t.Helper()
	cfg := client.Config{Arbiters: arbiters, Etcd: etcd, Namespace: ns, RetryDeadline: retry}
	if ns == "" {
		require.NoError(t, adminCreds().Apply(&cfg))
	} else { // a tenant: TLS and a refreshing namespace token
		require.NoError(t, client.Credentials{CAFile: adminCreds().CAFile}.Apply(&cfg))
		cfg.Credentials = auth.NewRefreshingSource(func(context.Context) (string, time.Time, error) {
			return namespaceToken(t, ns, auth.DefaultTokenTTL), time.Now().Add(auth.DefaultTokenTTL), nil
		}, nil)
	}
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

func createNamespace(t testing.TB, name string, maxVZones, zonesPerVZone uint32) {
	t.Helper()
	admin := newClient(t, "", 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: name, MaxActiveVzones: maxVZones, ZonesPerVzone: zonesPerVZone})
	require.NoError(t, err)
	// The cluster has 56 active-zone slots: give them back for the next test.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cfg := client.Config{Arbiters: arbiters, Etcd: etcd, RetryDeadline: 20 * time.Second}
		if err := adminCreds().Apply(&cfg); err != nil {
			t.Logf("deleting namespace %s: %v", name, err)
			return
		}
		if cl, err := client.New(ctx, cfg); err == nil {
			defer cl.Close()
			if err := cl.Namespaces().Delete(ctx, name, true); err != nil {
				t.Logf("deleting namespace %s: %v", name, err)
			}
		}
	})
}

// waitReady waits until an arbiter leads and counts n nodes available.
func waitReady(t testing.TB, n int, within time.Duration) *v1.ClusterStatusResponse {
	t.Helper()
	admin := newClient(t, "", within)
	deadline := time.Now().Add(within)
	var last *v1.ClusterStatusResponse
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := admin.ClusterStatus(ctx)
		cancel()
		last, lastErr = st, err
		if err == nil && st.GetLeader() != "" && int(st.GetNodesAvailable()) == n {
			return st
		}
		time.Sleep(250 * time.Millisecond) // the poll interval of the status call
	}
	require.FailNow(t, "cluster not ready", "want %d nodes available and a leader within %s; last status %v, err %v", n, within, last, lastErr)
	return nil
}

// pattern is the content of blocks [off, off+n) of v-zone vz: every 4 KiB
// block is a SHA-256 of (seed, vz, block) repeated, so any misplaced, stale
// or torn block is caught.
func pattern(seed string, vz, off, n, bs uint64) []byte {
	out := make([]byte, n*bs)
	for i := uint64(0); i < n; i++ {
		h := sha256.Sum256(fmt.Appendf(nil, "%s/%d/%d", seed, vz, off+i))
		for j := uint64(0); j < bs; j += uint64(len(h)) {
			copy(out[i*bs+j:], h[:])
		}
	}
	return out
}

// verify reads blocks [0, n) of vz back and compares them with the pattern.
func verify(t testing.TB, vz *client.VZone, seed string, n, bs uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const step = 256
	for off := uint64(0); off < n; off += step {
		k := min(step, n-off)
		got, err := vz.Read(ctx, off, k)
		require.NoError(t, err, "v-zone %d: read %d blocks at %d", vz.ID(), k, off)
		want := pattern(seed, vz.ID(), off, k, bs)
		if !bytes.Equal(want, got) {
			for i := uint64(0); i < k; i++ {
				if !bytes.Equal(want[i*bs:(i+1)*bs], got[i*bs:(i+1)*bs]) {
					require.FailNow(t, "acknowledged data lost", "v-zone %d: block %d differs (of %d acknowledged)", vz.ID(), off+i, n)
				}
			}
		}
	}
}

// writer writes the pattern sequentially into a v-zone, chunk blocks at a
// time, and remembers how much was acknowledged and the longest wait.
type writer struct {
	vz    *client.VZone
	seed  string
	bs    uint64
	chunk uint64
	limit uint64 // stop at this many blocks
	pause time.Duration

	mu     sync.Mutex
	acked  uint64
	err    error
	errAt  time.Time
	maxGap time.Duration
	writes int
}

func newWriter(t testing.TB, vz *client.VZone, seed string, chunk uint64, pause time.Duration) *writer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := vz.ReportZone(ctx)
	require.NoError(t, err)
	return &writer{vz: vz, seed: seed, bs: info.BlockSize, chunk: chunk, limit: info.Capacity, pause: pause, acked: info.WritePointer}
}

// run writes until ctx ends, the v-zone is full, or a write fails.
func (w *writer) run(ctx context.Context) {
	last := time.Now()
	for ctx.Err() == nil {
		w.mu.Lock()
		off := w.acked
		w.mu.Unlock()
		n := min(w.chunk, w.limit-off)
		if n == 0 {
			return
		}
		wctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		start := time.Now()
		err := w.vz.Write(wctx, off, pattern(w.seed, w.vz.ID(), off, n, w.bs))
		cancel()
		w.mu.Lock()
		if err != nil {
			w.err, w.errAt = fmt.Errorf("write %d blocks at %d after %s: %w", n, off, time.Since(start).Round(time.Millisecond), err), time.Now()
			w.mu.Unlock()
			return
		}
		w.acked = off + n
		w.writes++
		w.maxGap = max(w.maxGap, time.Since(last))
		last = time.Now()
		w.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(w.pause):
		}
	}
}

// waitWrites waits until every writer has acknowledged at least n writes:
// the workload runs (a hang guard of two minutes; a writer's error shows
// in the drill's later checks).
func waitWrites(t testing.TB, ws []*writer, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, w := range ws {
			if _, writes, _, err := w.state(); err != nil || writes < n {
				return false
			}
		}
		return true
	}, 2*time.Minute, 20*time.Millisecond, "every writer acknowledged %d writes", n)
}

func (w *writer) state() (acked uint64, writes int, maxGap time.Duration, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked, w.writes, w.maxGap, w.err
}

// freePort checks a host port is free (the client metrics endpoint).
func listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err, "port %s must be free", addr)
	return l
}
