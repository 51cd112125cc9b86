package zns

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func fill(t *testing.T, d *Device, zi uint64, n int, tag byte) {
	t.Helper()
	bs := d.g.BlockSize
	start := zi * d.g.ZoneSize
	for i := 0; i < n; {
		k := min(8, n-i)
		_, err := d.Write(bg, start+uint64(i), pattern(bs, start+uint64(i), k, tag), Flags{})
		require.NoError(t, err)
		i += k
	}
}

func TestGoldenTiming(t *testing.T) {
	for _, media := range []string{"MLC", "TLC", "ZNAND"} {
		t.Run(media, func(t *testing.T) {
			cfg := testCfgNoLimits()
			cfg.Media = media
			v := clock.NewVirtual()
			d, _ := newDev(t, cfg, v)
			m := flash.Presets[media]
			fill(t, d, 0, 8, 1)
			v.Advance(time.Second)
			// one 4 KiB read: page read + 1/4 DMA + link
			_, res, err := d.Read(bg, 0, 1)
			require.NoError(t, err)
			lf := float64(4096) / 1.2e9 * 1e9
			link := time.Duration(lf)
			require.Equal(t, m.Read+m.DMA/4+link, res.Latency())
			v.Advance(time.Second)
			// copyback: zone 0 chunk 0 -> zone 2 chunk 0 (same FCG, same chip)
			id, err := d.ZoneCompaction(bg, []Copy{{Src: 0, Dst: 2 * d.g.ZoneSize, Count: 4}})
			require.NoError(t, err)
			cb, err := d.WaitCompaction(bg, id)
			require.NoError(t, err)
			require.Equal(t, uint64(4), cb.CopybackBlocks)
			v.Advance(time.Second)
			// read-and-program: zone 0 chunk 0 -> zone 1 (other FCG)
			id, err = d.ZoneCompaction(bg, []Copy{{Src: 0, Dst: 1 * d.g.ZoneSize, Count: 4}})
			require.NoError(t, err)
			rp, err := d.WaitCompaction(bg, id)
			require.NoError(t, err)
			require.Equal(t, uint64(4), rp.ReadProgBlocks)
			require.Equal(t, m.Read+2*m.DMA+m.Program, rp.Duration())
			// copyback: the normalized latency applied to the chip-side cost
			// (read + program), no DMA: less chip time than read-and-program
			require.Equal(t, time.Duration(float64(m.Read+m.Program)*m.CopybackRatio), cb.Duration())
			require.Less(t, cb.Duration(), m.Read+m.Program)
			cc := d.CopyCosts()
			require.Equal(t, cb.Duration(), cc.CopybackChunk)
			require.Equal(t, rp.Duration(), cc.ReadProgramChunk)
			require.Equal(t, m.Read+m.Program, cc.ReadProgramChipChunk)
			require.Equal(t, res.Latency()-link, cc.FlashReadBlock)
			require.Equal(t, link, cc.HostTransferBlock)
		})
	}
}

func TestVirtualDeterminism(t *testing.T) {
	run := func() []IOResult {
		v := clock.NewVirtual()
		cfg := testCfgNoLimits()
		cfg.WriteCacheBytes = 64 << 10
		d, _ := newDev(t, cfg, v)
		var out []IOResult
		for i := 0; i < 200; i++ {
			zi := uint64(i % 5)
			_, res, err := d.Append(bg, zi*d.g.ZoneSize, pattern(d.g.BlockSize, 0, 1+i%3, 0), Flags{})
			if err != nil {
				continue
			}
			out = append(out, res)
			_, r2, err := d.Read(bg, zi*d.g.ZoneSize, 2)
			require.NoError(t, err)
			out = append(out, r2)
		}
		require.Greater(t, d.Log().CacheStalls, int64(0))
		return out
	}
	require.Equal(t, run(), run())
}

