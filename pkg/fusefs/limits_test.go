package fusefs_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Edges a real program meets through the mount (found with a battery of
// syscalls against `zctl local up --mount`): a fallocate larger than the
// free space, timestamps outside what the file system stores, and POSIX ACLs
// it would not enforce.
func TestFallocateAndTimestampEdges(t *testing.T) {
	m := mountCluster(t)
	p := filepath.Join(m.dir, "f")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	defer f.Close()
	var sfs unix.Statfs_t
	require.NoError(t, unix.Statfs(m.dir, &sfs))
	free := int64(sfs.Bavail) * sfs.Bsize

	t.Run("fallocate past the free space is ENOSPC and changes nothing", func(t *testing.T) {
		for _, mode := range []uint32{0, unix.FALLOC_FL_KEEP_SIZE} {
			err := unix.Fallocate(int(f.Fd()), mode, 0, 2*free+(1<<30))
			assert.ErrorIs(t, err, unix.ENOSPC, "mode %d", mode)
			st, err := f.Stat()
			require.NoError(t, err)
			assert.Zero(t, st.Size(), "mode %d: the size did not change", mode)
		}
		require.NoError(t, unix.Fallocate(int(f.Fd()), 0, 0, 1<<20), "what fits is allocated (the size grows)")
		st, err := f.Stat()
		require.NoError(t, err)
		assert.Equal(t, int64(1<<20), st.Size())
		_, err = f.WriteAt(make([]byte, 1<<20), 0)
		require.NoError(t, err)
		require.NoError(t, unix.Fallocate(int(f.Fd()), 0, 0, 1<<20), "a range the file holds needs nothing")
	})

	t.Run("POSIX ACLs are refused, not stored unenforced", func(t *testing.T) {
		// user::rw- group::r-- other::--- (an ACL taking others' read away)
		acl := []byte{2, 0, 0, 0, 1, 0, 6, 0, 0xff, 0xff, 0xff, 0xff, 4, 0, 4, 0, 0xff, 0xff, 0xff, 0xff, 0x20, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}
		d := filepath.Join(m.dir, "d")
		require.NoError(t, os.Mkdir(d, 0o755))
		assert.ErrorIs(t, unix.Setxattr(p, "system.posix_acl_access", acl, 0), unix.EOPNOTSUPP)
		assert.ErrorIs(t, unix.Setxattr(d, "system.posix_acl_default", acl, 0), unix.EOPNOTSUPP, "a directory's default ACL")
		require.NoError(t, unix.Setxattr(p, "user.note", []byte("v"), 0), "other xattrs work")
	})

	t.Run("timestamps", func(t *testing.T) {
		for _, c := range []struct {
			name     string
			set      unix.Timespec
			wantSec  int64
			wantNsec int64
		}{
			{"2038+", unix.Timespec{Sec: 1 << 32, Nsec: 7}, 1 << 32, 7},
			{"before 1970 with a fraction", unix.Timespec{Sec: -315619200, Nsec: 500_000_000}, -315619200, 500_000_000},
			// the ends of int64 nanoseconds: 2262-04-11T23:47:16.854775807Z
			// and 1677-09-21T00:12:43.145224192Z
			{"far future: clamped to 2262, not wrapped", unix.Timespec{Sec: 1 << 40}, math.MaxInt64 / 1_000_000_000, math.MaxInt64 % 1_000_000_000},
			{"far past: clamped to 1677", unix.Timespec{Sec: -(1 << 40)}, -9223372037, 145224192},
		} {
			require.NoError(t, unix.UtimesNano(p, []unix.Timespec{c.set, c.set}), c.name)
			var st unix.Stat_t
			require.NoError(t, unix.Stat(p, &st))
			assert.Equal(t, c.wantSec, st.Mtim.Sec, "%s: mtime seconds", c.name)
			assert.Equal(t, c.wantNsec, st.Mtim.Nsec, "%s: mtime nanoseconds", c.name)
			assert.Equal(t, st.Mtim, st.Atim, c.name)
		}
	})
}
