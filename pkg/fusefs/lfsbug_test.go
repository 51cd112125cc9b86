//go:build lfsbugs

package fusefs_test

// Bugs found in pkg/lfs while binding it (not fixed here: pkg/lfs belongs to
// another engineer). Run with: go test -tags lfsbugs ./pkg/fusefs -run LFSBug

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// The superblock records MaxZones at mkfs (and UserBlocks derived from it),
// but Mount takes the segment count from the Volume's geometry of the day.
// fsvol derives MaxZones from the cluster's capacity shared by the
// namespaces, so creating a second namespace after mkfs shrinks it: the file
// system then promises (statfs, space accounting) more blocks than its
// segments can hold, and recycling starves. Mount should use the
// superblock's MaxZones or refuse a smaller volume (GeometryMismatchError).
func TestLFSBugMountIgnoresSuperblockMaxZones(t *testing.T) {
	ctx := context.Background()
	cl, err := localcluster.Start(ctx, localcluster.Config{Dir: t.TempDir(), Nodes: 3, Clock: "off", Device: localcluster.TinyDevice(), AdminToken: "tok"})
	require.NoError(t, err)
	defer cl.Close()
	admin, err := client.New(ctx, client.Config{Arbiters: cl.ArbiterAddrs(), Token: "tok"})
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "fs", MaxActiveVzones: 8, ZonesPerVzone: 4})
	require.NoError(t, err)
	c, err := client.New(ctx, client.Config{Arbiters: cl.ArbiterAddrs(), Namespace: "fs"})
	require.NoError(t, err)
	defer c.Close()
	vol40, err := fsvol.New(ctx, c, fsvol.Options{MaxZones: 40})
	require.NoError(t, err)
	require.NoError(t, lfs.Mkfs(ctx, vol40, lfs.MkfsOptions{OPPercent: 20}))
	fs, err := lfs.Mount(ctx, vol40, lfs.Options{})
	require.NoError(t, err)
	promised := fs.Stats().UserBlocks
	require.NoError(t, fs.Unmount(ctx))

	vol20, err := fsvol.New(ctx, c, fsvol.Options{MaxZones: 20})
	require.NoError(t, err)
	fs, err = lfs.Mount(ctx, vol20, lfs.Options{})
	if err != nil {
		return // refusing is fine
	}
	defer fs.Unmount(ctx)
	st := fs.Stats()
	assert.Equal(t, 38, st.SegmentsTotal, "segments of the superblock (40 - 2 metadata)")
	assert.LessOrEqual(t, promised, uint64(st.SegmentsTotal-st.ReserveSegments)*st.ZoneBlocks,
		"the space users are promised fits in the segments the mount may use")
}
