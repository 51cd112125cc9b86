package devvol_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

var bg = context.Background()

func newDevs(t *testing.T, n, zones int) []*zns.Device {
	var out []*zns.Device
	for i := 0; i < n; i++ {
		d, err := zns.Create(filepath.Join(t.TempDir(), "dev"), devvol.TestConfig(zones, 8), clock.Off())
		require.NoError(t, err)
		t.Cleanup(func() { _ = d.Close() })
		out = append(out, d)
	}
	return out
}

func TestVolume(t *testing.T) {
	v, err := devvol.New(newDevs(t, 2, 8)...)
	require.NoError(t, err)
	g := v.Geometry()
	require.Equal(t, lfs.VolumeGeometry{BlockSize: 4096, ZoneBlocks: 64, ChunkBlocks: 4, MaxOpen: 32, MaxZones: 16}, g)
	zs, err := v.Zones(bg)
	require.NoError(t, err)
	require.Empty(t, zs)

	a, err := v.OpenZone(bg)
	require.NoError(t, err)
	b, err := v.OpenZone(bg)
	require.NoError(t, err)
	require.NotEqual(t, a/8, b/8, "round robin over devices")
	data := bytes.Repeat([]byte{1, 2, 3, 4}, 4096) // 4 blocks
	require.NoError(t, v.Write(bg, a, 0, data, true))
	require.ErrorIs(t, v.Write(bg, a, 0, data, false), zerr.ErrWritePointer)
	buf := make([]byte, len(data))
	require.NoError(t, v.Read(bg, a, 0, buf))
	require.Equal(t, data, buf)
	require.ErrorIs(t, v.Read(bg, a, 62, buf), zerr.ErrOutOfRange)

	zs, err = v.Zones(bg)
	require.NoError(t, err)
	require.ElementsMatch(t, []lfs.ZoneInfo{{ID: a, WP: 4, Capacity: 64, State: lfs.ZoneOpen}, {ID: b, WP: 0, Capacity: 64, State: lfs.ZoneOpen}}, zs)

	// compact inside a device and across devices
	c, err := v.OpenZone(bg) // on a's device
	require.NoError(t, err)
	require.Equal(t, a/8, c/8)
	st, err := v.Compact(bg, []lfs.Copy{{Src: a, SrcOff: 0, Dst: c, DstOff: 0, Blocks: 4}, {Src: a, SrcOff: 0, Dst: b, DstOff: 0, Blocks: 4}})
	require.NoError(t, err)
	require.Equal(t, uint64(4), st.Copyback+st.Local)
	require.Equal(t, uint64(4), st.Remote)
	for _, z := range []lfs.ZoneID{b, c} {
		require.NoError(t, v.Read(bg, z, 0, buf))
		require.Equal(t, data, buf)
	}
	loc, err := v.Locate(bg, a, 4)
	require.NoError(t, err)
	require.Equal(t, uint32(a%8), loc.Zone)
	require.NoError(t, v.Finish(bg, a))
	require.NoError(t, v.Reset(bg, b))
	require.NoError(t, v.Flush(bg))
	zs, err = v.Zones(bg)
	require.NoError(t, err)
	require.ElementsMatch(t, []lfs.ZoneInfo{{ID: a, WP: 64, Capacity: 64, State: lfs.ZoneFull}, {ID: c, WP: 4, Capacity: 64, State: lfs.ZoneOpen}}, zs)

	_, err = v.Locate(bg, 99, 0)
	require.ErrorIs(t, err, zerr.ErrNotFound)
	for i := 0; i < 14; i++ {
		_, err = v.OpenZone(bg)
		require.NoError(t, err)
	}
	_, err = v.OpenZone(bg)
	require.ErrorIs(t, err, zerr.ErrNoResources)
}
