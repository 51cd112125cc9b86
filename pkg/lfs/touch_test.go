package lfs

import (
	"math/rand/v2"
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
		require.Equal(t, len(ref), tl.len())
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
