package fusefs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// renameat2 RENAME_EXCHANGE swaps two names of any kinds (across
// directories too); RENAME_WHITEOUT stays EINVAL.
func TestRenameExchange(t *testing.T) {
	m := mountCluster(t)
	p := func(n string) string { return filepath.Join(m.dir, n) }
	require.NoError(t, os.WriteFile(p("a"), []byte("A"), 0o644))
	require.NoError(t, os.WriteFile(p("b"), []byte("B"), 0o644))
	require.NoError(t, os.MkdirAll(p("d1/sub"), 0o755))
	require.NoError(t, os.Mkdir(p("d2"), 0o755))
	require.NoError(t, os.WriteFile(p("d2/f"), []byte("F"), 0o644))
	xchg := func(a, b string) error {
		return unix.Renameat2(unix.AT_FDCWD, p(a), unix.AT_FDCWD, p(b), unix.RENAME_EXCHANGE)
	}
	read := func(n string) string {
		b, err := os.ReadFile(p(n))
		require.NoError(t, err, n)
		return string(b)
	}
	require.NoError(t, xchg("a", "b"))
	assert.Equal(t, "B", read("a"))
	assert.Equal(t, "A", read("b"))
	// a directory and a file in different directories
	require.NoError(t, xchg("d1/sub", "d2/f"))
	assert.Equal(t, "F", read("d1/sub"))
	fi, err := os.Stat(p("d2/f"))
	require.NoError(t, err)
	assert.True(t, fi.IsDir())
	var st1, st2 unix.Stat_t
	require.NoError(t, unix.Stat(p("d1"), &st1))
	require.NoError(t, unix.Stat(p("d2"), &st2))
	assert.Equal(t, uint64(2), uint64(st1.Nlink), "d1 lost its subdirectory")
	assert.Equal(t, uint64(3), uint64(st2.Nlink), "d2 gained one")
	// ".." of the moved directory is its new parent
	require.NoError(t, unix.Stat(p("d2/f/.."), &st1))
	assert.Equal(t, st2.Ino, st1.Ino)
	assert.ErrorIs(t, xchg("a", "missing"), syscall.ENOENT)
	assert.ErrorIs(t, xchg("d2", "d2/f"), syscall.EINVAL, "a directory cannot move below itself")
	err = unix.Renameat2(unix.AT_FDCWD, p("a"), unix.AT_FDCWD, p("b"), unix.RENAME_WHITEOUT)
	assert.Error(t, err, "whiteouts are not supported")
	m.remount(t)
	assert.Equal(t, "B", read("a"))
	assert.Equal(t, "F", read("d1/sub"))
	m.unmountAndCheck(t)
}

// O_TMPFILE makes an unnamed file that linkat(AT_EMPTY_PATH) can name,
// unless opened with O_EXCL; an unnamed one disappears at its close.
func TestTmpfile(t *testing.T) {
	m := mountCluster(t)
	fd, err := unix.Open(m.dir, unix.O_TMPFILE|unix.O_RDWR, 0o600)
	require.NoError(t, err)
	_, err = unix.Write(fd, []byte("anonymous"))
	require.NoError(t, err)
	ents, err := os.ReadDir(m.dir)
	require.NoError(t, err)
	assert.Empty(t, ents, "an O_TMPFILE file has no name")
	require.NoError(t, unix.Linkat(fd, "", unix.AT_FDCWD, filepath.Join(m.dir, "named"), unix.AT_EMPTY_PATH))
	require.NoError(t, unix.Fsync(fd))
	require.NoError(t, unix.Close(fd))
	b, err := os.ReadFile(filepath.Join(m.dir, "named"))
	require.NoError(t, err)
	assert.Equal(t, "anonymous", string(b))

	fd, err = unix.Open(m.dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_EXCL, 0o600)
	require.NoError(t, err)
	err = unix.Linkat(fd, "", unix.AT_FDCWD, filepath.Join(m.dir, "never"), unix.AT_EMPTY_PATH)
	assert.Error(t, err, "O_EXCL: never linkable")
	require.NoError(t, unix.Close(fd))
	for i := 0; i < 3; i++ { // unnamed files are freed at close
		fd, err = unix.Open(m.dir, unix.O_TMPFILE|unix.O_WRONLY, 0o600)
		require.NoError(t, err)
		_, err = unix.Write(fd, []byte(fmt.Sprint(i)))
		require.NoError(t, err)
		require.NoError(t, unix.Close(fd))
	}
	m.remount(t)
	ents, err = os.ReadDir(m.dir)
	require.NoError(t, err)
	require.Len(t, ents, 1)
	assert.Equal(t, "named", ents[0].Name())
	m.unmountAndCheck(t)
}