func TestZoneCompaction(t *testing.T) {
	d, _ := newDev(t, testCfgNoLimits(), clock.NewVirtual())
	bs := d.g.BlockSize
	zs := d.g.ZoneSize
	fill(t, d, 0, 60, 7)
	src := func(off uint64, n int) []byte { return pattern(bs, off, n, 7) }
	dst := 2 * zs // same FCG as zone 0
	copies := []Copy{
		{Src: 0, Dst: dst, Count: 8},       // two full chunks, same chips: copyback
		{Src: 12, Dst: dst + 8, Count: 4},  // chunk 3 -> chunk 2: other chip, read-program
		{Src: 17, Dst: dst + 13, Count: 3}, // unaligned, and a 1-block gap before it
		{Src: 40, Dst: dst + 24, Count: 8}, // chunks 10,11 -> 6,7: same chip parity => copyback
	}
	id, err := d.ZoneCompaction(bg, copies)
	require.NoError(t, err)
	// other zones stay usable meanwhile
	_, err = d.Write(bg, 3*zs, pattern(bs, 0, 1, 1), Flags{})
	require.NoError(t, err)
	res, err := d.WaitCompaction(bg, id)
	require.NoError(t, err)
	require.Equal(t, uint64(23), res.Blocks)
	require.Equal(t, uint64(16), res.CopybackBlocks)
	require.Equal(t, uint64(7), res.ReadProgBlocks)
	require.Greater(t, res.Duration(), time.Duration(0))
	got, _, err := d.Read(bg, dst, 32)
	require.NoError(t, err)
	require.Equal(t, src(0, 8), got[:8*bs])
	require.Equal(t, src(12, 4), got[8*bs:12*bs])
	require.Equal(t, make([]byte, bs), got[12*bs:13*bs]) // gap
	require.Equal(t, src(17, 3), got[13*bs:16*bs])
	require.Equal(t, make([]byte, 8*bs), got[16*bs:24*bs])
	require.Equal(t, src(40, 8), got[24*bs:32*bs])
	rep, _ := d.ReportZones(StateAny, 2, 1)
	require.Equal(t, dst+32, rep[0].WP)
	_, err = d.WaitCompaction(bg, id)
	require.ErrorIs(t, err, zerr.ErrNotFound)
	l := d.Log()
	require.Equal(t, uint64(4), l.CopybackChunks)

	// errors
	_, err = d.ZoneCompaction(bg, []Copy{{Src: 0, Dst: dst, Count: 4}}) // below WP
	require.ErrorIs(t, err, zerr.ErrWritePointer)
	_, err = d.ZoneCompaction(bg, []Copy{{Src: 5 * zs, Dst: 6 * zs, Count: 4}}) // unwritten source
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)
	_, err = d.ZoneCompaction(bg, []Copy{{Src: 0, Dst: 6 * zs, Count: 4}, {Src: 0, Dst: 6*zs + 2, Count: 4}})
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)
	_, err = d.ZoneCompaction(bg, nil)
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)

	// simple copy
	_, err = d.SimpleCopy(bg, []Range{{LBA: 4, Count: 2}, {LBA: 30, Count: 3}}, 4*zs)
	require.NoError(t, err)
	got, _, err = d.Read(bg, 4*zs, 5)
	require.NoError(t, err)
	require.Equal(t, append(src(4, 2), src(30, 3)...), got)
	_, err = d.SimpleCopy(bg, []Range{{LBA: 4, Count: 2}}, 4*zs)
	require.ErrorIs(t, err, zerr.ErrWritePointer)
}

func TestCopybackThreshold(t *testing.T) {
	cfg := testCfgNoLimits()
	cfg.CopybackThreshold = 2
	d, _ := newDev(t, cfg, clock.Off())
	fill(t, d, 0, 4, 1)
	zs := d.g.ZoneSize
	// chain 0 -> 2 -> 4 -> 6 (all FCG 0): third hop exceeds the threshold
	var kinds []uint64
	for _, hop := range [][2]uint64{{0, 2}, {2, 4}, {4, 6}, {6, 8}} {
		id, err := d.ZoneCompaction(bg, []Copy{{Src: hop[0] * zs, Dst: hop[1] * zs, Count: 4}})
		require.NoError(t, err)
		r, err := d.WaitCompaction(bg, id)
		require.NoError(t, err)
		kinds = append(kinds, r.CopybackBlocks)
	}
	require.Equal(t, []uint64{4, 4, 0, 4}, kinds)
}

