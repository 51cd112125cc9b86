package lfs_test

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func mustCreate(t *testing.T, fs *lfs.FS, parent uint64, name string) (lfs.Attr, lfs.Handle) {
	t.Helper()
	a, h, err := fs.Create(bg, parent, name, 0o644, 0, 0, syscall.O_RDWR)
	require.NoError(t, err)
	return a, h
}

func TestPOSIX(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, fs *lfs.FS)
	}{
		{"sparse file past 4 GiB", func(t *testing.T, fs *lfs.FS) {
			a, h := mustCreate(t, fs, lfs.RootIno, "big")
			off := int64(5<<30 + 123)
			_, err := fs.Write(bg, h, off, []byte("tail"))
			require.NoError(t, err)
			_, err = fs.Write(bg, h, 10, []byte("head"))
			require.NoError(t, err)
			at, err := fs.Getattr(bg, a.Ino)
			require.NoError(t, err)
			require.Equal(t, uint64(off+4), at.Size)
			buf := make([]byte, 8)
			n, err := fs.Read(bg, h, off-4, buf)
			require.NoError(t, err)
			require.Equal(t, []byte("\x00\x00\x00\x00tail"), buf[:n])
			n, err = fs.Read(bg, h, 1<<30, buf)
			require.NoError(t, err)
			require.Equal(t, make([]byte, 8), buf[:n], "hole reads zeros")
			st, err := fs.Statfs(bg)
			require.NoError(t, err)
			require.Less(t, st.Blocks-st.Bfree, uint64(20), "a sparse file uses few blocks")
			require.NoError(t, fs.Fsync(bg, h, false))
			require.NoError(t, fs.Release(bg, h))
		}},
		{"truncate down then up reads zeros", func(t *testing.T, fs *lfs.FS) {
			a, h := mustCreate(t, fs, lfs.RootIno, "f")
			data := bytes.Repeat([]byte{0xab}, 10000)
			_, err := fs.Write(bg, h, 0, data)
			require.NoError(t, err)
			_, err = fs.Setattr(bg, a.Ino, lfs.SetattrIn{Valid: lfs.SetSize, Size: 5000})
			require.NoError(t, err)
			_, err = fs.Setattr(bg, a.Ino, lfs.SetattrIn{Valid: lfs.SetSize, Size: 12000})
			require.NoError(t, err)
			buf := make([]byte, 12000)
			n, err := fs.Read(bg, h, 0, buf)
			require.NoError(t, err)
			require.Equal(t, 12000, n)
			require.Equal(t, data[:5000], buf[:5000])
			require.Equal(t, make([]byte, 7000), buf[5000:])
			require.NoError(t, fs.Release(bg, h))
		}},
		{"unlink of an open file", func(t *testing.T, fs *lfs.FS) {
			_, h := mustCreate(t, fs, lfs.RootIno, "x") // the root gets its first dentry block
			require.NoError(t, fs.Release(bg, h))
			require.NoError(t, fs.Unlink(bg, lfs.RootIno, "x"))
			st0, err := fs.Statfs(bg)
			require.NoError(t, err)
			_, h = mustCreate(t, fs, lfs.RootIno, "f")
			_, err = fs.Write(bg, h, 0, make([]byte, 64<<10))
			require.NoError(t, err)
			require.NoError(t, fs.Unlink(bg, lfs.RootIno, "f"))
			_, err = fs.Lookup(bg, lfs.RootIno, "f")
			require.ErrorIs(t, err, syscall.ENOENT)
			n, err := fs.Write(bg, h, 64<<10, []byte("more"))
			require.NoError(t, err)
			require.Equal(t, 4, n)
			buf := make([]byte, 4)
			_, err = fs.Read(bg, h, 64<<10, buf)
			require.NoError(t, err)
			require.Equal(t, "more", string(buf))
			require.Equal(t, 1, fs.Stats().Orphans)
			require.NoError(t, fs.Release(bg, h))
			st1, err := fs.Statfs(bg)
			require.NoError(t, err)
			require.Equal(t, st0.Bfree, st1.Bfree, "space comes back at the last close")
		}},
		{"rename cases", func(t *testing.T, fs *lfs.FS) {
			d1, err := fs.Mkdir(bg, lfs.RootIno, "d1", 0o755, 0, 0)
			require.NoError(t, err)
			d2, err := fs.Mkdir(bg, lfs.RootIno, "d2", 0o755, 0, 0)
			require.NoError(t, err)
			require.NoError(t, writeFile(fs, "d1/a", []byte("A"), false))
			require.NoError(t, writeFile(fs, "d2/b", []byte("B"), false))
			// over an existing file, across directories
			require.NoError(t, fs.Rename(bg, d1.Ino, "a", d2.Ino, "b", 0))
			got, err := readFile(fs, "d2/b")
			require.NoError(t, err)
			require.Equal(t, "A", string(got))
			_, err = fs.Lookup(bg, d1.Ino, "a")
			require.ErrorIs(t, err, syscall.ENOENT)
			// directory into its own subtree
			sub, err := fs.Mkdir(bg, d1.Ino, "sub", 0o755, 0, 0)
			require.NoError(t, err)
			require.ErrorIs(t, fs.Rename(bg, lfs.RootIno, "d1", sub.Ino, "x", 0), syscall.EINVAL)
			// directory over a non-empty / an empty directory
			require.ErrorIs(t, fs.Rename(bg, d1.Ino, "sub", lfs.RootIno, "d2", 0), syscall.ENOTEMPTY)
			_, err = fs.Mkdir(bg, lfs.RootIno, "empty", 0o755, 0, 0)
			require.NoError(t, err)
			require.NoError(t, fs.Rename(bg, d1.Ino, "sub", lfs.RootIno, "empty", 0))
			moved, err := fs.Lookup(bg, lfs.RootIno, "empty")
			require.NoError(t, err)
			require.Equal(t, sub.Ino, moved.Ino)
			dotdot, err := fs.Lookup(bg, moved.Ino, "..")
			require.NoError(t, err)
			require.Equal(t, uint64(lfs.RootIno), dotdot.Ino)
			// file over directory and back
			require.ErrorIs(t, fs.Rename(bg, d2.Ino, "b", lfs.RootIno, "empty", 0), syscall.EISDIR)
			require.ErrorIs(t, fs.Rename(bg, lfs.RootIno, "empty", d2.Ino, "b", 0), syscall.ENOTDIR)
			require.ErrorIs(t, fs.Rename(bg, d2.Ino, "b", lfs.RootIno, "d1", lfs.RenameNoReplace), syscall.EEXIST)
			root, err := fs.Getattr(bg, lfs.RootIno)
			require.NoError(t, err)
			require.Equal(t, uint32(5), root.Nlink, "root: . .. d1 d2 empty")
		}},
		{"rmdir and unlink errors", func(t *testing.T, fs *lfs.FS) {
			d, err := fs.Mkdir(bg, lfs.RootIno, "d", 0o755, 0, 0)
			require.NoError(t, err)
			require.NoError(t, writeFile(fs, "d/f", nil, false))
			require.ErrorIs(t, fs.Rmdir(bg, lfs.RootIno, "d"), syscall.ENOTEMPTY)
			require.ErrorIs(t, fs.Rmdir(bg, d.Ino, "f"), syscall.ENOTDIR)
			require.ErrorIs(t, fs.Unlink(bg, lfs.RootIno, "d"), syscall.EISDIR)
			require.ErrorIs(t, fs.Unlink(bg, lfs.RootIno, "nope"), syscall.ENOENT)
			_, _, err = fs.Create(bg, d.Ino, "f", 0o644, 0, 0, 0)
			require.ErrorIs(t, err, syscall.EEXIST)
			_, _, err = fs.Create(bg, d.Ino, string(bytes.Repeat([]byte("n"), 256)), 0o644, 0, 0, 0)
			require.ErrorIs(t, err, syscall.ENAMETOOLONG)
			_, _, err = fs.Create(bg, d.Ino, "a/b", 0o644, 0, 0, 0)
			require.ErrorIs(t, err, syscall.EINVAL)
			require.NoError(t, fs.Unlink(bg, d.Ino, "f"))
			require.NoError(t, fs.Rmdir(bg, lfs.RootIno, "d"))
		}},
		{"hard links and symlinks", func(t *testing.T, fs *lfs.FS) {
			a, h := mustCreate(t, fs, lfs.RootIno, "f")
			require.NoError(t, fs.Release(bg, h))
			l, err := fs.Link(bg, a.Ino, lfs.RootIno, "g")
			require.NoError(t, err)
			require.Equal(t, uint32(2), l.Nlink)
			d, err := fs.Mkdir(bg, lfs.RootIno, "d", 0o755, 0, 0)
			require.NoError(t, err)
			_, err = fs.Link(bg, d.Ino, lfs.RootIno, "dl")
			require.ErrorIs(t, err, syscall.EPERM)
			require.NoError(t, fs.Unlink(bg, lfs.RootIno, "f"))
			at, err := fs.Getattr(bg, a.Ino)
			require.NoError(t, err)
			require.Equal(t, uint32(1), at.Nlink)
			s, err := fs.Symlink(bg, lfs.RootIno, "s", "/some/where/far", 0, 0)
			require.NoError(t, err)
			require.Equal(t, uint32(syscall.S_IFLNK), s.Mode&syscall.S_IFMT)
			tgt, err := fs.Readlink(bg, s.Ino)
			require.NoError(t, err)
			require.Equal(t, "/some/where/far", tgt)
			_, err = fs.Readlink(bg, a.Ino)
			require.ErrorIs(t, err, syscall.EINVAL)
		}},
		{"chmod chown utimens", func(t *testing.T, fs *lfs.FS) {
			a, h := mustCreate(t, fs, lfs.RootIno, "f")
			require.NoError(t, fs.Release(bg, h))
			at, err := fs.Setattr(bg, a.Ino, lfs.SetattrIn{Valid: lfs.SetMode | lfs.SetUID | lfs.SetGID | lfs.SetAtime | lfs.SetMtime,
				Mode: 0o4711, UID: 1000, GID: 100, Atime: 111, Mtime: 222})
			require.NoError(t, err)
			require.Equal(t, uint32(syscall.S_IFREG|0o4711), at.Mode)
			require.Equal(t, uint32(1000), at.UID)
			require.Equal(t, uint32(100), at.GID)
			require.Equal(t, int64(111), at.Atime)
			require.Equal(t, int64(222), at.Mtime)
		}},
		{"xattrs", func(t *testing.T, fs *lfs.FS) {
			a, h := mustCreate(t, fs, lfs.RootIno, "f")
			require.NoError(t, fs.Release(bg, h))
			require.NoError(t, fs.Setxattr(bg, a.Ino, "user.b", []byte("2"), 0))
			require.NoError(t, fs.Setxattr(bg, a.Ino, "user.a", []byte("1"), lfs.XattrCreate))
			require.ErrorIs(t, fs.Setxattr(bg, a.Ino, "user.a", []byte("x"), lfs.XattrCreate), syscall.EEXIST)
			require.ErrorIs(t, fs.Setxattr(bg, a.Ino, "user.c", []byte("x"), lfs.XattrReplace), syscall.ENODATA)
			err := fs.Setxattr(bg, a.Ino, "user.big", make([]byte, 8192), 0)
			var nr *zerr.NoResourcesError
			require.ErrorAs(t, err, &nr, "the xattr limit is a typed error")
			require.GreaterOrEqual(t, nr.Requested, uint64(4+len("user.big")+8192), "the inode's attributes with the new one")
			require.Equal(t, uint64(3986), nr.Available, "the room with 4 KiB blocks")
			require.Equal(t, syscall.ENOSPC, lfs.Errno(err))
			names, err := fs.Listxattr(bg, a.Ino)
			require.NoError(t, err)
			require.Equal(t, []string{"user.a", "user.b"}, names)
			v, err := fs.Getxattr(bg, a.Ino, "user.b")
			require.NoError(t, err)
			require.Equal(t, "2", string(v))
			require.NoError(t, fs.Removexattr(bg, a.Ino, "user.b"))
			_, err = fs.Getxattr(bg, a.Ino, "user.b")
			require.ErrorIs(t, err, syscall.ENODATA)
		}},
		{"O_APPEND", func(t *testing.T, fs *lfs.FS) {
			require.NoError(t, writeFile(fs, "f", []byte("abc"), false))
			ino, err := walk(fs, "f")
			require.NoError(t, err)
			h, err := fs.Open(bg, ino, syscall.O_WRONLY|syscall.O_APPEND)
			require.NoError(t, err)
			_, err = fs.Write(bg, h, 0, []byte("def"))
			require.NoError(t, err)
			require.NoError(t, fs.Release(bg, h))
			got, err := readFile(fs, "f")
			require.NoError(t, err)
			require.Equal(t, "abcdef", string(got))
			h, err = fs.Open(bg, ino, syscall.O_RDONLY)
			require.NoError(t, err)
			_, err = fs.Write(bg, h, 0, []byte("x"))
			require.ErrorIs(t, err, syscall.EBADF)
			require.NoError(t, fs.Release(bg, h))
		}},
		{"full file system: ENOSPC, then delete recovers", func(t *testing.T, fs *lfs.FS) {
			chunk := bytes.Repeat([]byte{7}, 64<<10)
			var i int
			var err error
			for i = 0; i < 10000; i++ {
				if err = writeFile(fs, "f"+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676)), chunk, false); err != nil {
					break
				}
			}
			require.ErrorIs(t, err, syscall.ENOSPC)
			require.Equal(t, syscall.ENOSPC, lfs.Errno(err))
			st, err := fs.Statfs(bg)
			require.NoError(t, err)
			require.Less(t, st.Bavail, uint64(32), "write(2) filled what it may")
			reserve := lfs.DefaultWriteReserve(st.Blocks, int(st.Bsize))
			require.Greater(t, reserve, uint64(0))
			require.GreaterOrEqual(t, st.Bfree, reserve, "the write-back reserve stays free")
			require.Less(t, st.Bfree, reserve+32)
			ents, err := fs.Readdir(bg, lfs.RootIno)
			require.NoError(t, err)
			for _, e := range ents[2:] {
				require.NoError(t, fs.Unlink(bg, lfs.RootIno, e.Name))
			}
			for j := 0; j < i/2; j++ {
				require.NoError(t, writeFile(fs, "again"+string(rune('a'+j%26))+string(rune('a'+j/26%26)), chunk, false))
			}
			rep, err := fs.Fsck(bg)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVol(t, 48, 8)
			fs := mkfsMount(t, v, lfs.Options{})
			tc.run(t, fs)
			rep, err := fs.Fsck(bg)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
			// everything survives a remount
			before := tree(t, fs)
			require.NoError(t, fs.Unmount(bg))
			fs, err = lfs.Mount(bg, v, lfs.Options{})
			require.NoError(t, err)
			require.Equal(t, before, tree(t, fs))
			require.NoError(t, fs.Unmount(bg))
		})
	}
}

