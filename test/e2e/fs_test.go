package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func needFuse(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
}

// mountProc is a foreground `zctl mount`.
type mountProc struct {
	cmd  *exec.Cmd
	done chan error
	logs *strings.Builder
	mu   *sync.Mutex
}

func (p *mountProc) log() string { p.mu.Lock(); defer p.mu.Unlock(); return p.logs.String() }

// mountFG starts `zctl mount DIR` in the foreground and waits for its
// "mounted" line.
func mountFG(t *testing.T, env []string, dir string, args ...string) *mountProc {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "zctl"), append([]string{"mount", dir}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	p := &mountProc{cmd: cmd, done: make(chan error, 1), logs: &strings.Builder{}, mu: &sync.Mutex{}}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = exec.Command("fusermount3", "-u", "-z", dir).Run()
	})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if strings.HasPrefix(sc.Text(), "mounted ") {
				close(ready)
			}
		}
		p.done <- cmd.Wait()
	}()
	select {
	case <-ready:
	case err := <-p.done:
		t.Fatalf("zctl mount exited: %v\n%s", err, p.log())
	case <-time.After(60 * time.Second):
		t.Fatalf("zctl mount not mounted after 60s:\n%s", p.log())
	}
	return p
}

func isMounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	require.NoError(t, err)
	abs, _ := filepath.Abs(dir)
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[1] == abs && strings.HasPrefix(f[2], "fuse.zonefleet") {
			return true
		}
	}
	return false
}

func waitExit(t *testing.T, pid int) {
	t.Helper()
	require.Eventually(t, func() bool { return syscall.Kill(pid, 0) != nil }, 30*time.Second, 20*time.Millisecond, "process %d did not exit", pid)
}

// mkfs, mount as a daemon, use it, stats and metrics, unmount from outside,
// fsck, mount in the foreground, data still there, SIGTERM unmounts cleanly.
func TestFSCommands(t *testing.T) {
	needFuse(t)
	dir := t.TempDir()
	env := []string{"ZONEFLEET_CLUSTER=" + filepath.Join(dir, "cluster.json")}
	up, done := localUp(t, dir, env)
	mnt := t.TempDir()

	out, code := zctl(t, env, "", "mkfs", "--ns", "default", "--overprovision", "15")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "formatted namespace default")
	out, code = zctl(t, env, "", "mkfs", "--ns", "default")
	assert.Equal(t, 4, code, "a formatted namespace is refused: %s", out)
	assert.Contains(t, out, "--force")
	out, code = zctl(t, env, "", "mkfs", "--ns", "default", "--segment-vzones", "2")
	assert.Equal(t, 2, code, out)
	out, code = zctl(t, env, "", "-n", "default", "mkfs", "--force")
	require.Equal(t, 0, code, out)

	out, code = zctl(t, env, "", "mount", "--ns", "default", mnt, "--daemon", "--metrics-listen", "127.0.0.1:0",
		"--log", filepath.Join(dir, "mount.log"), "-o", "json")
	require.Equal(t, 0, code, out)
	var d struct {
		PID int    `json:"pid"`
		Dir string `json:"dir"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &d), out)
	require.Positive(t, d.PID)
	require.True(t, isMounted(t, mnt))

	files := map[string][]byte{}
	for i := 0; i < 20; i++ {
		name := filepath.Join(fmt.Sprintf("d%d", i%3), fmt.Sprintf("f%d", i))
		files[name] = bytes.Repeat([]byte{byte(i)}, 1000*i+7)
		require.NoError(t, os.MkdirAll(filepath.Join(mnt, filepath.Dir(name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(mnt, name), files[name], 0o644))
	}
	require.NoError(t, os.Symlink("d0/f0", filepath.Join(mnt, "link")))

	out, code = zctl(t, env, "", "fs", "stat", mnt, "-o", "json")
	require.Equal(t, 0, code, out)
	var st struct {
		Mount struct {
			PID         int    `json:"pid"`
			Namespace   string `json:"namespace"`
			GC          string `json:"gc"`
			MetricsAddr string `json:"metrics_addr"`
		} `json:"mount"`
		Stats struct {
			UsedBlocks uint64
			Nodes      uint64
			Mode       string  `json:"mode"`
			TLRecycled *uint64 `json:"tl_recycled_segments"`
			Compacted  *uint64 `json:"compacted_segments"`
		} `json:"stats"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	assert.Equal(t, d.PID, st.Mount.PID)
	assert.Equal(t, "default", st.Mount.Namespace)
	assert.Equal(t, "zns+", st.Mount.GC)
	assert.Contains(t, []string{"zns+", "izc"}, st.Stats.Mode, "zns+, or izc when the volume has no TL_open")
	assert.NotNil(t, st.Stats.TLRecycled, out)
	assert.NotNil(t, st.Stats.Compacted, out)
	assert.Positive(t, st.Stats.UsedBlocks)
	assert.GreaterOrEqual(t, st.Stats.Nodes, uint64(25), "root, 3 directories, 20 files, a symlink")
	out, code = zctl(t, env, "", "fs", "stat", mnt)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "WAF")
	assert.Contains(t, out, "for room in the dirty budget")
	metrics := httpGet(t, "http://"+st.Mount.MetricsAddr+"/metrics")
	for _, m := range []string{"zonefleet_fs_operations_total{", "zonefleet_fs_segments_free", "zonefleet_fs_write_throttled_seconds_total", "zonefleet_client_ops_total{", "go_goroutines", `component="mount"`} {
		assert.Contains(t, metrics, m)
	}
	_, code = zctl(t, env, "", "fs", "stat", t.TempDir())
	assert.Equal(t, 3, code, "not a mount")

	// Unmount from outside: the daemon checkpoints and exits.
	b, err := exec.Command("fusermount3", "-u", mnt).CombinedOutput()
	require.NoError(t, err, string(b))
	waitExit(t, d.PID)
	logs, err := os.ReadFile(filepath.Join(dir, "mount.log"))
	require.NoError(t, err)
	assert.Contains(t, string(logs), "unmounted default")
	out, code = zctl(t, env, "", "fsck", "--ns", "default")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "clean")
	out, code = zctl(t, env, "", "fsck", "--ns", "default", "-o", "json")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, `"clean": true`)
	out, code = zctl(t, env, "", "fsck", "--ns", "default", "--repair")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "clean;")
	assert.Contains(t, out, "0 repaired")

	// Foreground, host-copy recycling: the same data; SIGTERM unmounts.
	p := mountFG(t, env, mnt, "--ns", "default", "--gc", "host-copy")
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(mnt, name))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(want, got), name)
	}
	target, err := os.Readlink(filepath.Join(mnt, "link"))
	require.NoError(t, err)
	assert.Equal(t, "d0/f0", target)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.done:
		require.NoError(t, err, p.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("zctl mount did not exit within 30s of SIGTERM:\n%s", p.log())
	}
	assert.False(t, isMounted(t, mnt))
	out, code = zctl(t, env, "", "fsck", "--ns", "default")
	require.Equal(t, 0, code, out)

	require.NoError(t, up.Process.Signal(syscall.SIGINT))
	require.NoError(t, <-done)
}