func tlCheck(t *testing.T, mode TLMode, crash bool) {
	cfg := testCfgNoLimits()
	d, p := newDev(t, cfg, clock.Off())
	bs := d.g.BlockSize
	zs := d.g.ZoneSize
	fill(t, d, 0, 60, 1)
	// valid: blocks 0-1, chunk 3 (12-15), chunk 5 (20-23), 30, 40-47
	valid := map[uint64]bool{0: true, 1: true, 30: true}
	for _, r := range [][2]uint64{{12, 16}, {20, 24}, {40, 48}} {
		for o := r[0]; o < r[1]; o++ {
			valid[o] = true
		}
	}
	bm := make([]byte, (60+7)/8)
	for o := range valid {
		bm[o/8] |= 1 << (o % 8)
	}
	bad := append([]byte(nil), bm...)
	bad[7] |= 0x80 // block 63 > capacity
	_, err := d.TLOpen(bg, 0, bad[:3], mode)
	require.ErrorIs(t, err, zerr.ErrInvalidBitmap)
	_, err = d.TLOpen(bg, 0, bad, mode)
	require.ErrorIs(t, err, zerr.ErrInvalidBitmap)
	_, err = d.TLOpen(bg, 0, bm, mode)
	require.NoError(t, err)
	// writes to valid blocks and backwards fail
	_, err = d.Write(bg, 12, pattern(bs, 12, 1, 2), Flags{})
	require.ErrorIs(t, err, zerr.ErrTLViolation)
	want := func(o uint64) []byte {
		if valid[o] {
			return pattern(bs, o, 1, 1)
		}
		return pattern(bs, o, 1, 2)
	}
	// overwrite invalid blocks in increasing order, some in runs
	written := map[uint64]bool{}
	o := uint64(0)
	for o < 35 {
		if valid[o] {
			o++
			continue
		}
		n := uint64(1)
		for o+n < 60 && !valid[o+n] && n < 3 {
			n++
		}
		_, err := d.Write(bg, o, pattern(bs, o, int(n), 2), Flags{})
		require.NoError(t, err, "TL write at %d", o)
		for i := o; i < o+n; i++ {
			written[i] = true
		}
		o += n
		// every block reads right while TL_opened
		got, _, err := d.Read(bg, 0, 60)
		require.NoError(t, err)
		for i := uint64(0); i < 60; i++ {
			if valid[i] || written[i] {
				require.Equal(t, want(i), got[int(i)*bs:int(i+1)*bs], "block %d during TL", i)
			}
		}
	}
	_, err = d.Write(bg, 2, pattern(bs, 2, 1, 2), Flags{})
	require.ErrorIs(t, err, zerr.ErrTLViolation)
	if crash {
		d.abandon()
		d, err = Open(p, cfg, clock.Off())
		require.NoError(t, err)
		defer d.Close()
	} else {
		_, err = d.ZoneMgmt(bg, 0, ActionFinish, false)
		require.NoError(t, err)
	}
	got, _, err := d.Read(bg, 0, 60)
	require.NoError(t, err)
	for i := uint64(0); i < 60; i++ {
		if valid[i] || written[i] {
			require.Equal(t, want(i), got[int(i)*bs:int(i+1)*bs], "block %d after TL", i)
		}
	}
	rep, _ := d.ReportZones(StateAny, 0, 1)
	require.False(t, rep[0].TL)
	l := d.Log()
	require.Greater(t, l.PluggedOnDemand+l.PluggedBackground, uint64(0))
	// copyback plugs whole chunks, counted among all copyback chunks
	cb := uint64(d.Geometry().ChunkBlocks)
	require.LessOrEqual(t, l.PluggedCopyback, l.PluggedOnDemand+l.PluggedBackground)
	require.Zero(t, l.PluggedCopyback%cb)
	require.LessOrEqual(t, l.PluggedCopyback/cb, l.CopybackChunks)
	if mode == PPAOrdered && !crash {
		require.Greater(t, l.PluggedBackground, uint64(0))
	}
	_ = zs
}

func TestTLOpen(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  TLMode
		crash bool
	}{{"lba", LBAOrdered, false}, {"ppa", PPAOrdered, false}, {"lba-crash", LBAOrdered, true}, {"ppa-crash", PPAOrdered, true}} {
		t.Run(tc.name, func(t *testing.T) { tlCheck(t, tc.mode, tc.crash) })
	}
}

