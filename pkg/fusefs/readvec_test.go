package fusefs_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/fusefs"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// READ replies are written from lfs's page cache and, for what is not
// cached, from the request's buffer (lfs.ReadVec): with a page cache far
// smaller than the file, reads through the kernel mix both kinds of pieces,
// at offsets inside pages too, and must return the file's bytes.
func TestReadVecThroughKernel(t *testing.T) {
	needFuse(t)
	ctx := context.Background()
	d, err := zns.Create(filepath.Join(t.TempDir(), "dev0"), devvol.TestConfig(64, 16), clock.Off())
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	vol, err := devvol.New(d)
	require.NoError(t, err)
	require.NoError(t, lfs.Mkfs(ctx, vol, lfs.MkfsOptions{}))
	fs, err := lfs.Mount(ctx, vol, lfs.Options{CacheBlocks: 64})
	require.NoError(t, err)
	dir := t.TempDir()
	srv, err := fusefs.Mount(fusefs.New(fs, fusefs.Config{}), dir, fusefs.MountOptions{Direct: os.Geteuid() == 0})
	require.NoError(t, err)
	defer func() {
		require.NoError(t, srv.Unmount(false))
		require.NoError(t, fs.Unmount(ctx))
	}()

	want := make([]byte, 3<<20+1234) // 3 MiB and a partial page: 6× the page cache
	for i := range want {
		want[i] = byte(i*7 + i>>12)
	}
	p := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(p, want, 0o644))
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	for pass := 0; pass < 3; pass++ {
		// the kernel's cache of the file dropped: every read reaches lfs
		require.NoError(t, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED))
		got := make([]byte, len(want))
		for _, off := range []int{0, 4096*37 + 100, 1 << 20, 2<<20 + 2048} {
			n, err := f.ReadAt(got[off:], int64(off))
			if err != nil {
				require.ErrorContains(t, err, "EOF")
			}
			require.Equal(t, len(want)-off, n)
			if !assert.True(t, bytes.Equal(want[off:], got[off:off+n]), "pass %d: read at %d differs", pass, off) {
				return
			}
		}
	}
}
