package lfs_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// TestBlocksWrittenByKind: with nothing recycled, every block written to
// the drives is a node, a metadata or a user data block, and each
// operation writes the kinds it should.
func TestBlocksWrittenByKind(t *testing.T) {
	for _, tc := range []struct {
		name             string
		ipu              int
		op               func(t *testing.T, fs *lfs.FS, h lfs.Handle)
		data, node, meta bool // which kinds the operation writes
	}{
		{"fdatasync of an overwrite", 0, func(t *testing.T, fs *lfs.FS, h lfs.Handle) {
			require.NoError(t, fs.Fsync(bg, h, true))
		}, true, true, false},
		{"fsync of an overwrite", 0, func(t *testing.T, fs *lfs.FS, h lfs.Handle) {
			require.NoError(t, fs.Fsync(bg, h, false))
		}, true, true, false},
		{"in-place fdatasync", 8, func(t *testing.T, fs *lfs.FS, h lfs.Handle) {
			require.NoError(t, fs.Fsync(bg, h, true))
		}, true, false, false},
		{"sync", 0, func(t *testing.T, fs *lfs.FS, _ lfs.Handle) {
			require.NoError(t, fs.Sync(bg))
		}, true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newIPUVol(t, 24, 8, 64)
			fs := mkfsMount(t, v, lfs.Options{IPUFsyncBlocks: tc.ipu})
			defer fs.Abandon()
			s0 := fs.Stats()
			h, _ := syncedFile(t, fs, "f", 16*4096, 'a')
			s1 := fs.Stats()
			require.GreaterOrEqual(t, s1.UserDataBlocksWritten-s0.UserDataBlocksWritten, uint64(16), "the file's 16 pages")
			require.Positive(t, s1.NodeBlocksWritten-s0.NodeBlocksWritten, "the file's inode and direct node")
			require.Positive(t, s1.MetaBlocksWritten-s0.MetaBlocksWritten, "a create's first fsync checkpoints")

			_, err := fs.Write(bg, h, 4096, bytes.Repeat([]byte{'b'}, 4096))
			require.NoError(t, err)
			tc.op(t, fs, h)
			s2 := fs.Stats()
			require.Equal(t, tc.data, s2.UserDataBlocksWritten > s1.UserDataBlocksWritten, "user data written")
			require.Equal(t, tc.node, s2.NodeBlocksWritten > s1.NodeBlocksWritten, "node blocks written")
			require.Equal(t, tc.meta, s2.MetaBlocksWritten > s1.MetaBlocksWritten, "metadata blocks written")
			require.NoError(t, fs.Release(bg, h))

			all := s2.DriveBlocksWritten - s0.DriveBlocksWritten
			kinds := s2.NodeBlocksWritten - s0.NodeBlocksWritten + s2.MetaBlocksWritten - s0.MetaBlocksWritten + s2.UserDataBlocksWritten - s0.UserDataBlocksWritten
			require.Equal(t, all, kinds, "every block written is of one kind when nothing is recycled")
			require.Zero(t, fs.Stats().CompactedSegments+fs.Stats().TLRecycledSegments)
			require.NoError(t, fs.Unmount(bg))
		})
	}
}