func TestMkfsRefusesAndMountErrors(t *testing.T) {
	v := newVol(t, 32, 8)
	_, err := lfs.Mount(bg, v, lfs.Options{})
	require.ErrorIs(t, err, zerr.ErrNotFound, "nothing to mount")
	require.NoError(t, lfs.Mkfs(bg, v, lfs.MkfsOptions{}))
	err = lfs.Mkfs(bg, v, lfs.MkfsOptions{})
	require.ErrorIs(t, err, zerr.ErrAlreadyExists)
	require.NoError(t, lfs.Mkfs(bg, v, lfs.MkfsOptions{Force: true, OPPercent: 20}))
	require.ErrorIs(t, lfs.Mkfs(bg, v, lfs.MkfsOptions{Force: true, OPPercent: 90}), zerr.ErrInvalidArgument)
	fs, err := lfs.Mount(bg, v, lfs.Options{})
	require.NoError(t, err)
	require.NoError(t, fs.Unmount(bg))
	require.ErrorIs(t, fs.Unmount(bg), zerr.ErrClosed)
	_, err = fs.Getattr(bg, lfs.RootIno)
	require.Equal(t, syscall.EIO, lfs.Errno(err))
	small := newVol(t, 12, 8)
	require.ErrorIs(t, lfs.Mkfs(bg, small, lfs.MkfsOptions{}), zerr.ErrNoResources)
}

