package zns

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/ondisk"
	"github.com/zonefleet/zonefleet/pkg/vfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// TestWritePhysOnePwritePerRun checks that a write reaches the store as one
// pwrite per run of chunks that lie back to back in the file: a zone on one
// die takes a whole write in one pwrite, a zone striped over dies one per
// chunk; and that the data reads back either way, also after a reopen.
func TestWritePhysOnePwritePerRun(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dzone  int
		older  bool                 // a drive of the older, chip-major layout (no featFBGInterleaved)
		writes func(chunks int) int // data pwrites expected for a write of chunks whole chunks
	}{
		{"one die per zone", 1, false, func(int) int { return 1 }},
		{"two dies per zone", 2, false, func(int) int { return 1 }},
		{"four dies per zone", 4, false, func(int) int { return 1 }},
		{"one die per zone, older layout", 1, true, func(int) int { return 1 }},
		{"two dies per zone, older layout", 2, true, func(c int) int { return c }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecordedDrive(t, tc.dzone, tc.older)
			d, cfg, mem, mu := r.d, r.cfg, r.mem, &r.mu
			lens := &r.lens
			g := d.Geometry()
			cb := g.ChunkBlocks
			chunks := 3
			n := chunks * cb
			require.LessOrEqual(t, uint64(n+1), g.ZoneCap)
			mu.Lock()
			*lens = nil
			mu.Unlock()
			data := pattern(g.BlockSize, 0, n, 7)
			_, err := d.Write(bg, 0, data, Flags{})
			require.NoError(t, err)
			mu.Lock()
			require.Len(t, *lens, tc.writes(chunks), "data pwrites of a %d-chunk write: %v", chunks, *lens)
			total := 0
			for _, l := range *lens {
				total += l
			}
			mu.Unlock()
			require.Equal(t, len(data), total)
			// a write that starts and ends inside chunks: one pwrite per
			// run as well, split where the runs are
			tail := pattern(g.BlockSize, uint64(n), 1, 9)
			_, err = d.Write(bg, uint64(n), tail, Flags{})
			require.NoError(t, err)

			check := func(d *Device) {
				got, _, err := d.Read(bg, 0, uint64(n+1))
				require.NoError(t, err)
				require.Equal(t, append(append([]byte{}, data...), tail...), got)
			}
			check(d)
			d2 := flushReopen(t, d, cfg, mem)
			check(d2)
			// a reset zone reads as zeros again (its FBG punched whichever
			// the layout), and takes new data
			_, err = d2.ZoneMgmt(bg, 0, ActionReset, false)
			require.NoError(t, err)
			_, err = d2.Write(bg, 0, tail, Flags{})
			require.NoError(t, err)
			got, _, err := d2.Read(bg, 0, 1)
			require.NoError(t, err)
			require.Equal(t, tail, got)
		})
	}
}

// TestLayoutOffsets: every flash page of every chip and block has its own
// page-aligned place inside the flash region, in both layouts; interleaved,
// every zone's chunks are back to back (the point of the layout).
func TestLayoutOffsets(t *testing.T) {
	for _, dz := range []int{1, 2, 4} {
		for _, il := range []bool{false, true} {
			cfg := plCfg()
			cfg.DZone, cfg.ZoneCapacity = dz, 0
			l := newLayout(cfg)
			l.interleaved = il
			seen := map[int64]bool{}
			for chip := 0; chip < l.g.Chips; chip++ {
				for blk := 0; blk < cfg.BlocksPerChip; blk++ {
					for page := 0; page < cfg.PagesPerBlock; page++ {
						o := l.off(chip, blk, page, 0)
						require.GreaterOrEqual(t, o, l.flashBase)
						require.LessOrEqual(t, o+int64(cfg.PageSize), l.size)
						require.Zero(t, (o-l.flashBase)%int64(cfg.PageSize))
						require.False(t, seen[o], "dzone %d interleaved %v: chip %d blk %d page %d shares %d", dz, il, chip, blk, page, o)
						seen[o] = true
					}
				}
			}
			if !il && dz > 1 {
				continue
			}
			for fcg := 0; fcg < l.g.NFCG; fcg++ {
				for blk := 0; blk < cfg.BlocksPerChip; blk++ {
					for b := uint64(1); b < l.g.ZoneSize; b++ {
						a0, a1 := l.g.Locate(fcg, b-1), l.g.Locate(fcg, b)
						require.Equal(t, l.off(a0.Chip, blk, a0.Page, a0.Sub)+int64(cfg.BlockSize), l.off(a1.Chip, blk, a1.Page, a1.Sub),
							"dzone %d: zone block %d follows block %d in the file", dz, b, b-1)
					}
					r := l.fbgRanges(fcg, blk)
					require.Len(t, r, 1)
					require.Equal(t, l.off(fcg*dz, blk, 0, 0), r[0][0])
					require.Equal(t, int64(l.g.ZoneSize)*int64(cfg.BlockSize), r[0][1], "the FBG is the zone's whole extent")
				}
			}
		}
	}
}

