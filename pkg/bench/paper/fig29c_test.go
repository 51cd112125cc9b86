package paper

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFig29c asserts the part of the paper's effect ZoneFleet reproduces:
// congestion control shrinks the readers' windows and gives up read
// bandwidth. The writers' gains of the paper (B and C up with CC+AC) are not
// reproduced (README, "Paper vs ZoneFleet"); the test records them.
func TestFig29c(t *testing.T) {
	res, err := RunFig29c(context.Background(), t.TempDir(), DefaultFig29c())
	require.NoError(t, err)
	for _, r := range res.Runs {
		t.Logf("%+v", r)
	}
	t.Logf("gains over no scheduler: reader %v busy %v regular %v", res.ReaderGain, res.BusyGain, res.RegularGain)
	require.Less(t, res.ReaderGain["cc"], 0.8)
	require.Less(t, res.ReaderGain["cc+ac"], 0.8)
	require.Less(t, res.BusyGain["ac"], 1.0, "AC paces the busy writer")
	for _, r := range res.Runs {
		require.Positive(t, r.ReaderMBps, r.Mode)
		require.Positive(t, r.RegularMBps, r.Mode)
	}
}
