package fsvol_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/internal/testcluster"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// watchdog tracks operations in flight and reports any that runs longer
// than limit (a hang, not a slow operation: limit is the retry deadline
// plus generous slack), with a goroutine dump.
type watchdog struct {
	mu      sync.Mutex
	next    int
	running map[int]opInFlight
	limit   time.Duration
	hung    []string
	longest time.Duration
}

type opInFlight struct {
	what  string
	start time.Time
}

func newWatchdog(limit time.Duration) *watchdog {
	return &watchdog{running: map[int]opInFlight{}, limit: limit}
}

// do runs one operation under the watchdog; it returns the operation's error.
func (w *watchdog) do(what string, f func() error) error {
	w.mu.Lock()
	id := w.next
	w.next++
	w.running[id] = opInFlight{what, time.Now()}
	w.mu.Unlock()
	err := f()
	w.mu.Lock()
	if d := time.Since(w.running[id].start); d > w.longest {
		w.longest = d
	}
	delete(w.running, id)
	w.mu.Unlock()
	return err
}

// startedBefore counts the operations in flight that began before t0.
func (w *watchdog) startedBefore(t0 time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, op := range w.running {
		if op.start.Before(t0) {
			n++
		}
	}
	return n
}

// check records every operation running longer than the limit.
func (w *watchdog) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, op := range w.running {
		if d := time.Since(op.start); d > w.limit {
			msg := fmt.Sprintf("%s blocked %s (> %s)", op.what, d, w.limit)
			if len(w.hung) == 0 { // one goroutine dump is enough
				buf := make([]byte, 4<<20)
				msg += "\n" + string(buf[:runtime.Stack(buf, true)])
			}
			w.hung = append(w.hung, msg)
			delete(w.running, id)
		}
	}
}

func (w *watchdog) run(stop <-chan struct{}) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			w.check()
		}
	}
}

// fsOps wraps the lfs API as a shell would use it.
type fsOps struct{ fs *lfs.FS }

func (o fsOps) lookup(name string) (lfs.Attr, error) {
	return o.fs.Lookup(context.Background(), 1, name)
}

func (o fsOps) write(ctx context.Context, name string, data []byte, fsync bool) error {
	_, h, err := o.fs.Create(ctx, 1, name, 0o644, 0, 0, syscall.O_RDWR|syscall.O_TRUNC)
	if err != nil {
		return err
	}
	defer o.fs.Release(context.Background(), h)
	if _, err := o.fs.Write(ctx, h, 0, data); err != nil {
		return err
	}
	if !fsync {
		return nil // left to the periodic checkpoint
	}
	return o.fs.Fsync(ctx, h, false)
}

func (o fsOps) read(ctx context.Context, name string) ([]byte, error) {
	a, err := o.lookup(name)
	if err != nil {
		return nil, err
	}
	h, err := o.fs.Open(ctx, a.Ino, syscall.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer o.fs.Release(context.Background(), h)
	buf := make([]byte, a.Size)
	n, err := o.fs.Read(ctx, h, 0, buf)
	return buf[:n], err
}

// eioOrNil fails unless err is nil or EIO (the two answers allowed while a
// node is down).
func eioOrNil(err error) error {
	if err == nil || lfs.Errno(err) == syscall.EIO {
		return nil
	}
	return fmt.Errorf("want success or EIO, got %v (errno %v)", err, lfs.Errno(err))
}

// TestNodeOutageUnderMountedFS, in process: real etcd, arbiter and
// nodes over gRPC, the file system over fsvol with periodic checkpoints on a
// realtime clock and a mixed workload. One node's gRPC server stops and comes
// back. Every operation returns (success or EIO) within the retry deadline
// plus slack, stat/readdir and reads of data on live nodes keep working, the
// workload completes after the node returns without a remount, fsck is clean
// and every fsynced file is intact.
func TestNodeOutageUnderMountedFS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and stops a node for seconds")
	}
	for _, tc := range []struct {
		name string
		// victim picks the node to stop: perNode counts the file system's
		// v-zones by node, meta is the node of the metadata log's zone
		victim func(perNode map[string]int, meta string) string
	}{
		{"node holding most data segments", func(perNode map[string]int, meta string) string {
			victim, most := "", 0
			for n, k := range perNode {
				if n != meta && (k > most || k == most && n < victim) {
					victim, most = n, k
				}
			}
			return victim
		}},
		// every checkpoint, the periodic ones included, needs this node
		{"node holding the metadata log", func(_ map[string]int, meta string) string { return meta }},
	} {
		t.Run(tc.name, func(t *testing.T) { nodeOutage(t, tc.victim) })
	}
}

