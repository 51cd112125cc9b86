package zns

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/vfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

var (
	longPowerLoss = flag.Bool("long", false, "power-loss tests: many more seeds and crash points")
	powerVerbose  = flag.Bool("powerloss.v", false, "power-loss tests: log every command")
	powerSeed     = flag.Uint64("powerloss.seed", 0, "power-loss tests: run only this seed (as printed by a failure)")
	powerSeeds    = flag.Int("powerloss.seeds", 0, "power-loss tests: run this many seeds (0: the default, or -long's)")
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// plModel is what the host may expect of the drive: cur holds the content
// of every acknowledged block, dur the content guaranteed to survive a power
// loss (as of the last FUA write or completed Flush). Blocks overwritten
// since then (unsure) and zones reset or TL_opened since then (zoneUnsure)
// may legitimately come back with their old or new content.
type plModel struct {
	cur, dur   map[uint64][]byte
	unsure     map[uint64]bool
	zoneUnsure map[uint64]bool
	maxWP      map[uint64]uint64 // highest write pointer each zone ever had
}

type plExpect struct {
	cur        map[uint64][]byte // acknowledged: what a process kill must keep
	dur        map[uint64][]byte
	unsure     map[uint64]bool
	zoneUnsure map[uint64]bool
	maxWP      map[uint64]uint64
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	o := make(map[K]V, len(m))
	for k, v := range m {
		o[k] = v
	}
	return o
}

func (m *plModel) expect() plExpect {
	return plExpect{cloneMap(m.cur), cloneMap(m.dur), cloneMap(m.unsure), cloneMap(m.zoneUnsure), cloneMap(m.maxWP)}
}

func (m *plModel) ack(lba uint64, blk []byte) {
	if old, ok := m.dur[lba]; ok && !bytes.Equal(old, blk) {
		m.unsure[lba] = true
	}
	m.cur[lba] = blk
}

func (m *plModel) flushed() {
	m.dur = cloneMap(m.cur)
	m.unsure = map[uint64]bool{}
	m.zoneUnsure = map[uint64]bool{}
}

// crashPoint is the file system as a power loss would leave it at one file
// operation, and what the host may expect then.
type crashPoint struct {
	fs     *vfs.MemFS
	kill   bool // a killed process (the page cache survives), not a power loss
	exp    plExpect
	opIdx  int
	fileOp int
}

// plRun says how runPowerLossWorkload runs the drive's syncs and where it
// cuts the power.
type plRun struct {
	order syncOrder // syncAll's fdatasyncs: one after the other in a fixed order (a seed replays exactly), or at once
	// atSyncs also cuts the power at every fdatasync: before it runs
	// (with syncAll's two syncs one after the other, between them), with
	// the file's unsynced writes kept, torn or lost at random.
	atSyncs bool
}

// runPowerLossWorkload runs nOps random drive commands on a crashable file
// system and takes a crash clone before about every 1/every-th file
// operation.
func runPowerLossWorkload(t *testing.T, seed uint64, nOps, every int, run plRun) ([]crashPoint, *plModel) {
	rng := rand.New(rand.NewPCG(seed, 7))
	mem := vfs.NewCrashableMem()
	m := &plModel{cur: map[uint64][]byte{}, dur: map[uint64][]byte{}, unsure: map[uint64]bool{}, zoneUnsure: map[uint64]bool{}, maxWP: map[uint64]uint64{}}
	var points []crashPoint
	var exp plExpect
	opIdx, fileOps := 0, 0
	crng := rand.New(rand.NewPCG(seed, 11)) // separate stream: the device may do file ops concurrently
	var hookMu sync.Mutex                   // syncConcurrent: the journal's sync runs on its own goroutine
	hook := vfs.InjectorFunc(func(o vfs.Op) error {
		hookMu.Lock()
		defer hookMu.Unlock()
		fileOps++
		if crng.IntN(every) == 0 || run.atSyncs && o.Kind == vfs.OpSync {
			points = append(points, crashPoint{fs: mem.CrashClone(crng.Uint64()), exp: exp, opIdx: opIdx, fileOp: fileOps})
		}
		if crng.IntN(every*4) == 0 {
			points = append(points, crashPoint{fs: mem.Clone(), kill: true, exp: exp, opIdx: opIdx, fileOp: fileOps})
		}
		return nil
	})
	fs := vfs.WithErrors(mem, hook)
	cfg := plCfg()
	d, err := Create("/dev/zns0", cfg, clock.Off(), WithFS(fs), WithLogger(quiet), withSyncOrder(run.order))
	require.NoError(t, err)
	g := d.g
	bs := g.BlockSize
	const nz = 6
	exp = m.expect()
	for opIdx = 0; opIdx < nOps; opIdx++ {
		zi := uint64(rng.IntN(nz))
		zs := zi * g.ZoneSize
		tag := byte(opIdx)
		rep, _ := d.ReportZones(StateAny, zi, 1)
		wp := rep[0].WP - zs
		n := uint64(1 + rng.IntN(4))
		blocks := func(lba uint64, n uint64) []byte { return pattern(bs, lba, int(n), tag) }
		r := rng.IntN(100)
		if *powerVerbose {
			t.Logf("op %d: kind %d zone %d n %d", opIdx, r, zi, n)
		}
		switch {
		case r < 40: // append / write at the write pointer, some with FUA
			fua := rng.IntN(5) == 0
			data := blocks(zs+wp, n)
			m.maxWP[zi] = max(m.maxWP[zi], wp+n) // in flight
			exp = m.expect()
			var lba uint64
			if rng.IntN(2) == 0 {
				lba, _, err = d.Append(bg, zs, data, Flags{FUA: fua})
			} else {
				lba = zs + wp
				_, err = d.Write(bg, lba, data, Flags{FUA: fua})
			}
			if err == nil {
				for i := uint64(0); i < n; i++ {
					m.ack(lba+i, data[i*uint64(bs):(i+1)*uint64(bs)])
				}
				if fua {
					m.flushed()
				}
			}
		case r < 48: // in-place update of written blocks
			if wp == 0 {
				continue
			}
			off := uint64(rng.IntN(int(wp)))
			k := min(n, wp-off)
			data := blocks(zs+off, k)
			// in flight: each block may end up old or new
			for i := uint64(0); i < k; i++ {
				m.unsure[zs+off+i] = true
			}
			exp = m.expect()
			if _, err = d.Write(bg, zs+off, data, Flags{Overwrite: true}); err == nil {
				// durable when it returns, without a Flush
				for i := uint64(0); i < k; i++ {
					b := data[i*uint64(bs) : (i+1)*uint64(bs)]
					m.ack(zs+off+i, b)
					m.dur[zs+off+i] = b
					delete(m.unsure, zs+off+i)
				}
			}
		case r < 60:
			if _, err = d.Flush(bg); err == nil {
				m.flushed()
			}
		case r < 66: // reset
			m.zoneUnsure[zi] = true // in flight: it may or may not happen
			exp = m.expect()
			if _, err = d.ZoneMgmt(bg, zi, ActionReset, false); err == nil {
				for o := uint64(0); o < g.ZoneSize; o++ {
					delete(m.cur, zs+o)
				}
				m.zoneUnsure[zi] = true
			}
		case r < 71:
			_, err = d.ZoneMgmt(bg, zi, ActionFinish, false)
		case r < 76:
			_, err = d.ZoneMgmt(bg, zi, ActionClose, false)
		case r < 86: // zone_compaction of a written range into an empty zone
			dst := uint64(rng.IntN(nz))
			drep, _ := d.ReportZones(StateAny, dst, 1)
			if dst == zi || wp == 0 || drep[0].State != StateEmpty {
				continue
			}
			cnt := 1 + uint64(rng.IntN(int(wp)))
			m.maxWP[dst] = max(m.maxWP[dst], cnt)
			exp = m.expect()
			id, err2 := d.ZoneCompaction(bg, []Copy{{Src: zs, Dst: dst * g.ZoneSize, Count: cnt}})
			if err = err2; err == nil {
				var res CompactionResult
				res, err = d.WaitCompaction(bg, id)
				if err == nil && res.Err == nil {
					for i := uint64(0); i < cnt; i++ {
						if b, ok := m.cur[zs+i]; ok {
							m.ack(dst*g.ZoneSize+i, b)
						}
					}
				}
			}
		default: // TL_open with a random valid bitmap, then a few sparse writes
			if wp == 0 {
				continue
			}
			bm := make([]byte, (g.ZoneCap+7)/8)
			for o := uint64(0); o < wp; o++ {
				if rng.IntN(3) != 0 {
					bm[o/8] |= 1 << (o % 8)
				}
			}
			m.zoneUnsure[zi] = true // invalid blocks may be gone once it starts
			m.maxWP[zi] = g.ZoneCap
			exp = m.expect()
			if _, err = d.TLOpen(bg, zi, bm, TLMode(rng.IntN(2))); err != nil {
				continue
			}
			for o := uint64(0); o < g.ZoneCap; o++ {
				if bm[o/8]&(1<<(o%8)) == 0 {
					delete(m.cur, zs+o)
				}
			}
			for k := 0; k < 3; k++ {
				rep, _ := d.ReportZones(StateAny, zi, 1)
				w := rep[0].WP - zs
				for w < g.ZoneCap && bm[w/8]&(1<<(w%8)) != 0 {
					w++
				}
				if w >= g.ZoneCap {
					break
				}
				data := blocks(zs+w, 1)
				if _, err := d.Write(bg, zs+w, data, Flags{}); err == nil {
					m.ack(zs+w, data)
				}
			}
			if rng.IntN(2) == 0 {
				_, _ = d.ZoneMgmt(bg, zi, ActionClose, false)
			}
		}
		if *powerVerbose {
			t.Logf("op %d r-zone %d wp %d: err %v (fileOps %d)", opIdx, zi, wp, err, fileOps)
		}
		if err != nil {
			var ioe *IOError
			require.False(t, errors.As(err, &ioe), "seed %d op %d: unexpected I/O error %v", seed, opIdx, err)
			require.True(t, isTyped(err), "seed %d op %d: untyped error %v", seed, opIdx, err)
			err = nil
		}
		all, _ := d.ReportZones(StateAny, 0, nz)
		for _, z := range all {
			m.maxWP[z.Index] = max(m.maxWP[z.Index], z.WP-z.Start)
		}
		exp = m.expect()
	}
	require.NoError(t, d.Close())
	return points, m
}

// plCfg has open/active limits above what the workload can reach.
func plCfg() flash.Config {
	c := testCfg()
	c.MaxOpenZones, c.MaxActiveZones = 8, 8
	return c
}

func isTyped(err error) bool {
	for _, s := range allSentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// checkCrashPoint opens the drive a power loss left behind and checks the
// invariants: it opens; every durable block reads back; write pointers are
// consistent with the data (never past what was written, every durable
// block below its zone's write pointer) and with the zone states; and the
// drive takes new writes.
func checkCrashPoint(t *testing.T, seed uint64, cp crashPoint) {
	where := fmt.Sprintf("seed %d, crash before file op %d (during command %d); rerun: go test ./pkg/zns -run TestPowerLossDrive -powerloss.seed=%d", seed, cp.fileOp, cp.opIdx, seed)
	d, err := Open("/dev/zns0", plCfg(), clock.Off(), WithFS(cp.fs), WithLogger(quiet))
	if err != nil && cp.exp.dur == nil {
		return
	}
	if errors.Is(err, zerr.ErrNotFound) && len(cp.exp.dur) == 0 && cp.opIdx == 0 {
		return // crashed inside Create: nothing was acknowledged
	}
	require.NoError(t, err, where)
	defer d.Close()
	rep := checkInvariants(t, d)
	g := d.g
	want := cp.exp.dur
	if cp.kill {
		want = cp.exp.cur // a kill loses nothing acknowledged
		where = "process kill: " + where
	}
	for lba, want := range want {
		zi := lba / g.ZoneSize
		if cp.exp.unsure[lba] || cp.exp.zoneUnsure[zi] {
			continue
		}
		got, _, err := d.Read(bg, lba, 1)
		require.NoError(t, err, where)
		require.True(t, bytes.Equal(want, got), "%s: durable block %d lost (zone %d: %s wp %d)", where, lba, zi, rep[zi].State, rep[zi].WP-rep[zi].Start)
		if !rep[zi].TL {
			require.Less(t, lba, rep[zi].WP, "%s: durable block %d at or above the write pointer", where, lba)
		}
	}
	for _, z := range rep {
		if z.State != StateFull {
			require.LessOrEqual(t, z.WP-z.Start, cp.exp.maxWP[z.Index], "%s: zone %d write pointer past anything written", where, z.Index)
		}
	}
	// still a working drive
	for _, z := range rep {
		if z.State == StateEmpty {
			_, _, err := d.Append(bg, z.Start, pattern(g.BlockSize, z.Start, 1, 0xee), Flags{FUA: true})
			require.NoError(t, err, where)
			break
		}
	}
}

// powerLossSeeds is the list of n seeds a power-loss test runs: the same
// ones on every run of the default tests (a failure reproduces), a new
// sample per process with -long (seeds from the process id, printed on
// failure); -powerloss.seeds overrides n, -powerloss.seed picks one.
func powerLossSeeds(n int) []uint64 {
	if *powerSeed != 0 {
		return []uint64{*powerSeed}
	}
	if *powerSeeds > 0 {
		n = *powerSeeds
	}
	base := uint64(1)
	if *longPowerLoss {
		base = uint64(os.Getpid())
	}
	list := make([]uint64, n)
	for i := range list {
		list[i] = base*1000 + uint64(i)
	}
	return list
}

// TestPowerLossDrive: random commands (writes, appends, FUA, Flush, IPU,
// resets, finish, close, zone_compaction, TL_open + sparse writes) on the
// crashable file system, power lost at random file operations (unsynced
// writes vanish, tear or turn to zeros), the drive reopened each time; at
// some points a killed process instead (every acknowledged block must read
// back).
func TestPowerLossDrive(t *testing.T) {
	seeds, nOps, every := 40, 70, 3
	if testing.Short() {
		seeds = 10
	}
	if *longPowerLoss {
		seeds, nOps, every = 300, 150, 2
	}
	list := powerLossSeeds(seeds)
	total := 0
	for _, seed := range list {
		points, _ := runPowerLossWorkload(t, seed, nOps, every, plRun{order: syncJournalFirst})
		for _, cp := range points {
			checkCrashPoint(t, seed, cp)
		}
		total += len(points)
		if t.Failed() {
			t.Fatalf("failing seed: %d", seed)
		}
	}
	t.Logf("%d seeds, %d crash points", len(list), total)
	require.Greater(t, total, len(list)*10)
}

// TestPowerLossBetweenSyncs: a Flush or FUA write syncs the data file and
// the journal in one round, at once, so a power loss may find either one
// synced without the other. The workload of TestPowerLossDrive with the
// power cut at every fdatasync, also between the two of one round (each
// order: the journal synced and the data not, and the other way round),
// and with the two syncs really concurrent: every durable block reads
// back, every write pointer is consistent. Flushes and FUA writes that had
// records to sync are counted, so the test cannot pass without reaching
// the point it is about.
func TestPowerLossBetweenSyncs(t *testing.T) {
	seeds, nOps, every := 12, 70, 6
	if testing.Short() {
		seeds = 4
	}
	if *longPowerLoss {
		seeds, nOps, every = 100, 150, 3
	}
	for _, tc := range []struct {
		name  string
		order syncOrder
	}{
		{"journal first", syncJournalFirst},
		{"data first", syncDataFirst},
		{"concurrent", syncConcurrent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list := powerLossSeeds(seeds)
			total := 0
			var both uint64
			for _, seed := range list {
				points, _ := runPowerLossWorkload(t, seed, nOps, every, plRun{order: tc.order, atSyncs: true})
				for _, cp := range points {
					checkCrashPoint(t, seed, cp)
					if t.Failed() {
						t.Fatalf("failing seed: %d (order %s)", seed, tc.name)
					}
				}
				total += len(points)
			}
			// the rounds that synced both files: a second run of one seed
			// on a plain crashable file system, counting them
			both = syncRoundsWithJournal(t, list[0], nOps, tc.order)
			t.Logf("%d seeds, %d crash points; seed %d: %d sync rounds with journal records", len(list), total, list[0], both)
			require.Greater(t, total, len(list)*10)
			require.Positive(t, both, "no Flush or FUA write had journal records to sync")
		})
	}
}

// syncRoundsWithJournal runs the first nOps commands of the power-loss
// workload's kinds that end in syncAll (writes with FUA, Flush) after a
// zone open each, and counts the rounds that synced the journal with the
// data file.
func syncRoundsWithJournal(t *testing.T, seed uint64, nOps int, order syncOrder) uint64 {
	rng := rand.New(rand.NewPCG(seed, 7))
	d, err := Create("/dev/zns0", plCfg(), clock.Off(), WithFS(vfs.NewCrashableMem()), WithLogger(quiet), withSyncOrder(order))
	require.NoError(t, err)
	defer d.Close()
	g := d.g
	var n uint64
	for i := 0; i < nOps; i++ {
		zi := uint64(rng.IntN(6))
		if _, err := d.ZoneMgmt(bg, zi, ActionReset, false); err != nil {
			continue
		}
		j0, d0 := d.Log().JournalSyncs, d.Log().DataSyncs
		data := pattern(g.BlockSize, zi*g.ZoneSize, 1, byte(i))
		if rng.IntN(2) == 0 {
			_, _, err = d.Append(bg, zi*g.ZoneSize, data, Flags{FUA: true})
		} else if _, _, err = d.Append(bg, zi*g.ZoneSize, data, Flags{}); err == nil {
			_, err = d.Flush(bg)
		}
		require.NoError(t, err)
		if l := d.Log(); l.JournalSyncs > j0 && l.DataSyncs > d0 {
			n++
		}
	}
	return n
}
