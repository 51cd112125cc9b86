package fusefs_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/zonefleet/zonefleet/pkg/fusefs"
	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// mountLine is the /proc/mounts line of dir.
func mountLine(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[1] == dir {
			return l
		}
	}
	t.Fatalf("%s not in /proc/self/mounts", dir)
	return ""
}

// Reads through the mount update atime per the mode: relatime and
// strictatime update it on the first read after a write even though the
// kernel cached the written pages; noatime never does. The mount shows the
// option.
func TestMountAtime(t *testing.T) {
	for _, mode := range []lfs.AtimeMode{lfs.AtimeRelative, lfs.AtimeNever, lfs.AtimeStrict} {
		t.Run(mode.String(), func(t *testing.T) {
			m := mountClusterOpts(t, fusefs.MountOptions{Atime: mode}, lfs.Options{Move: lfs.Compact, Atime: mode})
			require.Contains(t, mountLine(t, m.dir), mode.String())
			p := filepath.Join(m.dir, "f")
			require.NoError(t, os.WriteFile(p, []byte("hello"), 0o644))
			a, err := m.fs.Lookup(context.Background(), lfs.RootIno, "f")
			require.NoError(t, err)
			_, err = m.fs.Setattr(context.Background(), a.Ino, lfs.SetattrIn{Valid: lfs.SetAtime, Atime: a.Mtime - 1})
			require.NoError(t, err)
			got, err := os.ReadFile(p)
			require.NoError(t, err)
			require.Equal(t, "hello", string(got))
			b, err := m.fs.Getattr(context.Background(), a.Ino)
			require.NoError(t, err)
			if mode == lfs.AtimeNever {
				require.Equal(t, a.Mtime-1, b.Atime, "noatime: the read left atime")
			} else {
				require.Greater(t, b.Atime, a.Mtime, "%s: the read after the write updated atime", mode)
			}
			m.unmountAndCheck(t)
		})
	}
}

// --read-only: every change is EROFS, reads work. --dev: a device node on
// the mount opens; without it (nodev) it does not.
func TestMountReadOnlyAndDev(t *testing.T) {
	t.Run("read-only", func(t *testing.T) {
		m := mountCluster(t)
		require.NoError(t, os.WriteFile(filepath.Join(m.dir, "f"), []byte("kept"), 0o644))
		require.NoError(t, m.srv.Unmount(false))
		srv, err := fusefs.Mount(fusefs.New(m.fs, fusefs.Config{}), m.dir, fusefs.MountOptions{ReadOnly: true, Direct: os.Geteuid() == 0})
		require.NoError(t, err)
		m.srv = srv
		require.Contains(t, strings.Fields(mountLine(t, m.dir))[3], "ro")
		got, err := os.ReadFile(filepath.Join(m.dir, "f"))
		require.NoError(t, err)
		require.Equal(t, "kept", string(got))
		require.ErrorIs(t, os.WriteFile(filepath.Join(m.dir, "g"), nil, 0o644), unix.EROFS)
		require.ErrorIs(t, os.Remove(filepath.Join(m.dir, "f")), unix.EROFS)
		m.unmountAndCheck(t)
	})
	for _, dev := range []bool{false, true} {
		t.Run(map[bool]string{false: "nodev", true: "dev"}[dev], func(t *testing.T) {
			if os.Geteuid() != 0 {
				t.Skip("device nodes need root")
			}
			m := mountClusterWith(t, fusefs.MountOptions{Dev: dev})
			p := filepath.Join(m.dir, "null")
			require.NoError(t, unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if dev {
				require.NoError(t, err, "dev: the device opens")
				_, err = f.Write([]byte("gone"))
				require.NoError(t, err)
				require.NoError(t, f.Close())
			} else {
				require.ErrorIs(t, err, unix.EACCES, "nodev: the device does not open")
			}
			m.unmountAndCheck(t)
		})
	}
}
