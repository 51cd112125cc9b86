package lfs_test

import (
	"bytes"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// st_blocks counts the space used (512-byte units): written blocks only,
// whether still dirty in the cache or on the drives, through truncation, a
// remount and a crash.
func TestStBlocksCountsWrittenBlocks(t *testing.T) {
	v := newVol(t, 32, 8)
	fs := mkfsMount(t, v, lfs.Options{})
	a, h := mustCreate(t, fs, lfs.RootIno, "sparse")
	bs := uint64(a.Blksize)
	per := bs / 512
	blocks := func(when string, want uint64) {
		t.Helper()
		got, err := fs.Getattr(bg, a.Ino)
		require.NoError(t, err)
		require.Equal(t, want*per, got.Blocks, when)
	}
	blocks("empty", 0)
	_, err := fs.Write(bg, h, 0, bytes.Repeat([]byte("a"), int(bs)+1)) // blocks 0 and 1
	require.NoError(t, err)
	_, err = fs.Write(bg, h, int64(100*bs), []byte("z")) // block 100, far past a hole
	require.NoError(t, err)
	blocks("dirty", 3)
	require.NoError(t, fs.Fsync(bg, h, false))
	blocks("written", 3)
	_, err = fs.Write(bg, h, 0, []byte("overwrite")) // no new block
	require.NoError(t, err)
	require.NoError(t, fs.Fsync(bg, h, false))
	blocks("overwritten", 3)
	_, err = fs.Setattr(bg, a.Ino, lfs.SetattrIn{Valid: lfs.SetSize, Size: 1 << 30})
	require.NoError(t, err)
	blocks("extended", 3)
	_, err = fs.Setattr(bg, a.Ino, lfs.SetattrIn{Valid: lfs.SetSize, Size: bs + 5})
	require.NoError(t, err)
	blocks("truncated", 2)
	require.NoError(t, fs.Fsync(bg, h, false))
	require.NoError(t, fs.Release(bg, h))
	require.NoError(t, fs.Unmount(bg))

	fs, err = lfs.Mount(bg, v, lfs.Options{})
	require.NoError(t, err)
	blocks("after remount", 2)
	h, err = fs.Open(bg, a.Ino, syscall.O_RDWR)
	require.NoError(t, err)
	_, err = fs.Write(bg, h, int64(50*bs), []byte("y"))
	require.NoError(t, err)
	require.NoError(t, fs.Fsync(bg, h, true))
	fs.Abandon()
	fs, err = lfs.Mount(bg, v, lfs.Options{})
	require.NoError(t, err)
	blocks("after crash", 3)
	// an inode of an older build (no count): counted from its direct nodes
	require.NoError(t, fs.ForgetBlockCount(a.Ino))
	require.NoError(t, fs.Unmount(bg))
	fs, err = lfs.Mount(bg, v, lfs.Options{})
	require.NoError(t, err)
	blocks("counted", 3)
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
}