func fileContent(name string, n int) []byte {
	out := make([]byte, 0, n+32)
	for i := 0; len(out) < n; i++ {
		h := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", name, i)))
		out = append(out, h[:]...)
	}
	return out[:n]
}

// Crash test: kill -9 the mount process at random points under load,
// clear the dead mount, fsck clean, remount: every file whose fsync returned
// is intact; repeat on the recovered file system.
func TestFSCrash(t *testing.T) {
	needFuse(t)
	dir := t.TempDir()
	env := []string{"ZONEFLEET_CLUSTER=" + filepath.Join(dir, "cluster.json")}
	up, done := localUp(t, dir, env)
	mnt := t.TempDir()
	out, code := zctl(t, env, "", "mkfs", "--ns", "default")
	require.Equal(t, 0, code, out)

	// The kill points are fixed by progress, not by time: round r kills the
	// mount once killAfter[r] files of that round were fsynced (the writers'
	// other files are in flight at that point, synced or not).
	killAfter := [...]int{3, 12, 30}
	durable := map[string][]byte{} // every file whose fsync returned
	var mu sync.Mutex
	for round := range len(killAfter) {
		var roundSynced atomic.Int64
		p := mountFG(t, env, mnt, "--ns", "default", "--checkpoint-every", "300ms", "--background-gc", "200ms")
		// what survived the previous crashes is intact
		for name, want := range durable {
			got, err := os.ReadFile(filepath.Join(mnt, name))
			if assert.NoError(t, err, "round %d: fsynced %s", round, name) {
				assert.True(t, bytes.Equal(want, got), "round %d: fsynced %s differs (%d bytes, want %d)", round, name, len(got), len(want))
			}
		}
		// load: writers that fsync some files, leave others unsynced and rename/remove them
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := 0; w < 3; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					name := fmt.Sprintf("r%d-w%d-%d", round, w, i)
					data := fileContent(name, 1+r.IntN(300<<10))
					f, err := os.OpenFile(filepath.Join(mnt, name), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
					if err != nil {
						return // the mount died
					}
					_, err = f.Write(data)
					doSync := r.IntN(2) == 0
					if err == nil && doSync {
						err = f.Sync()
					}
					_ = f.Close()
					if err != nil {
						return
					}
					if doSync {
						mu.Lock()
						durable[name] = data
						mu.Unlock()
						roundSynced.Add(1)
					} else if r.IntN(3) == 0 {
						if os.Rename(filepath.Join(mnt, name), filepath.Join(mnt, name+".tmp")) != nil || os.Remove(filepath.Join(mnt, name+".tmp")) != nil {
							return
						}
					}
				}
			}(w)
		}
		// a hang guard: the writers fsync several files a second
		require.Eventually(t, func() bool { return roundSynced.Load() >= int64(killAfter[round]) }, 5*time.Minute, time.Millisecond,
			"round %d: %d files fsynced", round, killAfter[round])
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
		<-p.done
		close(stop)
		wg.Wait()
		b, err := exec.Command("fusermount3", "-u", "-z", mnt).CombinedOutput()
		require.NoError(t, err, string(b))
		mu.Lock()
		t.Logf("round %d: killed; %d fsynced files so far", round, len(durable))
		mu.Unlock()
		out, code = zctl(t, env, "", "fsck", "--ns", "default")
		require.Equal(t, 0, code, "fsck after kill -9 in round %d: %s", round, out)
	}
	// last remount: everything fsynced is there; clean unmount; fsck clean
	p := mountFG(t, env, mnt, "--ns", "default")
	for name, want := range durable {
		got, err := os.ReadFile(filepath.Join(mnt, name))
		if assert.NoError(t, err, "fsynced %s", name) {
			assert.True(t, bytes.Equal(want, got), "fsynced %s differs", name)
		}
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, <-p.done, p.log())
	out, code = zctl(t, env, "", "fsck", "--ns", "default")
	require.Equal(t, 0, code, out)
	assert.Positive(t, len(durable))

	require.NoError(t, up.Process.Signal(syscall.SIGINT))
	require.NoError(t, <-done)
}

