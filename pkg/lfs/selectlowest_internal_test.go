package lfs

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// selectLowest puts the k lowest values first, whatever the input order
// (what prepareFlush relies on to write back the lowest dirty blocks).
func TestSelectLowest(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	seq := func(n int, f func(i int) uint64) []uint64 {
		s := make([]uint64, n)
		for i := range s {
			s[i] = f(i)
		}
		return s
	}
	for _, tc := range []struct {
		name string
		gen  func(n int) []uint64
	}{
		{"ascending", func(n int) []uint64 { return seq(n, func(i int) uint64 { return uint64(i) }) }},
		{"descending", func(n int) []uint64 { return seq(n, func(i int) uint64 { return uint64(n - i) }) }},
		{"random", func(n int) []uint64 { return seq(n, func(int) uint64 { return r.Uint64N(1 << 20) }) }},
		{"sawtooth", func(n int) []uint64 { return seq(n, func(i int) uint64 { return uint64(i%7*1000 + i) }) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, n := range []int{1, 2, 3, 5, 64, 1000, 4096} {
				for _, k := range []int{1, 2, n / 3, n / 2, n - 1, n} {
					if k < 1 || k > n {
						continue
					}
					s := tc.gen(n)
					want := slices.Clone(s)
					slices.Sort(want)
					selectLowest(s, k)
					got := slices.Clone(s[:k])
					slices.Sort(got)
					require.Equal(t, want[:k], got, "n=%d k=%d", n, k)
					all := slices.Clone(s)
					slices.Sort(all)
					require.Equal(t, want, all, "n=%d k=%d: a permutation", n, k)
				}
			}
		})
	}
}
