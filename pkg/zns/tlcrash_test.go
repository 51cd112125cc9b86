package zns

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/vfs"
)

// tlRef is the reference content of one TL scenario zone: want[o] is what
// block o must read (nil: anything).
type tlRef struct {
	want  [][]byte
	valid map[uint64]bool
	hole  map[uint64]bool // never written since TL_open
}

// tlScenario fills zone 0, flushes, TL_opens it with a bitmap whose last
// block is valid (so ending threaded logging plugs up to the capacity),
// writes most holes (not the last one) with FUA on the last write, and
// returns the reference.
func tlScenario(t *testing.T, d *Device, mode TLMode) tlRef {
	t.Helper()
	bs := d.g.BlockSize
	cap := d.g.ZoneCap
	fill(t, d, 0, int(cap), 1)
	_, err := d.Flush(bg)
	require.NoError(t, err)
	ref := tlRef{want: make([][]byte, cap), valid: map[uint64]bool{}, hole: map[uint64]bool{}}
	bm := make([]byte, (cap+7)/8)
	lastHole := uint64(0)
	for o := uint64(0); o < cap; o++ {
		if o%3 == 0 || (o >= 12 && o < 16) || o >= cap-5 {
			ref.valid[o] = true
			bm[o/8] |= 1 << (o % 8)
			ref.want[o] = pattern(bs, o, 1, 1)
		} else {
			lastHole = o
			ref.hole[o] = true
			ref.want[o] = make([]byte, bs) // never written: zeros once threaded logging ends
		}
	}
	_, err = d.TLOpen(bg, 0, bm, mode)
	require.NoError(t, err)
	var holes []uint64
	for o := uint64(0); o < lastHole; o++ {
		if !ref.valid[o] {
			holes = append(holes, o)
		}
	}
	for i, o := range holes {
		_, err := d.Write(bg, o, pattern(bs, o, 1, 2), Flags{FUA: i == len(holes)-1})
		require.NoError(t, err, "TL write at %d", o)
		ref.want[o] = pattern(bs, o, 1, 2)
		delete(ref.hole, o)
	}
	return ref
}

func checkTLRef(t *testing.T, d *Device, ref tlRef, what string) {
	t.Helper()
	bs := d.g.BlockSize
	got, _, err := d.Read(bg, 0, d.g.ZoneCap)
	require.NoError(t, err, what)
	for o, w := range ref.want {
		if w != nil && !(ref.hole[uint64(o)] && strings.HasPrefix(what, "live, TL")) {
			require.True(t, bytes.Equal(w, got[o*bs:(o+1)*bs]), "%s: block %d (valid %v) reads wrong", what, o, ref.valid[uint64(o)])
		}
	}
}

