package lfs_test

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

var bg = context.Background()

// newVol makes a volume over one emulated drive with zones zones of
// 8*ppb blocks.
func newVol(t testing.TB, zones, ppb int) *devvol.Volume {
	t.Helper()
	d, err := zns.Create(filepath.Join(t.TempDir(), "dev0"), devvol.TestConfig(zones, ppb), clock.Off())
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	v, err := devvol.New(d)
	require.NoError(t, err)
	return v
}

func mkfsMount(t testing.TB, v lfs.Volume, opts lfs.Options) *lfs.FS {
	t.Helper()
	require.NoError(t, lfs.Mkfs(bg, v, lfs.MkfsOptions{}))
	fs, err := lfs.Mount(bg, v, opts)
	require.NoError(t, err)
	return fs
}

// walk resolves a slash path to an inode.
func walk(fs *lfs.FS, p string) (uint64, error) {
	ino := uint64(lfs.RootIno)
	for _, c := range strings.Split(strings.Trim(p, "/"), "/") {
		if c == "" {
			continue
		}
		a, err := fs.Lookup(bg, ino, c)
		if err != nil {
			return 0, err
		}
		ino = a.Ino
	}
	return ino, nil
}

func split(p string) (string, string) {
	p = strings.Trim(p, "/")
	i := strings.LastIndex(p, "/")
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

// writeFile creates or truncates p and writes data.
func writeFile(fs *lfs.FS, p string, data []byte, fsync bool) error {
	dir, name := split(p)
	pino, err := walk(fs, dir)
	if err != nil {
		return err
	}
	var h lfs.Handle
	a, err := fs.Lookup(bg, pino, name)
	if err == nil {
		h, err = fs.Open(bg, a.Ino, syscall.O_RDWR|syscall.O_TRUNC)
	} else if err == syscall.ENOENT {
		_, h, err = fs.Create(bg, pino, name, 0o644, 0, 0, syscall.O_RDWR)
	}
	if err != nil {
		return err
	}
	defer fs.Release(bg, h)
	if len(data) > 0 {
		n, err := fs.Write(bg, h, 0, data)
		if err != nil {
			return err
		}
		if n != len(data) {
			return syscall.EIO
		}
	}
	if fsync {
		return fs.Fsync(bg, h, false)
	}
	return nil
}

func readFile(fs *lfs.FS, p string) ([]byte, error) {
	ino, err := walk(fs, p)
	if err != nil {
		return nil, err
	}
	a, err := fs.Getattr(bg, ino)
	if err != nil {
		return nil, err
	}
	h, err := fs.Open(bg, ino, syscall.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer fs.Release(bg, h)
	buf := make([]byte, a.Size)
	n, err := fs.Read(bg, h, 0, buf)
	return buf[:n], err
}
