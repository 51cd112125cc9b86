package fsvol_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// The superblock records MaxZones at mkfs (and the user space derived from
// it); fsvol derives its figure from the cluster's capacity shared by the
// namespaces, so it changes when namespaces come and go. Mount must keep the
// superblock's segments, so the space promised to users always fits them.
func TestMountKeepsTheSuperblocksSegments(t *testing.T) {
	ctx := context.Background()
	_, c := tenantCluster(t, 3, "fs", 8, 4)
	vol40, err := fsvol.New(ctx, c, fsvol.Options{MaxZones: 40})
	require.NoError(t, err)
	require.NoError(t, lfs.Mkfs(ctx, vol40, lfs.MkfsOptions{OPPercent: 20}))
	fs, err := lfs.Mount(ctx, vol40, lfs.Options{})
	require.NoError(t, err)
	promised := fs.Stats().UserBlocks
	require.NoError(t, fs.Unmount(ctx))
	// A volume hands the namespace over only once closed: its background
	// work (a v-zone opened ahead, finishes) must not race the next mount's
	// recovery, which resets every v-zone it does not know.
	require.NoError(t, vol40.Close(ctx))

	vol20, err := fsvol.New(ctx, c, fsvol.Options{MaxZones: 20})
	require.NoError(t, err)
	fs, err = lfs.Mount(ctx, vol20, lfs.Options{})
	require.NoError(t, err)
	defer fs.Unmount(ctx)
	st := fs.Stats()
	assert.Equal(t, 38, st.SegmentsTotal, "segments of the superblock (40 - 2 metadata)")
	assert.LessOrEqual(t, promised, uint64(st.SegmentsTotal-st.ReserveSegments)*st.ZoneBlocks,
		"the space users are promised fits in the segments the mount may use")
}