// TestTLOpenLeavesEmptyZonesOpenable: LogFBGs come from a chip group's
// spare FBGs only. With every spare holding one, TL_open is refused
// (NoResources, the zone unchanged) and each empty zone of the group still
// opens; when threaded logging ends (finish, reset) the spare is free again,
// also across a restart.
func TestTLOpenLeavesEmptyZonesOpenable(t *testing.T) {
	cfg := testCfgNoLimits()
	d, p := newDev(t, cfg, clock.Off())
	g := d.g
	spares := g.FBGsPerFCG - g.ZonesPerFCG
	require.Greater(t, g.ZonesPerFCG, spares+2, "the test needs more zones than spares in a chip group")
	zoneOf := func(k int) uint64 { return uint64(k * g.NFCG) } // the k-th zone of chip group 0
	// spares+1 written zones in group 0, the rest of the group empty
	for k := 0; k <= spares; k++ {
		fill(t, d, zoneOf(k), 8, byte(k+1))
	}
	bm := make([]byte, (g.ZoneCap+7)/8)
	bm[0] = 0x0f // blocks 0-3 stay valid
	for k := 0; k < spares; k++ {
		_, err := d.TLOpen(bg, zoneOf(k), bm, LBAOrdered)
		require.NoError(t, err, "TL_open %d of %d spares", k+1, spares)
	}
	before, err := d.ReportZones(StateAny, zoneOf(spares), 1)
	require.NoError(t, err)
	_, err = d.TLOpen(bg, zoneOf(spares), bm, LBAOrdered)
	var nr *zerr.NoResourcesError
	require.ErrorAs(t, err, &nr)
	require.Contains(t, nr.Resource, "chip group 0")
	after, err := d.ReportZones(StateAny, zoneOf(spares), 1)
	require.NoError(t, err)
	require.Equal(t, before, after, "a refused TL_open changes nothing")
	// a zone of another chip group is not affected
	fill(t, d, 1, 8, 0x21)
	_, err = d.TLOpen(bg, 1, bm, LBAOrdered)
	require.NoError(t, err)
	// every empty zone of group 0 opens and takes writes
	for k := spares + 1; k < g.ZonesPerFCG; k++ {
		fill(t, d, zoneOf(k), 1, 0x30)
	}
	// finishing a TL zone frees its spare: TL_open succeeds again
	_, err = d.ZoneMgmt(bg, zoneOf(0), ActionFinish, false)
	require.NoError(t, err)
	_, err = d.TLOpen(bg, zoneOf(spares), bm, LBAOrdered)
	require.NoError(t, err)
	// so does a reset of a TL_opened zone
	_, err = d.ZoneMgmt(bg, zoneOf(1), ActionReset, false)
	require.NoError(t, err)
	fill(t, d, zoneOf(1), 8, 0x40)
	_, err = d.TLOpen(bg, zoneOf(1), bm, LBAOrdered)
	require.NoError(t, err)
	// a restart finalizes threaded logging: every spare is free again
	require.NoError(t, d.Close())
	d, err = Open(p, cfg, clock.Off())
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	for k := 0; k < spares; k++ {
		_, err := d.TLOpen(bg, zoneOf(k+1), bm, LBAOrdered)
		require.NoError(t, err, "after a restart: TL_open %d of %d spares", k+1, spares)
	}
	_, err = d.TLOpen(bg, zoneOf(0), bm, LBAOrdered)
	require.ErrorAs(t, err, &nr)
}

func TestIPU(t *testing.T) {
	cfg := testCfgNoLimits()
	cfg.IPUBudgetBlocks = 8
	d, p := newDev(t, cfg, clock.NewVirtual())
	bs := d.g.BlockSize
	fill(t, d, 0, 20, 1)
	// overwrite not flagged: write pointer error
	_, err := d.Write(bg, 4, pattern(bs, 4, 4, 9), Flags{})
	require.ErrorIs(t, err, zerr.ErrWritePointer)
	_, err = d.Write(bg, 4, pattern(bs, 4, 4, 9), Flags{Overwrite: true}) // aligned chunk -> chunk entry
	require.NoError(t, err)
	_, err = d.Write(bg, 9, pattern(bs, 9, 1, 9), Flags{Overwrite: true})
	require.NoError(t, err)
	_, err = d.Write(bg, 9, pattern(bs, 9, 1, 8), Flags{Overwrite: true}) // re-update: no new budget
	require.NoError(t, err)
	l := d.Log()
	require.Equal(t, uint64(5), l.IPUUsed)
	require.Equal(t, uint64(1), l.IPUChunkEntries)
	require.Equal(t, uint64(1), l.IPUPageEntries)
	_, err = d.Write(bg, 12, pattern(bs, 12, 4, 9), Flags{Overwrite: true})
	var be *zerr.IPUBudgetError
	require.ErrorAs(t, err, &be)
	require.Equal(t, uint64(8), be.Budget)
	require.Equal(t, uint64(5), be.Used)
	_, err = d.Write(bg, 18, pattern(bs, 18, 4, 9), Flags{Overwrite: true}) // past WP
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)
	check := func(d *Device) {
		got, _, err := d.Read(bg, 0, 20)
		require.NoError(t, err)
		for i := uint64(0); i < 20; i++ {
			w := pattern(bs, i, 1, 1)
			switch {
			case i >= 4 && i < 8:
				w = pattern(bs, i, 1, 9)
			case i == 9:
				w = pattern(bs, i, 1, 8)
			}
			require.Equal(t, w, got[int(i)*bs:int(i+1)*bs], "block %d", i)
		}
	}
	check(d)
	d.abandon()
	d, err = Open(p, cfg, clock.NewVirtual())
	require.NoError(t, err)
	check(d)
	require.Equal(t, uint64(5), d.Log().IPUUsed)
	_, err = d.ZoneMgmt(bg, 0, ActionReset, false)
	require.NoError(t, err)
	require.Equal(t, uint64(0), d.Log().IPUUsed)
	require.NoError(t, d.Close())
}

