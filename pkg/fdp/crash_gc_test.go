package fdp

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/vfs"
)

// refMap is the reference map of a concurrent crash workload: per LBA,
// every acknowledged version in order (version 0, zeros, first), the index
// of the newest one a completed Flush or FUA write made durable, and the
// version of the command in flight on it. Each worker owns its LBAs and
// runs one command at a time, so an LBA has at most one command in flight.
type refMap struct {
	mu      sync.Mutex
	hist    [][]uint64
	dur     []int
	pending map[uint64]uint64
}

func newRefMap(n uint64) *refMap {
	r := &refMap{hist: make([][]uint64, n), dur: make([]int, n), pending: map[uint64]uint64{}}
	for i := range r.hist {
		r.hist[i] = []uint64{0}
	}
	return r
}

func (r *refMap) start(lba, ver uint64) {
	r.mu.Lock()
	r.pending[lba] = ver
	r.mu.Unlock()
}

func (r *refMap) ack(lba, ver uint64) {
	r.mu.Lock()
	delete(r.pending, lba)
	r.hist[lba] = append(r.hist[lba], ver)
	r.mu.Unlock()
}

// mark is the newest acknowledged version of every LBA, as a sync that
// starts now will make durable.
func (r *refMap) mark() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make([]int, len(r.hist))
	for i, h := range r.hist {
		m[i] = len(h) - 1
	}
	return m
}

// synced records that a sync started at mark m completed.
func (r *refMap) synced(m []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, x := range m {
		r.dur[i] = max(r.dur[i], x)
	}
}

// allowed are the versions each LBA may hold after a power loss (kill:
// after a process kill) at this moment; called with r.mu held.
func (r *refMap) allowedLocked(kill bool) [][]uint64 {
	out := make([][]uint64, len(r.hist))
	for i, h := range r.hist {
		if kill {
			out[i] = []uint64{h[len(h)-1]}
		} else {
			out[i] = append([]uint64(nil), h[r.dur[i]:]...)
		}
		if v, ok := r.pending[uint64(i)]; ok {
			out[i] = append(out[i], v)
		}
	}
	return out
}

type gcCrashPoint struct {
	fs       *vfs.MemFS
	kill     bool
	allowed  [][]uint64
	duringGC bool
}

func gcCrashConfig() Config {
	c := crashConfig()
	c.ReclaimGroups = 2
	c.RUChips = 2
	return c
}