// localUpMount starts `zctl local up --mount DIR` and waits for "Ready.".
func localUpMount(t *testing.T, dir, mnt string, env []string) (*exec.Cmd, chan error, func() string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "zctl"), "local", "up", "--data", dir, "--clock", "off", "--nodes", "2", "--mount", mnt)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = exec.Command("fusermount3", "-u", "-z", mnt).Run()
	})
	ready := make(chan struct{})
	logs := &strings.Builder{}
	var mu sync.Mutex
	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			mu.Lock()
			logs.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.HasPrefix(sc.Text(), "Ready.") {
				close(ready)
			}
		}
		done <- cmd.Wait()
	}()
	select {
	case <-ready:
	case err := <-done:
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("zctl local up --mount exited: %v\n%s", err, logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("zctl local up --mount not ready after 60s")
	}
	return cmd, done, func() string { mu.Lock(); defer mu.Unlock(); return logs.String() }
}

// zctl local up --mount formats the default namespace, mounts it before it
// says Ready, and unmounts it (checkpointed) on Ctrl-C before the cluster
// stops; up again on the same data mounts the same file system.
func TestLocalUpMount(t *testing.T) {
	needFuse(t)
	dir, mnt := t.TempDir(), t.TempDir()
	env := []string{"ZONEFLEET_CLUSTER=" + filepath.Join(dir, "cluster.json")}
	up, done, logs := localUpMount(t, dir, mnt, env)
	require.True(t, isMounted(t, mnt))
	assert.Contains(t, logs(), "mounted at "+mnt)
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "kept"), []byte("hello\n"), 0o644))
	out, code := zctl(t, env, "", "fs", "stat", mnt, "-o", "json")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, `"namespace": "default"`)
	out, code = zctl(t, env, "", "mkfs")
	assert.Equal(t, 4, code, "the default namespace holds the file system: %s", out)
	require.NoError(t, up.Process.Signal(syscall.SIGINT))
	require.NoError(t, <-done)
	assert.False(t, isMounted(t, mnt))

	up, done, _ = localUpMount(t, dir, mnt, env)
	got, err := os.ReadFile(filepath.Join(mnt, "kept"))
	require.NoError(t, err, "the file survives a restart of the cluster and the mount")
	assert.Equal(t, "hello\n", string(got))
	require.NoError(t, up.Process.Signal(syscall.SIGINT))
	require.NoError(t, <-done)
	assert.False(t, isMounted(t, mnt))
}
