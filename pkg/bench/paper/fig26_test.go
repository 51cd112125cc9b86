package paper

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFig26(t *testing.T) {
	t.Parallel() // an independent simulation: runs beside the other figures
	c := DefaultFig26()
	res, err := RunFig26(context.Background(), t.TempDir(), c)
	require.NoError(t, err)
	t.Logf("%+v", res.Rows)
	for _, row := range res.Rows {
		if row.Writers == 4 {
			require.InDelta(t, 2.0, row.VZoneOverStatic, 0.4, "4 writers")
		} else {
			require.InDelta(t, 1.025, row.VZoneOverStatic, 0.225, "%d writers", row.Writers)
		}
	}
}