// TestWriteV: a write handed over as buffers cut anywhere (not at blocks or
// chunks; empty ones too) stores what Write of the same bytes stores, with
// one vectored pwrite per run of back-to-back chunks, in either layout, and
// a TL or in-place write of several buffers works too.
func TestWriteV(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dzone  int
		older  bool
		writes int // data pwrites expected for the 3-chunk write
	}{
		{"two dies per zone", 2, false, 1},
		{"two dies per zone, older layout", 2, true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecordedDrive(t, tc.dzone, tc.older)
			d, cfg, mem, mu := r.d, r.cfg, r.mem, &r.mu
			lens := &r.lens
			g := d.Geometry()
			n := 3 * g.ChunkBlocks
			data := pattern(g.BlockSize, 0, n, 11)
			cuts := []int{0, 1000, 1000, 5000, g.BlockSize*g.ChunkBlocks + 7, len(data) - 1, len(data)}
			var bufs [][]byte
			for i := 1; i < len(cuts); i++ {
				bufs = append(bufs, data[cuts[i-1]:cuts[i]])
			}
			mu.Lock()
			*lens = nil
			mu.Unlock()
			_, err := d.WriteV(bg, 0, bufs, Flags{})
			require.NoError(t, err)
			mu.Lock()
			require.Len(t, *lens, tc.writes, "data pwrites: %v", *lens)
			mu.Unlock()
			got, _, err := d.Read(bg, 0, uint64(n))
			require.NoError(t, err)
			require.Equal(t, data, got)

			// bad lengths change nothing
			_, err = d.WriteV(bg, uint64(n), [][]byte{data[:100], data[:100]}, Flags{})
			require.ErrorIs(t, err, zerr.ErrInvalidArgument)
			_, err = d.WriteV(bg, uint64(n), nil, Flags{})
			require.ErrorIs(t, err, zerr.ErrInvalidArgument)
			zs, err := d.ReportZones(StateAny, 0, 1)
			require.NoError(t, err)
			require.Equal(t, uint64(n), zs[0].WP)

			// an in-place update of written blocks given as two buffers
			upd := pattern(g.BlockSize, 1, 2, 13)
			_, err = d.WriteV(bg, 1, [][]byte{upd[:5000], upd[5000:]}, Flags{Overwrite: true})
			require.NoError(t, err)
			got, _, err = d.Read(bg, 1, 2)
			require.NoError(t, err)
			require.Equal(t, upd, got)

			d2 := flushReopen(t, d, cfg, mem)
			want := append(append(append([]byte{}, data[:g.BlockSize]...), upd...), data[3*g.BlockSize:]...)
			got, _, err = d2.Read(bg, 0, uint64(n))
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}
}

// recordedDrive is a drive on an in-memory file system that records the
// length of every data pwrite (not write-pointer slots or journal frames).
type recordedDrive struct {
	d    *Device
	cfg  flash.Config
	mem  vfs.FS
	mu   sync.Mutex
	lens []int
}

// newRecordedDrive makes one with dies per zone; older makes it with the
// older, chip-major layout (no featFBGInterleaved).
func newRecordedDrive(t *testing.T, dies int, older bool) *recordedDrive {
	t.Helper()
	if older {
		saved := newFeatures
		newFeatures = ondisk.Features{}
		t.Cleanup(func() { newFeatures = saved })
	}
	r := &recordedDrive{cfg: plCfg(), mem: vfs.NewCrashableMem()}
	r.cfg.DZone, r.cfg.ZoneCapacity = dies, 0 // (zone capacity = size)
	rec := vfs.InjectorFunc(func(o vfs.Op) error {
		if o.Kind == vfs.OpWrite && !strings.HasSuffix(o.Path, ".journal") && o.Len >= 4096 {
			r.mu.Lock()
			r.lens = append(r.lens, o.Len)
			r.mu.Unlock()
		}
		return nil
	})
	var err error
	r.d, err = Create("/dev/zns0", r.cfg, clock.Off(), WithFS(vfs.WithErrors(r.mem, rec)), WithLogger(quiet))
	require.NoError(t, err)
	return r
}

