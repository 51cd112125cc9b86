package lfs_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// nodeDown is a Volume error naming its node, like pkg/client's NodeError.
type nodeDown struct{ node string }

func (e *nodeDown) Error() string    { return "node " + e.node + ": connection refused" }
func (e *nodeDown) NodeName() string { return e.node }
func (e *nodeDown) Unwrap() error {
	return &zerr.UnavailableError{What: "server", Reason: "connection refused"}
}

// outageVol fails every call with an unavailable node while down; with hang
// the calls instead block until their ctx ends (a node that accepts
// connections but never answers).
type outageVol struct {
	lfs.Volume
	down, hang atomic.Bool
	failed     atomic.Int64
}

func (o *outageVol) check(ctx context.Context) error {
	if !o.down.Load() {
		return nil
	}
	o.failed.Add(1)
	if o.hang.Load() {
		<-ctx.Done()
		return &zerr.UnavailableError{What: "server", Reason: ctx.Err().Error()}
	}
	return &nodeDown{node: "n7"}
}
func (o *outageVol) Write(ctx context.Context, z lfs.ZoneID, off uint64, d []byte, fua bool) error {
	if err := o.check(ctx); err != nil {
		return err
	}
	return o.Volume.Write(ctx, z, off, d, fua)
}
func (o *outageVol) Read(ctx context.Context, z lfs.ZoneID, off uint64, b []byte) error {
	if err := o.check(ctx); err != nil {
		return err
	}
	return o.Volume.Read(ctx, z, off, b)
}
func (o *outageVol) OpenZone(ctx context.Context) (lfs.ZoneID, error) {
	if err := o.check(ctx); err != nil {
		return 0, err
	}
	return o.Volume.OpenZone(ctx)
}
func (o *outageVol) Flush(ctx context.Context) error {
	if err := o.check(ctx); err != nil {
		return err
	}
	return o.Volume.Flush(ctx)
}

// logBuffer captures slog's default logger for one test.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}
func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func captureLog(t *testing.T) *logBuffer {
	lb := &logBuffer{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelInfo})))
	t.Cleanup(func() { slog.SetDefault(old) })
	return lb
}

// hang bounds a wait that only a deadlock could make long.
const hang = 30 * time.Second

// returnsWithin runs f and fails the test if it has not returned after
// limit: a bound on a hang, generous for a loaded machine, not a speed test.
func returnsWithin(t *testing.T, limit time.Duration, what string, f func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- f() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(limit):
		t.Fatalf("%s: still blocked after %s", what, limit)
		return nil
	}
}

// TestOutageDuringPeriodicCheckpoint, at the lfs level: the
// periodic checkpoint runs as a realtime-clock callback and meets an
// unavailable node; it must back off on that clock, give up after the retry
// deadline, leave the file system usable, and recover once the node is back.
func TestOutageDuringPeriodicCheckpoint(t *testing.T) {
	const deadline = 300 * time.Millisecond
	const slack = 15 * time.Second
	logs := captureLog(t)
	clk := clock.Realtime(1)
	defer clk.Stop()
	v := newVol(t, 32, 8)
	require.NoError(t, lfs.Mkfs(bg, v, lfs.MkfsOptions{}))
	ov := &outageVol{Volume: v}
	reg := prometheus.NewRegistry()
	fs, err := lfs.Mount(bg, ov, lfs.Options{Clock: clk, Registry: reg, CheckpointEvery: 10 * time.Millisecond, RetryDeadline: deadline})
	require.NoError(t, err)
	kept := bytes.Repeat([]byte("acknowledged "), 3000)
	require.NoError(t, writeFile(fs, "kept", kept, true))

	ov.down.Store(true)
	// dirty data for the periodic checkpoint, not fsynced
	require.NoError(t, writeFile(fs, "dirty", bytes.Repeat([]byte{7}, 8192), false))
	require.Eventually(t, func() bool { n, _ := fs.Stalls(); return n > 0 }, slack, time.Millisecond,
		"the periodic checkpoint retries the unavailable node")
	require.Greater(t, gaugeOf(t, reg, "zonefleet_fs_stalled_operations"), 0.0)
	require.Eventually(t, func() bool { _, f := fs.Stalls(); return f > 0 }, slack, time.Millisecond,
		"the checkpoint gives up after the retry deadline")

	// during the outage every operation returns: metadata from the cache
	// succeeds, what needs the volume fails with EIO
	for _, tc := range []struct {
		name string
		op   func() error
	}{
		{"stat", func() error { _, err := walk(fs, "kept"); return err }},
		{"readdir", func() error { _, err := fs.Readdir(bg, 1); return err }},
		{"write+fsync", func() error { return writeFile(fs, "new", []byte("x"), true) }},
		{"sync", func() error { return fs.Sync(bg) }},
	} {
		err := returnsWithin(t, slack, tc.name, tc.op)
		if err != nil {
			require.Equal(t, syscall.EIO, lfs.Errno(err), "%s: %v", tc.name, err)
		}
	}
	out := logs.String()
	require.Contains(t, out, "level=WARN msg=\"file system operation stalled")
	require.Contains(t, out, "node=n7")
	require.Contains(t, out, "since=")
	require.Contains(t, out, "op=")
	require.Less(t, strings.Count(out, "operation stalled"), int(ov.failed.Load()), "warnings are rate-limited, not one per attempt")

	// the node returns: the mount recovers by itself
	ov.down.Store(false)
	require.Eventually(t, func() bool { n, _ := fs.Stalls(); return n == 0 }, slack, time.Millisecond)
	require.Equal(t, 0.0, gaugeOf(t, reg, "zonefleet_fs_stalled_operations"))
	require.NoError(t, writeFile(fs, "after", kept, true))
	require.NoError(t, fs.Sync(bg))
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))

	fs, err = lfs.Mount(bg, v, lfs.Options{})
	require.NoError(t, err)
	for _, p := range []string{"kept", "after"} {
		got, err := readFile(fs, p)
		require.NoError(t, err)
		require.Equal(t, kept, got, p)
	}
	rep, err = fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
}

