package lfs_test

import (
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

type specialCase struct {
	name string
	mode uint32
	rdev uint64
	want uint64 // rdev kept
}

var specialCases = []specialCase{
	{"fifo", syscall.S_IFIFO | 0o640, 0, 0},
	{"sock", syscall.S_IFSOCK | 0o755, 0, 0},
	{"chr", syscall.S_IFCHR | 0o600, 0x0103, 0x0103},           // 1:3, /dev/null
	{"blk", syscall.S_IFBLK | 0o660, 0x0800_0011, 0x0800_0011}, // a large minor
	{"reg", 0o644, 7, 0},                                       // type 0: regular file, rdev ignored
	{"fiforedev", syscall.S_IFIFO | 0o600, 99, 0},              // rdev only for devices
}

func checkSpecial(t *testing.T, fs *lfs.FS, dir uint64, when string) {
	t.Helper()
	for _, c := range specialCases {
		a, err := fs.Lookup(bg, dir, c.name)
		require.NoError(t, err, "%s %s", when, c.name)
		wantMode := c.mode
		if wantMode&syscall.S_IFMT == 0 {
			wantMode |= syscall.S_IFREG
		}
		require.Equal(t, wantMode, a.Mode, "%s %s mode", when, c.name)
		require.Equal(t, c.want, a.Rdev, "%s %s rdev", when, c.name)
		require.Equal(t, uint32(1000+len(c.name)), a.UID, "%s %s uid", when, c.name)
		require.Equal(t, uint32(2000), a.GID, "%s %s gid", when, c.name)
	}
	ents, err := fs.Readdir(bg, dir)
	require.NoError(t, err)
	types := map[string]uint32{}
	for _, e := range ents {
		types[e.Name] = e.Mode
	}
	require.Equal(t, uint32(syscall.S_IFIFO), types["fifo"], when)
	require.Equal(t, uint32(syscall.S_IFSOCK), types["sock"], when)
	require.Equal(t, uint32(syscall.S_IFCHR), types["chr"], when)
	require.Equal(t, uint32(syscall.S_IFBLK), types["blk"], when)
	require.Equal(t, uint32(syscall.S_IFREG), types["reg"], when)
}

func makeSpecial(t *testing.T, fs *lfs.FS) uint64 {
	t.Helper()
	d, err := fs.Mkdir(bg, lfs.RootIno, "dev", 0o755, 0, 0)
	require.NoError(t, err)
	for _, c := range specialCases {
		a, err := fs.Mknod(bg, d.Ino, c.name, c.mode, c.rdev, uint32(1000+len(c.name)), 2000)
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, a.Rdev, c.name)
	}
	// permissions and ownership change as for files; size cannot
	chr, err := fs.Lookup(bg, d.Ino, "chr")
	require.NoError(t, err)
	_, err = fs.Setattr(bg, chr.Ino, lfs.SetattrIn{Valid: lfs.SetMode, Mode: 0o600})
	require.NoError(t, err)
	_, err = fs.Setattr(bg, chr.Ino, lfs.SetattrIn{Valid: lfs.SetSize, Size: 10})
	require.ErrorIs(t, err, syscall.EINVAL)
	// a device's number survives xattrs that fill the inode block
	require.NoError(t, fs.Setxattr(bg, chr.Ino, "user.a", []byte("v"), 0))
	_, err = fs.Mknod(bg, d.Ino, "dir", syscall.S_IFDIR|0o755, 0, 0, 0)
	require.ErrorIs(t, err, syscall.EPERM)
	_, err = fs.Mknod(bg, d.Ino, "bad", 0o170000|0o644, 0, 0, 0)
	require.ErrorIs(t, err, syscall.EINVAL)
	_, err = fs.Mknod(bg, d.Ino, "fifo", syscall.S_IFIFO|0o644, 0, 0, 0)
	require.ErrorIs(t, err, syscall.EEXIST)
	_, err = fs.Mknod(bg, d.Ino, strings.Repeat("n", 256), syscall.S_IFIFO|0o644, 0, 0, 0)
	require.ErrorIs(t, err, syscall.ENAMETOOLONG)
	return d.Ino
}

// Special files of every kind keep type, device number, permissions and
// ownership through a clean remount, and fsck accepts them.
func TestSpecialFilesRemount(t *testing.T) {
	v := newVol(t, 32, 8)
	fs := mkfsMount(t, v, lfs.Options{})
	d := makeSpecial(t, fs)
	checkSpecial(t, fs, d, "before")
	require.NoError(t, fs.Unmount(bg))
	fs, err := lfs.Mount(bg, v, lfs.Options{})
	require.NoError(t, err)
	checkSpecial(t, fs, d, "after remount")
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
}

// Special files made durable by fsync of their directory come back after a
// crash (roll-forward of the fsynced nodes, no checkpoint in between).
func TestSpecialFilesCrash(t *testing.T) {
	v := newVol(t, 32, 8)
	fs := mkfsMount(t, v, lfs.Options{})
	d := makeSpecial(t, fs)
	for _, c := range specialCases {
		a, err := fs.Lookup(bg, d, c.name)
		require.NoError(t, err)
		require.NoError(t, fs.FsyncIno(bg, a.Ino))
	}
	require.NoError(t, fs.FsyncIno(bg, d))
	// after the checkpoint those fsyncs took: an attribute change made
	// durable by fsync alone (roll-forward of the inode node)
	blk, err := fs.Lookup(bg, d, "blk")
	require.NoError(t, err)
	_, err = fs.Setattr(bg, blk.Ino, lfs.SetattrIn{Valid: lfs.SetUID | lfs.SetMode, UID: 4242, Mode: 0o604})
	require.NoError(t, err)
	require.NoError(t, fs.FsyncIno(bg, blk.Ino))
	fs.Abandon()
	fs, err = lfs.Mount(bg, v, lfs.Options{})
	require.NoError(t, err)
	got, err := fs.Lookup(bg, d, "blk")
	require.NoError(t, err)
	require.Equal(t, uint32(syscall.S_IFBLK|0o604), got.Mode)
	require.Equal(t, uint32(4242), got.UID)
	require.Equal(t, uint64(0x0800_0011), got.Rdev)
	_, err = fs.Setattr(bg, blk.Ino, lfs.SetattrIn{Valid: lfs.SetUID | lfs.SetMode, UID: 1003, Mode: 0o660})
	require.NoError(t, err)
	checkSpecial(t, fs, d, "after crash")
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
}