func TestErrno(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{syscall.ENOTEMPTY, syscall.ENOTEMPTY},
		{&zerr.NoResourcesError{Resource: "zones"}, syscall.ENOSPC},
		{&zerr.UnavailableError{What: "node"}, syscall.EIO},
		{&zerr.CorruptError{Path: "x"}, syscall.EUCLEAN},
		{&zerr.WritePointerError{}, syscall.EIO},
		{&zerr.NotFoundError{}, syscall.ENOENT},
		{&zerr.ClosedError{What: "fs"}, syscall.ESHUTDOWN},
		{errors.New("anything"), syscall.EIO},
	} {
		require.Equal(t, tc.want, lfs.Errno(tc.err), "%v", tc.err)
	}
}

func TestBadInputIsAnErrnoNeverAPanic(t *testing.T) {
	v := newVol(t, 32, 8)
	fs := mkfsMount(t, v, lfs.Options{})
	a, h := mustCreate(t, fs, lfs.RootIno, "f")
	_, err := fs.Write(bg, h, 0, []byte("data"))
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		call func() error
		want syscall.Errno
	}{
		{"getattr ino 0", func() error { _, err := fs.Getattr(bg, 0); return err }, syscall.ENOENT},
		{"getattr huge ino", func() error { _, err := fs.Getattr(bg, 1<<62); return err }, syscall.ENOENT},
		{"getattr unknown ino", func() error { _, err := fs.Getattr(bg, 12345); return err }, syscall.ENOENT},
		{"lookup in a file", func() error { _, err := fs.Lookup(bg, a.Ino, "x"); return err }, syscall.ENOTDIR},
		{"readdir of a file", func() error { _, err := fs.Readdir(bg, a.Ino); return err }, syscall.ENOTDIR},
		{"mkdir in a file", func() error { _, err := fs.Mkdir(bg, a.Ino, "x", 0o755, 0, 0); return err }, syscall.ENOTDIR},
		{"name with NUL", func() error { _, _, err := fs.Create(bg, lfs.RootIno, "a\x00b", 0o644, 0, 0, 0); return err }, syscall.EINVAL},
		{"name dot", func() error { _, err := fs.Mkdir(bg, lfs.RootIno, ".", 0o755, 0, 0); return err }, syscall.EINVAL},
		{"read bad handle", func() error { _, err := fs.Read(bg, 999, 0, make([]byte, 4)); return err }, syscall.EBADF},
		{"write bad handle", func() error { _, err := fs.Write(bg, 999, 0, []byte("x")); return err }, syscall.EBADF},
		{"release bad handle", func() error { return fs.Release(bg, 999) }, syscall.EBADF},
		{"negative offset", func() error { _, err := fs.Read(bg, h, -1, make([]byte, 4)); return err }, syscall.EINVAL},
		{"write past 32 TiB", func() error { _, err := fs.Write(bg, h, 1<<62, []byte("x")); return err }, syscall.EFBIG},
		{"truncate past 32 TiB", func() error {
			_, err := fs.Setattr(bg, a.Ino, lfs.SetattrIn{Valid: lfs.SetSize, Size: 1 << 62})
			return err
		}, syscall.EFBIG},
		{"truncate a directory", func() error {
			_, err := fs.Setattr(bg, lfs.RootIno, lfs.SetattrIn{Valid: lfs.SetSize, Size: 0})
			return err
		}, syscall.EISDIR},
		{"empty xattr name", func() error { return fs.Setxattr(bg, a.Ino, "", nil, 0) }, syscall.ERANGE},
		{"remove missing xattr", func() error { return fs.Removexattr(bg, a.Ino, "user.none") }, syscall.ENODATA},
		{"readlink of a dir", func() error { _, err := fs.Readlink(bg, lfs.RootIno); return err }, syscall.EINVAL},
		{"rename missing", func() error { return fs.Rename(bg, lfs.RootIno, "none", lfs.RootIno, "x", 0) }, syscall.ENOENT},
		{"rename exchange with no target", func() error { return fs.Rename(bg, lfs.RootIno, "f", lfs.RootIno, "x", lfs.RenameExchange) }, syscall.ENOENT},
		{"rename exchange and noreplace", func() error {
			return fs.Rename(bg, lfs.RootIno, "f", lfs.RootIno, "f", lfs.RenameExchange|lfs.RenameNoReplace)
		}, syscall.EINVAL},
		{"rename whiteout", func() error { return fs.Rename(bg, lfs.RootIno, "f", lfs.RootIno, "x", 4) }, syscall.EINVAL},
		{"mknod of a directory", func() error {
			_, err := fs.Mknod(bg, lfs.RootIno, "d", syscall.S_IFDIR|0o755, 0, 0, 0)
			return err
		}, syscall.EPERM},
		{"lookup of a long name", func() error { _, err := fs.Lookup(bg, lfs.RootIno, string(bytes.Repeat([]byte("n"), 256))); return err }, syscall.ENAMETOOLONG},
		{"punch a directory", func() error {
			return fs.Fallocate(bg, lfs.RootIno, lfs.FallocPunchHole|lfs.FallocKeepSize, 0, 1, nil)
		}, syscall.EISDIR},
		{"collapse range", func() error { return fs.Fallocate(bg, a.Ino, 0x08, 0, 4096, nil) }, syscall.EOPNOTSUPP},
		{"seek data past the end", func() error { _, err := fs.Lseek(bg, a.Ino, 1<<40, lfs.SeekData); return err }, syscall.ENXIO},
		{"huge symlink", func() error {
			_, err := fs.Symlink(bg, lfs.RootIno, "s", string(bytes.Repeat([]byte("x"), 5000)), 0, 0)
			return err
		}, syscall.ENAMETOOLONG},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := fs.Stats()
			require.Equal(t, tc.want, lfs.Errno(tc.call()))
			after := fs.Stats()
			require.Equal(t, before.UsedBlocks, after.UsedBlocks, "nothing changed")
		})
	}
	buf := make([]byte, 10)
	n, err := fs.Read(bg, h, 0, buf)
	require.NoError(t, err)
	require.Equal(t, "data", string(buf[:n]))
	require.NoError(t, fs.Release(bg, h))
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
}