func nodeOutage(t *testing.T, pick func(perNode map[string]int, meta string) string) {
	const retryDeadline = 2 * time.Second
	const outage = 3 * retryDeadline
	ctx := context.Background()
	// one zone per v-zone: each segment lives on one node, so a node outage
	// leaves the other nodes' data readable; nine active v-zones hold the
	// six logs (lfs mkfs), spread over the nodes
	cl, c := testcluster.Tenant(t, localcluster.Config{Nodes: 3}, &v1.CreateNamespaceRequest{Name: "fs", MaxActiveVzones: 9, ZonesPerVzone: 1},
		testcluster.RetryDeadline(retryDeadline/2))
	vol, err := fsvol.New(ctx, c, fsvol.Options{MaxZones: 60})
	require.NoError(t, err)
	require.NoError(t, lfs.Mkfs(ctx, vol, lfs.MkfsOptions{OPPercent: 20}))
	clk := clock.Realtime(1)
	defer clk.Stop()
	fs, err := lfs.Mount(ctx, vol, lfs.Options{Clock: clk, Move: lfs.Compact, CheckpointEvery: 50 * time.Millisecond,
		RetryDeadline: retryDeadline, CacheBlocks: 96})
	require.NoError(t, err)
	ops := fsOps{fs}

	// fsynced files before the outage
	var mu sync.Mutex
	synced := map[string][]byte{}
	for i := 0; i < 24; i++ {
		name := fmt.Sprintf("before-%02d", i)
		data := content(name, 0, 24<<10+i*512)
		require.NoError(t, ops.write(ctx, name, data, true))
		synced[name] = data
	}

	before := make(map[string][]byte, len(synced))
	for k, v := range synced {
		before[k] = v
	}

	// the node to stop, while others hold segments too
	zones, err := vol.Zones(ctx)
	require.NoError(t, err)
	perNode := map[string]int{}
	for _, z := range zones {
		l, err := vol.Locate(ctx, z.ID, 0)
		require.NoError(t, err)
		perNode[l.Node]++
	}
	require.GreaterOrEqual(t, len(perNode), 2, "the file system spans several nodes: %v", perNode)
	ml, err := vol.Locate(ctx, fs.Stats().MetaZone, 0)
	require.NoError(t, err)
	victimID := pick(perNode, ml.Node)
	victim := -1
	for i, n := range cl.Info().Nodes {
		if n.ID == victimID {
			victim = i
		}
	}
	require.GreaterOrEqual(t, victim, 0, "node %q", victimID)
	t.Logf("zones per node %v, metadata log on %s; stopping %s", perNode, ml.Node, victimID)

	// a hang guard, not a timing claim: fifteen times the retry deadline
	wd := newWatchdog(15 * retryDeadline)
	stopWD := make(chan struct{})
	go wd.run(stopWD)
	var phase atomic.Int32 // 0 before, 1 node down, 2 node back
	var (
		errsMu    sync.Mutex
		bad       []string
		readOK    [3]int
		readEIO   [3]int
		writeOK   [3]int
		writeEIO  [3]int
		statFails [3]int
	)
	fail := func(format string, a ...any) {
		errsMu.Lock()
		bad = append(bad, fmt.Sprintf(format, a...))
		errsMu.Unlock()
	}
	workCtx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// writers: new files, fsynced; the acknowledged ones must survive
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; workCtx.Err() == nil; i++ {
				p := phase.Load()
				// every other file is left dirty for the periodic checkpoint,
				// which so meets the outage on the clock's timer
				fsync := i%2 == 0
				name := fmt.Sprintf("w%d-%03d", w, i)
				data := content(name, int(p), 12<<10)
				err := wd.do("write "+name, func() error { return ops.write(ctx, name, data, fsync) })
				// an operation that began before the outage and saw it counts in it;
				// one that began during the outage stays there even when it ends
				// after the node is back (it may exhaust its deadline on the dead
				// node's connection): "after" holds only operations begun after
				p = max(p, min(phase.Load(), 1))
				errsMu.Lock()
				if err == nil {
					writeOK[p]++
				} else {
					writeEIO[p]++
				}
				errsMu.Unlock()
				if e := eioOrNil(err); e != nil {
					fail("write %s in phase %d: %v", name, p, e)
				} else if err == nil && fsync {
					mu.Lock()
					synced[name] = data
					mu.Unlock()
				}
				time.Sleep(20 * time.Millisecond) // pacing of the workload, not a wait for anything
			}
		}(w)
	}
	// two readers of the files written before. A read of a file on the
	// stopped node takes the retry deadline, so a reader gets about three
	// reads into the outage: each jumps through the files (strides 5 and 7,
	// coprime with 24, from opposite ends) instead of reading neighbours,
	// which the log wrote to the same segment, hence to the same node (one
	// reader going file by file met three files of the stopped node in a
	// row in a CI run and read nothing during the outage).
	for _, rd := range []struct{ start, stride int }{{0, 5}, {12, 7}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; workCtx.Err() == nil; i++ {
				p := phase.Load()
				name := fmt.Sprintf("before-%02d", (rd.start+i*rd.stride)%24)
				var got []byte
				err := wd.do("read "+name, func() (err error) { got, err = ops.read(ctx, name); return err })
				p = max(p, min(phase.Load(), 1)) // as for the writers
				errsMu.Lock()
				if err == nil {
					readOK[p]++
				} else {
					readEIO[p]++
				}
				errsMu.Unlock()
				if e := eioOrNil(err); e != nil {
					fail("read %s in phase %d: %v", name, p, e)
				} else if err == nil && !bytes.Equal(got, before[name]) {
					fail("read %s in phase %d: wrong content", name, p)
				}
				time.Sleep(5 * time.Millisecond) // pacing, as for the writers
			}
		}()
	}
	// stat and readdir must keep working throughout
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; workCtx.Err() == nil; i++ {
			p := phase.Load()
			name := fmt.Sprintf("before-%02d", i%24)
			err := wd.do("stat "+name, func() error { _, err := ops.lookup(name); return err })
			if err == nil {
				err = wd.do("readdir /", func() error { _, err := fs.Readdir(ctx, 1); return err })
			}
			if err != nil {
				errsMu.Lock()
				statFails[p]++
				errsMu.Unlock()
				fail("stat/readdir in phase %d: %v", p, err)
			}
			time.Sleep(5 * time.Millisecond) // pacing, as for the writers
		}
	}()

	// the workload runs before the outage
	require.Eventually(t, func() bool {
		errsMu.Lock()
		defer errsMu.Unlock()
		return writeOK[0] >= 3 && readOK[0] >= 3
	}, time.Minute, 5*time.Millisecond, "the workload runs")
	phase.Store(1)
	require.NoError(t, cl.StopNode(victim))
	// The outage lasts its time (a scenario length, not a wait for an
	// event: the periodic checkpoint and the workload meet the dead node
	// for that long) and, on a machine too busy to get that far
	// in it, until a read of a live node's data succeeded and an operation
	// needing the dead node failed (the bound turns a wedged mount into a
	// failure).
	time.Sleep(outage)
	require.Eventually(t, func() bool {
		errsMu.Lock()
		defer errsMu.Unlock()
		return readOK[1] > 0 && readEIO[1]+writeEIO[1] > 0
	}, 2*time.Minute, 10*time.Millisecond, "reads of live data and failures of dead-node operations during the outage")
	stalled, failedOps := fs.Stalls()
	t.Logf("during the outage: %d operations retrying, %d gave up after the deadline", stalled, failedOps)
	require.NoError(t, cl.StartNode(ctx, victim))
	require.NoError(t, cl.WaitReady(ctx))
	// operations that began before the node was serving again may still
	// exhaust their deadline (and hold what later ones wait for): "after"
	// counts from the point where all of them returned (a hang guard:
	// each returns within the retry deadline)
	back := time.Now()
	require.Eventually(t, func() bool { return wd.startedBefore(back) == 0 }, 15*retryDeadline, 5*time.Millisecond,
		"the operations begun during the outage return")
	phase.Store(2)
	// the workload goes on against the returned node until writes succeed again
	recovered := assert.Eventually(t, func() bool {
		errsMu.Lock()
		defer errsMu.Unlock()
		return writeOK[2] >= 10 && readOK[2] >= 24
	}, 60*time.Second, 50*time.Millisecond, "the mount recovers by itself")
	wd.check()
	// a wedged mount: report the blocked operations (workers cannot be joined)
	require.Empty(t, wd.hung, "no operation may block longer than the retry deadline plus slack")
	require.True(t, recovered)
	stopWork()
	wg.Wait()
	close(stopWD)
	wd.check()

	t.Logf("reads ok/EIO before %d/%d, down %d/%d, after %d/%d; writes ok/EIO before %d/%d, down %d/%d, after %d/%d; longest op %s",
		readOK[0], readEIO[0], readOK[1], readEIO[1], readOK[2], readEIO[2], writeOK[0], writeEIO[0], writeOK[1], writeEIO[1], writeOK[2], writeEIO[2], wd.longest)
	require.Empty(t, wd.hung, "no operation may block longer than the retry deadline plus slack")
	require.Empty(t, bad)
	require.Zero(t, readEIO[0]+writeEIO[0], "nothing fails before the outage")
	require.Positive(t, readOK[1], "reads of data on live nodes work during the outage")
	require.Positive(t, readEIO[1]+writeEIO[1], "operations needing the dead node fail with EIO")
	require.Zero(t, readEIO[2], "reads work again after the node returns")

	// nothing is left retrying (a call backing off counts as stalled; calls
	// in flight without trouble are not)
	stalled, failedOps = fs.Stalls()
	require.Zero(t, stalled)
	require.Positive(t, failedOps)

	check := func(fs *lfs.FS) {
		t.Helper()
		ops := fsOps{fs}
		for name, want := range synced {
			got, err := ops.read(ctx, name)
			require.NoError(t, err, name)
			require.True(t, bytes.Equal(want, got), "%s intact", name)
		}
		rep, err := fs.Fsck(ctx)
		require.NoError(t, err)
		require.Empty(t, rep.Problems)
	}
	require.NoError(t, fs.Sync(ctx))
	check(fs) // no remount needed
	require.NoError(t, fs.Unmount(ctx))
	fs, err = lfs.Mount(ctx, vol, lfs.Options{Move: lfs.Compact})
	require.NoError(t, err)
	check(fs)
	require.NoError(t, fs.Unmount(ctx))
}
