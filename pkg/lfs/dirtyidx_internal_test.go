package lfs

import (
	"math/rand"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDirtyIndexOps: random adds and removes (mostly new numbers appended
// and the lowest removed, as write-back does, some anywhere) keep the index
// equal to a set, sorted and without duplicates, and next finds the lowest
// member at or above any number.
func TestDirtyIndexOps(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var d dirtyIndex
	set := map[uint64]bool{}
	top := uint64(1)
	for i := range 4000 {
		switch r := rng.Intn(10); {
		case r < 4:
			top += uint64(1 + rng.Intn(3))
			d.add(top)
			set[top] = true
		case r < 6:
			ino := uint64(1 + rng.Intn(int(top)))
			d.add(ino)
			set[ino] = true
		case r < 8:
			if lo, ok := d.next(0); ok {
				d.remove(lo)
				delete(set, lo)
			}
		default:
			ino := uint64(1 + rng.Intn(int(top)))
			d.remove(ino)
			delete(set, ino)
		}
		want := make([]uint64, 0, len(set))
		for ino := range set {
			want = append(want, ino)
		}
		slices.Sort(want)
		require.Equal(t, want, append([]uint64{}, d.inos...), "step %d", i)
		require.Equal(t, len(want), d.len())
		from := uint64(rng.Intn(int(top) + 2))
		got, ok := d.next(from)
		j, _ := slices.BinarySearch(want, from)
		if j == len(want) {
			require.False(t, ok, "step %d: nothing at or above %d", i, from)
		} else {
			require.True(t, ok)
			require.Equal(t, want[j], got, "step %d: lowest at or above %d", i, from)
		}
	}
}