// TestTLReopen: a TL zone survives a clean close, a killed process and a
// power loss, finished (it reopens full with the LogFBG data) or not
// (threaded logging ends on reopen: the zone is closed, not TL, its write
// pointer past the last valid block, every acknowledged block reads back,
// the never-written holes read as zeros; a finish then makes it full).
func TestTLReopen(t *testing.T) {
	for _, mode := range []TLMode{LBAOrdered, PPAOrdered} {
		for _, finish := range []bool{false, true} {
			for _, how := range []string{"close", "kill", "powerloss"} {
				name := fmt.Sprintf("%v/finish=%v/%s", mode, finish, how)
				t.Run(name, func(t *testing.T) {
					mem := vfs.NewCrashableMem()
					cfg := testCfgNoLimits()
					d, err := Create("/dev/tl", cfg, clock.Off(), WithFS(mem), WithLogger(quiet))
					require.NoError(t, err)
					ref := tlScenario(t, d, mode)
					checkTLRef(t, d, ref, "live, TL_opened")
					if finish {
						_, err := d.ZoneMgmt(bg, 0, ActionFinish, false)
						require.NoError(t, err)
						_, err = d.Flush(bg)
						require.NoError(t, err)
						checkTLRef(t, d, ref, "live, finished")
					}
					fs := mem
					switch how {
					case "close":
						require.NoError(t, d.Close())
					case "kill":
						fs = mem.Clone()
						d.abandon()
					case "powerloss":
						fs = mem.CrashClone(7)
						d.abandon()
					}
					d2, err := Open("/dev/tl", cfg, clock.Off(), WithFS(fs), WithLogger(quiet))
					require.NoError(t, err)
					defer d2.Close()
					rep, err := d2.ReportZones(StateAny, 0, 1)
					require.NoError(t, err)
					z := rep[0]
					require.False(t, z.TL, "threaded logging ends on reopen")
					require.Equal(t, d2.g.ZoneCap, z.WP-z.Start, "write pointer past the last valid block")
					if finish {
						require.Equal(t, StateFull, z.State)
					} else {
						require.Equal(t, StateClosed, z.State, "an unfinished TL zone comes back closed (not full) even at capacity")
					}
					checkTLRef(t, d2, ref, "reopened")
					_, err = d2.ZoneMgmt(bg, 0, ActionFinish, false)
					require.NoError(t, err)
					rep, _ = d2.ReportZones(StateAny, 0, 1)
					require.Equal(t, StateFull, rep[0].State)
					checkTLRef(t, d2, ref, "reopened and finished")
					// a second life: nothing depends on the recovery's memory
					d2.abandon()
					d3, err := Open("/dev/tl", cfg, clock.Off(), WithFS(fs.Clone()), WithLogger(quiet))
					require.NoError(t, err)
					defer d3.Close()
					checkTLRef(t, d3, ref, "reopened twice")
				})
			}
		}
	}
}

// tlModel is what the host may expect of the TL workload's zones:
// cur/dur as in plModel; zero holds the blocks that must read as zeros once
// threaded logging has ended (invalid at TL_open, not written since);
// valid[zone] the last TL_open's valid blocks (zone-relative); reset zones
// are unsure until the next Flush.
type tlModel struct {
	cur, dur   map[uint64][]byte
	zero       map[uint64]bool
	zoneUnsure map[uint64]bool
	valid      map[uint64]map[uint64]bool
	finished   map[uint64]bool // finished (full) and durable: reopens full
	finCur     map[uint64]bool // finished, not yet flushed
}

type tlExpect struct {
	cur, dur   map[uint64][]byte
	zero       map[uint64]bool
	zoneUnsure map[uint64]bool
	valid      map[uint64]map[uint64]bool
	finished   map[uint64]bool
}

func (m *tlModel) expect() tlExpect {
	v := map[uint64]map[uint64]bool{}
	for z, s := range m.valid {
		v[z] = cloneMap(s)
	}
	return tlExpect{cloneMap(m.cur), cloneMap(m.dur), cloneMap(m.zero), cloneMap(m.zoneUnsure), v, cloneMap(m.finished)}
}

func (m *tlModel) flushed() {
	m.dur = cloneMap(m.cur)
	m.zoneUnsure = map[uint64]bool{}
	for z := range m.finCur {
		m.finished[z] = true
	}
}

type tlPoint struct {
	fs     *vfs.MemFS
	kill   bool
	exp    tlExpect
	opIdx  int
	fileOp int
}

