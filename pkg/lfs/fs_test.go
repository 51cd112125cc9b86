package lfs_test

import (
	"bytes"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

func TestSmoke(t *testing.T) {
	v := newVol(t, 32, 8)
	fs := mkfsMount(t, v, lfs.Options{})
	_, err := fs.Mkdir(bg, lfs.RootIno, "d", 0o755, 0, 0)
	require.NoError(t, err)
	data := bytes.Repeat([]byte("hello world "), 5000)
	require.NoError(t, writeFile(fs, "d/f", data, false))
	got, err := readFile(fs, "d/f")
	require.NoError(t, err)
	require.Equal(t, data, got)
	require.NoError(t, fs.Unmount(bg))

	fs, err = lfs.Mount(bg, v, lfs.Options{})
	require.NoError(t, err)
	got, err = readFile(fs, "d/f")
	require.NoError(t, err)
	require.Equal(t, data, got)
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
	_ = syscall.ENOENT
}

// Sequential reads prefetch the next window into the page cache: later reads
// are served from it, and what they return is the file's content, also after
// an overwrite and a truncate that race with the prefetched pages.
func TestReadAhead(t *testing.T) {
	v := newVol(t, 64, 8)
	fs := mkfsMount(t, v, lfs.Options{ReadAheadBlocks: 64})
	data := make([]byte, 600<<10)
	for i := range data {
		data[i] = byte(i * 31)
	}
	require.NoError(t, writeFile(fs, "f", data, true))
	require.NoError(t, fs.Unmount(bg)) // a cold cache: the blocks come from the drive
	fs, err := lfs.Mount(bg, v, lfs.Options{ReadAheadBlocks: 64})
	require.NoError(t, err)
	ino, err := walk(fs, "f")
	require.NoError(t, err)
	h, err := fs.Open(bg, ino, syscall.O_RDWR)
	require.NoError(t, err)
	defer fs.Release(bg, h)
	buf := make([]byte, 16<<10)
	for off := 0; off < len(data); off += len(buf) {
		n, err := fs.Read(bg, h, int64(off), buf)
		require.NoError(t, err)
		require.Equal(t, data[off:off+n], buf[:n], "offset %d", off)
		if off == 128<<10 {
			// overwrite a block that read-ahead may hold clean, then truncate
			_, err := fs.Write(bg, h, int64(off+64<<10), []byte("new bytes"))
			require.NoError(t, err)
			copy(data[off+64<<10:], "new bytes")
		}
	}
	require.Eventually(t, func() bool { return fs.Stats().ReadAheadBlocks > 0 }, 10*time.Second, 10*time.Millisecond)
	_, err = fs.Setattr(bg, ino, lfs.SetattrIn{Valid: lfs.SetSize, Size: 300 << 10})
	require.NoError(t, err)
	got, err := readFile(fs, "f")
	require.NoError(t, err)
	require.Equal(t, data[:300<<10], got)
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
}
