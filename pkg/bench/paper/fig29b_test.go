package paper

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFig29b(t *testing.T) {
	c := DefaultFig29b()
	res, err := RunFig29b(context.Background(), t.TempDir(), c)
	require.NoError(t, err)
	for _, row := range res.Rows {
		t.Logf("%s: off %+v on %+v gain %.3f coloc %.3f total %.3f", row.Scenario.Name, row.Off, row.On, row.RegularGain, row.ColocGain, row.TotalGain)
	}
	require.GreaterOrEqual(t, res.RegularGain["1-regular"], 1.2)
}
