package lfs_test

import (
	"bytes"
	"context"
	"fmt"
	mrand "math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// flakyVol fails every n-th Write and Read with zerr.Unavailable (before
// doing anything), or every one when n == 1.
type flakyVol struct {
	lfs.Volume
	n     int64
	calls atomic.Int64
}

func (f *flakyVol) fail() error {
	if f.calls.Add(1)%f.n == 0 {
		return &zerr.UnavailableError{What: "node n1", Reason: "test"}
	}
	return nil
}
func (f *flakyVol) Write(ctx context.Context, z lfs.ZoneID, off uint64, d []byte, fua bool) error {
	if err := f.fail(); err != nil {
		return err
	}
	return f.Volume.Write(ctx, z, off, d, fua)
}
func (f *flakyVol) Read(ctx context.Context, z lfs.ZoneID, off uint64, b []byte) error {
	if err := f.fail(); err != nil {
		return err
	}
	return f.Volume.Read(ctx, z, off, b)
}

func TestUnavailableIsRetriedThenEIO(t *testing.T) {
	v := newVol(t, 32, 8)
	require.NoError(t, lfs.Mkfs(bg, v, lfs.MkfsOptions{}))
	fv := &flakyVol{Volume: v, n: 3}
	fs, err := lfs.Mount(bg, fv, lfs.Options{})
	require.NoError(t, err)
	data := make([]byte, 200<<10)
	for i := range data {
		data[i] = byte(i * 31)
	}
	require.NoError(t, writeFile(fs, "f", data, true), "transient failures are retried")
	got, err := readFile(fs, "f")
	require.NoError(t, err)
	require.Equal(t, data, got)

	fv.n = 1 // the drives are gone for good
	err = writeFile(fs, "g", data, true)
	require.Error(t, err)
	require.Equal(t, syscall.EIO, lfs.Errno(err))
	fs.Abandon()

	// nothing fsynced was lost, nothing is inconsistent
	fs, err = lfs.Mount(bg, v, lfs.Options{})
	require.NoError(t, err)
	got, err = readFile(fs, "f")
	require.NoError(t, err)
	require.Equal(t, data, got)
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
}

// Few open zones (two logs instead of six) and a volume over two drives;
// the drives are closed and reopened between mounts (a whole-stack restart).
func TestTwoLogsTwoDrivesRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := devvol.TestConfig(12, 8)
	cfg.MaxOpenZones, cfg.MaxActiveZones = 3, 3
	open := func(create bool) ([]*zns.Device, *devvol.Volume) {
		var devs []*zns.Device
		for _, name := range []string{"a", "b"} {
			var d *zns.Device
			var err error
			if create {
				d, err = zns.Create(filepath.Join(dir, name), cfg, clock.Off())
			} else {
				d, err = zns.Open(filepath.Join(dir, name), cfg, clock.Off())
			}
			require.NoError(t, err)
			devs = append(devs, d)
		}
		v, err := devvol.New(devs...)
		require.NoError(t, err)
		return devs, v
	}
	devs, v := open(true)
	require.Equal(t, 6, v.Geometry().MaxOpen)
	fs := mkfsMount(t, v, lfs.Options{Move: lfs.Compact})
	m := &model{files: map[string]*mfile{}, dirs: map[string]bool{}}
	_, err := fs.Mkdir(bg, lfs.RootIno, "s", 0o755, 0, 0)
	require.NoError(t, err)
	require.NoError(t, worker(fs, 0, 42, 1000, []string{"s"}, m, map[string][]byte{}, &sync.Mutex{}))
	compareTree(t, fs, []*model{m})
	require.Positive(t, fs.Stats().GCForeground)
	require.NoError(t, fs.Unmount(bg))
	for _, d := range devs {
		require.NoError(t, d.Close())
	}
	devs, v = open(false)
	defer func() {
		for _, d := range devs {
			_ = d.Close()
		}
	}()
	fs, err = lfs.Mount(bg, v, lfs.Options{Move: lfs.Compact})
	require.NoError(t, err)
	compareTree(t, fs, []*model{m})
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
}

// keepVol fails every bulk Write (64 KiB or more: file data write-backs)
// with zerr.Unavailable while failing is set, as a transport that gave up
// while it was still sending would, and keeps the buffer it was handed with
// a copy of its contents at the failure.
type keepVol struct {
	lfs.Volume
	failing atomic.Bool
	mu      sync.Mutex
	kept    [][2][]byte // the buffer, its contents at the failure
}

func (k *keepVol) Write(ctx context.Context, z lfs.ZoneID, off uint64, d []byte, fua bool) error {
	if k.failing.Load() && len(d) >= 64<<10 {
		k.mu.Lock()
		k.kept = append(k.kept, [2][]byte{d, append([]byte(nil), d...)})
		k.mu.Unlock()
		return &zerr.UnavailableError{What: "node n1", Reason: "test"}
	}
	return k.Volume.Write(ctx, z, off, d, fua)
}

