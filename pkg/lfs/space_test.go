package lfs_test

import (
	"bytes"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// fill writes whole blocks to a new file until ENOSPC and returns how many
// it wrote.
func fill(t *testing.T, fs *lfs.FS, name string) int64 {
	t.Helper()
	a, h := mustCreate(t, fs, lfs.RootIno, name)
	bs := int64(a.Blksize)
	blk := bytes.Repeat([]byte("f"), int(bs))
	var n int64
	for ; ; n++ {
		if _, err := fs.Write(bg, h, n*bs, blk); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			break
		}
	}
	require.NoError(t, fs.Fsync(bg, h, false))
	require.NoError(t, fs.Release(bg, h))
	return n
}

// writeRange writes blocks [from, to) of h, each filled with c.
func writeRange(t *testing.T, fs *lfs.FS, h lfs.Handle, bs, from, to int64, c byte) {
	t.Helper()
	blk := bytes.Repeat([]byte{c}, int(bs))
	for b := from; b < to; b++ {
		_, err := fs.Write(bg, h, b*bs, blk)
		require.NoError(t, err, "write of block %d into the reserved range", b)
	}
}

func bfree(t *testing.T, fs *lfs.FS) uint64 {
	t.Helper()
	st, err := fs.Statfs(bg)
	require.NoError(t, err)
	return st.Bfree
}

// fallocate (mode 0 and KEEP_SIZE) reserves its range: free space drops
// at once, another file filling the file system leaves it alone, every
// write into it succeeds, and punching or truncating gives the space back.
func TestFallocateReserves(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode uint32
	}{{"mode 0", 0}, {"keep size", lfs.FallocKeepSize}} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVol(t, 32, 8)
			fs := mkfsMount(t, v, lfs.Options{})
			a, h := mustCreate(t, fs, lfs.RootIno, "db")
			bs := int64(a.Blksize)
			const blocks = 300
			free0 := bfree(t, fs)
			require.NoError(t, fs.Fallocate(bg, a.Ino, tc.mode, 0, uint64(blocks*bs), nil))
			free1 := bfree(t, fs)
			require.GreaterOrEqual(t, free0-free1, uint64(blocks), "free space drops by the range at once")
			require.Less(t, free0-free1, uint64(blocks+blocks/100+2), "and by little more (its direct nodes)")
			st, err := fs.Getattr(bg, a.Ino)
			require.NoError(t, err)
			if tc.mode == 0 {
				require.Equal(t, uint64(blocks*bs), st.Size)
			} else {
				require.Zero(t, st.Size)
			}
			require.Positive(t, fill(t, fs, "filler"))
			writeRange(t, fs, h, bs, 0, blocks, 'd')
			require.NoError(t, fs.Fsync(bg, h, false))
			got := make([]byte, bs)
			_, err = fs.Read(bg, h, (blocks-1)*bs, got)
			require.NoError(t, err)
			require.Equal(t, bytes.Repeat([]byte{'d'}, int(bs)), got)
			require.Zero(t, fs.Reserved(), "every reserved block is written")
			rep, err := fs.Fsck(bg)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)

			// punching a reservation gives the space back at once, truncating the rest
			require.NoError(t, fs.Unlink(bg, lfs.RootIno, "filler"))
			b, h2 := mustCreate(t, fs, lfs.RootIno, "pre")
			require.NoError(t, fs.Fallocate(bg, b.Ino, tc.mode, 0, uint64(blocks*bs), nil))
			r0 := fs.Reserved()
			require.GreaterOrEqual(t, r0, uint64(blocks))
			f0 := bfree(t, fs)
			require.NoError(t, fs.Fallocate(bg, b.Ino, lfs.FallocPunchHole|lfs.FallocKeepSize, 0, uint64(blocks/2*bs), nil))
			require.GreaterOrEqual(t, bfree(t, fs)-f0, uint64(blocks/2), "punch returns its half")
			_, err = fs.Setattr(bg, b.Ino, lfs.SetattrIn{Valid: lfs.SetSize, Size: 0})
			require.NoError(t, err)
			require.Zero(t, fs.Reserved(), "truncate returns the rest")
			require.NoError(t, fs.Release(bg, h2))
			require.NoError(t, fs.Release(bg, h))
			rep, err = fs.Fsck(bg)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
			require.NoError(t, fs.Unmount(bg))
		})
	}
}

