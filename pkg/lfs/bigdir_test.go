package lfs_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// countVol counts the blocks a Volume is asked to write (lfs writes
// concurrently: write-back lanes and the checkpoint).
type countVol struct {
	lfs.Volume
	blocks atomic.Uint64
}

func (c *countVol) Write(ctx context.Context, z lfs.ZoneID, off uint64, d []byte, fua bool) error {
	c.blocks.Add(uint64(len(d) / 4096))
	return c.Volume.Write(ctx, z, off, d, fua)
}

// Many files in one directory: every create costs the same number of block
// writes whether the directory holds 1k or 30k entries (no quadratic work),
// and every name is found again after a remount.
func TestManyFilesInOneDirectory(t *testing.T) {
	d, err := zns.Create(filepath.Join(t.TempDir(), "dev0"), devvol.TestConfig(200, 32), clock.Off())
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	dv, err := devvol.New(d)
	require.NoError(t, err)
	v := &countVol{Volume: dv}
	fs := mkfsMount(t, v, lfs.Options{CacheInodes: 4096})
	dir, err := fs.Mkdir(bg, lfs.RootIno, "big", 0o755, 0, 0)
	require.NoError(t, err)
	const n, batch = 30000, 3000
	var perBatch []uint64
	for b := 0; b < n/batch; b++ {
		before := v.blocks.Load()
		for i := b * batch; i < (b+1)*batch; i++ {
			_, h, err := fs.Create(bg, dir.Ino, fmt.Sprintf("file-%06d", i), 0o644, 0, 0, 0)
			require.NoError(t, err)
			require.NoError(t, fs.Release(bg, h))
		}
		require.NoError(t, fs.Sync(bg))
		perBatch = append(perBatch, v.blocks.Load()-before)
	}
	t.Logf("blocks written per %d creates: %v", batch, perBatch)
	for _, w := range perBatch[1:] {
		require.Less(t, float64(w), 1.5*float64(perBatch[0]), "cost per create does not grow with the directory")
	}
	require.Less(t, fs.Stats().CachedInodes, 4096+batch, "inode cache stays bounded")
	ents, err := fs.Readdir(bg, dir.Ino)
	require.NoError(t, err)
	require.Len(t, ents, n+2)
	require.NoError(t, fs.Unmount(bg))
	fs, err = lfs.Mount(bg, v, lfs.Options{CacheInodes: 4096})
	require.NoError(t, err)
	for i := 0; i < n; i += 7 {
		_, err := fs.Lookup(bg, dir.Ino, fmt.Sprintf("file-%06d", i))
		require.NoError(t, err)
	}
	for i := 0; i < n; i += 3 {
		require.NoError(t, fs.Unlink(bg, dir.Ino, fmt.Sprintf("file-%06d", i)))
	}
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.Equal(t, n-n/3+2, rep.Inodes-0, "root, big and the files left")
	require.NoError(t, fs.Unmount(bg))
}
