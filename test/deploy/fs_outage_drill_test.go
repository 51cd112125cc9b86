//go:build deploy

package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// syncLog collects a process's stderr.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) add(s string) { l.mu.Lock(); l.b.WriteString(s + "\n"); l.mu.Unlock() }
func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// mountFSWith is mountFS with extra mount flags and the mount's log kept.
func mountFSWith(t *testing.T, ns, dir string, args ...string) (*exec.Cmd, *syncLog) {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot(), "bin", "zctl"), append([]string{"mount", "-n", ns, dir}, args...)...)
	cmd.Env = append(append(os.Environ(), "ZONEFLEET_ARBITER="+strings.Join(arbiters, ","), "ZONEFLEET_CLUSTER=/nonexistent/cluster.json"), tenantEnv(t, ns)...)
	out, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	logs := &syncLog{}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			logs.add(sc.Text())
		}
	}()
	require.Eventually(t, func() bool { return mounted(dir) }, time.Minute, 50*time.Millisecond, "zctl mount: %s", logs)
	return cmd, logs
}

// bounded runs f and fails the test if it does not return within limit (a
// hang: the mount must not wedge on a dead node; not a speed assertion).
func bounded(t *testing.T, limit time.Duration, what string, f func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- f() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(limit):
		t.Fatalf("%s: no answer within %s (the mount is wedged)", what, limit)
		return nil
	}
}

