package fdp

import (
	"bytes"
	"encoding/binary"
	"flag"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/vfs"
)

var longCrash = flag.Bool("long", false, "crash tests: many more seeds")

// crashModel is what the host may expect of each LBA: ver 0 reads as
// zeros. dur is the version as of the last completed Flush (or FUA
// write), since the versions acknowledged after it, cur the newest.
type crashModel struct {
	cur, dur map[uint64]uint64
	since    map[uint64][]uint64
	pending  map[uint64]uint64 // the command running when the crash hits
}

type crashExpect struct {
	cur, dur map[uint64]uint64
	since    map[uint64][]uint64
	pending  map[uint64]uint64
}

func (m *crashModel) snapshot() crashExpect {
	e := crashExpect{cur: map[uint64]uint64{}, dur: map[uint64]uint64{}, since: map[uint64][]uint64{}, pending: map[uint64]uint64{}}
	for k, v := range m.cur {
		e.cur[k] = v
	}
	for k, v := range m.dur {
		e.dur[k] = v
	}
	for k, v := range m.since {
		e.since[k] = append([]uint64(nil), v...)
	}
	for k, v := range m.pending {
		e.pending[k] = v
	}
	return e
}

func (m *crashModel) ack(lba, ver uint64) {
	m.cur[lba] = ver
	m.since[lba] = append(m.since[lba], ver)
}

func (m *crashModel) flushed() {
	m.dur = map[uint64]uint64{}
	for k, v := range m.cur {
		m.dur[k] = v
	}
	m.since = map[uint64][]uint64{}
}

type crashPoint struct {
	fs   *vfs.MemFS
	kill bool
	exp  crashExpect
	op   int
}

// allowed are the versions an LBA may hold after the crash.
func (e crashExpect) allowed(lba uint64, kill bool) []uint64 {
	var out []uint64
	if kill {
		out = append(out, e.cur[lba])
	} else {
		out = append(out, e.dur[lba])
		out = append(out, e.since[lba]...)
	}
	if v, ok := e.pending[lba]; ok {
		out = append(out, v)
	}
	return out
}

func crashConfig() Config {
	c := testConfig()
	c.Flash.BlocksPerChip = 48
	c.Flash.PagesPerBlock = 4
	c.OverProvision = 0.35
	return c
}

// runCrashWorkload runs random writes (some FUA), trims, flushes and
// handle updates with garbage collection active, and keeps the file system
// as a power loss (CrashClone) or a process kill (Clone) would leave it
// at random file operations.
func runCrashWorkload(t *testing.T, seed uint64, nOps, every int) []crashPoint {
	rng := rand.New(rand.NewPCG(seed, 3))
	crng := rand.New(rand.NewPCG(seed, 5))
	mem := vfs.NewCrashableMem()
	m := &crashModel{cur: map[uint64]uint64{}, dur: map[uint64]uint64{}, since: map[uint64][]uint64{}, pending: map[uint64]uint64{}}
	var points []crashPoint
	op := 0
	armed := false
	hook := vfs.InjectorFunc(func(vfs.Op) error {
		if !armed {
			return nil
		}
		if crng.IntN(every) == 0 {
			points = append(points, crashPoint{fs: mem.CrashClone(crng.Uint64()), exp: m.snapshot(), op: op})
		}
		if crng.IntN(every*4) == 0 {
			points = append(points, crashPoint{fs: mem.Clone(), kill: true, exp: m.snapshot(), op: op})
		}
		return nil
	})
	cfg := crashConfig()
	d, err := Create("/fdp0", cfg, clock.Off(), WithFS(vfs.WithErrors(mem, hook)), WithLogger(quiet))
	require.NoError(t, err)
	armed = true
	bs := d.BlockSize()
	n := d.Capacity()
	ver := uint64(0)
	for op = 0; op < nOps; op++ {
		switch x := rng.IntN(100); {
		case x < 80:
			k := uint64(1 + rng.IntN(6))
			lba := rng.Uint64N(n - k + 1)
			if rng.IntN(3) != 0 {
				lba = rng.Uint64N(n/5 - k)
			}
			fua := rng.IntN(25) == 0
			buf := make([]byte, 0, int(k)*bs)
			vs := make([]uint64, k)
			for i := range k {
				ver++
				vs[i] = ver
				m.pending[lba+i] = ver
				buf = append(buf, block(bs, lba+i, ver)...)
			}
			_, err := d.Write(bg, lba, buf, PlacementID{Handle: uint16(rng.IntN(len(cfg.Handles)))}, Flags{FUA: fua})
			require.NoError(t, err)
			for i := range k {
				m.ack(lba+i, vs[i])
			}
			if fua {
				// FUA syncs the whole data file and the journal.
				m.flushed()
			}
		case x < 90:
			k := uint64(1 + rng.IntN(10))
			lba := rng.Uint64N(n - k + 1)
			for i := range k {
				m.pending[lba+i] = 0
			}
			require.NoError(t, d.Trim(bg, lba, k))
			for i := range k {
				m.ack(lba+i, 0)
			}
		case x < 93:
			require.NoError(t, d.UpdateHandles(bg, []PlacementID{{Handle: uint16(rng.IntN(len(cfg.Handles)))}}))
		default:
			require.NoError(t, d.Flush(bg))
			m.flushed()
		}
		clear(m.pending)
	}
	armed = false
	require.Greater(t, d.Stats().GCCopies, uint64(0), "the workload must run garbage collection")
	require.NoError(t, d.Close())
	return points
}

