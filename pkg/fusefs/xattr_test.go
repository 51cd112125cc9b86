package fusefs_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Extended attribute names and flags behave as on the host's own file
// system: each case runs on the mount and on a t.TempDir, and both must
// give the same result (FUSE passes any name through, so the namespaces a
// disk file system stores are the binding's to enforce).
func TestXattrNamesAsOnTheHost(t *testing.T) {
	m := mountCluster(t)
	dirs := []string{m.dir, t.TempDir()}
	errOf := func(err error) string {
		var e syscall.Errno
		if errors.As(err, &e) {
			return unix.ErrnoName(e)
		}
		if err != nil {
			return err.Error()
		}
		return "ok"
	}
	for _, tc := range []struct {
		name  string
		attr  string
		value []byte
		flags int
	}{
		{"user namespace", "user.k", []byte("v"), 0},
		{"empty value", "user.empty", nil, 0},
		{"security namespace", "security.zf", []byte("v"), 0},
		{"trusted namespace (root)", "trusted.zf", []byte("v"), 0},
		{"bare user prefix", "user.", []byte("v"), 0},
		{"bare security prefix", "security.", []byte("v"), 0},
		{"other system name", "system.foo", []byte("v"), 0},
		{"made-up namespace", "bogus.x", []byte("v"), 0},
		{"no namespace", "user", []byte("v"), 0},
		{"create a new one", "user.new", []byte("v"), unix.XATTR_CREATE},
		{"replace a missing one", "user.missing", []byte("v"), unix.XATTR_REPLACE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, d := range dirs {
				p := filepath.Join(d, "x-"+tc.name)
				require.NoError(t, os.WriteFile(p, []byte("data"), 0o644))
				got = append(got, errOf(unix.Setxattr(p, tc.attr, tc.value, tc.flags)))
			}
			assert.Equal(t, got[1], got[0], "mount vs host for %q", tc.attr)
		})
	}
	// the made-up namespace is not stored: it is not listed
	p := filepath.Join(m.dir, "x-made-up namespace")
	buf := make([]byte, 4096)
	n, err := unix.Listxattr(p, buf)
	require.NoError(t, err)
	assert.NotContains(t, string(buf[:n]), "bogus")
	// an inode's attributes share its block (3,986 bytes with 4 KiB
	// blocks, 4 bytes of lengths per attribute): past it, ENOSPC
	p = filepath.Join(m.dir, "x-room")
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	require.ErrorIs(t, unix.Setxattr(p, "user.big", make([]byte, 3986), 0), unix.ENOSPC)
	require.NoError(t, unix.Setxattr(p, "user.fits", make([]byte, 3900), 0))
	m.unmountAndCheck(t)
}
