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
	cmd.Env = append(os.Environ(), "ZONEFLEET_ARBITER="+strings.Join(arbiters, ","), "ZONEFLEET_CLUSTER=/nonexistent/cluster.json")
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
// hang, the bug of issue 21; not a speed assertion).
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

// Issue 21: `docker kill` an ssdnode under a mounted file system. Reads of
// data on the other nodes, stat and readdir keep working; operations that
// need the dead node fail with EIO within the retry deadline and a killed
// reader goes away; after `docker start` the mount recovers by itself (no
// remount): every fsynced file reads back intact, writes work, fsck is clean.
func TestDrillSSDNodeKilledUnderMountedFS(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse on this machine")
	}
	// the mount's retry deadline (lfs.DefaultRetryDeadline) plus the slack of
	// one client attempt and a loaded machine
	const limit = lfs.DefaultRetryDeadline + 40*time.Second
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
	for i := 0; i < 40; i++ {
		name := filepath.Join(dir, fmt.Sprintf("f%02d", i))
		data := fileContent(name, 40_000+i*3_000)
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

	// the victim: the node holding the most of the file system's v-zones
	ctx := context.Background()
	cl := newClient(t, ns, 10*time.Second)
	vol, err := fsvol.New(ctx, cl, fsvol.Options{})
	require.NoError(t, err)
	zones, err := vol.Zones(ctx)
	require.NoError(t, err)
	perNode := map[string]int{}
	for _, z := range zones {
		l, err := vol.Locate(ctx, z.ID, 0)
		require.NoError(t, err)
		perNode[l.Node]++
	}
	require.GreaterOrEqual(t, len(perNode), 2, "the file system spans several nodes: %v", perNode)
	victim, most := "", 0
	for n, k := range perNode {
		if k > most {
			victim, most = n, k
		}
	}
	svc := "ssdnode-" + strings.TrimPrefix(victim, "node-")
	killed := time.Now()
	compose(t, "kill", svc)
	t.Logf("v-zones per node %v; killed %s", perNode, svc)

	// during the outage every operation answers: reads succeed (data on live
	// nodes) or fail with EIO (data on the dead node); stat and readdir work
	var ok, eio int
	for name, want := range files {
		var got []byte
		start := time.Now()
		err := bounded(t, limit, "read "+name, func() (err error) { got, err = os.ReadFile(name); return err })
		switch {
		case err == nil:
			ok++
			assert.True(t, bytes.Equal(want, got), "%s: wrong content during the outage", name)
		case errors.Is(err, syscall.EIO):
			eio++
			t.Logf("read %s: EIO after %s", filepath.Base(name), time.Since(start).Round(time.Millisecond))
		default:
			t.Errorf("read %s during the outage: %v (want success or EIO)", name, err)
		}
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
	assert.Positive(t, ok, "reads of data on live nodes work")
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
	}
	// a reader killed while it waits for the dead node goes away
	for name := range files {
		cat := exec.Command("cat", name)
		cat.Stdout = nil
		require.NoError(t, cat.Start())
		time.Sleep(500 * time.Millisecond)
		_ = cat.Process.Signal(syscall.SIGKILL)
		require.NoError(t, bounded(t, 30*time.Second, "SIGKILLed reader", func() error { _ = cat.Wait(); return nil }))
		break
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