// flushReopen flushes d, closes it and opens it again from mem (closed
// with t).
func flushReopen(t *testing.T, d *Device, cfg flash.Config, mem vfs.FS) *Device {
	t.Helper()
	_, err := d.Flush(bg)
	require.NoError(t, err)
	require.NoError(t, d.Close())
	d2, err := Open("/dev/zns0", cfg, clock.Off(), WithFS(mem), WithLogger(quiet))
	require.NoError(t, err)
	t.Cleanup(func() { _ = d2.Close() })
	return d2
}

// TestReleasedFBGPunchedAtReuse: a reset leaves the zone's flash block
// group (and its page cache) alone; the next allocation, in any chip
// group, punches it — the FBG it takes when that holds old data (then synced
// before the first write), else the oldest released one — so that the new
// zone's writes take back pages freed just before (allocFBG). Whichever
// FBG a zone lands on, it reads only its own data, also after a reopen.
func TestReleasedFBGPunchedAtReuse(t *testing.T) {
	type punch struct{ off, n int64 }
	var mu sync.Mutex
	var punches []punch
	syncs := 0
	inj := vfs.InjectorFunc(func(o vfs.Op) error {
		if o.Path != "/dev/zns0" { // the data file, not the journal
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		switch o.Kind {
		case vfs.OpPunch:
			punches = append(punches, punch{o.Off, int64(o.Len)})
		case vfs.OpSync:
			syncs++
		}
		return nil
	})
	take := func() ([]punch, int) {
		mu.Lock()
		defer mu.Unlock()
		p, s := punches, syncs
		punches, syncs = nil, 0
		return p, s
	}
	cfg := plCfg()
	mem := vfs.NewCrashableMem()
	d, err := Create("/dev/zns0", cfg, clock.Off(), WithFS(vfs.WithErrors(mem, inj)), WithLogger(quiet))
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	g := d.Geometry()
	// two zones of different chip groups: page cache is the machine's
	z0 := uint64(0)
	z1 := uint64(1)
	for g.FCG(z1) == g.FCG(z0) {
		z1++
	}
	fcg := g.FCG(z0)
	rangesOf := func(fbg int) []punch {
		var out []punch
		for _, r := range d.lay.fbgRanges(fcg, fbg) {
			out = append(out, punch{r[0], r[1]})
		}
		return out
	}
	n := int(g.ZoneCap / 2)
	old := pattern(g.BlockSize, z0*g.ZoneSize, n, 1)
	_, err = d.Write(bg, z0*g.ZoneSize, old, Flags{})
	require.NoError(t, err)
	oldFBG := d.zones[z0].fbg
	require.GreaterOrEqual(t, oldFBG, 0)
	take()

	_, err = d.ZoneMgmt(bg, z0, ActionReset, false)
	require.NoError(t, err)
	p, _ := take()
	require.Empty(t, p, "a reset punches nothing")

	// z1 opens on a never-written FBG of its own chip group: it punches
	// z0's old one
	fresh := pattern(g.BlockSize, z1*g.ZoneSize, n, 2)
	_, err = d.Write(bg, z1*g.ZoneSize, fresh, Flags{})
	require.NoError(t, err)
	p, s := take()
	require.Equal(t, rangesOf(oldFBG), p, "the oldest released FBG is punched when a clean one is taken")
	require.Zero(t, s, "a clean FBG needs no sync")

	// z0 written and reset again; its FBG made the least erased, so that
	// the next allocation takes it while it still holds old data: punched
	// and synced then, before the zone's first write
	_, err = d.Write(bg, z0*g.ZoneSize, old[:g.BlockSize], Flags{})
	require.NoError(t, err)
	again := d.zones[z0].fbg
	_, err = d.ZoneMgmt(bg, z0, ActionReset, false)
	require.NoError(t, err)
	a := d.fcgs[fcg]
	a.mu.Lock()
	for b := range a.erases {
		if b != again {
			a.erases[b] += 100
		}
	}
	a.mu.Unlock()
	take()
	_, err = d.Write(bg, z0*g.ZoneSize, old, Flags{})
	require.NoError(t, err)
	require.Equal(t, again, d.zones[z0].fbg)
	p, s = take()
	require.Equal(t, rangesOf(again), p, "an FBG holding old data is punched when taken")
	require.Positive(t, s, "and synced before the zone's first write")

	check := func(d *Device) {
		got, _, err := d.Read(bg, z1*g.ZoneSize, uint64(n))
		require.NoError(t, err)
		require.Equal(t, fresh, got)
		got, _, err = d.Read(bg, z0*g.ZoneSize, uint64(n))
		require.NoError(t, err)
		require.Equal(t, old, got)
	}
	check(d)
	check(flushReopen(t, d, cfg, mem))
}

// TestFBGReuseConcurrent: every zone of a chip group written, read back
// and reset by its own goroutine, so that allocations race with each
// other's punches of released FBGs (allocFBG marks one used while it
// punches it). Each zone reads only its own latest data. (The wait of an
// allocation that finds nothing free meanwhile is TestAllocWaitsForPunch's:
// this workload does not reach it.)
func TestFBGReuseConcurrent(t *testing.T) {
	cfg := testCfgNoLimits()
	cfg.SpareBlocksPerChip = 1 // few FBGs beyond the zones
	d, _ := newDev(t, cfg, clock.Off())
	g := d.Geometry()
	var zones []uint64
	for z := uint64(0); z < g.Zones; z++ {
		if g.FCG(z) == 0 {
			zones = append(zones, z)
		}
	}
	require.Len(t, zones, int(g.ZonesPerFCG))
	rounds := 60
	if testing.Short() {
		rounds = 15
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(zones))
	for _, z := range zones {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lba := z * g.ZoneSize
			for r := 0; r < rounds; r++ {
				n := 1 + (r*7+int(z))%int(g.ZoneCap)
				data := pattern(g.BlockSize, lba, n, byte(r))
				if _, err := d.Write(bg, lba, data, Flags{}); err != nil {
					errs <- fmt.Errorf("zone %d round %d: write: %w", z, r, err)
					return
				}
				got, _, err := d.Read(bg, lba, uint64(n))
				if err != nil || !bytes.Equal(got, data) {
					errs <- fmt.Errorf("zone %d round %d: read back %v (equal %t)", z, r, err, bytes.Equal(got, data))
					return
				}
				if _, err := d.ZoneMgmt(bg, z, ActionReset, false); err != nil {
					errs <- fmt.Errorf("zone %d round %d: reset: %w", z, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestAllocWaitsForPunch: an allocation that finds no free FBG while
// another allocation is punching a released one (marked used meanwhile)
// waits for the punch and takes that FBG, rather than failing with
// no-resources.
func TestAllocWaitsForPunch(t *testing.T) {
	block := make(chan struct{})
	punching := make(chan struct{}, 1)
	inj := vfs.InjectorFunc(func(o vfs.Op) error {
		if o.Kind == vfs.OpPunch {
			select {
			case punching <- struct{}{}:
				<-block
			default:
			}
		}
		return nil
	})
	d, err := Create("/dev/zns0", plCfg(), clock.Off(), WithFS(vfs.WithErrors(vfs.NewCrashableMem(), inj)), WithLogger(quiet))
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	a := d.fcgs[0]
	// every FBG used but two: clean (taken first) and released unpunched
	clean, held := 0, 1
	a.mu.Lock()
	for b := range a.used {
		a.used[b] = b != clean && b != held
	}
	a.erases[held] = 1
	a.cleanAt[held] = dirtyFBG
	a.mu.Unlock()
	d.heldMu.Lock()
	a.inHeld[held] = true
	d.held = []heldFBG{{0, held}}
	d.heldMu.Unlock()

	first := make(chan int, 1)
	go func() {
		b, err := d.allocFBG(0)
		assert.NoError(t, err)
		first <- b
	}()
	<-punching // the first allocation took clean and is punching held
	second := make(chan error, 1)
	var got int
	go func() {
		var err error
		got, err = d.allocFBG(0)
		second <- err
	}()
	select {
	case err := <-second:
		t.Fatalf("the second allocation returned (%v) while the first was punching", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(block)
	require.NoError(t, <-second)
	require.Equal(t, clean, <-first)
	require.Equal(t, held, got)
}
