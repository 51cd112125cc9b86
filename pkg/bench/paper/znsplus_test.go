package paper

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// The ZNS+ figure through the harness: both workloads run, and the paper's
// direction holds at the short scale (ZNS+ above ZNS and at least IZC,
// threaded logging recycles segments, a table line per ratio).
func TestZNSPlusFigure(t *testing.T) {
	res, err := Run(context.Background(), t.TempDir(), []string{"zns_plus"}, Options{Short: true})
	require.NoError(t, err)
	r, ok := res.Figures["zns_plus"].(*ZNSPlusResult)
	require.True(t, ok)
	require.Len(t, r.Workloads, 2)
	for _, w := range r.Workloads {
		require.NotEmpty(t, w.Utils)
		for _, u := range w.Utils {
			require.Greater(t, u.ZNSPlusVsZNS, 1.0, w.Workload)
			require.GreaterOrEqual(t, u.ZNSPlusVsZNS, u.IZCvsZNS, w.Workload)
			require.Greater(t, u.TLShare, 0.0, w.Workload)
		}
	}
	require.Len(t, res.Lines["zns_plus"], 3*2)
	require.NoError(t, plotFigure("zns_plus", r, t.TempDir()+"/zns_plus.png"))
}
