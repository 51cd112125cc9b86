package fsvol_test

import (
	"bytes"
	"context"
	"errors"
	mrand "math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func zoneInfo(t *testing.T, ctx context.Context, vol lfs.Volume, z lfs.ZoneID) lfs.ZoneInfo {
	t.Helper()
	list, err := vol.Zones(ctx)
	require.NoError(t, err)
	for _, zi := range list {
		if zi.ID == z {
			return zi
		}
	}
	t.Fatalf("zone %d not listed", z)
	return lfs.ZoneInfo{}
}

// The lfs.TLOpener contract through fsvol over real nodes: a zone written to
// capacity (finished in the background) is TL_opened with a bitmap, listed
// open, written in its holes at offsets past the write pointer, read right
// at every step (the whole zone), refuses writes over valid blocks, counts
// against MaxOpen, and ends full after Finish.
func TestVolumeTLOpen(t *testing.T) {
	ctx := context.Background()
	_, c := tenantCluster(t, 2, "tl", 3, 2)
	vol, err := fsvol.New(ctx, c, fsvol.Options{MaxZones: 12, OpenAhead: -1})
	require.NoError(t, err)
	defer vol.Close(ctx)
	var tlo lfs.TLOpener = vol
	geo := vol.Geometry()
	bsz := geo.BlockSize
	rng := mrand.New(mrand.NewPCG(5, 6))

	fill := func() (lfs.ZoneID, []byte) {
		z, err := vol.OpenZone(ctx)
		require.NoError(t, err)
		data := make([]byte, int(geo.ZoneBlocks)*bsz)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		for off := 0; off < int(geo.ZoneBlocks); off += 32 {
			require.NoError(t, vol.Write(ctx, z, uint64(off), data[off*bsz:(off+32)*bsz], false))
		}
		return z, data // written to capacity: finished in the background
	}
	z, data := fill()
	y, _ := fill()
	require.Equal(t, lfs.ZoneFull, zoneInfo(t, ctx, vol, z).State)

	valid := make([]bool, geo.ZoneBlocks)
	bm := make([]byte, (geo.ZoneBlocks+7)/8)
	for b := range valid {
		if (b/5)%2 == 0 { // runs of 5 valid, 5 invalid
			valid[b] = true
			bm[b/8] |= 1 << (b % 8)
		}
	}
	check := func(when string) {
		t.Helper()
		buf := make([]byte, len(data))
		require.NoError(t, vol.Read(ctx, z, 0, buf), when)
		for b, v := range valid {
			if v && !bytes.Equal(buf[b*bsz:(b+1)*bsz], data[b*bsz:(b+1)*bsz]) {
				t.Fatalf("%s: block %d differs", when, b)
			}
		}
	}
	assert.Error(t, tlo.TLOpen(ctx, z, bm[:len(bm)-1]), "a short bitmap is refused")
	require.NoError(t, tlo.TLOpen(ctx, z, bm))
	zi := zoneInfo(t, ctx, vol, z)
	assert.Equal(t, lfs.ZoneOpen, zi.State)
	check("after TL_open")

	// Over a valid block: typed, nothing changes.
	err = vol.Write(ctx, z, 0, make([]byte, bsz), false)
	assert.True(t, errors.Is(err, zerr.ErrTLViolation), "%v", err)
	check("after the refused write")

	// The holes, skipping every third one and the last (a write that
	// reaches the zone's end finishes it).
	for h, b := 0, uint64(5); b+10 < geo.ZoneBlocks; h, b = h+1, b+10 {
		if h%3 == 2 {
			continue
		}
		n := min(5, geo.ZoneBlocks-b)
		buf := make([]byte, n*uint64(bsz))
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		require.NoError(t, vol.Write(ctx, z, b, buf, h%2 == 0))
		copy(data[b*uint64(bsz):], buf)
		for i := b; i < b+n; i++ {
			valid[i] = true
		}
		if h%4 == 0 {
			check("while writing the holes")
		}
	}
	require.NoError(t, vol.Flush(ctx))
	check("after the holes")
	assert.Equal(t, lfs.ZoneOpen, zoneInfo(t, ctx, vol, z).State)

	// Three active: z (threaded logging) and two open zones. A TL_open of y
	// is over MaxOpen.
	a, err := vol.OpenZone(ctx)
	require.NoError(t, err)
	_, err = vol.OpenZone(ctx)
	require.NoError(t, err)
	err = tlo.TLOpen(ctx, y, bm)
	assert.True(t, errors.Is(err, zerr.ErrTooManyOpen), "%v", err)
	assert.Equal(t, lfs.ZoneFull, zoneInfo(t, ctx, vol, y).State, "the refused TL_open changed nothing")
	require.NoError(t, vol.Finish(ctx, a))
	require.NoError(t, tlo.TLOpen(ctx, y, bm), "the finish of a gave a slot back")

	require.NoError(t, vol.Finish(ctx, z))
	assert.Equal(t, lfs.ZoneFull, zoneInfo(t, ctx, vol, z).State)
	check("after finish")
	require.NoError(t, vol.Finish(ctx, y))

	// A destination opened like z sits on z's chips (copyback-aware layout).
	type chip struct {
		node      string
		dev, chip uint32
	}
	chips := map[chip]bool{}
	for off := uint64(0); off < geo.ZoneBlocks; off += uint64(geo.ChunkBlocks) {
		l, err := vol.Locate(ctx, z, off)
		require.NoError(t, err)
		chips[chip{l.Node, l.Device, l.Chip}] = true
	}
	d, err := vol.OpenZoneLike(ctx, z)
	require.NoError(t, err)
	for off := uint64(0); ; off += uint64(geo.ChunkBlocks) {
		l, err := vol.Locate(ctx, d, off)
		if errors.Is(err, zerr.ErrOutOfRange) {
			require.Positive(t, off, "the first stripe group is allocated")
			break
		}
		require.NoError(t, err)
		require.True(t, chips[chip{l.Node, l.Device, l.Chip}], "block %d of the like zone on a chip of the victim", off)
	}
	require.NoError(t, vol.Finish(ctx, d))
}