// runConcurrentCrashWorkload runs workers, each on its own LBAs, handle
// and (alternating) reclaim group, issuing writes (some FUA), trims,
// flushes and handle updates, so that one group's collector copies while
// the other workers write, read the reference map and sync. At random file
// operations it keeps the file system as a power loss (CrashClone) or a
// process kill (Clone) would leave it, with the reference map's allowed
// versions at that instant.
func runConcurrentCrashWorkload(t *testing.T, seed uint64, workers, nOps, every int) []gcCrashPoint {
	cfg := gcCrashConfig()
	mem := vfs.NewCrashableMem()
	var d *Device
	var ref *refMap
	var points []gcCrashPoint
	var writing atomic.Int32 // host writes in progress
	var armed atomic.Bool
	crng := rand.New(rand.NewPCG(seed, 5))
	hook := vfs.InjectorFunc(func(vfs.Op) error {
		if !armed.Load() {
			return nil
		}
		gc := d.collecting.Load() > 0
		if gc {
			// Let the other workers run while a collector copies.
			runtime.Gosched()
		}
		ref.mu.Lock()
		defer ref.mu.Unlock()
		// The collector runs inside a host write: a second write in
		// progress is a host write concurrent with the collection.
		during := gc && writing.Load() >= 2
		p := every
		if during {
			p = every / 8
		}
		if crng.IntN(p) == 0 {
			points = append(points, gcCrashPoint{fs: mem.CrashClone(crng.Uint64()), allowed: ref.allowedLocked(false), duringGC: during})
		}
		if crng.IntN(p*4) == 0 {
			points = append(points, gcCrashPoint{fs: mem.Clone(), kill: true, allowed: ref.allowedLocked(true), duringGC: during})
		}
		return nil
	})
	var err error
	d, err = Create("/fdp0", cfg, clock.Off(), WithFS(vfs.WithErrors(mem, hook)), WithLogger(quiet))
	require.NoError(t, err)
	bs := d.BlockSize()
	n := d.Capacity()
	ref = newRefMap(n)
	span := n / uint64(workers)
	var ver atomic.Uint64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	armed.Store(true)
	for w := range workers {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)+11))
			base := uint64(w) * span
			pid := PlacementID{Group: uint16(w % cfg.ReclaimGroups), Handle: uint16(w % len(cfg.Handles))}
			for range nOps {
				switch x := rng.IntN(100); {
				case x < 82:
					k := uint64(1 + rng.IntN(4))
					lba := base + rng.Uint64N(span-k+1)
					if rng.IntN(3) != 0 {
						lba = base + rng.Uint64N(span/4-k) // a hot quarter
					}
					fua := rng.IntN(30) == 0
					var m []int
					if fua {
						m = ref.mark()
					}
					buf := make([]byte, 0, int(k)*bs)
					vs := make([]uint64, k)
					for i := range k {
						vs[i] = ver.Add(1)
						ref.start(lba+i, vs[i])
						buf = append(buf, block(bs, lba+i, vs[i])...)
					}
					writing.Add(1)
					_, err := d.Write(bg, lba, buf, pid, Flags{FUA: fua})
					writing.Add(-1)
					if err != nil {
						errs <- err
						return
					}
					for i := range k {
						ref.ack(lba+i, vs[i])
					}
					if fua {
						// A FUA write syncs the data file and the journal:
						// it makes durable what was acknowledged before it
						// started, and its own data (not what other
						// workers had acknowledged by the time it returned).
						ref.mu.Lock()
						for i := range k {
							m[lba+i] = len(ref.hist[lba+i]) - 1
						}
						ref.mu.Unlock()
						ref.synced(m)
					}
				case x < 92:
					k := uint64(1 + rng.IntN(8))
					lba := base + rng.Uint64N(span-k+1)
					for i := range k {
						ref.start(lba+i, 0)
					}
					if err := d.Trim(bg, lba, k); err != nil {
						errs <- err
						return
					}
					for i := range k {
						ref.ack(lba+i, 0)
					}
				case x < 94:
					if err := d.UpdateHandles(bg, []PlacementID{pid}); err != nil {
						errs <- err
						return
					}
				default:
					m := ref.mark()
					if err := d.Flush(bg); err != nil {
						errs <- err
						return
					}
					ref.synced(m)
				}
			}
		}(w)
	}
	wg.Wait()
	armed.Store(false)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Greater(t, d.Stats().GCCopies, uint64(0), "the workload must run garbage collection")
	checkInvariants(t, d)
	// The live drive reads every LBA's last acknowledged version: no
	// collection published a copy over a newer write or trim.
	got, _, err := d.Read(bg, 0, n)
	require.NoError(t, err)
	for lba := range n {
		want := make([]byte, bs)
		if v := ref.hist[lba][len(ref.hist[lba])-1]; v != 0 {
			want = block(bs, lba, v)
		}
		require.Equal(t, want, got[int(lba)*bs:int(lba+1)*bs], "LBA %d on the live drive", lba)
	}
	require.NoError(t, d.Close())
	return points
}

func verifyGCCrashPoint(t *testing.T, cp gcCrashPoint, i int) {
	cfg := gcCrashConfig()
	d, err := Open("/fdp0", cfg, clock.Off(), WithFS(cp.fs), WithLogger(quiet))
	require.NoError(t, err, "open after crash point %d (kill=%v)", i, cp.kill)
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
		require.Contains(t, cp.allowed[lba], have, "LBA %d after crash point %d (kill=%v, during GC=%v): version %d", lba, i, cp.kill, cp.duringGC, have)
	}
	require.NoError(t, d.Close())
}

// TestPowerLossConcurrentGC: power losses and process kills at random
// file operations while writers on two reclaim groups write, trim, flush
// and update handles, and one group's garbage collector copies a victim
// while the others' host writes go on; the cuts taken during a collection
// with another host write in progress are sampled more often. After every
// cut the drive must open consistent and hold, for every LBA, its last
// durable version or a newer acknowledged one (after a kill: its last
// acknowledged one), or the version of a command in flight at the cut.
func TestPowerLossConcurrentGC(t *testing.T) {
	seeds := 3
	if *longCrash {
		seeds = 30
	}
	total, during := 0, 0
	for seed := range uint64(seeds) {
		points := runConcurrentCrashWorkload(t, seed+1, 4, 400, 800)
		for i, cp := range points {
			verifyGCCrashPoint(t, cp, i)
			total++
			if cp.duringGC {
				during++
			}
		}
	}
	t.Logf("%d crash points, %d during a collection with a host write in progress", total, during)
	require.Positive(t, during, "no cut landed in a collection concurrent with a host write")
}