func TestWearLevelling(t *testing.T) {
	d, _ := newDev(t, testCfgNoLimits(), clock.Off())
	for i := 0; i < 30; i++ {
		fill(t, d, 0, 4, byte(i))
		_, err := d.ZoneMgmt(bg, 0, ActionReset, false)
		require.NoError(t, err)
	}
	l := d.Log()
	require.Equal(t, uint64(30*2), l.Erases)
	// 30 erases spread over the free FBGs of FCG 0 (10 FBGs, 8 free besides others)
	require.LessOrEqual(t, l.EraseCountMax, uint64(4))
}

// A busy narrow zone fills the shared write cache and slows a write to
// another zone (eZNS §3.6) — deterministic on the virtual clock.
func TestWriteCacheInterference(t *testing.T) {
	cfg := testCfgNoLimits()
	cfg.DZone = 1
	cfg.ZoneCapacity = 0
	cfg.WriteCacheBytes = 64 << 10
	latency := func(busy bool) time.Duration {
		v := clock.NewVirtual()
		d, _ := newDev(t, cfg, v)
		bs := d.g.BlockSize
		nw := NoWait(bg)
		if busy {
			for i := 0; i < 8; i++ { // 8 x 16 KiB into one single-chip zone at t=0
				_, _, err := d.Append(nw, 0, pattern(bs, 0, 4, 1), Flags{})
				require.NoError(t, err)
			}
		}
		res, err := d.Write(nw, 2*d.g.ZoneSize, pattern(bs, 0, 4, 2), Flags{})
		require.NoError(t, err)
		if busy {
			require.Greater(t, d.Log().CacheStalls, int64(0))
		}
		return res.Latency()
	}
	idle, busy := latency(false), latency(true)
	lf := float64(16384) / 1.2e9 * 1e9
	link := time.Duration(lf)
	require.InDelta(t, float64(link), float64(idle), 1)
	require.Greater(t, busy, 100*idle) // waited for programs on the busy chip
}

func TestRefusedCompactionChangesNothing(t *testing.T) {
	d, _ := newDev(t, testCfgNoLimits(), clock.Off())
	zs := d.g.ZoneSize
	fill(t, d, 0, 8, 1)
	fill(t, d, 5, 4, 1)
	before, _ := d.ReportZones(StateAny, 0, 0)
	// first destination (zone 3, empty) is fine, the second (zone 5) is below its WP
	_, err := d.ZoneCompaction(bg, []Copy{{Src: 0, Dst: 3 * zs, Count: 4}, {Src: 4, Dst: 5 * zs, Count: 4}})
	require.ErrorIs(t, err, zerr.ErrWritePointer)
	after, _ := d.ReportZones(StateAny, 0, 0)
	require.Equal(t, before, after)
	require.Equal(t, 2, d.Log().OpenZones)
}