// runTLCrashWorkload: zones are filled, TL_opened with random bitmaps,
// written in their holes (runs, skipped holes, some FUA), flushed, finished,
// closed, reset and TL_opened again, on the crashable file system; a crash
// image (power loss or kill) is taken before about every every-th file
// operation, with what the host may expect then.
func runTLCrashWorkload(t *testing.T, seed uint64, nOps, every int) []tlPoint {
	rng := rand.New(rand.NewPCG(seed, 17))
	crng := rand.New(rand.NewPCG(seed, 19))
	mem := vfs.NewCrashableMem()
	m := &tlModel{cur: map[uint64][]byte{}, dur: map[uint64][]byte{}, zero: map[uint64]bool{}, zoneUnsure: map[uint64]bool{},
		valid: map[uint64]map[uint64]bool{}, finished: map[uint64]bool{}, finCur: map[uint64]bool{}}
	var points []tlPoint
	var exp tlExpect
	opIdx, fileOps := 0, 0
	armed := false // crash points once Create has completed
	hook := vfs.InjectorFunc(func(o vfs.Op) error {
		if o.Kind == vfs.OpRead || !armed {
			return nil
		}
		fileOps++
		if crng.IntN(every) == 0 {
			points = append(points, tlPoint{fs: mem.CrashClone(crng.Uint64()), exp: exp, opIdx: opIdx, fileOp: fileOps})
		}
		if crng.IntN(every*3) == 0 {
			points = append(points, tlPoint{fs: mem.Clone(), kill: true, exp: exp, opIdx: opIdx, fileOp: fileOps})
		}
		return nil
	})
	cfg := plCfg()
	d, err := Create("/dev/zns0", cfg, clock.Off(), WithFS(vfs.WithErrors(mem, hook)), WithLogger(quiet), withSyncOrder(syncJournalFirst))
	require.NoError(t, err)
	g := d.g
	bs := g.BlockSize
	const nz = 4
	exp = m.expect()
	armed = true
	for opIdx = 0; opIdx < nOps; opIdx++ {
		zi := uint64(rng.IntN(nz))
		zs := zi * g.ZoneSize
		tag := byte(opIdx + 1)
		rep, _ := d.ReportZones(StateAny, zi, 1)
		z := rep[0]
		wp := z.WP - zs
		r := rng.IntN(100)
		var err error
		switch {
		case !z.TL && z.State != StateFull && wp < g.ZoneCap && r < 35: // sequential writes (fill)
			n := min(g.ZoneCap-wp, uint64(1+rng.IntN(20)))
			fua := rng.IntN(4) == 0
			data := pattern(bs, zs+wp, int(n), tag)
			delete(m.finCur, zi)
			for i := uint64(0); i < n; i++ {
				delete(m.zero, zs+wp+i) // a zone whose TL ended at a close takes writes past its write pointer
			}
			exp = m.expect()
			if _, err = d.Write(bg, zs+wp, data, Flags{FUA: fua}); err == nil {
				for i := uint64(0); i < n; i++ {
					m.cur[zs+wp+i] = data[i*uint64(bs) : (i+1)*uint64(bs)]
				}
				if fua {
					m.flushed()
				}
			}
		case wp > 0 && r < 42: // in-place update of written blocks (IPU), also of a TL zone's valid blocks
			off := uint64(rng.IntN(int(wp)))
			if z.TL {
				var vs []uint64
				for o := range m.valid[zi] {
					vs = append(vs, o)
				}
				if len(vs) == 0 {
					continue
				}
				slices.Sort(vs)
				off = vs[rng.IntN(len(vs))]
			}
			data := pattern(bs, zs+off, 1, tag)
			prev, had := m.cur[zs+off]
			delete(m.dur, zs+off) // old or new until the next flush
			delete(m.zero, zs+off)
			// While the update is in flight a kill may leave the old or the
			// new contents: the slot is written and its record appended
			// before the journal sync that acknowledges it.
			delete(m.cur, zs+off)
			exp = m.expect()
			if _, err = d.Write(bg, zs+off, data, Flags{Overwrite: true}); err == nil {
				m.cur[zs+off] = data
			} else if had {
				m.cur[zs+off] = prev
			}
		case z.TL && r < 50: // TL writes: a run in a hole at or above the write pointer
			var holes []uint64
			for o := wp; o < g.ZoneCap; o++ {
				if !m.valid[zi][o] {
					holes = append(holes, o)
				}
			}
			if len(holes) == 0 {
				continue
			}
			o := holes[rng.IntN(min(len(holes), 4))] // may skip a few holes
			n := uint64(1)
			for n < 3 && o+n < g.ZoneCap && !m.valid[zi][o+n] && rng.IntN(2) == 0 {
				n++
			}
			fua := rng.IntN(5) == 0
			data := pattern(bs, zs+o, int(n), tag)
			for i := uint64(0); i < n; i++ {
				delete(m.zero, zs+o+i) // in flight: old (zeros) or new
			}
			exp = m.expect()
			if _, err = d.Write(bg, zs+o, data, Flags{FUA: fua}); err == nil {
				for i := uint64(0); i < n; i++ {
					m.cur[zs+o+i] = data[i*uint64(bs) : (i+1)*uint64(bs)]
				}
				if fua {
					m.flushed()
				}
			}
		case !z.TL && wp > 0 && (z.State == StateFull || z.State == StateClosed || z.State.open()) && r < 70: // TL_open
			bm := make([]byte, (g.ZoneCap+7)/8)
			valid := map[uint64]bool{}
			for o := uint64(0); o < wp; o++ {
				if rng.IntN(3) != 0 || (o == wp-1 && rng.IntN(2) == 0) {
					bm[o/8] |= 1 << (o % 8)
					valid[o] = true
				}
			}
			// in flight: invalid blocks may keep their data or lose it
			for o := uint64(0); o < g.ZoneSize; o++ {
				if !valid[o] {
					delete(m.cur, zs+o)
					delete(m.dur, zs+o)
				}
				delete(m.zero, zs+o)
			}
			delete(m.finished, zi)
			delete(m.finCur, zi)
			delete(m.valid, zi) // the old or the new bitmap
			exp = m.expect()
			if _, err = d.TLOpen(bg, zi, bm, TLMode(rng.IntN(2))); err == nil {
				m.valid[zi] = valid
				for o := uint64(0); o < g.ZoneCap; o++ {
					if !valid[o] {
						m.zero[zs+o] = true
					}
				}
			}
		case r < 80:
			exp = m.expect()
			if _, err = d.Flush(bg); err == nil {
				m.flushed()
			}
		case r < 88 && z.State != StateEmpty:
			exp = m.expect()
			if _, err = d.ZoneMgmt(bg, zi, ActionFinish, false); err == nil {
				m.finCur[zi] = true
				delete(m.valid, zi)
			}
		case r < 94:
			exp = m.expect()
			if _, err = d.ZoneMgmt(bg, zi, ActionClose, false); err == nil {
				delete(m.valid, zi)
			}
		default: // reset
			m.zoneUnsure[zi] = true
			exp = m.expect()
			if _, err = d.ZoneMgmt(bg, zi, ActionReset, false); err == nil {
				for o := uint64(0); o < g.ZoneSize; o++ {
					delete(m.cur, zs+o)
					delete(m.dur, zs+o)
					delete(m.zero, zs+o)
				}
				delete(m.valid, zi)
				delete(m.finished, zi)
				delete(m.finCur, zi)
			}
		}
		if *powerVerbose {
			rep, _ := d.ReportZones(StateAny, zi, 1)
			t.Logf("op %d (file op %d): r %d zone %d was %+v now %+v: err %v", opIdx, fileOps, r, zi, z, rep[0], err)
		}
		require.True(t, err == nil || isTyped(err), "seed %d op %d: %v", seed, opIdx, err)
		var ioe *IOError
		require.False(t, errors.As(err, &ioe), "seed %d op %d: unexpected I/O error %v", seed, opIdx, err)
		exp = m.expect()
	}
	armed = false
	require.NoError(t, d.Close())
	return points
}

