package fusefs_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/zonefleet/zonefleet/pkg/fusefs"
	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// runAsNobody runs a shell command as uid/gid 65534 without capabilities
// and returns its combined output and error (a failure is no test failure).
func runAsNobody(cmd string) (string, error) {
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "sh", "-c", cmd).CombinedOutput()
	return string(out), err
}

// The root-reserved share on a real mount: a user's dd stops with ENOSPC
// at what df reports available, while root still writes the share, creates
// files, and opens and reads a WAL-mode SQLite database whose recovery
// needs new blocks; fsck finds the full file system sound.
func TestRootReserveOnMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a second user, setpriv")
	}
	for _, wb := range []bool{false, true} {
		t.Run(map[bool]string{false: "write-through", true: "writeback-cache"}[wb], func(t *testing.T) {
			m := mountClusterMkfs(t, lfs.MkfsOptions{OPPercent: 20, ReservedRootPercent: lfs.DefaultReservedRootPercent},
				fusefs.MountOptions{AllowOther: true, WritebackCache: wb}, lfs.Options{Move: lfs.Compact})
			resv := m.fs.RootReserveBlocks()
			require.NotZero(t, resv)
			// nobody must reach the mount: t.TempDir's directories are 0700
			for d := filepath.Dir(m.dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
				require.NoError(t, os.Chmod(d, 0o755))
			}
			require.NoError(t, os.Chmod(m.dir, 0o1777))

			// two WAL-mode databases: one closed cleanly (an open must
			// create its -shm, 32 KiB written before the first read), one
			// whose writer was killed before any checkpoint (its last
			// transactions only in the WAL, which the open replays)
			_, err := exec.LookPath("sqlite3")
			haveSQLite := err == nil
			if !haveSQLite {
				t.Log("no sqlite3: the databases are not tried")
			}
			clean, crashed := filepath.Join(m.dir, "clean.db"), filepath.Join(m.dir, "crashed.db")
			if haveSQLite {
				const create = "PRAGMA journal_mode=WAL;\nPRAGMA wal_autocheckpoint=0;\nCREATE TABLE t(x);\n" +
					"INSERT INTO t SELECT zeroblob(1000) FROM generate_series(1, 500);\n"
				sqlite3(t, clean, create)
				_, err := os.Stat(clean + "-shm")
				require.ErrorIs(t, err, os.ErrNotExist, "a clean close removes the -shm")
				cmd := exec.Command("sqlite3", crashed)
				cmd.Stdin = strings.NewReader(create + ".shell kill -9 $PPID\n")
				out, _ := cmd.CombinedOutput()
				st, err := os.Stat(crashed + "-wal")
				require.NoError(t, err, "the WAL survives the kill: %s", out)
				require.NotZero(t, st.Size())
			}

			var st0 unix.Statfs_t
			require.NoError(t, unix.Statfs(m.dir, &st0))
			user := filepath.Join(m.dir, "user")
			out, err := runAsNobody(fmt.Sprintf("dd if=/dev/zero of=%s bs=64k conv=fsync", user))
			require.Error(t, err, "a user's dd stops: %s", out)
			require.Contains(t, out, "No space left on device")
			fi, err := os.Stat(user)
			require.NoError(t, err)
			avail := int64(st0.Bavail) * st0.Bsize
			t.Logf("df: %d bytes available, %d free (share %d blocks); a user's dd wrote %d bytes", avail, int64(st0.Bfree)*st0.Bsize, resv, fi.Size())
			if !wb {
				require.InEpsilon(t, float64(avail), float64(fi.Size()), 0.01, "a user fills what df reports available")
			} else {
				// the kernel holds the pages write(2) accepted past the
				// limit: a write-back may lose some (fsync reports it)
				require.InEpsilon(t, float64(avail), float64(fi.Size()), 0.05)
			}
			var st1 unix.Statfs_t
			require.NoError(t, unix.Statfs(m.dir, &st1))
			require.GreaterOrEqual(t, st1.Bfree, resv*9/10, "the share is left free")

			if haveSQLite {
				for _, db := range []string{clean, crashed} {
					out, err := exec.Command("sqlite3", db, "SELECT count(*), sum(length(x)) FROM t;").CombinedOutput()
					require.NoError(t, err, "root opens %s on the full file system: %s", filepath.Base(db), out)
					require.Equal(t, "500|500000", strings.TrimSpace(string(out)), filepath.Base(db))
				}
			}

			f, n, werr := fillFile(t, filepath.Join(m.dir, "root"), 'r', 1<<40)
			require.ErrorIs(t, werr, unix.ENOSPC)
			if serr := f.Sync(); serr != nil {
				require.ErrorIs(t, serr, unix.ENOSPC)
			}
			require.NoError(t, f.Close())
			t.Logf("root then wrote %d bytes (share %d bytes)", n, int64(resv)*st0.Bsize)
			require.Greater(t, n, int64(resv)*st0.Bsize/2, "root writes into the share")
			_, err = runAsNobody("touch " + filepath.Join(m.dir, "user-new"))
			require.Error(t, err, "a user cannot create in the share")
			m.unmountAndCheck(t)
		})
	}
}

// sqlite3 runs the sqlite3 shell on db with script as its input.
func sqlite3(t *testing.T, db, script string) string {
	t.Helper()
	cmd := exec.Command("sqlite3", db)
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// df -i on a mount: the free inodes statfs reports are the empty files a
// user can create before ENOSPC, within 1 %, with a root-reserved share
// (which users' files may not fill).
func TestStatfsInodesMatchFillOnMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a second user, setpriv")
	}
	// (half the space over-provisioned: fewer files to create)
	m := mountClusterMkfs(t, lfs.MkfsOptions{OPPercent: 50, ReservedRootPercent: lfs.DefaultReservedRootPercent},
		fusefs.MountOptions{AllowOther: true}, lfs.Options{Move: lfs.Compact})
	for d := filepath.Dir(m.dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	require.NoError(t, os.Chmod(m.dir, 0o1777))
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(m.dir, &st))
	out, err := runAsNobody(fmt.Sprintf("cd %s && i=0; while { true > f$i; } 2>/dev/null; do i=$((i+1)); done; echo $i", m.dir))
	require.NoError(t, err, out)
	var n uint64
	_, err = fmt.Sscan(strings.TrimSpace(out), &n)
	require.NoError(t, err, out)
	t.Logf("df -i: %d inodes, %d free; a user created %d empty files", st.Files, st.Ffree, n)
	require.InEpsilon(t, float64(st.Ffree), float64(n), 0.01)
	require.NoError(t, os.WriteFile(filepath.Join(m.dir, "root"), nil, 0o644), "root still creates")
	m.unmountAndCheck(t)
}