// A compaction is booked piece by piece on the clock: a user read on one of
// its chips, submitted in the middle, waits at most for the piece in
// progress, not for the whole compaction (ZNS+ §3.2.1), and the compaction
// ends later by about the read's chip time. Copyback makes the chip-bound
// compaction faster than read-and-program by 1/copyback_ratio.
func TestCompactionInterleavesUserReads(t *testing.T) {
	type out struct {
		comp        CompactionResult
		read        IOResult
		idleRead    time.Duration
		copybackLat time.Duration
	}
	run := func(t *testing.T, noCopyback, userRead bool) out {
		cfg := flash.Small()
		cfg.MaxOpenZones, cfg.MaxActiveZones = 0, 0
		cfg.DisableCopyback = noCopyback
		v := clock.NewVirtual()
		d, _ := newDev(t, cfg, v)
		zs := d.g.ZoneSize
		for _, z := range []uint64{0, 2, 4} { // FCG 0: chips 0 and 1
			fill(t, d, z, int(zs), byte(z))
		}
		v.AdvanceTo(d.Drained() + time.Millisecond)
		var o out
		_, r, err := d.Read(bg, 0, 1)
		require.NoError(t, err)
		o.idleRead = r.Latency()
		o.copybackLat = d.model.CopybackLatency()
		v.Advance(time.Millisecond)
		var copies []Copy
		for k, z := range []uint64{0, 2, 4} {
			copies = append(copies, Copy{Src: z * zs, Dst: (6 + 2*uint64(k)) * zs, Count: zs})
		}
		t0 := v.Now()
		id, err := d.ZoneCompaction(bg, copies)
		require.NoError(t, err)
		if userRead {
			v.AdvanceTo(t0 + 2*time.Millisecond)
			_, o.read, err = d.Read(bg, 0, 1) // chunk 0: chip 0, busy compacting
			require.NoError(t, err)
		}
		o.comp, err = d.WaitCompaction(bg, id)
		require.NoError(t, err)
		require.Equal(t, 3*zs, o.comp.Blocks)
		if noCopyback {
			require.Equal(t, 3*zs, o.comp.ReadProgBlocks)
		} else {
			require.Equal(t, 3*zs, o.comp.CopybackBlocks)
		}
		got, _, err := d.Read(bg, 6*zs, zs)
		require.NoError(t, err)
		require.Equal(t, pattern(d.g.BlockSize, 0, int(zs), 0)[:64], got[:64])
		return o
	}
	idle := run(t, false, false)
	busy := run(t, false, true)
	// the read waits at most one copyback (the piece in progress), the
	// compaction had far more left
	require.Greater(t, busy.read.Latency(), busy.idleRead)
	require.LessOrEqual(t, busy.read.Latency(), busy.idleRead+busy.copybackLat)
	left := busy.comp.Completed - busy.read.Submitted
	require.Greater(t, left, 10*busy.read.Latency(), "a convoy would have made the read wait %v", left)
	// the compaction yields the chip for the read: it ends later, by the read's chip time
	p := flash.Presets["MLC"]
	require.Greater(t, busy.comp.Duration(), idle.comp.Duration())
	require.LessOrEqual(t, busy.comp.Duration(), idle.comp.Duration()+p.Read+p.DMA)
	// 24 chunks per chip: chip-bound, copyback saves 1 - ratio of the chip time
	require.InDelta(t, 24*busy.copybackLat, idle.comp.Duration(), float64(p.Read+p.DMA))
	rp := run(t, true, false)
	t.Logf("idle read %v, read during compaction %v (compaction had %v left); compaction %v alone, %v with the read, %v without copyback",
		busy.idleRead, busy.read.Latency(), left, idle.comp.Duration(), busy.comp.Duration(), rp.comp.Duration())
	require.InDelta(t, 24*(p.Read+p.Program), rp.comp.Duration(), float64(2*(p.Read+2*p.DMA)))
	require.InDelta(t, 1/p.CopybackRatio, float64(rp.comp.Duration())/float64(idle.comp.Duration()), 0.02)
	// deterministic on the virtual clock
	again := run(t, false, true)
	require.Equal(t, busy, again)
}

