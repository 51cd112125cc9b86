package lfs_test

import (
	"bytes"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// Write stops at the write-back reserve; WriteBack may use it; a failed
// WriteBack makes every fsync of the file fail until its last close.
func TestWriteBackReserveAndStickyError(t *testing.T) {
	v := newVol(t, 32, 8)
	fs := mkfsMount(t, v, lfs.Options{WriteReserveBlocks: 40})
	a, h := mustCreate(t, fs, lfs.RootIno, "f")
	bs := int64(a.Blksize)
	blk := bytes.Repeat([]byte("w"), int(bs))
	var off int64
	for ; ; off += bs {
		if _, err := fs.Write(bg, h, off, blk); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			break
		}
	}
	st, err := fs.Statfs(bg)
	require.NoError(t, err)
	require.GreaterOrEqual(t, st.Bfree, uint64(40))
	require.Less(t, st.Bavail, uint64(8))
	require.NoError(t, fs.Fsync(bg, h, false))
	// write-back of mapped pages lands in the reserve
	m, h2 := mustCreate(t, fs, lfs.RootIno, "mapped")
	var wb int64
	for ; ; wb += bs {
		if _, err := fs.WriteBack(bg, h2, wb, blk); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			break
		}
	}
	require.Greater(t, wb/bs, int64(30), "the reserve took write-back pages")
	require.True(t, fs.StaleCache(m.Ino), "the kernel's pages are stale")
	require.False(t, fs.StaleCache(m.Ino), "reported once")
	for i := 0; i < 3; i++ {
		require.ErrorIs(t, fs.Fsync(bg, h2, false), syscall.ENOSPC, "fsync %d after the failed write-back", i)
		require.ErrorIs(t, fs.FsyncIno(bg, m.Ino), syscall.ENOSPC)
	}
	// another file is not affected
	require.NoError(t, fs.Fsync(bg, h, false))
	// the last close ends the report; space freed, the file works again
	require.NoError(t, fs.Release(bg, h2))
	require.NoError(t, fs.Release(bg, h))
	require.NoError(t, fs.Unlink(bg, lfs.RootIno, "f"))
	h2, err = fs.Open(bg, m.Ino, syscall.O_RDWR)
	require.NoError(t, err)
	_, err = fs.Write(bg, h2, wb, blk)
	require.NoError(t, err)
	require.NoError(t, fs.Fsync(bg, h2, false))
	require.NoError(t, fs.Release(bg, h2))
	require.NoError(t, fs.Unmount(bg))
}
