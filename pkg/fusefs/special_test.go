package fusefs_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/zonefleet/zonefleet/pkg/fusefs"
	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// remount ends the FUSE mount and lfs cleanly and mounts both again.
func (m *mounted) remount(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, m.srv.Unmount(false))
	m.srv = nil
	require.NoError(t, m.fs.Unmount(ctx))
	fs, err := lfs.Mount(ctx, m.vol, lfs.Options{Move: lfs.Compact})
	require.NoError(t, err)
	m.fs = fs
	srv, err := fusefs.Mount(fusefs.New(fs, fusefs.Config{}), m.dir, fusefs.MountOptions{Direct: os.Geteuid() == 0})
	require.NoError(t, err)
	m.srv = srv
}

// FIFOs, Unix sockets and device nodes made through the kernel (mkfifo,
// bind, mknod) work, keep type, rdev, mode and owner across a remount, and a
// FIFO carries data between a reader and a writer.
func TestSpecialFiles(t *testing.T) {
	m := mountCluster(t)
	root := os.Geteuid() == 0
	p := func(n string) string { return filepath.Join(m.dir, n) }
	require.NoError(t, unix.Mkfifo(p("fifo"), 0o640))
	l, err := net.Listen("unix", p("sock"))
	require.NoError(t, err)
	type want struct {
		typ  uint32
		rdev uint64
	}
	wants := map[string]want{"fifo": {syscall.S_IFIFO, 0}, "sock": {syscall.S_IFSOCK, 0}}
	if root {
		require.NoError(t, unix.Mknod(p("null"), syscall.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
		require.NoError(t, unix.Mknod(p("blk"), syscall.S_IFBLK|0o600, int(unix.Mkdev(8, 17))))
		require.NoError(t, os.Chown(p("blk"), 1234, 5678))
		wants["null"] = want{syscall.S_IFCHR, unix.Mkdev(1, 3)}
		wants["blk"] = want{syscall.S_IFBLK, unix.Mkdev(8, 17)}
	}
	// a FIFO passes data (the kernel serves it; the file system holds the node)
	done := make(chan []byte)
	go func() {
		b, _ := os.ReadFile(p("fifo"))
		done <- b
	}()
	require.NoError(t, os.WriteFile(p("fifo"), []byte("through the pipe"), 0))
	assert.Equal(t, "through the pipe", string(<-done))
	// a Unix socket accepts connections
	go func() {
		if c, err := l.Accept(); err == nil {
			_, _ = c.Write([]byte("hi"))
			_ = c.Close()
		}
	}()
	c, err := net.Dial("unix", p("sock"))
	require.NoError(t, err)
	buf := make([]byte, 2)
	_, err = c.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "hi", string(buf))
	require.NoError(t, c.Close())
	require.NoError(t, l.Close()) // removes the socket file: make it again
	l, err = net.Listen("unix", p("sock"))
	require.NoError(t, err)
	if ul, ok := l.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
	}
	require.NoError(t, l.Close())

	check := func(when string) {
		for n, w := range wants {
			var st unix.Stat_t
			require.NoError(t, unix.Lstat(p(n), &st), "%s %s", when, n)
			assert.Equal(t, w.typ, st.Mode&syscall.S_IFMT, "%s %s type", when, n)
			assert.Equal(t, w.rdev, st.Rdev, "%s %s rdev", when, n)
			assert.Zero(t, st.Size, "%s %s size", when, n)
		}
		var st unix.Stat_t
		require.NoError(t, unix.Lstat(p("fifo"), &st))
		assert.Equal(t, uint32(0o640), st.Mode&0o7777, when)
		if root {
			require.NoError(t, unix.Lstat(p("blk"), &st))
			assert.Equal(t, uint32(1234), st.Uid, when)
			assert.Equal(t, uint32(5678), st.Gid, when)
		}
		ents, err := os.ReadDir(m.dir)
		require.NoError(t, err)
		types := map[string]os.FileMode{}
		for _, e := range ents {
			types[e.Name()] = e.Type()
		}
		assert.Equal(t, os.ModeNamedPipe, types["fifo"], when)
		assert.Equal(t, os.ModeSocket, types["sock"], when)
	}
	check("before remount")
	m.remount(t)
	check("after remount")
	require.NoError(t, os.Chmod(p("fifo"), 0o600))
	require.NoError(t, os.Remove(p("sock")))
	m.unmountAndCheck(t)
}

// Every call that takes a name accepts 255 bytes and refuses 256 with
// ENAMETOOLONG (never ENOENT).
func TestNameTooLong(t *testing.T) {
	m := mountCluster(t)
	ok := filepath.Join(m.dir, strings.Repeat("a", 255))
	long := filepath.Join(m.dir, strings.Repeat("b", 256))
	other := filepath.Join(m.dir, "other")
	require.NoError(t, os.WriteFile(other, []byte("x"), 0o644))
	calls := []struct {
		name string
		run  func(p string) error
		undo func(p string) error
	}{
		{"create", func(p string) error { return os.WriteFile(p, []byte("d"), 0o644) }, nil},
		{"stat", func(p string) error { _, err := os.Lstat(p); return err }, nil},
		{"open", func(p string) error {
			f, err := os.Open(p)
			if err == nil {
				_ = f.Close()
			}
			return err
		}, nil},
		{"chmod", func(p string) error { return os.Chmod(p, 0o600) }, nil},
		{"chown", func(p string) error { return os.Lchown(p, os.Getuid(), os.Getgid()) }, nil},
		{"truncate", func(p string) error { return os.Truncate(p, 1) }, nil},
		{"utimes", func(p string) error { return unix.Utimes(p, []unix.Timeval{{Sec: 1}, {Sec: 2}}) }, nil},
		{"setxattr", func(p string) error { return unix.Setxattr(p, "user.k", []byte("v"), 0) }, nil},
		{"link", func(p string) error { return os.Link(other, p) }, os.Remove},
		{"rename to", func(p string) error { return os.Rename(other, p) }, func(p string) error { return os.Rename(p, other) }},
		{"rename from", func(p string) error {
			if err := os.Rename(p, other+"2"); err != nil {
				return err
			}
			return os.Rename(other+"2", p)
		}, nil},
		{"unlink", os.Remove, func(p string) error { return os.WriteFile(p, nil, 0o644) }},
		{"mkdir", func(p string) error { return os.Mkdir(p, 0o755) }, os.Remove},
		{"symlink", func(p string) error { return os.Symlink("target", p) }, os.Remove},
		{"mkfifo", func(p string) error { return unix.Mkfifo(p, 0o644) }, os.Remove},
		{"rmdir", func(p string) error {
			_ = os.Mkdir(p, 0o755) // fails for 256 bytes: rmdir must say why
			return syscall.Rmdir(p)
		}, nil},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			p := ok
			switch c.name {
			case "link", "rename to", "mkdir", "symlink", "mkfifo", "rmdir":
				p = ok + "-"[:0] // a fresh name of 255 bytes
				require.NoError(t, os.RemoveAll(ok))
			}
			require.NoError(t, c.run(p), "255 bytes")
			if c.undo != nil {
				require.NoError(t, c.undo(p))
			}
			if _, err := os.Lstat(ok); os.IsNotExist(err) {
				require.NoError(t, os.WriteFile(ok, []byte("d"), 0o644))
			}
			err := c.run(long)
			require.ErrorIs(t, err, syscall.ENAMETOOLONG, "256 bytes")
		})
	}
	m.unmountAndCheck(t)
}
