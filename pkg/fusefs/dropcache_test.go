package fusefs_test

import (
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/zonefleet/zonefleet/pkg/fusefs"
)

// TestDropCachesXattr: setting the root's DropCachesXattr to "1" empties
// lfs's cache of the written-back file's clean pages, and the file reads
// back the same; another value is EINVAL, a caller other than root gets
// EPERM (on a mount shared with allow_other and a root directory everyone
// may write), and the attribute reads as absent.
func TestDropCachesXattr(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the caller check is against uid 0")
	}
	m := mountClusterWith(t, fusefs.MountOptions{AllowOther: true})
	data := make([]byte, 256<<10)
	for i := range data {
		data[i] = byte(i * 13)
	}
	p := filepath.Join(m.dir, "f")
	f, err := os.Create(p)
	require.NoError(t, err)
	_, err = f.Write(data)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	require.Positive(t, m.fs.Stats().CachedPages, "the written pages stay cached, clean")

	require.ErrorIs(t, unix.Setxattr(m.dir, fusefs.DropCachesXattr, []byte("2"), 0), syscall.EINVAL)
	require.Positive(t, m.fs.Stats().CachedPages, "a refused request drops nothing")

	require.NoError(t, os.Chmod(m.dir, 0o777))
	root, err := os.Open(m.dir) // (the test's temporary parents are 0700)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		// fsuid is per thread: this goroutine's thread acts as uid 65534
		// and is not handed back to the runtime
		runtime.LockOSThread()
		unix.Setfsuid(65534)
		errc <- unix.Fsetxattr(int(root.Fd()), fusefs.DropCachesXattr, []byte("1"), 0)
	}()
	require.ErrorIs(t, <-errc, syscall.EPERM)
	require.NoError(t, root.Close())
	require.Positive(t, m.fs.Stats().CachedPages, "a refused request drops nothing")

	require.NoError(t, unix.Setxattr(m.dir, fusefs.DropCachesXattr, []byte("1"), 0))
	s := m.fs.Stats()
	assert.Equal(t, s.DirtyPages, s.CachedPages, "only dirty pages stay")

	_, err = unix.Getxattr(m.dir, fusefs.DropCachesXattr, make([]byte, 16))
	require.ErrorIs(t, err, syscall.ENODATA)
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, data, got)
	m.unmountAndCheck(t)
}
