package zns

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func newDevOpts(t *testing.T, cfg flash.Config, opts ...Option) *Device {
	t.Helper()
	d, err := Create(filepath.Join(t.TempDir(), "dev0"), cfg, clock.NewVirtual(), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// TestL2PCacheMiss: a read whose map page is not cached pays a flash read
// of it first; the granularity decides how many blocks one map page
// covers.
func TestL2PCacheMiss(t *testing.T) {
	cfg := testCfgNoLimits()
	bs := cfg.BlockSize
	for _, tc := range []struct {
		g      L2PGranularity
		misses uint64 // reading block 0 of every zone, twice
	}{
		{L2PPage, 4},  // one map page per zone (1024 entries > a zone): two pages cached, four zones
		{L2PChunk, 1}, // 1024 blocks per entry: every zone in the first map page
		{L2PZone, 1},
	} {
		t.Run(tc.g.String(), func(t *testing.T) {
			c := L2PConfig{Granularity: tc.g, CacheBytes: 2 * 4096, EntryBytes: 4, MapPageBytes: 4096}
			if tc.g == L2PPage {
				c.MapPageBytes = 4 * 60 // 60 entries: one zone's capacity per map page
				c.CacheBytes = 2 * c.MapPageBytes
			}
			d := newDevOpts(t, cfg, WithL2P(c))
			g := d.Geometry()
			for z := uint64(0); z < 4; z++ {
				_, err := d.Write(bg, z*g.ZoneSize, pattern(bs, z*g.ZoneSize, 1, 1), Flags{})
				require.NoError(t, err)
			}
			var first, again []uint64
			for r := 0; r < 2; r++ {
				for z := uint64(0); z < 4; z++ {
					_, res, err := d.Read(bg, z*g.ZoneSize, 1)
					require.NoError(t, err)
					lat := uint64(res.Completed - res.Submitted)
					if r == 0 {
						first = append(first, lat)
					} else {
						again = append(again, lat)
					}
				}
			}
			l := d.Log()
			require.Equal(t, uint64(8), l.L2PLookups)
			if tc.g == L2PPage {
				// four map pages, two cached: the LRU misses every time
				require.Equal(t, uint64(8), l.L2PMisses)
				require.Equal(t, first, again)
				return
			}
			require.Equal(t, tc.misses, l.L2PMisses)
			rd := uint64(d.conf().Resolved().ReadLatency)
			require.GreaterOrEqual(t, first[0], again[0]+rd, "a miss costs a flash read")
			require.Equal(t, again[1], again[0])
		})
	}
}

func TestL2PConfigRefused(t *testing.T) {
	for _, c := range []L2PConfig{
		{Granularity: 0, CacheBytes: 4096},
		{Granularity: L2PPage, CacheBytes: 100},
		{Granularity: L2PZone, CacheBytes: 4096, MapPageBytes: 2, EntryBytes: 4},
	} {
		_, err := Create(filepath.Join(t.TempDir(), "dev0"), testCfg(), clock.NewVirtual(), WithL2P(c))
		require.True(t, errors.Is(err, zerr.ErrInvalidArgument), "%+v: %v", c, err)
	}
	_, err := ParseL2PGranularity("block")
	require.True(t, errors.Is(err, zerr.ErrInvalidArgument))
	g, err := ParseL2PGranularity("chunk")
	require.NoError(t, err)
	require.Equal(t, L2PChunk, g)
}

// TestWriteBuffers: what a write buffer holds when a FUA write, a Flush or
// another zone's write empties it early goes to SLC (and costs its
// program); a zone written in whole superpages never does.
func TestWriteBuffers(t *testing.T) {
	cfg := testCfgNoLimits()
	bs := cfg.BlockSize
	d := newDevOpts(t, cfg, WithWriteBuffers(1))
	g := d.Geometry()
	sp := uint64(g.ChunkBlocks * g.DZone)
	// whole superpages: nothing buffered past a boundary
	_, err := d.Write(bg, 0, pattern(bs, 0, int(sp), 1), Flags{FUA: true})
	require.NoError(t, err)
	require.Zero(t, d.Log().SLCBufferedBlocks)
	// one block, then another zone takes the only buffer: one SLC block
	_, err = d.Write(bg, sp, pattern(bs, sp, 1, 1), Flags{})
	require.NoError(t, err)
	_, err = d.Write(bg, g.ZoneSize, pattern(bs, g.ZoneSize, 2, 1), Flags{})
	require.NoError(t, err)
	l := d.Log()
	require.Equal(t, uint64(1), l.SLCBufferedBlocks)
	require.Equal(t, uint64(1), l.WriteBufferSwitches)
	// a Flush empties the two blocks of the second zone
	res, err := d.Flush(bg)
	require.NoError(t, err)
	require.Equal(t, uint64(3), d.Log().SLCBufferedBlocks)
	require.GreaterOrEqual(t, res.Completed-res.Submitted, d.conf().Resolved().SLCProgramLatency)
	// a FUA write of a partial superpage: its block to SLC at once
	res, err = d.Write(bg, g.ZoneSize+2, pattern(bs, g.ZoneSize+2, 1, 1), Flags{FUA: true})
	require.NoError(t, err)
	require.Equal(t, uint64(4), d.Log().SLCBufferedBlocks)
	require.GreaterOrEqual(t, res.Completed-res.Submitted, d.conf().Resolved().SLCProgramLatency)
	// a reset drops the buffer without programming it
	_, err = d.Write(bg, g.ZoneSize+3, pattern(bs, g.ZoneSize+3, 1, 1), Flags{})
	require.NoError(t, err)
	_, err = d.ZoneMgmt(bg, 1, ActionReset, false)
	require.NoError(t, err)
	_, err = d.Flush(bg)
	require.NoError(t, err)
	require.Equal(t, uint64(4), d.Log().SLCBufferedBlocks)
}

// TestWriteBuffersOff: without the option nothing is buffered in the
// model and a Flush takes no modelled time.
func TestWriteBuffersOff(t *testing.T) {
	cfg := testCfgNoLimits()
	d := newDevOpts(t, cfg)
	_, err := d.Write(bg, 0, pattern(cfg.BlockSize, 0, 1, 1), Flags{})
	require.NoError(t, err)
	res, err := d.Flush(bg)
	require.NoError(t, err)
	require.Equal(t, res.Submitted, res.Completed)
	require.Zero(t, d.Log().SLCBufferedBlocks)
}
