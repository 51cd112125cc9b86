package fusefs_test

import (
	"bytes"
	"context"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/zonefleet/zonefleet/pkg/fusefs"
	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// With the kernel write-back cache (zctl mount --writeback-cache): go-fuse's
// POSIX suite passes; O_APPEND writes through two descriptors land in the
// order written (the kernel places them; the binding keeps lfs from moving
// the written-back pages to its own end of file); a write-only descriptor's
// partial page keeps the rest of the page; small writes reach lfs as a few
// page-sized WRITEs; and what fsync returned for survives an unmount, as
// fsck and a fresh mount see it.
func TestWritebackCache(t *testing.T) {
	m := mountClusterWith(t, fusefs.MountOptions{WritebackCache: true})
	t.Run("posix", func(t *testing.T) {
		names := make([]string, 0, len(posixtest.All))
		for n := range posixtest.All {
			if n != "FcntlFlockLocksFile" { // as in TestPosix
				names = append(names, n)
			}
		}
		sort.Strings(names)
		for _, n := range names {
			sub := filepath.Join(m.dir, "posix-"+n)
			require.NoError(t, os.Mkdir(sub, 0o755))
			t.Run(n, func(t *testing.T) { posixtest.All[n](t, sub) })
		}
	})
	t.Run("SEEK_DATA finds what the kernel still holds", func(t *testing.T) {
		// cp's sparse copy walks SEEK_DATA/SEEK_HOLE: a range written a
		// moment ago, still in the kernel's cache, must read as data
		f, err := os.Create(filepath.Join(m.dir, "sparse-fresh"))
		require.NoError(t, err)
		defer f.Close()
		_, err = f.WriteAt([]byte("x"), 1<<20)
		require.NoError(t, err)
		data, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA)
		require.NoError(t, err, "SEEK_DATA over a file whose only byte is in the kernel's cache")
		require.LessOrEqual(t, data, int64(1<<20))
		hole, err := unix.Seek(int(f.Fd()), data, unix.SEEK_HOLE)
		require.NoError(t, err)
		require.Greater(t, hole, int64(1<<20), "the written byte is not in a hole")
		_, err = unix.Seek(int(f.Fd()), (1<<20)+1, unix.SEEK_DATA)
		require.ErrorIs(t, err, unix.ENXIO, "past the end")
	})
	t.Run("append through two descriptors", func(t *testing.T) {
		p := filepath.Join(m.dir, "log")
		a, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		require.NoError(t, err)
		b, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0o644)
		require.NoError(t, err)
		var want []byte
		for i := 0; i < 300; i++ {
			f, c := a, byte('a'+i%26)
			if i%3 == 1 {
				f, c = b, byte('A'+i%26)
			}
			rec := bytes.Repeat([]byte{c}, 1+i%37)
			_, err := f.Write(rec)
			require.NoError(t, err)
			want = append(want, rec...)
			if i%40 == 39 {
				// the kernel writes the partial last page back now and
				// again after the next appends: the same offset twice
				require.NoError(t, f.Sync())
			}
		}
		require.NoError(t, a.Sync())
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
		got, err := os.ReadFile(p)
		require.NoError(t, err)
		require.Equal(t, want, got)
		// the kernel's cache shows what it wrote; the file system must
		// hold the same (the next mount reads it from there)
		require.Equal(t, want, lfsRead(t, m.fs, "log"))
	})
	t.Run("partial page through a write-only descriptor", func(t *testing.T) {
		p := filepath.Join(m.dir, "patch")
		want := make([]byte, 3*4096+100)
		rand.New(rand.NewSource(1)).Read(want)
		require.NoError(t, os.WriteFile(p, want, 0o644))
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteAt([]byte("patched"), 5000)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		copy(want[5000:], "patched")
		got, err := os.ReadFile(p)
		require.NoError(t, err)
		require.Equal(t, want, got)
		require.Equal(t, want, lfsRead(t, m.fs, "patch"))
	})

	// many small random writes, fsync, then the file as lfs has it
	p := filepath.Join(m.dir, "db")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	want := make([]byte, 1<<20)
	rng := rand.New(rand.NewSource(2))
	w0 := fsOps(t, m.reg, "write")
	end := 0
	for i := 0; i < 4000; i++ {
		off := rng.Intn(len(want) - 512)
		rec := make([]byte, 1+rng.Intn(512))
		rng.Read(rec)
		_, err := f.WriteAt(rec, int64(off))
		require.NoError(t, err)
		copy(want[off:], rec)
		end = max(end, off+len(rec))
	}
	want = want[:end]
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	// 4000 writes of up to 512 bytes: the kernel's cache gathers them into
	// a few WRITEs of its dirty pages, not one per write(2)
	require.Less(t, fsOps(t, m.reg, "write")-w0, 400.0, "small writes gathered by the kernel")
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "the file as written (%d bytes, read %d)", len(want), len(got))
	require.True(t, bytes.Equal(want, lfsRead(t, m.fs, "db")), "the file as lfs has it")

	m.unmountAndCheck(t)
	ctx := context.Background()
	fs, err := lfs.Mount(ctx, m.vol, lfs.Options{})
	require.NoError(t, err)
	a, err := fs.Lookup(ctx, lfs.RootIno, "db")
	require.NoError(t, err)
	h, err := fs.Open(ctx, a.Ino, syscall.O_RDONLY)
	require.NoError(t, err)
	buf := make([]byte, len(want))
	n, err := fs.Read(ctx, h, 0, buf)
	require.NoError(t, err)
	require.Equal(t, len(want), n)
	require.True(t, bytes.Equal(want, buf), "the file after a fresh mount")
	require.NoError(t, fs.Release(ctx, h))
	require.NoError(t, fs.Unmount(ctx))
}

// lfsRead reads the root directory's file name through lfs, bypassing the
// kernel's page cache.
func lfsRead(t *testing.T, fs *lfs.FS, name string) []byte {
	t.Helper()
	ctx := context.Background()
	a, err := fs.Lookup(ctx, lfs.RootIno, name)
	require.NoError(t, err)
	h, err := fs.Open(ctx, a.Ino, syscall.O_RDONLY)
	require.NoError(t, err)
	defer fs.Release(ctx, h)
	buf := make([]byte, a.Size)
	n, err := fs.Read(ctx, h, 0, buf)
	require.NoError(t, err)
	return buf[:n]
}

// fsOps is the file system's count of operations op
// (zonefleet_fs_operations_total).
func fsOps(t *testing.T, reg *prometheus.Registry, op string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "zonefleet_fs_operations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == op {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