func verifyCrashPoint(t *testing.T, cp crashPoint) {
	cfg := crashConfig()
	d, err := Open("/fdp0", cfg, clock.Off(), WithFS(cp.fs), WithLogger(quiet))
	require.NoError(t, err, "open after crash at op %d (kill=%v)", cp.op, cp.kill)
	checkInvariants(t, d)
	bs := d.BlockSize()
	n := d.Capacity()
	got, _, err := d.Read(bg, 0, n)
	require.NoError(t, err)
	zero := make([]byte, bs)
	for lba := range n {
		b := got[int(lba)*bs : int(lba+1)*bs]
		have := uint64(0)
		if !bytes.Equal(b, zero) {
			have = binary.LittleEndian.Uint64(b[8:])
			require.Equal(t, lba, binary.LittleEndian.Uint64(b), "LBA %d holds another LBA's data", lba)
			require.Equal(t, block(bs, lba, have), b, "LBA %d: torn data", lba)
		}
		require.Contains(t, cp.exp.allowed(lba, cp.kill), have, "LBA %d after crash at op %d (kill=%v): version %d", lba, cp.op, cp.kill, have)
	}
	// The recovered drive keeps working: overwrite a range, reopen, read.
	data := make([]byte, 0, 32*bs)
	for i := range uint64(32) {
		data = append(data, block(bs, i, 1<<40+i)...)
	}
	_, err = d.Write(bg, 0, data, PlacementID{}, Flags{})
	require.NoError(t, err)
	require.NoError(t, d.Close())
	d, err = Open("/fdp0", cfg, clock.Off(), WithFS(cp.fs), WithLogger(quiet))
	require.NoError(t, err)
	checkInvariants(t, d)
	rb, _, err := d.Read(bg, 0, 32)
	require.NoError(t, err)
	require.Equal(t, data, rb)
	require.NoError(t, d.Close())
}

// TestPowerLoss: at random file operations of a workload with garbage
// collection, a power loss (unsynced writes applied, dropped or torn per
// sector) or a process kill; the drive must open, be consistent, and hold
// for every LBA its last durable content or a newer acknowledged one
// (after a kill: its last acknowledged one).
func TestPowerLoss(t *testing.T) {
	seeds := 3
	if *longCrash {
		seeds = 40
	}
	for seed := range uint64(seeds) {
		points := runCrashWorkload(t, seed+1, 1500, 300)
		require.NotEmpty(t, points)
		for _, cp := range points {
			verifyCrashPoint(t, cp)
		}
	}
}
