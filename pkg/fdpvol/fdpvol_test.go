package fdpvol_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/fdp"
	"github.com/zonefleet/zonefleet/pkg/fdpvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/vfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

var (
	bg    = context.Background()
	quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
)

// testConfig: 4 chips of 32 blocks of 8 pages (16 KiB), reclaim units of
// 2 chips (64 LBAs), one handle per zone class, 25 % over-provisioning: 48
// zones of one reclaim unit.
func testConfig() fdp.Config {
	c := fdp.DefaultConfig()
	c.Flash.BlocksPerChip = 32
	c.RUChips = 2
	c.OverProvision = 0.25
	c.Handles = make([]fdp.HandleType, lfs.NumZoneClasses)
	for i := range c.Handles {
		c.Handles[i] = fdp.InitiallyIsolated
	}
	return c
}

func newDev(t *testing.T, fs vfs.FS) *fdp.Device {
	t.Helper()
	d, err := fdp.Create("/fdp0", testConfig(), clock.Off(), fdp.WithFS(fs), fdp.WithLogger(quiet))
	require.NoError(t, err)
	return d
}

func blocks(bs, n int, seed byte) []byte {
	b := make([]byte, bs*n)
	for i := range b {
		b[i] = seed + byte(i/bs)
	}
	return b
}

// TestVolumeContract: zones are LBA ranges with host-side write pointers;
// each zone's writes go through its class's handle; Reset trims.
func TestVolumeContract(t *testing.T) {
	d := newDev(t, vfs.NewCrashableMem())
	defer d.Close()
	v, err := fdpvol.New(bg, d, fdpvol.Options{})
	require.NoError(t, err)
	g := v.Geometry()
	require.Equal(t, uint64(64), g.ZoneBlocks)
	require.Equal(t, int(d.Capacity()/64), g.MaxZones)
	bs := g.BlockSize

	z, err := v.OpenZoneFor(bg, lfs.ClassColdData)
	require.NoError(t, err)
	require.NoError(t, v.Write(bg, z, 0, blocks(bs, 4, 1), false))
	err = v.Write(bg, z, 5, blocks(bs, 1, 9), false)
	require.True(t, errors.Is(err, zerr.ErrWritePointer), "%v", err)
	err = v.Read(bg, z, 2, make([]byte, 3*bs))
	require.True(t, errors.Is(err, zerr.ErrOutOfRange), "%v", err)
	buf := make([]byte, 2*bs)
	require.NoError(t, v.Read(bg, z, 2, buf))
	require.Equal(t, blocks(bs, 4, 1)[2*bs:], buf)
	for _, u := range d.Usage() {
		want := uint64(0)
		if u.Handle == uint16(lfs.ClassColdData) {
			want = uint64(4 * bs)
		}
		require.Equal(t, want, u.HostBytes, "handle %d", u.Handle)
	}
	zs, err := v.Zones(bg)
	require.NoError(t, err)
	require.Equal(t, []lfs.ZoneInfo{{ID: z, WP: 4, Capacity: 64, State: lfs.ZoneOpen}}, zs)

	require.NoError(t, v.Finish(bg, z))
	err = v.Write(bg, z, 4, blocks(bs, 1, 9), false)
	require.True(t, errors.Is(err, zerr.ErrZoneState), "%v", err)
	require.NoError(t, v.Reset(bg, z))
	runs, err := d.LBAStatus(uint64(z)*64, 64)
	require.NoError(t, err)
	require.Empty(t, runs)
	zs, err = v.Zones(bg)
	require.NoError(t, err)
	require.Empty(t, zs)

	// MaxOpen
	v2, err := fdpvol.New(bg, d, fdpvol.Options{MaxOpen: 2})
	require.NoError(t, err)
	_, err = v2.OpenZone(bg)
	require.NoError(t, err)
	_, err = v2.OpenZone(bg)
	require.NoError(t, err)
	_, err = v2.OpenZone(bg)
	require.True(t, errors.Is(err, zerr.ErrTooManyOpen), "%v", err)

	// bad options
	_, err = fdpvol.New(bg, d, fdpvol.Options{Handles: []uint16{1}})
	require.True(t, errors.Is(err, zerr.ErrInvalidArgument), "%v", err)
	_, err = fdpvol.New(bg, d, fdpvol.Options{DefaultHandle: 99})
	require.True(t, errors.Is(err, zerr.ErrInvalidArgument), "%v", err)
}

