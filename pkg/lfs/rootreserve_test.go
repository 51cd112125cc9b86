package lfs_test

import (
	"bytes"
	"context"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

var asRoot = lfs.WithRootReserve(bg)

func TestRootReserveBlocks(t *testing.T) {
	const bs = 4096
	floor := uint64(lfs.MinRootReserveBytes / bs)
	for _, tc := range []struct {
		name       string
		userBlocks uint64
		pct        float64
		want       uint64
	}{
		{"none", 1 << 20, 0, 0},
		{"one percent of a large volume", 1 << 24, 1, 1<<24/100 + 1},
		{"the floor on a small volume", 10 * floor, 1, floor},
		{"at most half", floor, 1, floor / 2},
		{"a fraction of a percent", 1 << 30, 0.5, 1<<29/100 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, lfs.RootReserveBlocks(tc.userBlocks, bs, tc.pct))
		})
	}
}

// fillAs writes one file block by block as ctx's caller until ENOSPC and
// returns the blocks written.
func fillAs(t *testing.T, ctx context.Context, fs *lfs.FS, name string) int64 {
	t.Helper()
	a, h, err := fs.Create(ctx, lfs.RootIno, name, 0o644, 0, 0, syscall.O_WRONLY)
	require.NoError(t, err)
	bs := int64(a.Blksize)
	blk := bytes.Repeat([]byte("r"), int(bs))
	var n int64
	for ; ; n++ {
		if _, err := fs.Write(ctx, h, n*bs, blk); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			break
		}
	}
	require.NoError(t, fs.Fsync(ctx, h, false))
	require.NoError(t, fs.Release(ctx, h))
	return n
}

// The root-reserved share: statfs counts it free but not available; a
// caller other than root fills Bavail and then gets ENOSPC from write,
// create and fallocate, while root fills the share too; the share survives
// a remount, a mount option overrides it, and fsck finds the full file
// system sound.
func TestRootReserve(t *testing.T) {
	v := newVol(t, 64, 32)
	require.NoError(t, lfs.Mkfs(bg, v, lfs.MkfsOptions{ReservedRootPercent: 1}))
	fs, err := lfs.Mount(bg, v, lfs.Options{})
	require.NoError(t, err)
	st, err := fs.Statfs(bg)
	require.NoError(t, err)
	resv := fs.RootReserveBlocks()
	require.Equal(t, lfs.RootReserveBlocks(st.Blocks, int(st.Bsize), 1), resv)
	require.NotZero(t, resv)

	got := fillAs(t, bg, fs, "user")
	t.Logf("user blocks %d, share %d, bavail %d, a user's file took %d blocks", st.Blocks, resv, st.Bavail, got)
	require.InEpsilon(t, float64(st.Bavail), float64(got), 0.01, "a user fills what statfs says is available")
	full, err := fs.Statfs(bg)
	require.NoError(t, err)
	require.GreaterOrEqual(t, full.Bfree, resv, "the share is still free")

	a, h, err := fs.Create(asRoot, lfs.RootIno, "pre", 0o644, 0, 0, syscall.O_WRONLY)
	require.NoError(t, err, "root creates in the share")
	require.NoError(t, fs.Release(asRoot, h))
	require.ErrorIs(t, fs.Fallocate(bg, a.Ino, 0, 0, 64<<10, nil), syscall.ENOSPC, "a user cannot reserve the share")
	require.NoError(t, fs.Fallocate(asRoot, a.Ino, 0, 0, 64<<10, nil), "root can")

	rootGot := fillAs(t, asRoot, fs, "root")
	t.Logf("root then wrote %d blocks of the %d-block share", rootGot, resv)
	require.Greater(t, rootGot, int64(resv*95/100), "root fills the share")
	require.LessOrEqual(t, rootGot, int64(resv))
	full, err = fs.Statfs(bg)
	require.NoError(t, err)
	require.Zero(t, full.Bavail)
	require.Zero(t, full.Ffree)
	_, _, err = fs.Create(bg, lfs.RootIno, "user2", 0o644, 1000, 1000, syscall.O_WRONLY)
	require.ErrorIs(t, err, syscall.ENOSPC, "a user cannot create in the share")
	_, err = fs.Mkdir(bg, lfs.RootIno, "userdir", 0o755, 1000, 1000)
	require.ErrorIs(t, err, syscall.ENOSPC)
	_, err = fs.Mkdir(asRoot, lfs.RootIno, "rootdir", 0o755, 0, 0)
	require.NoError(t, err, "root still creates (in the write-back reserve)")

	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems, "a full file system is sound")
	require.NoError(t, fs.Unmount(bg))

	fs, err = lfs.Mount(bg, v, lfs.Options{})
	require.NoError(t, err)
	require.Equal(t, resv, fs.RootReserveBlocks(), "the superblock keeps the share")
	require.NoError(t, fs.Unlink(asRoot, lfs.RootIno, "root"))
	require.Zero(t, fillAs(t, bg, fs, "user3"), "what root freed is the share again")
	require.NoError(t, fs.Unmount(bg))

	fs, err = lfs.Mount(bg, v, lfs.Options{ReservedRootPercent: -1})
	require.NoError(t, err)
	require.Zero(t, fs.RootReserveBlocks(), "a mount option drops the share")
	require.Greater(t, fillAs(t, bg, fs, "user4"), int64(resv*95/100), "without the share a user fills it")
	require.NoError(t, fs.Unmount(bg))

	_, err = lfs.Mount(bg, v, lfs.Options{ReservedRootPercent: 60})
	require.Error(t, err, "more than half is refused")
	require.Error(t, lfs.Mkfs(bg, v, lfs.MkfsOptions{Force: true, ReservedRootPercent: 51}))
	rep, err = lfs.Fsck(bg, v, false)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
}

// Without the option Mkfs reserves nothing: every caller may fill the
// user blocks.
func TestRootReserveNoneByDefault(t *testing.T) {
	v := newVol(t, 32, 8)
	fs := mkfsMount(t, v, lfs.Options{})
	require.Zero(t, fs.RootReserveBlocks())
	require.NoError(t, fs.Unmount(bg))
}
