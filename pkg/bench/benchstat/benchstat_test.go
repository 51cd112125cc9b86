package benchstat

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		in := append([]float64(nil), tc.in...)
		require.Equal(t, tc.want, Median(tc.in))
		require.Equal(t, in, tc.in, "input unchanged")
	}
}

// ProcessCPU grows while the process burns CPU (a busy loop reaches 20 ms
// of it long before 10 s of wall time, even on a loaded machine), and never
// goes back.
func TestProcessCPU(t *testing.T) {
	c0, t0 := ProcessCPU(), time.Now()
	prev := c0
	for ProcessCPU()-c0 < 20*time.Millisecond && time.Since(t0) < 10*time.Second {
		c := ProcessCPU()
		require.GreaterOrEqual(t, c, prev)
		prev = c
	}
	require.GreaterOrEqual(t, ProcessCPU()-c0, 20*time.Millisecond)
}