// The ways a compaction's pieces get booked: driven by WaitCompaction on the
// virtual clock, at once under NoWait, by the realtime clock's timers, and
// at Close for a compaction nobody waits for.
func TestCompactionJobCompletion(t *testing.T) {
	setup := func(t *testing.T, clk clock.Clock) (*Device, []Copy) {
		cfg := flash.Small()
		cfg.MaxOpenZones, cfg.MaxActiveZones = 0, 0
		d, _ := newDev(t, cfg, clk)
		zs := d.g.ZoneSize
		fill(t, d, 0, 16, 3)
		// chunks 0,1 by copyback, 2,3 by read and program (other chips)
		return d, []Copy{{Src: 0, Dst: 2 * zs, Count: 8}, {Src: 8, Dst: 2*zs + 12, Count: 8}}
	}
	var driven, nowait CompactionResult
	for _, noWait := range []bool{false, true} {
		v := clock.NewVirtual()
		d, copies := setup(t, v)
		v.AdvanceTo(d.Drained() + time.Millisecond)
		id, err := d.ZoneCompaction(bg, copies)
		require.NoError(t, err)
		ctx := bg
		if noWait {
			ctx = NoWait(bg)
		}
		res, err := d.WaitCompaction(ctx, id)
		require.NoError(t, err)
		require.Equal(t, uint64(8), res.CopybackBlocks)
		require.Equal(t, uint64(8), res.ReadProgBlocks)
		if noWait {
			nowait = res
			require.Less(t, v.Now(), res.Completed, "NoWait does not move the clock")
		} else {
			driven = res
			require.Equal(t, res.Completed, v.Now())
		}
	}
	require.Equal(t, driven.Duration(), nowait.Duration())
	require.Greater(t, driven.Duration(), time.Duration(0))

	t.Run("realtime", func(t *testing.T) {
		rt := clock.Realtime(1)
		defer rt.Stop()
		d, copies := setup(t, rt)
		id, err := d.ZoneCompaction(bg, copies)
		require.NoError(t, err)
		res, err := d.WaitCompaction(bg, id)
		require.NoError(t, err)
		require.Greater(t, res.Duration(), time.Duration(0))
		require.GreaterOrEqual(t, rt.Now(), res.Completed)
	})
	t.Run("close while booking", func(t *testing.T) {
		v := clock.NewVirtual()
		d, copies := setup(t, v)
		_, err := d.ZoneCompaction(bg, copies)
		require.NoError(t, err)
		require.NoError(t, d.Close()) // books the rest, does not hang
	})
	t.Run("destination refuses writes until the job ends", func(t *testing.T) {
		v := clock.NewVirtual()
		d, copies := setup(t, v)
		id, err := d.ZoneCompaction(bg, copies)
		require.NoError(t, err)
		_, err = d.Write(NoWait(bg), 2*d.g.ZoneSize+20, pattern(d.g.BlockSize, 0, 1, 1), Flags{})
		require.ErrorIs(t, err, zerr.ErrZoneState)
		_, err = d.WaitCompaction(bg, id)
		require.NoError(t, err)
		_, err = d.Write(bg, 2*d.g.ZoneSize+20, pattern(d.g.BlockSize, 0, 1, 1), Flags{})
		require.NoError(t, err)
	})
}

// Finishing a TL zone plugs its remaining valid blocks in the background,
// piece by piece: a read on its chips right after the finish does not wait
// for all of it.
func TestTLFinishPlugsInBackground(t *testing.T) {
	cfg := flash.Small()
	cfg.MaxOpenZones, cfg.MaxActiveZones = 0, 0
	v := clock.NewVirtual()
	d, _ := newDev(t, cfg, v)
	zs := d.g.ZoneSize
	fill(t, d, 0, int(zs), 5)
	fill(t, d, 2, 8, 6)
	v.AdvanceTo(d.Drained() + time.Millisecond)
	bm := make([]byte, (d.g.ZoneCap+7)/8)
	for i := 1; i < len(bm); i++ { // all valid but the first 8 blocks
		bm[i] = 0xff
	}
	_, err := d.TLOpen(bg, 0, bm, PPAOrdered)
	require.NoError(t, err)
	_, err = d.Write(bg, 0, pattern(d.g.BlockSize, 0, 8, 9), Flags{})
	require.NoError(t, err)
	v.AdvanceTo(d.Drained() + time.Millisecond)
	t0 := v.Now()
	_, err = d.ZoneMgmt(bg, 0, ActionFinish, false)
	require.NoError(t, err)
	_, r, err := d.Read(bg, 2*zs, 1) // zone 2 chunk 0: chip 0, where the plugging runs
	require.NoError(t, err)
	// it waited for one copyback at most, not for the 7 per chip of the
	// plugging, nor for the erase of the original FBG (booked after it)
	require.LessOrEqual(t, r.Latency(), d.model.CopybackLatency()+100*time.Microsecond)
	end := d.Drained()
	require.Greater(t, end-t0, 7*d.model.CopybackLatency()+d.conf().EraseLatency)
	got, _, err := d.Read(bg, 8, 8)
	require.NoError(t, err)
	require.Equal(t, pattern(d.g.BlockSize, 8, 8, 5), got)
}

