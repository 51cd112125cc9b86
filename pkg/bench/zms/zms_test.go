package zms

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// TestFiguresDeterministic: two runs of each figure (short) give the same
// output, byte for byte.
func TestFiguresDeterministic(t *testing.T) {
	for _, f := range Figures() {
		t.Run(f.ID, func(t *testing.T) {
			var outs [2][]byte
			for i := range outs {
				r, lines, err := f.Run(context.Background(), true)
				require.NoError(t, err)
				require.NotEmpty(t, lines)
				outs[i], err = json.Marshal(struct {
					R any
					L []Line
				}{r, lines})
				require.NoError(t, err)
			}
			require.Equal(t, string(outs[0]), string(outs[1]))
		})
	}
}

// TestIPUShape: within the budget every tiny fsync goes in place and
// writes one block; past it the drive refuses and the log takes over.
func TestIPUShape(t *testing.T) {
	c := DefaultIPU()
	c.Zones, c.FileMiB, c.Ops = 32, 4, 300
	r, err := RunIPU(context.Background(), c)
	require.NoError(t, err)
	byName := map[string]IPUWorkload{}
	for _, w := range r.Workloads {
		byName[w.Name] = w
		require.Zero(t, w.Log.InPlaceBlocksPerOp, w.Name)
	}
	in := byName["randwrite_fsync_in_budget"]
	require.Equal(t, 1.0, in.IPU.InPlaceBlocksPerOp)
	require.Equal(t, 1.0, in.IPU.DriveBlocksPerOp, "no node written")
	require.Zero(t, in.IPU.Fallbacks)
	require.Greater(t, in.Log.DriveBlocksPerOp, 2.0, "the log writes the data and its nodes")
	require.Greater(t, in.IPUOverLog, 1.0)
	out := byName["randwrite_fsync"]
	require.NotZero(t, out.IPU.Fallbacks, "16x the budget: the drive refuses")
	require.Equal(t, 2.0, byName["sqlite_delete"].IPU.InPlaceBlocksPerOp, "the header and the leaf page")
}

// TestL2PShape: with the map cached no granularity misses; on the 8x
// range page mapping misses most lookups and zone mapping none.
func TestL2PShape(t *testing.T) {
	c := DefaultL2P()
	c.RangeMiB, c.CacheKiB, c.Reads, c.Warmup = []int{16, 128}, 16, 2000, 500
	r, err := RunL2P(context.Background(), c)
	require.NoError(t, err)
	require.Len(t, r.Rows, 6)
	for _, row := range r.Rows[:3] {
		require.Zero(t, row.MissRate, "%+v", row)
	}
	page, zone := r.Rows[3], r.Rows[5]
	require.Greater(t, page.MissRate, 0.5)
	require.Zero(t, zone.MissRate)
	require.Greater(t, zone.KIOPS, page.KIOPS)
}

// TestTailorShape: with one write buffer, IOTailor leaves less in SLC.
func TestTailorShape(t *testing.T) {
	c := DefaultTailor()
	c.Zones, c.TotalMiB, c.WriteBuffers = 32, 16, []int{1}
	r, err := RunTailor(context.Background(), c)
	require.NoError(t, err)
	require.Len(t, r.Runs, 2)
	off, on := r.Runs[0], r.Runs[1]
	require.Greater(t, off.SLCShare, 0.0)
	require.Less(t, on.SLCShare, off.SLCShare)
}

func TestLookup(t *testing.T) {
	_, err := Lookup("fig99")
	require.True(t, errors.Is(err, zerr.ErrInvalidArgument))
	f, err := Lookup("zms_l2p")
	require.NoError(t, err)
	require.Equal(t, "zms_l2p", f.ID)
}
