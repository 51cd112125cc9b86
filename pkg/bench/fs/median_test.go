package fsbench

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMedianRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		mibs []float64
		want float64
	}{
		{"one", []float64{7}, 7},
		{"odd", []float64{30, 10, 20}, 20},
		{"even: the lower middle", []float64{40, 10, 30, 20}, 20},
		{"ties", []float64{5, 5, 1}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var xs []Recycling
			for i, m := range tc.mibs {
				xs = append(xs, Recycling{MiBPerSecond: m, GCRuns: uint64(100 + i)})
			}
			got := medianRun(xs)
			assert.Equal(t, tc.want, got.MiBPerSecond)
			// the whole record of that run, not a mix of runs
			for i, m := range tc.mibs {
				if m == got.MiBPerSecond {
					assert.Equal(t, uint64(100+i), got.GCRuns)
					break
				}
			}
			assert.Equal(t, tc.mibs[0], xs[0].MiBPerSecond, "the input is not reordered")
		})
	}
}
