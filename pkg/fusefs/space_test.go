package fusefs_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/zonefleet/zonefleet/pkg/fusefs"
	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// fillFile writes 1 MiB chunks of c to p until write(2) fails or limit
// bytes are written; it returns the bytes written and the error.
func fillFile(t *testing.T, p string, c byte, limit int64) (*os.File, int64, error) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() }) // before the unmount, should the test stop early
	buf := bytes.Repeat([]byte{c}, 1<<20)
	var n int64
	for n < limit {
		k, err := f.Write(buf)
		n += int64(k)
		if err != nil {
			return f, n, err
		}
	}
	return f, n, nil
}

// With the kernel write-back cache, a writer that fills the file system
// gets ENOSPC from write(2) (at the latest from fsync), and the file holds
// exactly what write(2) accepted: it never grows past what was stored.
func TestWritebackCacheFull(t *testing.T) {
	m := mountClusterWith(t, fusefs.MountOptions{WritebackCache: true})
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(m.dir, &st))
	capacity := int64(st.Blocks) * st.Bsize
	p := filepath.Join(m.dir, "dd")
	f, n, werr := fillFile(t, p, 'z', 3*capacity)
	require.ErrorIs(t, werr, unix.ENOSPC, "write(2) reports the full file system (after %d bytes of %d)", n, capacity)
	// (write(2) may accept a little more than fits — the kernel's dirty
	// limit throttles, it does not stop a writer at a byte — and then
	// fsync reports ENOSPC, as the checks below require)
	serr := f.Sync()
	if serr != nil {
		require.ErrorIs(t, serr, unix.ENOSPC)
	}
	require.NoError(t, f.Close())
	a, err := m.fs.Lookup(context.Background(), lfs.RootIno, "dd")
	require.NoError(t, err)
	require.LessOrEqual(t, a.Size, uint64(n), "the file never grows past what write(2) accepted")
	if serr != nil {
		// fsync reported the loss: a range whose write-back failed may be
		// a hole, never other data
		got, err := os.ReadFile(p)
		require.NoError(t, err)
		require.Equal(t, len(got), bytes.Count(got, []byte{'z'})+bytes.Count(got, []byte{0}), "only what was written, or holes")
	}
	if serr == nil {
		require.LessOrEqual(t, a.Size, a.Blocks*512, "fsync succeeded: the file holds no range that was not stored")
		// fsync succeeded: everything write(2) accepted is stored
		require.Equal(t, uint64(n), a.Size)
		got, err := os.ReadFile(p)
		require.NoError(t, err)
		require.Equal(t, int(n), bytes.Count(got, []byte{'z'}))
	}
	t.Logf("capacity %d bytes, write(2) accepted %d, fsync: %v", capacity, n, serr)
	// space freed: the file system takes writes again. The kernel sends
	// FUSE's RELEASE of a closed file in the background (close(2) returns
	// first), so the unlink may find the file still open: an orphan whose
	// blocks are freed at its release. Wait for that event.
	require.NoError(t, os.Remove(p))
	require.Eventually(t, func() bool { s := m.fs.Stats(); return s.Orphans == 0 && s.OpenHandles == 0 },
		time.Minute, time.Millisecond, "the kernel released the removed file (a guard against a hang: normally milliseconds)")
	f, _, werr = fillFile(t, filepath.Join(m.dir, "again"), 'y', 4<<20)
	require.NoError(t, werr)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	m.unmountAndCheck(t)
}

// posix_fallocate reserves: after a filler takes every free block, writes
// into the preallocated range (mode 0 and KEEP_SIZE) still succeed, and
// free space dropped at the fallocate.
func TestFallocateReservesOnMount(t *testing.T) {
	for _, wb := range []bool{false, true} {
		t.Run(map[bool]string{false: "write-through", true: "writeback-cache"}[wb], func(t *testing.T) {
			m := mountClusterWith(t, fusefs.MountOptions{WritebackCache: wb})
			const size = 8 << 20
			var st0, st1 unix.Statfs_t
			require.NoError(t, unix.Statfs(m.dir, &st0))
			var files []*os.File
			for i, mode := range []uint32{0, unix.FALLOC_FL_KEEP_SIZE} {
				f, err := os.OpenFile(filepath.Join(m.dir, "pre"+string(rune('0'+i))), os.O_CREATE|os.O_RDWR, 0o644)
				require.NoError(t, err)
				t.Cleanup(func() { _ = f.Close() })
				require.NoError(t, unix.Fallocate(int(f.Fd()), mode, 0, size))
				files = append(files, f)
			}
			require.NoError(t, unix.Statfs(m.dir, &st1))
			require.GreaterOrEqual(t, (st0.Bfree-st1.Bfree)*uint64(st0.Bsize), uint64(2*size), "free space drops at the fallocate")
			fl, _, werr := fillFile(t, filepath.Join(m.dir, "filler"), 'f', 1<<40)
			require.ErrorIs(t, werr, unix.ENOSPC)
			_ = fl.Sync()
			require.NoError(t, fl.Close())
			buf := bytes.Repeat([]byte("p"), 1<<20)
			for i, f := range files {
				for off := int64(0); off < size; off += int64(len(buf)) {
					_, err := f.WriteAt(buf, off)
					require.NoError(t, err, "file %d: write at %d into the reserved range", i, off)
				}
				require.NoError(t, f.Sync(), "file %d", i)
				require.NoError(t, f.Close())
			}
			m.unmountAndCheck(t)
		})
	}
}
