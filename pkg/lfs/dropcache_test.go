package lfs_test

import (
	"bytes"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// TestDropCleanCache: after a write, an fsync and a read, the file's pages
// are cached and clean; DropCleanCache drops them all (and only them: the
// dirty pages of a second file stay), the next read goes to the drives and
// returns the same bytes, and the dirty pages are still there.
func TestDropCleanCache(t *testing.T) {
	const bs, pages = 4096, 16
	v := newVol(t, 64, 8)
	fs := mkfsMount(t, v, lfs.Options{ReadAheadBlocks: -1})
	data := make([]byte, pages*bs)
	for i := range data {
		data[i] = byte(i * 7)
	}
	_, h, err := fs.Create(bg, lfs.RootIno, "clean", 0o644, 0, 0, syscall.O_RDWR)
	require.NoError(t, err)
	_, err = fs.Write(bg, h, 0, data)
	require.NoError(t, err)
	require.NoError(t, fs.Fsync(bg, h, false))

	_, h2, err := fs.Create(bg, lfs.RootIno, "dirty", 0o644, 0, 0, syscall.O_RDWR)
	require.NoError(t, err)
	_, err = fs.Write(bg, h2, 0, data[:2*bs])
	require.NoError(t, err)

	before := fs.Stats()
	require.GreaterOrEqual(t, before.CachedPages, pages+2)
	require.GreaterOrEqual(t, before.DirtyPages, 2, "the second file's pages are dirty")

	dropped := fs.DropCleanCache()
	require.Equal(t, before.CachedPages-before.DirtyPages, dropped)
	after := fs.Stats()
	require.Equal(t, before.DirtyPages, after.CachedPages, "only the dirty pages stay")
	require.Equal(t, before.DirtyPages, after.DirtyPages)

	got := make([]byte, len(data))
	n, err := fs.Read(bg, h, 0, got)
	require.NoError(t, err)
	require.Equal(t, len(data), n)
	require.True(t, bytes.Equal(data, got), "a read after the drop returns the data from the drives")

	got2 := make([]byte, 2*bs)
	_, err = fs.Read(bg, h2, 0, got2)
	require.NoError(t, err)
	require.Equal(t, data[:2*bs], got2)
	require.Equal(t, before.DirtyPages, fs.Stats().DirtyPages, "the dirty pages were never dropped")
	require.NoError(t, fs.Unmount(bg))
}
