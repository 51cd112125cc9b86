package paper

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// Fig. 26 through the arbiter: local overdrive widens 4 writers' v-zones to
// width 8 (twice the static width-4 zones' dies and bandwidth) and narrows
// 8 and 16 writers' to width 4 (the static zones' dies: the same bandwidth).
func TestFig26(t *testing.T) {
	t.Parallel() // an independent simulation: runs beside the other figures
	c := DefaultFig26()
	res, err := RunFig26(context.Background(), t.TempDir(), c)
	require.NoError(t, err)
	t.Logf("%+v", res.Rows)
	require.Len(t, res.Rows, 3)
	for _, row := range res.Rows {
		if row.Writers == 4 {
			require.InDelta(t, 2.0, row.VZoneOverStatic, 0.2, "4 writers")
			require.Equal(t, map[string]int{"8": 4}, row.VZoneWidths, "local overdrive: width 8")
		} else {
			require.InDelta(t, 1.0, row.VZoneOverStatic, 0.05, "%d writers", row.Writers)
			require.Equal(t, map[string]int{"4": row.Writers}, row.VZoneWidths, "%d writers: width 4", row.Writers)
		}
		// the static zones run at their dies' program rate (about 42 MB/s each)
		require.InDelta(t, float64(row.Writers*c.StaticWidth)*42, row.StaticMBps, float64(row.Writers*c.StaticWidth)*4)
	}
}