func checkTLPoint(t *testing.T, seed uint64, cp tlPoint) {
	where := fmt.Sprintf("seed %d, crash before file op %d (during command %d, kill %v); rerun: go test ./pkg/zns -run TestTLCrashPoints -powerloss.seed=%d", seed, cp.fileOp, cp.opIdx, cp.kill, seed)
	d, err := Open("/dev/zns0", plCfg(), clock.Off(), WithFS(cp.fs), WithLogger(quiet))
	require.NoError(t, err, where)
	defer d.Close()
	g := d.g
	rep, err := d.ReportZones(StateAny, 0, 0)
	require.NoError(t, err)
	want := cp.exp.dur
	if cp.kill {
		want = cp.exp.cur
	}
	check := func(d *Device, stage string) {
		for lba, w := range want {
			zi := lba / g.ZoneSize
			if cp.exp.zoneUnsure[zi] {
				continue
			}
			got, _, err := d.Read(bg, lba, 1)
			require.NoError(t, err, where)
			require.True(t, bytes.Equal(w, got), "%s (%s): acknowledged block %d (zone %d offset %d, valid at TL_open %v) lost: zone %+v", where, stage, lba, zi, lba-zi*g.ZoneSize, cp.exp.valid[zi][lba-zi*g.ZoneSize], rep[zi])
		}
		for lba := range cp.exp.zero {
			zi := lba / g.ZoneSize
			if cp.exp.zoneUnsure[zi] {
				continue
			}
			got, _, err := d.Read(bg, lba, 1)
			require.NoError(t, err, where)
			require.True(t, bytes.Equal(make([]byte, g.BlockSize), got), "%s (%s): never written hole %d (zone %d offset %d) does not read as zeros (reads %x): zone %+v", where, stage, lba, zi, lba-zi*g.ZoneSize, got[:64], rep[zi])
		}
	}
	check(d, "reopened")
	for _, z := range rep {
		require.False(t, z.TL, "%s: zone %d still TL_opened after a reopen", where, z.Index)
		if cp.exp.zoneUnsure[z.Index] {
			continue
		}
		wp := z.WP - z.Start
		for o := range cp.exp.valid[z.Index] {
			require.Greater(t, wp, o, "%s: zone %d: write pointer %d not past valid block %d: %+v", where, z.Index, wp, o, z)
		}
		for lba := range want {
			if lba/g.ZoneSize == z.Index {
				require.Greater(t, z.WP, lba, "%s: zone %d: acknowledged block %d at or above the write pointer", where, z.Index, lba)
			}
		}
		if cp.exp.finished[z.Index] {
			require.Equal(t, StateFull, z.State, "%s: zone %d finished and flushed", where, z.Index)
		}
	}
	// ending threaded logging left nothing to the recovery's memory: finish
	// every zone, kill the process, reopen and read again
	for _, z := range rep {
		if z.State.active() {
			_, err := d.ZoneMgmt(bg, z.Index, ActionFinish, false)
			require.NoError(t, err, where)
		}
	}
	check(d, "finished after reopen")
	fs := cp.fs.Clone()
	d.abandon()
	d2, err := Open("/dev/zns0", plCfg(), clock.Off(), WithFS(fs), WithLogger(quiet))
	require.NoError(t, err, where)
	defer d2.Close()
	check(d2, "reopened twice")
}

// TestTLCrashPoints: random threaded-logging workloads (fill, TL_open with
// random bitmaps, sparse writes with and without FUA, Flush, finish, close,
// reset, TL_open again) with a power loss or a killed process at random file
// operations; after each reopen every acknowledged durable block (a kill:
// every acknowledged block) reads back, the holes TL_open gave up read as
// zeros, no zone is TL_opened, write pointers are past the valid and the
// durable blocks, finished zones are full. The seed is printed on failure.
func TestTLCrashPoints(t *testing.T) {
	seeds, nOps, every := 12, 80, 6
	if testing.Short() {
		seeds = 5
	}
	if *longPowerLoss {
		seeds, nOps, every = 300, 150, 2
	}
	list := powerLossSeeds(seeds)
	total := 0
	for _, seed := range list {
		points := runTLCrashWorkload(t, seed, nOps, every)
		for _, cp := range points {
			checkTLPoint(t, seed, cp)
			if t.Failed() {
				t.Fatalf("failing seed: %d", seed)
			}
		}
		total += len(points)
	}
	t.Logf("%d seeds, %d crash points", len(list), total)
	require.Greater(t, total, len(list)*5)
}
