package lfs_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// callLog records the Volume writes and flushes while on is set, in order.
type callLog struct {
	lfs.Volume
	mu    sync.Mutex
	on    bool
	calls []string // "w<blocks>" for a write, "W<blocks>" with FUA, "F" for a Flush
}

func (c *callLog) Write(ctx context.Context, z lfs.ZoneID, off uint64, d []byte, fua bool) error {
	err := c.Volume.Write(ctx, z, off, d, fua)
	c.mu.Lock()
	if c.on && err == nil {
		k := "w"
		if fua {
			k = "W"
		}
		c.calls = append(c.calls, fmt.Sprintf("%s%d", k, len(d)/4096))
	}
	c.mu.Unlock()
	return err
}

func (c *callLog) Flush(ctx context.Context) error {
	err := c.Volume.Flush(ctx)
	c.mu.Lock()
	if c.on && err == nil {
		c.calls = append(c.calls, "F")
	}
	c.mu.Unlock()
	return err
}

func (c *callLog) record(on bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = on
	out := c.calls
	c.calls = nil
	return out
}

// An fsync of a file whose names are checkpointed takes one Flush round:
// its data is written, the volume is flushed once, and its dirty direct
// nodes and the inode with the fsync mark are written last, in one write,
// with FUA (F2FS's PREFLUSH+FUA on the last node; roll-forward checks the
// batch is whole) — no second Flush, no separate write of the direct
// nodes. The power-loss tests check that what it covers survives; this
// checks the order and the count.
func TestFsyncOneFlushThenNodesFUA(t *testing.T) {
	for _, tc := range []struct {
		name     string
		write    func(t *testing.T, fs *lfs.FS, h lfs.Handle)
		datasync bool
		nodes    string // blocks of the FUA write: dirty direct nodes + the inode
	}{
		{"append 4 KiB", func(t *testing.T, fs *lfs.FS, h lfs.Handle) { mustWrite(t, fs, h, 64<<10, 4096) }, false, "2"},
		{"overwrite 4 KiB, fdatasync", func(t *testing.T, fs *lfs.FS, h lfs.Handle) { mustWrite(t, fs, h, 4096, 4096) }, true, "2"},
		{"append 200 KiB", func(t *testing.T, fs *lfs.FS, h lfs.Handle) { mustWrite(t, fs, h, 64<<10, 200<<10) }, false, "2"},
		{"chmod only", func(t *testing.T, fs *lfs.FS, h lfs.Handle) {
			_, err := fs.Setattr(bg, fileIno(t, fs, "f"), lfs.SetattrIn{Valid: lfs.SetMode, Mode: 0o600})
			require.NoError(t, err)
		}, false, "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &callLog{Volume: newVol(t, 32, 8)}
			fs := mkfsMount(t, v, lfs.Options{})
			t.Cleanup(func() { _ = fs.Unmount(bg) })
			_, h, err := fs.Create(bg, lfs.RootIno, "f", 0o644, 0, 0, syscall.O_RDWR)
			require.NoError(t, err)
			mustWrite(t, fs, h, 0, 64<<10)
			require.NoError(t, fs.Fsync(bg, h, false)) // a new name: this one checkpoints
			tc.write(t, fs, h)
			v.record(true)
			require.NoError(t, fs.Fsync(bg, h, tc.datasync))
			calls := v.record(false)
			seq := strings.Join(calls, " ")
			require.NotEmpty(t, calls)
			require.Equal(t, "W"+tc.nodes, calls[len(calls)-1], "the direct nodes and the marked inode come last, in one write with FUA: %s", seq)
			require.Equal(t, 1, strings.Count(seq, "F"), "one Flush round: %s", seq)
			require.Equal(t, "F", calls[len(calls)-2], "the Flush comes right before the nodes: %s", seq)
			require.Equal(t, 1, strings.Count(seq, "W"), "nothing else with FUA: %s", seq)
			// and the file reads back after a remount
			require.NoError(t, fs.Release(bg, h))
			require.NoError(t, fs.Unmount(bg))
			fs2, err := lfs.Mount(bg, v, lfs.Options{})
			require.NoError(t, err)
			fs = fs2
			_, err = readFile(fs, "f")
			require.NoError(t, err)
		})
	}
}

func mustWrite(t *testing.T, fs *lfs.FS, h lfs.Handle, off int64, n int) {
	t.Helper()
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + int(off))
	}
	got, err := fs.Write(bg, h, off, b)
	require.NoError(t, err)
	require.Equal(t, n, got)
}

func fileIno(t *testing.T, fs *lfs.FS, p string) uint64 {
	t.Helper()
	ino, err := walk(fs, p)
	require.NoError(t, err)
	return ino
}
