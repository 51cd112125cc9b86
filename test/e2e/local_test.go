package e2e

import (
	"bufio"
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

// localUp starts `zctl local up` and waits for its "Ready." line.
func localUp(t *testing.T, dir string, env []string) (*exec.Cmd, chan error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "zctl"), "local", "up", "--data", dir, "--clock", "off", "--nodes", "2")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	ready := make(chan struct{})
	var logs strings.Builder
	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "Ready.") {
				close(ready)
			}
		}
		done <- cmd.Wait()
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("zctl local up exited: %v\n%s", err, logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("zctl local up not ready after 60s:\n%s", logs.String())
	}
	return cmd, done
}

func zctl(t *testing.T, env []string, stdin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "zctl"), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return string(out), code
}

func TestLocalUpSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	env := []string{"ZONEFLEET_CLUSTER=" + filepath.Join(dir, "cluster.json")}
	up, done := localUp(t, dir, env)

	out, code := zctl(t, env, "", "ns", "create", "e2e", "--max-active-vzones", "2", "--zones-per-vzone", "4")
	require.Equal(t, 0, code, out)
	out, code = zctl(t, env, "", "-n", "e2e", "vzone", "open")
	require.Equal(t, 0, code, out)
	out, code = zctl(t, env, "persistent bytes\n", "-n", "e2e", "vzone", "write", "0")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "wrote 1 blocks at 0")
	out, code = zctl(t, env, "", "-n", "e2e", "vzone", "read", "0", "--blocks", "1")
	require.Equal(t, 0, code, out)
	assert.True(t, strings.HasPrefix(out, "persistent bytes\n"))

	// Ctrl-C stops everything cleanly.
	require.NoError(t, up.Process.Signal(syscall.SIGINT))
	select {
	case err := <-done:
		require.NoError(t, err, "zctl local up exits 0 on Ctrl-C")
	case <-time.After(30 * time.Second):
		t.Fatal("zctl local up did not stop within 30s of Ctrl-C")
	}
	_, code = zctl(t, env, "", "cluster", "status")
	assert.Equal(t, 5, code, "no cluster: unavailable")
	// The drives keep their size: another --blocks-per-chip is refused at
	// once, before anything starts.
	out, code = zctl(t, env, "", "local", "up", "--data", dir, "--clock", "off", "--nodes", "2", "--blocks-per-chip", "20")
	assert.Equal(t, 4, code, out)
	assert.Contains(t, out, "created with --blocks-per-chip 36")

	// Up again on the same directory: the same namespace, v-zone and data.
	up, done = localUp(t, dir, env)
	out, code = zctl(t, env, "", "-n", "e2e", "vzone", "read", "0", "--blocks", "1")
	require.Equal(t, 0, code, out)
	assert.True(t, strings.HasPrefix(out, "persistent bytes\n"), "data survived the restart: %q", out)
	out, code = zctl(t, env, "", "-n", "e2e", "vzone", "show", "0", "-o", "json")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, `"write_pointer": 1`)
	require.NoError(t, up.Process.Signal(syscall.SIGINT))
	require.NoError(t, <-done)
}
