package lfs

import (
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// The touch log against the map it replaced: random adds and lookups over
// a few zones, then every query the file system makes.
func TestTouchLogMatchesMap(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		ref := map[Addr]bool{}
		tl := newTouchLog()
		const capBlocks = 300 // not a multiple of 64
		for i := 0; i < 2000; i++ {
			a := MakeAddr(ZoneID(rng.IntN(4)), uint64(rng.IntN(capBlocks)))
			switch rng.IntN(3) {
			case 0, 1:
				was := rng.IntN(2) == 0
				if _, ok := ref[a]; !ok {
					ref[a] = was
				}
				tl.add(a, was)
			default:
				was, ok := tl.get(a)
				rw, rok := ref[a]
				require.Equal(t, rok, ok, "seed %d get %v", seed, a)
				require.Equal(t, rw, was, "seed %d get %v", seed, a)
			}
			if rng.IntN(500) == 0 {
				ref = map[Addr]bool{}
				tl.reset()
			}
		}
		n := 0
		tl.each(func(Addr, bool) { n++ })
		require.Equal(t, len(ref), n)
		got := map[Addr]bool{}
		tl.each(func(a Addr, was bool) { got[a] = was })
		require.Equal(t, ref, got)
		for z := ZoneID(0); z < 5; z++ {
			s := newSegment(z, capBlocks)
			for off := uint64(0); off < capBlocks; off++ {
				if rng.IntN(2) == 0 {
					s.valid[off/64] |= 1 << (off % 64)
				}
			}
			var want uint64
			keepWant := append([]uint64(nil), s.valid...)
			for a, was := range ref {
				if a.Zone() == z && was {
					if !s.isValid(a.Off()) {
						want++
					}
					keepWant[a.Off()/64] |= 1 << (a.Off() % 64)
				}
			}
			require.Equal(t, want, tl.preInvalid(z, s.valid), "seed %d zone %d", seed, z)
			keep := append([]uint64(nil), s.valid...)
			tl.wasValid(z, keep)
			require.Equal(t, keepWant, keep, "seed %d zone %d", seed, z)
		}
	}
}

// The page table against a map: random sets, drops and lookups, then the
// range queries the file system makes.
func TestPageTableMatchesMap(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 9))
		ref := map[uint64]*page{}
		var pt pageTable
		span := uint64(50 + rng.IntN(1000))
		for i := 0; i < 3000; i++ {
			b := uint64(rng.IntN(int(span)))
			switch rng.IntN(4) {
			case 0, 1:
				p := &page{}
				ref[b] = p
				pt.set(b, p)
			case 2:
				delete(ref, b)
				pt.del(b)
			default:
				require.Same(t, ref[b], pt.get(b), "seed %d get %d", seed, b)
			}
			require.Equal(t, len(ref), pt.len())
		}
		for q := 0; q < 200; q++ {
			from := uint64(rng.IntN(int(span) + 10))
			to := from + uint64(rng.IntN(200))
			var want []uint64
			for b := range ref {
				if b >= from && b < to {
					want = append(want, b)
				}
			}
			sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
			require.Equal(t, want, pt.blocks(from, to), "seed %d blocks [%d,%d)", seed, from, to)
			require.Equal(t, len(want) > 0, pt.any(from, to), "seed %d any [%d,%d)", seed, from, to)
		}
		for b := range ref { // drop them all: no chunk left behind
			pt.del(b)
		}
		require.Zero(t, pt.len())
		require.Empty(t, pt.chunks)
	}
}