// TestCompactIsHostCopy: Compact reads and writes through the host into
// the destination's handle.
func TestCompactIsHostCopy(t *testing.T) {
	d := newDev(t, vfs.NewCrashableMem())
	defer d.Close()
	v, err := fdpvol.New(bg, d, fdpvol.Options{})
	require.NoError(t, err)
	bs := v.Geometry().BlockSize
	src, err := v.OpenZoneFor(bg, lfs.ClassWarmData)
	require.NoError(t, err)
	dst, err := v.OpenZoneFor(bg, lfs.ClassColdData)
	require.NoError(t, err)
	data := blocks(bs, 8, 3)
	require.NoError(t, v.Write(bg, src, 0, data, false))
	st, err := v.Compact(bg, []lfs.Copy{{Src: src, SrcOff: 2, Dst: dst, DstOff: 0, Blocks: 3}, {Src: src, SrcOff: 6, Dst: dst, DstOff: 3, Blocks: 2}})
	require.NoError(t, err)
	require.Equal(t, lfs.CompactStats{Local: 5}, st)
	got := make([]byte, 5*bs)
	require.NoError(t, v.Read(bg, dst, 0, got))
	require.Equal(t, append(append([]byte(nil), data[2*bs:5*bs]...), data[6*bs:8*bs]...), got)
	for _, u := range d.Usage() {
		if u.Handle == uint16(lfs.ClassColdData) {
			require.Equal(t, uint64(5*bs), u.HostBytes)
		}
	}
}

// TestRecoverWritePointers: after a restart the zones and write pointers
// come from the drive's mapping; mapped blocks past a hole (a lost write
// before a surviving one) stay until the zone's next write trims them.
func TestRecoverWritePointers(t *testing.T) {
	mem := vfs.NewCrashableMem()
	d := newDev(t, mem)
	v, err := fdpvol.New(bg, d, fdpvol.Options{})
	require.NoError(t, err)
	bs := v.Geometry().BlockSize
	full, err := v.OpenZoneFor(bg, lfs.ClassHotNode)
	require.NoError(t, err)
	require.NoError(t, v.Write(bg, full, 0, blocks(bs, 64, 1), false))
	part, err := v.OpenZoneFor(bg, lfs.ClassWarmData)
	require.NoError(t, err)
	require.NoError(t, v.Write(bg, part, 0, blocks(bs, 10, 2), false))
	holed, err := v.OpenZoneFor(bg, lfs.ClassWarmData)
	require.NoError(t, err)
	require.NoError(t, v.Write(bg, holed, 0, blocks(bs, 12, 3), false))
	fin, err := v.OpenZoneFor(bg, lfs.ClassMeta)
	require.NoError(t, err)
	require.NoError(t, v.Write(bg, fin, 0, blocks(bs, 3, 4), false))
	require.NoError(t, v.Finish(bg, fin))
	// a hole at block 5 of holed, as a lost write leaves it
	require.NoError(t, d.Trim(bg, uint64(holed)*64+5, 1))
	require.NoError(t, d.Flush(bg))
	require.NoError(t, d.Close())

	d, err = fdp.Open("/fdp0", testConfig(), clock.Off(), fdp.WithFS(mem), fdp.WithLogger(quiet))
	require.NoError(t, err)
	defer d.Close()
	v, err = fdpvol.New(bg, d, fdpvol.Options{})
	require.NoError(t, err)
	zs, err := v.Zones(bg)
	require.NoError(t, err)
	require.ElementsMatch(t, []lfs.ZoneInfo{
		{ID: full, WP: 64, Capacity: 64, State: lfs.ZoneFull},
		{ID: part, WP: 10, Capacity: 64, State: lfs.ZoneOpen},
		{ID: holed, WP: 5, Capacity: 64, State: lfs.ZoneOpen},
		{ID: fin, WP: 3, Capacity: 64, State: lfs.ZoneOpen},
	}, zs)
	// opening changed nothing: the blocks past the hole are still mapped
	runs, err := d.LBAStatus(uint64(holed)*64, 64)
	require.NoError(t, err)
	require.Equal(t, []fdp.LBARange{{LBA: uint64(holed) * 64, Count: 5}, {LBA: uint64(holed)*64 + 6, Count: 6}}, runs)
	// writes resume at the recovered write pointer; the zone's first write
	// trims what lay past it
	require.NoError(t, v.Write(bg, holed, 5, blocks(bs, 2, 7), false))
	runs, err = d.LBAStatus(uint64(holed)*64, 64)
	require.NoError(t, err)
	require.Equal(t, []fdp.LBARange{{LBA: uint64(holed) * 64, Count: 7}}, runs)
	got := make([]byte, 7*bs)
	require.NoError(t, v.Read(bg, holed, 0, got))
	require.True(t, bytes.Equal(blocks(bs, 12, 3)[:5*bs], got[:5*bs]))
	require.True(t, bytes.Equal(blocks(bs, 2, 7), got[5*bs:]))
}

