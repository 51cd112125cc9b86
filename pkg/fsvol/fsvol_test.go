package fsvol_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/internal/testcluster"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

func content(name string, pass, n int) []byte {
	out := make([]byte, 0, n)
	for i := 0; len(out) < n; i++ {
		h := sha256.Sum256([]byte(fmt.Sprintf("%s/%d/%d", name, pass, i)))
		out = append(out, h[:]...)
	}
	return out[:n]
}

// The file system over a real cluster: mkfs, files, fsync, remount, and
// recycling that offloads compaction to the drives through the nodes.
func TestFileSystemOverTheCluster(t *testing.T) {
	ctx := context.Background()
	_, c := testcluster.Tenant(t, localcluster.Config{Nodes: 3}, &v1.CreateNamespaceRequest{Name: "fs", MaxActiveVzones: 8, ZonesPerVzone: 4})
	vol, err := fsvol.New(ctx, c, fsvol.Options{MaxZones: 28})
	require.NoError(t, err)
	geo := vol.Geometry()
	assert.Equal(t, 4096, geo.BlockSize)
	assert.Equal(t, uint64(512), geo.ZoneBlocks, "4 zones of 128 blocks")
	assert.Equal(t, 4, geo.ChunkBlocks)
	assert.Equal(t, 8, geo.MaxOpen)

	require.NoError(t, lfs.Mkfs(ctx, vol, lfs.MkfsOptions{OPPercent: 20}))
	assert.Error(t, lfs.Mkfs(ctx, vol, lfs.MkfsOptions{}), "a namespace holding a file system is refused without Force")

	fs, err := lfs.Mount(ctx, vol, lfs.Options{Move: lfs.Compact})
	require.NoError(t, err)
	files := map[string][]byte{}
	write := func(name string, off int, data []byte) {
		a, err := fs.Lookup(ctx, lfs.RootIno, name)
		var h lfs.Handle
		if err == nil {
			h, err = fs.Open(ctx, a.Ino, os.O_RDWR)
		} else {
			_, h, err = fs.Create(ctx, lfs.RootIno, name, 0o644, 0, 0, os.O_RDWR)
		}
		require.NoError(t, err)
		_, err = fs.Write(ctx, h, int64(off), data)
		require.NoError(t, err)
		require.NoError(t, fs.Fsync(ctx, h, false))
		require.NoError(t, fs.Release(ctx, h))
		cur := files[name]
		if len(cur) < off+len(data) {
			cur = append(cur, make([]byte, off+len(data)-len(cur))...)
		}
		copy(cur[off:], data)
		files[name] = cur
	}
	// Fill about 70 %, then overwrite random 64 KiB pieces across all files:
	// segments end up partly valid and recycle through zone_compaction.
	const nfiles, size, piece = 18, 1 << 20, 64 << 10
	for i := 0; i < nfiles; i++ {
		name := fmt.Sprintf("f%d", i)
		write(name, 0, content(name, 0, size))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for k := 0; k < 3*nfiles*size/piece/2; k++ {
		name := fmt.Sprintf("f%d", rng.IntN(nfiles))
		off := rng.IntN(size/piece) * piece
		write(name, off, content(name, k+1, piece))
	}
	st := fs.Stats()
	t.Logf("stats after the overwrites: %+v", st)
	assert.Positive(t, st.GCForeground+st.GCBackground, "recycling ran")
	assert.Positive(t, st.MovedIZC, "valid blocks moved by the drives (IZC)")
	require.NoError(t, fs.Unmount(ctx))

	rep, err := lfs.Fsck(ctx, vol, false)
	require.NoError(t, err)
	assert.Empty(t, rep.Problems, "fsck: %+v", rep)

	fs, err = lfs.Mount(ctx, vol, lfs.Options{Move: lfs.Compact})
	require.NoError(t, err)
	defer fs.Unmount(ctx)
	for name, want := range files {
		a, err := fs.Lookup(ctx, lfs.RootIno, name)
		require.NoError(t, err)
		h, err := fs.Open(ctx, a.Ino, os.O_RDONLY)
		require.NoError(t, err)
		got := make([]byte, len(want)+4096)
		n, err := fs.Read(ctx, h, 0, got)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(want, got[:n]), "%s after remount", name)
		require.NoError(t, fs.Release(ctx, h))
	}
	_ = time.Second
}