// TestZoneCompactionRuns: the data, counts and write pointers of a
// compaction do not depend on how its destination runs are staged (a chunk,
// an odd number of blocks, the default), across two destination zones,
// gaps, partial chunks and sources in two zones.
func TestZoneCompactionRuns(t *testing.T) {
	type outcome struct {
		res      CompactionResult
		log      Log
		wp2, wp4 uint64
		z2, z4   []byte
		full2    bool
	}
	run := func(stage uint64) outcome {
		saved := compactStageBytes
		compactStageBytes = stage
		defer func() { compactStageBytes = saved }()
		d, _ := newDev(t, testCfgNoLimits(), clock.Off())
		zs, zc := d.g.ZoneSize, d.g.ZoneCap
		fill(t, d, 0, int(zc), 1)
		fill(t, d, 1, int(zc), 2)
		// the staging buffer is reused: a stale run must not show through zeros
		copies := []Copy{
			{Src: 0, Dst: 2 * zs, Count: 20},
			{Src: 30, Dst: 2*zs + 21, Count: 7},           // one-block gap
			{Src: zs + 3, Dst: 2*zs + 28, Count: zc - 28}, // to the zone's end: it becomes full
			{Src: zs + 40, Dst: 4 * zs, Count: 15},
			{Src: 5, Dst: 4*zs + 19, Count: 1}, // gap of 4
			{Src: zs + 1, Dst: 4*zs + 20, Count: 9},
		}
		id, err := d.ZoneCompaction(bg, copies)
		require.NoError(t, err)
		res, err := d.WaitCompaction(bg, id)
		require.NoError(t, err)
		res.ID, res.Submitted, res.Completed = 0, 0, 0
		var o outcome
		o.res, o.log = res, d.Log()
		rep, err := d.ReportZones(StateAny, 2, 3)
		require.NoError(t, err)
		o.wp2, o.wp4 = rep[0].WP-2*zs, rep[2].WP-4*zs
		o.full2 = rep[0].State == StateFull
		o.z2, _, err = d.Read(bg, 2*zs, zc)
		require.NoError(t, err)
		o.z4, _, err = d.Read(bg, 4*zs, 29)
		require.NoError(t, err)
		bs := d.g.BlockSize
		want := func(z, lba uint64, n int, tag byte) []byte { return pattern(bs, z*zs+lba, n, tag) }
		require.Equal(t, want(0, 0, 20, 1), o.z2[:20*bs])
		require.Equal(t, make([]byte, bs), o.z2[20*bs:21*bs])
		require.Equal(t, want(0, 30, 7, 1), o.z2[21*bs:28*bs])
		require.Equal(t, want(1, 3, int(zc-28), 2), o.z2[28*bs:])
		require.Equal(t, want(1, 40, 15, 2), o.z4[:15*bs])
		require.Equal(t, make([]byte, 4*bs), o.z4[15*bs:19*bs])
		require.Equal(t, want(0, 5, 1, 1), o.z4[19*bs:20*bs])
		require.Equal(t, want(1, 1, 9, 2), o.z4[20*bs:])
		return o
	}
	def := run(1 << 20)
	require.Equal(t, uint64(20+7+(60-28)+15+1+9), def.res.Blocks)
	require.Positive(t, def.res.CopybackBlocks)
	require.Positive(t, def.res.ReadProgBlocks)
	require.True(t, def.full2)
	require.Equal(t, uint64(29), def.wp4)
	for _, stage := range []uint64{1, 9 * 4096, 13 * 4096} {
		require.Equal(t, def, run(stage), "stage %d bytes", stage)
	}
}

// With a multi-queue write cache (WriteCacheQueues) the busy zone fills
// only its own queue: a write to a zone of another queue is admitted at
// as soon as the host link delivers it, while the busy zone's writes
// stall behind their own programs. With
// one shared pool the same write waits (TestWriteCacheInterference).
func TestWriteCacheQueuesIsolate(t *testing.T) {
	cfg := testCfgNoLimits()
	cfg.DZone = 1
	cfg.ZoneCapacity = 0
	cfg.WriteCacheBytes = 64 << 10
	latency := func(queues int) (time.Duration, int64) {
		cfg.WriteCacheQueues = queues
		d, _ := newDev(t, cfg, clock.NewVirtual())
		bs := d.g.BlockSize
		nw := NoWait(bg)
		for i := 0; i < 8; i++ { // 8 x 16 KiB into one single-chip zone at t=0
			_, _, err := d.Append(nw, 0, pattern(bs, 0, 4, 1), Flags{})
			require.NoError(t, err)
		}
		stalls := d.Log().CacheStalls
		res, err := d.Write(nw, 3*d.g.ZoneSize, pattern(bs, 0, 4, 2), Flags{}) // queue 3 mod 2 = 1
		require.NoError(t, err)
		return res.Latency(), stalls
	}
	lf := float64(16384) / 1.2e9 * 1e9
	link := time.Duration(lf)
	multi, stalls := latency(2)
	require.Greater(t, stalls, int64(0), "the busy zone stalls on its own queue")
	// it waits only for the host link, behind the busy zone's 8 transfers
	require.InDelta(t, float64(9*link), float64(multi), 9)
	single, _ := latency(0)
	require.Greater(t, single, 10*multi)
}