func gaugeOf(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// TestRetryDeadline: an unavailable volume is retried until the retry
// deadline, then the call fails with a StalledError (EIO); with a virtual
// clock the deadline is modelled time; a hanging call is cut by the deadline
// with a realtime clock; a cancelled request returns at once.
func TestRetryDeadline(t *testing.T) {
	for _, tc := range []struct {
		name     string
		clk      func() clock.Clock
		deadline time.Duration
		hang     bool
		cancel   bool
		errno    syscall.Errno
	}{
		{"virtual", func() clock.Clock { return clock.NewVirtual() }, 2 * time.Second, false, false, syscall.EIO},
		{"realtime", func() clock.Clock { return clock.Realtime(1) }, 200 * time.Millisecond, false, false, syscall.EIO},
		{"realtime hanging node", func() clock.Clock { return clock.Realtime(1) }, 200 * time.Millisecond, true, false, syscall.EIO},
		{"off", clock.Off, time.Hour, false, false, syscall.EIO},
		{"realtime cancelled", func() clock.Clock { return clock.Realtime(1) }, time.Hour, false, true, syscall.EINTR},
		{"realtime hanging node cancelled", func() clock.Clock { return clock.Realtime(1) }, time.Hour, true, true, syscall.EINTR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := tc.clk()
			if r, ok := clk.(*clock.RealtimeClock); ok {
				defer r.Stop()
			}
			v := newVol(t, 32, 8)
			require.NoError(t, lfs.Mkfs(bg, v, lfs.MkfsOptions{}))
			ov := &outageVol{Volume: v}
			fs, err := lfs.Mount(bg, ov, lfs.Options{Clock: clk, RetryDeadline: tc.deadline})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			ino, err := walk(fs, "")
			require.NoError(t, err)
			_, h, err := fs.Create(ctx, ino, "f", 0o644, 0, 0, syscall.O_RDWR)
			require.NoError(t, err)
			_, err = fs.Write(ctx, h, 0, make([]byte, 4096))
			require.NoError(t, err)
			ov.hang.Store(tc.hang)
			ov.down.Store(true)
			start := clk.Now()
			if tc.cancel {
				time.AfterFunc(50*time.Millisecond, cancel)
			}
			err = returnsWithin(t, 30*time.Second, "fsync", func() error { return fs.Fsync(ctx, h, false) })
			require.Error(t, err)
			require.Equal(t, tc.errno, lfs.Errno(err), "%v", err)
			stalled, failed := fs.Stalls()
			require.Zero(t, stalled)
			if !tc.cancel {
				require.Equal(t, uint64(1), failed)
				if clk.Kind() == clock.KindVirtual {
					require.Equal(t, start+tc.deadline, clk.Now(), "retried exactly until the deadline (modelled)")
				}
			}
			ov.down.Store(false)
			require.NoError(t, fs.Fsync(bg, h, false), "the file system recovers when the node returns")
			require.NoError(t, fs.Release(bg, h))
			rep, err := fs.Fsck(bg)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
			require.NoError(t, fs.Unmount(bg))
		})
	}
}

// TestSlowCallCountsAsStalled: with a realtime clock a Volume call that gets
// no answer (the client retrying a dead node inside one attempt) counts as
// stalled and is warned about while it waits, before any error arrives; an
// interrupted request then returns at once.
func TestSlowCallCountsAsStalled(t *testing.T) {
	logs := captureLog(t)
	clk := clock.Realtime(1)
	defer clk.Stop()
	v := newVol(t, 32, 8)
	require.NoError(t, lfs.Mkfs(bg, v, lfs.MkfsOptions{}))
	ov := &outageVol{Volume: v}
	fs, err := lfs.Mount(bg, ov, lfs.Options{Clock: clk, RetryDeadline: time.Hour})
	require.NoError(t, err)
	_, h, err := fs.Create(bg, 1, "f", 0o644, 0, 0, syscall.O_RDWR)
	require.NoError(t, err)
	_, err = fs.Write(bg, h, 0, make([]byte, 4096))
	require.NoError(t, err)
	ov.hang.Store(true)
	ov.down.Store(true)
	ctx, cancel := context.WithCancel(bg)
	errc := make(chan error, 1)
	go func() { errc <- fs.Fsync(ctx, h, false) }()
	require.Eventually(t, func() bool { n, _ := fs.Stalls(); return n == 1 }, time.Minute, 10*time.Millisecond,
		"a call without an answer counts as stalled")
	// the warning is written just after the call counts as stalled
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "no answer from the volume yet") }, hang, 10*time.Millisecond,
		"a stalled call is warned about: %s", logs.String())
	require.Contains(t, logs.String(), "op=")
	cancel()
	select {
	case err := <-errc:
		require.Equal(t, syscall.EINTR, lfs.Errno(err), "%v", err)
	case <-time.After(hang):
		t.Fatal("an interrupted fsync did not return")
	}
	n, failed := fs.Stalls()
	require.Zero(t, n)
	require.Zero(t, failed, "an interrupted call is not a deadline failure")
	ov.down.Store(false)
	require.NoError(t, fs.Fsync(bg, h, false))
	require.NoError(t, fs.Release(bg, h))
	require.NoError(t, fs.Unmount(bg))
}
