//go:build deploy

package deploy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// zctlFS runs the host's zctl (built by make images) against the compose cluster.
func zctlFS(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot(), "bin", "zctl"), args...)
	cmd.Env = append(append(os.Environ(), "ZONEFLEET_ARBITER="+strings.Join(arbiters, ","),
		"ZONEFLEET_CLUSTER=/nonexistent/cluster.json"), adminEnv()...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mounted(dir string) bool {
	b, err := os.ReadFile("/proc/mounts")
	return err == nil && bytes.Contains(b, []byte(" "+dir+" "))
}

// mountFS starts `zctl mount` in the foreground and waits until it is mounted.
func mountFS(t *testing.T, ns, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot(), "bin", "zctl"), "mount", "-n", ns, dir)
	cmd.Env = append(append(os.Environ(), "ZONEFLEET_ARBITER="+strings.Join(arbiters, ","), "ZONEFLEET_CLUSTER=/nonexistent/cluster.json"), tenantEnv(t, ns)...)
	out, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var logs strings.Builder
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
		}
	}()
	require.Eventually(t, func() bool { return mounted(dir) }, time.Minute, 50*time.Millisecond, "zctl mount: %s", &logs)
	return cmd
}

func fileContent(name string, n int) []byte {
	var out []byte
	for i := 0; len(out) < n; i++ {
		h := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", name, i)))
		out = append(out, h[:]...)
	}
	return out[:n]
}

// Restart the whole cluster: the file system mounts again and every fsynced
// file is intact. The mount process is killed (as by a crash of the host's
// mount) before the cluster goes down.
func TestDrillWholeClusterRestartFileSystem(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse on this machine")
	}
	waitReady(t, nodeCount, time.Minute)
	createNamespace(t, "restart-fs", 8, 2)
	out, err := zctlFS(t, "mkfs", "-n", "restart-fs")
	require.NoError(t, err, out)

	dir := t.TempDir()
	m := mountFS(t, "restart-fs", dir)
	files := map[string][]byte{}
	for i := 0; i < 12; i++ {
		name := filepath.Join(dir, fmt.Sprintf("d%d", i%3), fmt.Sprintf("f%d", i))
		require.NoError(t, os.MkdirAll(filepath.Dir(name), 0o755))
		data := fileContent(name, 100_000+i*37_000)
		f, err := os.Create(name)
		require.NoError(t, err)
		_, err = f.Write(data)
		require.NoError(t, err)
		require.NoError(t, f.Sync(), "fsync")
		require.NoError(t, f.Close())
		files[name] = data
	}
	// The directories' entries are made durable by syncing them too.
	for i := 0; i < 3; i++ {
		d, err := os.Open(filepath.Join(dir, fmt.Sprintf("d%d", i)))
		require.NoError(t, err)
		require.NoError(t, d.Sync())
		d.Close()
	}
	require.NoError(t, m.Process.Signal(syscall.SIGKILL))
	_ = m.Wait()
	_ = exec.Command("fusermount3", "-u", "-z", dir).Run()
	require.Eventually(t, func() bool { return !mounted(dir) }, 10*time.Second, 50*time.Millisecond)

	start := time.Now()
	compose(t, "down") // no -v: the volumes stay
	compose(t, "up", "-d")
	require.NoError(t, waitHealthy())
	waitReady(t, nodeCount, 2*time.Minute)
	t.Logf("whole cluster down and up again in %s", time.Since(start).Round(time.Second))

	m = mountFS(t, "restart-fs", dir)
	for name, want := range files {
		got, err := os.ReadFile(name)
		require.NoError(t, err, name)
		assert.True(t, bytes.Equal(want, got), "%s intact after the restart", name)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "after"), []byte("still writable\n"), 0o644))
	require.NoError(t, m.Process.Signal(syscall.SIGTERM))
	require.NoError(t, m.Wait(), "a clean unmount on SIGTERM")
	require.False(t, mounted(dir))
	out, err = zctlFS(t, "fsck", "-n", "restart-fs")
	require.NoError(t, err, "fsck after the restart: %s", out)
}
