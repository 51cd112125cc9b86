package lfs

import "math/bits"

// touchLog records which blocks changed validity since the last checkpoint
// and whether each was valid at it: the checkpoint's SIT delta, and the
// pre-invalid blocks (valid at the checkpoint, invalid now) that recycling
// and threaded logging must leave in place until the next one. fs.mu
// guards it.
//
// It keeps two bitmaps per zone instead of a map keyed by block address:
// every block written or overwritten touches it (twice for an overwrite),
// under fs.mu, and a map of a quarter of a million blocks (1 GiB written
// between checkpoints) cost about 5 % of the CPU of a sequential write over
// the cluster in map probes, growth and GC scanning (BenchmarkSeqWriteCluster,
// pprof: setValid and invalidate). Bitmaps are found by zone, not by
// segment, so a segment object that is replaced between checkpoints keeps
// its zone's record, as the map did.
type touchLog struct {
	zones map[ZoneID]*touchSet
}

// touchSet is one zone's record: touched has a bit per block whose
// validity changed since the checkpoint, was (a subset) the blocks among
// them that were valid at it.
type touchSet struct {
	touched []uint64
	was     []uint64
}

func newTouchLog() touchLog { return touchLog{zones: map[ZoneID]*touchSet{}} }

// reset forgets every change (a checkpoint recorded them, or a mount read
// the tables fresh).
func (t *touchLog) reset() { *t = newTouchLog() }

// get reports whether a changed validity since the checkpoint (ok) and
// whether it was valid at it.
func (t *touchLog) get(a Addr) (was, ok bool) {
	ts := t.zones[a.Zone()]
	if ts == nil {
		return false, false
	}
	off := a.Off()
	i, bit := off/64, uint64(1)<<(off%64)
	if i >= uint64(len(ts.touched)) || ts.touched[i]&bit == 0 {
		return false, false
	}
	return ts.was[i]&bit != 0, true
}

// add records a change of a's validity, valid at the checkpoint or not
// (wasValid); a block already recorded keeps its first record.
func (t *touchLog) add(a Addr, wasValid bool) {
	z, off := a.Zone(), a.Off()
	ts := t.zones[z]
	if ts == nil {
		ts = &touchSet{}
		t.zones[z] = ts
	}
	i, bit := off/64, uint64(1)<<(off%64)
	if n := int(i) + 1; n > len(ts.touched) {
		ts.touched = append(ts.touched, make([]uint64, n-len(ts.touched))...)
		ts.was = append(ts.was, make([]uint64, n-len(ts.was))...)
	}
	if ts.touched[i]&bit != 0 {
		return
	}
	ts.touched[i] |= bit
	if wasValid {
		ts.was[i] |= bit
	}
}

// each calls f for every recorded block.
func (t *touchLog) each(f func(a Addr, was bool)) {
	for z, ts := range t.zones {
		for i, w := range ts.touched {
			for w != 0 {
				b := uint64(bits.TrailingZeros64(w))
				w &= w - 1
				f(MakeAddr(z, uint64(i)*64+b), ts.was[i]&(1<<b) != 0)
			}
		}
	}
}

// preInvalid counts the blocks of zone z that were valid at the checkpoint
// and are not in valid (a segment's valid bitmap) now.
func (t *touchLog) preInvalid(z ZoneID, valid []uint64) uint64 {
	ts := t.zones[z]
	if ts == nil {
		return 0
	}
	var n int
	for i, w := range ts.was {
		if i < len(valid) {
			w &^= valid[i]
		}
		n += bits.OnesCount64(w)
	}
	return uint64(n)
}

// wasValid ORs into keep (a bitmap of zone z's blocks) the recorded blocks
// of z that were valid at the checkpoint; words past len(keep) are ignored.
func (t *touchLog) wasValid(z ZoneID, keep []uint64) {
	ts := t.zones[z]
	if ts == nil {
		return
	}
	for i := 0; i < len(ts.was) && i < len(keep); i++ {
		keep[i] |= ts.was[i]
	}
}