// A reservation survives a clean unmount and a crash after its fsync
// (fsck of the checkpoint and the mount after roll-forward agree), and the
// inode's deletion releases it.
func TestFallocateReservationPersists(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := map[bool]string{false: "unmount", true: "crash after fsync"}[crash]
		t.Run(name, func(t *testing.T) {
			v := newVol(t, 32, 8)
			fs := mkfsMount(t, v, lfs.Options{})
			a, h := mustCreate(t, fs, lfs.RootIno, "db")
			bs := int64(a.Blksize)
			const blocks = 200
			require.NoError(t, fs.Fallocate(bg, a.Ino, lfs.FallocKeepSize, 0, uint64(blocks*bs), nil))
			writeRange(t, fs, h, bs, 0, 10, 'a')
			resv := fs.Reserved()
			require.NoError(t, fs.Fsync(bg, h, false))
			if crash {
				fs.Abandon()
				rep, err := lfs.Fsck(bg, v, false)
				require.NoError(t, err)
				require.Empty(t, rep.Problems, "the checkpoint is consistent")
			} else {
				require.NoError(t, fs.Release(bg, h))
				require.NoError(t, fs.Unmount(bg))
			}
			fs, err := lfs.Mount(bg, v, lfs.Options{})
			require.NoError(t, err)
			require.Equal(t, resv, fs.Reserved(), "the mount counts the reservation again")
			rep, err := fs.Fsck(bg)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
			h, err = fs.Open(bg, a.Ino, syscall.O_RDWR)
			require.NoError(t, err)
			require.Positive(t, fill(t, fs, "filler"))
			writeRange(t, fs, h, bs, 10, blocks, 'b')
			require.NoError(t, fs.Fsync(bg, h, false))
			require.NoError(t, fs.Release(bg, h))
			require.NoError(t, fs.Unmount(bg))

			// deleting a file releases what it still holds
			fs, err = lfs.Mount(bg, v, lfs.Options{})
			require.NoError(t, err)
			require.NoError(t, fs.Unlink(bg, lfs.RootIno, "filler"))
			c, h3 := mustCreate(t, fs, lfs.RootIno, "c")
			require.NoError(t, fs.Fallocate(bg, c.Ino, 0, 0, uint64(blocks*bs), nil))
			require.NoError(t, fs.Release(bg, h3))
			f0 := bfree(t, fs)
			require.NoError(t, fs.Unlink(bg, lfs.RootIno, "c"))
			require.GreaterOrEqual(t, bfree(t, fs)-f0, uint64(blocks))
			require.Zero(t, fs.Reserved())
			rep, err = fs.Fsck(bg)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
			require.NoError(t, fs.Unmount(bg))
		})
	}
}

// Two reserved ranges sharing one missing direct node reserve it once: the
// reservation is spent exactly when both ranges are written.
func TestFallocateRangesShareDirectNode(t *testing.T) {
	v := newVol(t, 32, 8)
	fs := mkfsMount(t, v, lfs.Options{})
	a, h := mustCreate(t, fs, lfs.RootIno, "f")
	bs := int64(a.Blksize)
	require.NoError(t, fs.Fallocate(bg, a.Ino, lfs.FallocKeepSize, 0, uint64(4*bs), nil))
	require.NoError(t, fs.Fallocate(bg, a.Ino, lfs.FallocKeepSize, uint64(8*bs), uint64(4*bs), nil))
	require.Equal(t, uint64(8+1), fs.Reserved(), "8 blocks and the one direct node")
	writeRange(t, fs, h, bs, 0, 4, 'a')
	writeRange(t, fs, h, bs, 8, 12, 'b')
	require.Zero(t, fs.Reserved())
	require.NoError(t, fs.Fsync(bg, h, false))
	require.NoError(t, fs.Release(bg, h))
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
}