// TestFailedWriteBuffersAreNotRecycled: the write-back recycles its gather
// buffers (pkg/bufpool) only after a write that succeeded. A buffer handed
// to a write that failed may still be read by a transport, so nothing may
// overwrite it, however many write-backs follow.
func TestFailedWriteBuffersAreNotRecycled(t *testing.T) {
	v := newVol(t, 32, 8)
	require.NoError(t, lfs.Mkfs(bg, v, lfs.MkfsOptions{}))
	kv := &keepVol{Volume: v}
	fs, err := lfs.Mount(bg, kv, lfs.Options{})
	require.NoError(t, err)
	file := func(i int) []byte {
		data := make([]byte, 384<<10)
		for j := range data {
			data[j] = byte(i*7 + j*31)
		}
		return data
	}
	for i := 0; i < 3; i++ { // buffers go back to the pool
		require.NoError(t, writeFile(fs, fmt.Sprintf("ok%d", i), file(i), true))
	}
	kv.failing.Store(true)
	for i := 0; i < 4; i++ { // each write-back fails: its buffer must stay untouched
		require.Error(t, writeFile(fs, fmt.Sprintf("bad%d", i), file(10+i), true))
	}
	kv.failing.Store(false)
	for i := 0; i < 3; i++ { // more write-backs take buffers from the pool
		_ = writeFile(fs, fmt.Sprintf("after%d", i), file(20+i), true)
	}
	fs.Abandon()
	kv.mu.Lock()
	defer kv.mu.Unlock()
	require.GreaterOrEqual(t, len(kv.kept), 2, "the failures hit write-back batches")
	for i, k := range kv.kept {
		require.Equal(t, k[1], k[0], "buffer %d of a failed write was reused", i)
	}
}

// vecKeepVol records every vectored write's buffers with a copy of their
// contents when handed over.
type vecKeepVol struct {
	*devvol.Volume
	mu   sync.Mutex
	kept [][2][]byte // a buffer, its contents when written
}

func (k *vecKeepVol) WriteV(ctx context.Context, z lfs.ZoneID, off uint64, bufs [][]byte, fua bool) error {
	k.mu.Lock()
	for _, b := range bufs {
		k.kept = append(k.kept, [2][]byte{b, append([]byte(nil), b...)})
	}
	k.mu.Unlock()
	return k.Volume.WriteV(ctx, z, off, bufs, fua)
}

// TestWriteBackSendsPagesUnchanged: the write-back hands the volume the
// cached pages themselves (VectorWriter, no gather copy), so no page buffer
// may ever change once handed over — a volume may still read it (an
// abandoned network attempt) — however the file is written meanwhile:
// whole-block and partial overwrites, truncation, from several goroutines
// while write-backs and fsyncs run. The file reads back as written, also
// after a remount, and fsck is clean.
func TestWriteBackSendsPagesUnchanged(t *testing.T) {
	v := &vecKeepVol{Volume: newVol(t, 32, 8)}
	require.NoError(t, lfs.Mkfs(bg, v, lfs.MkfsOptions{}))
	fs, err := lfs.Mount(bg, v, lfs.Options{CacheBlocks: 256}) // write-back every 64 dirty pages
	require.NoError(t, err)
	const size = 1 << 20
	ref := make([]byte, size)
	_, h, err := fs.Create(bg, lfs.RootIno, "f", 0o644, 0, 0, syscall.O_RDWR)
	require.NoError(t, err)
	_, err = fs.Write(bg, h, 0, ref)
	require.NoError(t, err)
	var mu sync.Mutex // orders the writes with the reference
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(uint64(w), 5))
			for i := 0; i < 300; i++ {
				off := rng.IntN(size - 1)
				n := 1 + rng.IntN(min(size-off, 64<<10))
				if i%3 == 0 { // whole blocks
					off &^= 4095
					n = min(size-off, (n+4095)&^4095)
				}
				data := make([]byte, n)
				for j := range data {
					data[j] = byte(rng.Uint32())
				}
				mu.Lock()
				_, err := fs.Write(bg, h, int64(off), data)
				if err == nil {
					copy(ref[off:], data)
				}
				mu.Unlock()
				if !assert.NoError(t, err) {
					return
				}
				if i%50 == 49 {
					assert.NoError(t, fs.Fsync(bg, h, false))
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, fs.Fsync(bg, h, false))
	require.NoError(t, fs.Release(bg, h))
	v.mu.Lock()
	require.NotEmpty(t, v.kept, "the write-back used the vectored write")
	for i, k := range v.kept {
		require.True(t, bytes.Equal(k[1], k[0]), "page buffer %d changed after it was handed to the volume", i)
	}
	v.mu.Unlock()
	got, err := readFile(fs, "f")
	require.NoError(t, err)
	require.True(t, bytes.Equal(ref, got))
	require.NoError(t, fs.Unmount(bg))
	fs, err = lfs.Mount(bg, v, lfs.Options{})
	require.NoError(t, err)
	got, err = readFile(fs, "f")
	require.NoError(t, err)
	require.True(t, bytes.Equal(ref, got), "after remount")
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
}