// TestOpenWithOtherZoneSizeChangesNothing: a volume opened with another
// zone size (the reclaim unit size changed since mkfs) sees other zones,
// with blocks mapped past their write pointers; opening trims none of them,
// so a volume with the old size reads everything back. A finish trims the
// zone's stale tail.
func TestOpenWithOtherZoneSizeChangesNothing(t *testing.T) {
	d := newDev(t, vfs.NewCrashableMem())
	defer d.Close()
	v, err := fdpvol.New(bg, d, fdpvol.Options{})
	require.NoError(t, err)
	bs := v.Geometry().BlockSize
	zb := v.Geometry().ZoneBlocks
	a, err := v.OpenZone(bg)
	require.NoError(t, err)
	require.NoError(t, v.Write(bg, a, 0, blocks(bs, 10, 1), false))
	b, err := v.OpenZone(bg)
	require.NoError(t, err)
	require.Equal(t, a+1, b)
	require.NoError(t, v.Write(bg, b, 0, blocks(bs, 8, 2), false))
	require.NoError(t, v.Flush(bg))
	before, err := d.LBAStatus(0, 2*zb)
	require.NoError(t, err)

	// two reclaim units a zone: zone 0 holds both, mapped [0,10) and [zb, zb+8)
	w, err := fdpvol.New(bg, d, fdpvol.Options{ZoneRUs: 2})
	require.NoError(t, err)
	zs, err := w.Zones(bg)
	require.NoError(t, err)
	require.Equal(t, []lfs.ZoneInfo{{ID: 0, WP: 10, Capacity: 2 * zb, State: lfs.ZoneOpen}}, zs)
	after, err := d.LBAStatus(0, 2*zb)
	require.NoError(t, err)
	require.Equal(t, before, after, "opening trimmed nothing")

	v, err = fdpvol.New(bg, d, fdpvol.Options{})
	require.NoError(t, err)
	got := make([]byte, 8*bs)
	require.NoError(t, v.Read(bg, b, 0, got))
	require.Equal(t, blocks(bs, 8, 2), got, "the old zone size reads the data back")

	// a finish of the wider zone trims what lay past its write pointer
	require.NoError(t, w.Finish(bg, 0))
	after, err = d.LBAStatus(0, 2*zb)
	require.NoError(t, err)
	require.Equal(t, []fdp.LBARange{{LBA: 0, Count: 10}}, after)
}

// TestConcurrentZones: writers of different zones, a lister and a reset
// loop run at once (for the race detector); every zone reads back.
func TestConcurrentZones(t *testing.T) {
	d := newDev(t, vfs.NewCrashableMem())
	defer d.Close()
	v, err := fdpvol.New(bg, d, fdpvol.Options{MaxOpen: 8})
	require.NoError(t, err)
	bs := v.Geometry().BlockSize
	const writers = 4
	errs := make(chan error, writers+1)
	ids := make([]lfs.ZoneID, writers)
	for w := range writers {
		go func() {
			z, err := v.OpenZoneFor(bg, lfs.ZoneClass(w))
			if err != nil {
				errs <- err
				return
			}
			ids[w] = z
			for off := uint64(0); off < 64; off += 8 {
				if err := v.Write(bg, z, off, blocks(bs, 8, byte(w*16+int(off/8))), false); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	go func() {
		for range 50 {
			if _, err := v.Zones(bg); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	for range writers + 1 {
		require.NoError(t, <-errs)
	}
	for w, z := range ids {
		got := make([]byte, 64*bs)
		require.NoError(t, v.Read(bg, z, 0, got))
		for k := range 8 {
			require.Equal(t, blocks(bs, 8, byte(w*16+k)), got[k*8*bs:(k+1)*8*bs], "writer %d chunk %d", w, k)
		}
	}
	zs, err := v.Zones(bg)
	require.NoError(t, err)
	require.Len(t, zs, writers)
	for _, z := range zs {
		require.Equal(t, lfs.ZoneFull, z.State)
	}
}
