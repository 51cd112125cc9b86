package devvol_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

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
	require.Equal(t, lfs.VolumeGeometry{BlockSize: 4096, ZoneBlocks: 64, ChunkBlocks: 4, SuperpageBlocks: 8, MaxOpen: 32, MaxZones: 16}, g)
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

// TLOpen over the drive: a full zone is reopened for threaded logging with
// its valid bitmap; writes go into the holes (a write over a valid block is
// refused), every block reads back its valid data or what was written since,
// at every moment, and finish plugs the rest.
func TestTLOpen(t *testing.T) {
	for _, mode := range []zns.TLMode{zns.LBAOrdered, zns.PPAOrdered} {
		t.Run(mode.String(), func(t *testing.T) {
			v, err := devvol.New(newDevs(t, 1, 8)...)
			require.NoError(t, err)
			v.SetTLMode(mode)
			var tl lfs.TLOpener = v
			g := v.Geometry()
			bs := g.BlockSize
			blk := func(tag, i int) []byte { return bytes.Repeat([]byte{byte(tag), byte(i)}, bs/2) }
			z, err := v.OpenZone(bg)
			require.NoError(t, err)
			want := make([][]byte, g.ZoneBlocks)
			for i := range want {
				want[i] = blk(1, i)
				require.NoError(t, v.Write(bg, z, uint64(i), want[i], false))
			}
			zs, err := v.Zones(bg)
			require.NoError(t, err)
			require.Equal(t, lfs.ZoneFull, zs[0].State)
			// every third block stays valid
			valid := make([]byte, (g.ZoneBlocks+7)/8)
			for i := uint64(0); i < g.ZoneBlocks; i += 3 {
				valid[i/8] |= 1 << (i % 8)
			}
			require.ErrorIs(t, tl.TLOpen(bg, z, valid[:1]), zerr.ErrInvalidBitmap)
			require.NoError(t, tl.TLOpen(bg, z, valid))
			check := func() {
				buf := make([]byte, bs)
				for i := range want {
					if valid[i/8]&(1<<(i%8)) == 0 && !bytes.Equal(want[i], blk(1, i)) || valid[i/8]&(1<<(i%8)) != 0 {
						require.NoError(t, v.Read(bg, z, uint64(i), buf))
						require.Equal(t, want[i], buf, "block %d", i)
					}
				}
			}
			check()
			require.ErrorIs(t, v.Write(bg, z, 3, blk(2, 3), false), zerr.ErrTLViolation, "block 3 is valid")
			for i := uint64(1); i < g.ZoneBlocks/2; i++ {
				if i%3 == 0 {
					continue
				}
				want[i] = blk(2, int(i))
				require.NoError(t, v.Write(bg, z, i, want[i], false))
				check()
			}
			zs, err = v.Zones(bg)
			require.NoError(t, err)
			require.Equal(t, lfs.ZoneOpen, zs[0].State)
			require.Less(t, zs[0].WP, g.ZoneBlocks)
			require.NoError(t, v.Finish(bg, z))
			check()
			zs, err = v.Zones(bg)
			require.NoError(t, err)
			require.Equal(t, lfs.ZoneFull, zs[0].State)
		})
	}
}

// Compact on the virtual clock returns at submission (zone_compaction is
// asynchronous): the copies read back at once, a host write into the
// destination zone waits for the compaction instead of failing on the busy
// zone, and Flush waits for whatever is still running.
func TestCompactAsync(t *testing.T) {
	for _, next := range []string{"write", "flush"} {
		t.Run(next, func(t *testing.T) {
			clk := clock.NewVirtual()
			d, err := zns.Create(filepath.Join(t.TempDir(), "dev"), devvol.TestConfig(8, 8), clk)
			require.NoError(t, err)
			t.Cleanup(func() { _ = d.Close() })
			v, err := devvol.New(d)
			require.NoError(t, err)
			v.SetAsyncCompaction(true)
			a, err := v.OpenZone(bg)
			require.NoError(t, err)
			b, err := v.OpenZone(bg)
			require.NoError(t, err)
			data := make([]byte, 32*4096)
			for i := range data {
				data[i] = byte(i / 4096)
			}
			require.NoError(t, v.Write(bg, a, 0, data, true))
			require.NoError(t, v.Flush(bg))
			t0 := clk.Now()
			st, err := v.Compact(bg, []lfs.Copy{{Src: a, SrcOff: 0, Dst: b, DstOff: 0, Blocks: 32}})
			require.NoError(t, err)
			require.Equal(t, uint64(32), st.Copyback+st.Local)
			submitted := clk.Now() - t0
			// 8 chunks on 2 chips: at least 4 programs (or copybacks) per chip
			chip := time.Duration(float64(d.Config().Resolved().ProgramLatency) * 0.8)
			require.Less(t, submitted, chip, "Compact waited for the copies")
			buf := make([]byte, len(data))
			require.NoError(t, v.Read(bg, b, 0, buf))
			require.Equal(t, data, buf)
			if next == "write" {
				require.NoError(t, v.Write(bg, b, 32, data[:4096], false), "a write into the destination waits for the compaction")
			} else {
				require.NoError(t, v.Flush(bg))
			}
			require.GreaterOrEqual(t, clk.Now()-t0, 4*chip, "the copies' flash work is on the clock")
			require.NoError(t, v.Flush(bg))
		})
	}
}

// TestCompactSyncByDefault: without SetAsyncCompaction, Compact returns once
// the copies' flash work is done (as fsvol's does over the cluster).
func TestCompactSyncByDefault(t *testing.T) {
	clk := clock.NewVirtual()
	d, err := zns.Create(filepath.Join(t.TempDir(), "dev"), devvol.TestConfig(8, 8), clk)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	v, err := devvol.New(d)
	require.NoError(t, err)
	a, err := v.OpenZone(bg)
	require.NoError(t, err)
	b, err := v.OpenZone(bg)
	require.NoError(t, err)
	data := make([]byte, 32*4096)
	for i := range data {
		data[i] = byte(i / 4096)
	}
	require.NoError(t, v.Write(bg, a, 0, data, true))
	require.NoError(t, v.Flush(bg))
	t0 := clk.Now()
	_, err = v.Compact(bg, []lfs.Copy{{Src: a, SrcOff: 0, Dst: b, DstOff: 0, Blocks: 32}})
	require.NoError(t, err)
	chip := time.Duration(float64(d.Config().Resolved().ProgramLatency) * 0.8)
	require.GreaterOrEqual(t, clk.Now()-t0, 4*chip, "Compact waited for the copies")
	buf := make([]byte, len(data))
	require.NoError(t, v.Read(bg, b, 0, buf))
	require.Equal(t, data, buf)
}