// The NAT must fit a snapshot in one metadata zone: creating past MaxNodes is
// a clean ENOSPC, and deleting gives the inodes back.
func TestInodeLimitIsENOSPC(t *testing.T) {
	v := newVol(t, 300, 4) // many 32-block zones: the NAT, not the blocks, runs out first
	fs := mkfsMount(t, v, lfs.Options{})
	st, err := fs.Statfs(bg)
	require.NoError(t, err)
	max := st.Files
	require.Positive(t, max)
	var i int
	for i = 0; i < int(max)+10; i++ {
		_, h, err := fs.Create(bg, lfs.RootIno, "f"+itoa(uint64(i)), 0o644, 0, 0, 0)
		if err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			break
		}
		require.NoError(t, fs.Release(bg, h))
	}
	require.Less(t, i, int(max))
	st, err = fs.Statfs(bg)
	require.NoError(t, err)
	require.Less(t, st.Ffree, uint64(3))
	require.NoError(t, fs.Unmount(bg))
	fs, err = lfs.Mount(bg, v, lfs.Options{}) // the full snapshot fits
	require.NoError(t, err)
	for j := 0; j < i; j += 2 {
		require.NoError(t, fs.Unlink(bg, lfs.RootIno, "f"+itoa(uint64(j))))
	}
	_, h, err := fs.Create(bg, lfs.RootIno, "again", 0o644, 0, 0, 0)
	require.NoError(t, err)
	require.NoError(t, fs.Release(bg, h))
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
}
