package lfs_test

import (
	"bytes"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

func TestLseekDataHole(t *testing.T) {
	v := newVol(t, 32, 8)
	fs := mkfsMount(t, v, lfs.Options{})
	a, h := mustCreate(t, fs, lfs.RootIno, "f")
	bs := uint64(a.Blksize)
	epd := (bs - 48) / 8 // one direct node's reach: a search crosses a missing node
	_, err := fs.Write(bg, h, int64(2*bs), []byte("x"))
	require.NoError(t, err)
	_, err = fs.Write(bg, h, int64((epd+3)*bs), bytes.Repeat([]byte("y"), int(bs)))
	require.NoError(t, err)
	_, err = fs.Setattr(bg, a.Ino, lfs.SetattrIn{Valid: lfs.SetSize, Size: 3 * epd * bs})
	require.NoError(t, err)
	size := 3 * epd * bs
	for _, fsync := range []bool{false, true} {
		if fsync {
			require.NoError(t, fs.Fsync(bg, h, false))
		}
		for _, c := range []struct {
			off    uint64
			whence int
			want   uint64
			err    error
		}{
			{0, lfs.SeekData, 2 * bs, nil},
			{0, lfs.SeekHole, 0, nil},
			{2*bs + 7, lfs.SeekData, 2*bs + 7, nil},
			{2 * bs, lfs.SeekHole, 3 * bs, nil},
			{3 * bs, lfs.SeekData, (epd + 3) * bs, nil},
			{(epd + 3) * bs, lfs.SeekHole, (epd + 4) * bs, nil},
			{(epd + 4) * bs, lfs.SeekData, 0, syscall.ENXIO},
			{(epd + 4) * bs, lfs.SeekHole, (epd + 4) * bs, nil},
			{size, lfs.SeekHole, 0, syscall.ENXIO},
			{size - 1, lfs.SeekHole, size - 1, nil},
			{0, 9, 0, syscall.EINVAL},
		} {
			got, err := fs.Lseek(bg, a.Ino, c.off, c.whence)
			if c.err != nil {
				require.ErrorIs(t, err, c.err, "%+v", c)
				continue
			}
			require.NoError(t, err, "%+v", c)
			require.Equal(t, c.want, got, "fsync %v off %d whence %d", fsync, c.off, c.whence)
		}
	}
	// a dense file has its only hole at the end
	b, hb := mustCreate(t, fs, lfs.RootIno, "dense")
	_, err = fs.Write(bg, hb, 0, make([]byte, 3*bs+1))
	require.NoError(t, err)
	got, err := fs.Lseek(bg, b.Ino, 0, lfs.SeekHole)
	require.NoError(t, err)
	require.Equal(t, 3*bs+1, got)
	require.NoError(t, fs.Unmount(bg))
}

// Punching a hole and zeroing a range unmap the blocks: they read as zeros,
// st_blocks and the used space drop (recycling can reclaim them), the size
// follows KEEP_SIZE, and all of it survives a remount.
func TestFallocatePunchAndZero(t *testing.T) {
	v := newVol(t, 32, 8)
	fs := mkfsMount(t, v, lfs.Options{})
	a, h := mustCreate(t, fs, lfs.RootIno, "f")
	bs := uint64(a.Blksize)
	data := bytes.Repeat([]byte("0123456789abcdef"), int(16*bs)/16)
	_, err := fs.Write(bg, h, 0, data)
	require.NoError(t, err)
	require.NoError(t, fs.Fsync(bg, h, false))
	st0, err := fs.Statfs(bg)
	require.NoError(t, err)
	want := append([]byte(nil), data...)
	check := func(when string, blocks, size uint64) {
		t.Helper()
		at, err := fs.Getattr(bg, a.Ino)
		require.NoError(t, err)
		require.Equal(t, size, at.Size, when)
		require.Equal(t, blocks*bs/512, at.Blocks, when)
		buf := make([]byte, size)
		n, err := fs.Read(bg, h, 0, buf)
		require.NoError(t, err)
		require.Equal(t, int(size), n)
		require.True(t, bytes.Equal(want[:size], buf), when)
	}
	// punch blocks 2..5 whole and half of blocks 1 and 6
	off, n := bs+bs/2, 5*bs
	require.NoError(t, fs.Fallocate(bg, a.Ino, lfs.FallocPunchHole|lfs.FallocKeepSize, off, n, nil))
	clear(want[off : off+n])
	check("punched", 12, 16*bs)
	st1, err := fs.Statfs(bg)
	require.NoError(t, err)
	require.Equal(t, st0.Bfree+4, st1.Bfree, "the punched blocks are free again")
	// zero range past the end extends the size without taking space
	require.NoError(t, fs.Fallocate(bg, a.Ino, lfs.FallocZeroRange, 15*bs, 3*bs, nil))
	clear(want[15*bs : 16*bs])
	want = append(want, make([]byte, 2*bs)...)
	check("zeroed", 11, 18*bs)
	// KEEP_SIZE: the size stays
	require.NoError(t, fs.Fallocate(bg, a.Ino, lfs.FallocZeroRange|lfs.FallocKeepSize, 17*bs, 8*bs, nil))
	check("zero keep size", 11, 18*bs)
	// mode 0 extends and reserves the holes of the range (st_blocks counts
	// them); KEEP_SIZE reserves past the end without changing the size
	require.NoError(t, fs.Fallocate(bg, a.Ino, 0, 0, 20*bs, nil))
	want = append(want, make([]byte, 2*bs)...)
	check("allocated", 20, 20*bs)
	require.NoError(t, fs.Fallocate(bg, a.Ino, lfs.FallocKeepSize, 0, 40*bs, nil))
	check("keep size", 40, 20*bs)
	for _, c := range []struct {
		mode      uint32
		off, n    uint64
		errWanted error
	}{
		{lfs.FallocPunchHole, 0, bs, syscall.EOPNOTSUPP}, // punch needs KEEP_SIZE
		{0x08, 0, bs, syscall.EOPNOTSUPP},                // collapse range
		{0x20, 0, bs, syscall.EOPNOTSUPP},                // insert range
		{lfs.FallocPunchHole | lfs.FallocKeepSize, 0, 0, syscall.EINVAL},
	} {
		require.ErrorIs(t, fs.Fallocate(bg, a.Ino, c.mode, c.off, c.n, nil), c.errWanted, "%+v", c)
	}
	dir, err := fs.Mkdir(bg, lfs.RootIno, "d", 0o755, 0, 0)
	require.NoError(t, err)
	require.ErrorIs(t, fs.Fallocate(bg, dir.Ino, lfs.FallocPunchHole|lfs.FallocKeepSize, 0, bs, nil), syscall.EISDIR)
	require.NoError(t, fs.Fsync(bg, h, false))
	require.NoError(t, fs.Release(bg, h))
	require.NoError(t, fs.Unmount(bg))
	fs, err = lfs.Mount(bg, v, lfs.Options{})
	require.NoError(t, err)
	h, err = fs.Open(bg, a.Ino, syscall.O_RDONLY)
	require.NoError(t, err)
	check("after remount", 40, 20*bs)
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Release(bg, h))
	require.NoError(t, fs.Unmount(bg))
}