// `docker kill` an ssdnode under a mounted file system. Reads of
// data on the other nodes, stat and readdir keep working; operations that
// need the dead node fail with EIO within the retry deadline and a killed
// reader goes away; after `docker start` the mount recovers by itself (no
// remount): every fsynced file reads back intact, writes work, fsck is clean.
func TestDrillSSDNodeKilledUnderMountedFS(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse on this machine")
	}
	// the mount's retry deadline (lfs.DefaultRetryDeadline), twice (a call may
	// queue behind another stalled one), plus slack for a loaded machine
	const limit = 2*lfs.DefaultRetryDeadline + 40*time.Second
	waitReady(t, nodeCount, time.Minute)
	const ns = "outage-fs"
	// one zone per v-zone: each segment lives on one node
	createNamespace(t, ns, 12, 1)
	out, err := zctlFS(t, "mkfs", "-n", ns)
	require.NoError(t, err, out)

	dir := t.TempDir()
	// a small page cache so that reads reach the nodes
	m, mlog := mountFSWith(t, ns, dir, "--cache-blocks", "64", "--checkpoint-every", "1s")
	files := map[string][]byte{}
	// ~11 MB: more than one segment, so the data lives on several nodes
	for i := 0; i < 60; i++ {
		name := filepath.Join(dir, fmt.Sprintf("f%02d", i))
		data := fileContent(name, 120_000+i*2_000)
		f, err := os.Create(name)
		require.NoError(t, err)
		_, err = f.Write(data)
		require.NoError(t, err)
		require.NoError(t, f.Sync(), "fsync")
		require.NoError(t, f.Close())
		files[name] = data
	}
	d, err := os.Open(dir)
	require.NoError(t, err)
	require.NoError(t, d.Sync())
	d.Close()

	// the victim: the node holding the most file data (the metadata and node
	// logs are small and cached). The arbiter may have put all file data on
	// that node; reads of other nodes' data are then those of the new file
	// written during the outage (the in-process test covers them in depth).
	ctx := context.Background()
	cl := newClient(t, ns, 10*time.Second)
	vol, err := fsvol.New(ctx, cl, fsvol.Options{})
	require.NoError(t, err)
	zones, err := vol.Zones(ctx)
	require.NoError(t, err)
	perNode := map[string]int{}
	dataBlocks := map[string]uint64{}
	for _, z := range zones {
		l, err := vol.Locate(ctx, z.ID, 0)
		require.NoError(t, err)
		perNode[l.Node]++
		if z.WP >= 64 {
			dataBlocks[l.Node] += z.WP
		}
	}
	require.NotEmpty(t, dataBlocks)
	victim, fullest := "", uint64(0)
	for n, b := range dataBlocks {
		if b > fullest {
			victim, fullest = n, b
		}
	}
	svc := "ssdnode-" + strings.TrimPrefix(victim, "node-")
	killed := time.Now()
	compose(t, "kill", svc)
	t.Logf("v-zones per node %v, file data blocks per node %v; killed %s", perNode, dataBlocks, svc)

	// during the outage every operation answers: reads succeed (data on live
	// nodes) or fail with EIO (data on the dead node); stat and readdir work.
	// An EIO costs up to the retry deadline, twice if it queues behind another
	// stalled call (the file system lock), so a few are enough.
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	// alternate ends: the first and the last files went to different segments
	order := make([]string, 0, len(names))
	for a, b := 0, len(names)-1; a <= b; a, b = a+1, b-1 {
		order = append(order, names[a])
		if a != b {
			order = append(order, names[b])
		}
	}
	var ok, eio int
	deadFile := ""
	for _, name := range order {
		if eio >= 3 || eio >= 1 && ok >= 10 {
			break
		}
		want := files[name]
		var got []byte
		start := time.Now()
		err := bounded(t, limit, "read "+name, func() (err error) { got, err = os.ReadFile(name); return err })
		switch {
		case err == nil:
			ok++
			assert.True(t, bytes.Equal(want, got), "%s: wrong content during the outage", name)
		case errors.Is(err, syscall.EIO):
			eio++
			deadFile = name
			t.Logf("read %s: EIO after %s", filepath.Base(name), time.Since(start).Round(time.Millisecond))
		default:
			t.Errorf("read %s during the outage: %v (want success or EIO)", name, err)
		}
	}
	for _, name := range names {
		require.NoError(t, bounded(t, limit, "stat "+name, func() error { _, err := os.Stat(name); return err }))
	}
	require.NoError(t, bounded(t, limit, "readdir", func() error {
		es, err := os.ReadDir(dir)
		if err == nil && len(es) < len(files) {
			err = fmt.Errorf("readdir lists %d entries, want >= %d", len(es), len(files))
		}
		return err
	}))
	t.Logf("during the outage: %d reads ok, %d EIO", ok, eio)
	assert.Positive(t, eio, "reads of data on %s fail with EIO", svc)
	// a write + fsync returns (into a new segment on a live node, or EIO)
	werr := bounded(t, limit, "write+fsync", func() error {
		f, err := os.Create(filepath.Join(dir, "during"))
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.Write(fileContent("during", 50_000)); err != nil {
			return err
		}
		return f.Sync()
	})
	if werr != nil {
		assert.ErrorIs(t, werr, syscall.EIO)
	} else { // it went to a segment on a live node: it reads back
		got, err := os.ReadFile(filepath.Join(dir, "during"))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(fileContent("during", 50_000), got))
		files[filepath.Join(dir, "during")] = got
	}
	t.Logf("write+fsync during the outage: %v", werr)
	// a reader killed while it waits for the dead node goes away
	if deadFile != "" {
		cat := exec.Command("cat", deadFile)
		require.NoError(t, cat.Start())
		require.Eventually(t, func() bool { return inRead(cat.Process.Pid) }, time.Minute, 10*time.Millisecond,
			"the reader waits in read(2)")
		_ = cat.Process.Signal(syscall.SIGKILL)
		require.NoError(t, bounded(t, 30*time.Second, "SIGKILLed reader", func() error { _ = cat.Wait(); return nil }))
	}
	assert.Contains(t, mlog.String(), "operation stalled", "the mount warns what it waits for")
	assert.Contains(t, mlog.String(), victim, "the warning names the node")

	compose(t, "start", svc)
	require.NoError(t, waitHealthy())
	waitReady(t, nodeCount, 2*time.Minute)
	t.Logf("%s back %s after the kill", svc, time.Since(killed).Round(time.Second))

	// the mount recovers by itself
	require.Eventually(t, func() bool {
		for name, want := range files {
			got, err := os.ReadFile(name)
			if err != nil || !bytes.Equal(want, got) {
				return false
			}
		}
		return true
	}, 2*time.Minute, time.Second, "every fsynced file reads back without a remount")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "after"), fileContent("after", 70_000), 0o644))
	f, err := os.Open(filepath.Join(dir, "after"))
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	f.Close()
	require.NoError(t, m.Process.Signal(syscall.SIGTERM))
	require.NoError(t, m.Wait(), "a clean unmount on SIGTERM: %s", mlog)
	out, err = zctlFS(t, "fsck", "-n", ns)
	require.NoError(t, err, "fsck after the outage: %s", out)
}

// inRead reports whether process pid is blocked in the read system call
// (the first field of /proc/PID/syscall is the call's number).
func inRead(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
	if err != nil {
		return false
	}
	nr, _, _ := strings.Cut(string(b), " ")
	switch runtime.GOARCH {
	case "amd64":
		return nr == "0"
	case "arm64":
		return nr == "63"
	}
	return false
}
