package devvol_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// TestOpenZoneWrapsAround is the free-segment search of seeds/004 §3.2: an
// LFS that searches for a free section only forward from the current one
// fails at high utilization although free sections exist behind it; the
// volume's search must find a free zone wherever it is. Every zone of two
// drives is used, then zones behind the last one handed out (on the first
// drive, below the cursor of each) are freed one at a time: OpenZone finds
// each, and refuses only when none is free.
func TestOpenZoneWrapsAround(t *testing.T) {
	v, err := devvol.New(newDevs(t, 2, 8)...)
	require.NoError(t, err)
	var all []lfs.ZoneID
	for {
		z, err := v.OpenZone(bg)
		if err != nil {
			require.ErrorIs(t, err, zerr.ErrNoResources, "only when every zone is in use")
			break
		}
		require.NoError(t, v.Finish(bg, z)) // full: in use, holds no open resource
		all = append(all, z)
	}
	require.Len(t, all, int(v.Geometry().MaxZones), "every zone handed out once")
	last := all[len(all)-1]
	for _, free := range []lfs.ZoneID{0, 1, 9, last - 1} {
		if free == last {
			continue
		}
		require.NoError(t, v.Reset(bg, free))
		z, err := v.OpenZone(bg)
		require.NoError(t, err, "zone %d is free behind the last zone handed out (%d)", free, last)
		require.Equal(t, free, z)
		require.NoError(t, v.Finish(bg, z))
		_, err = v.OpenZone(bg)
		require.ErrorIs(t, err, zerr.ErrNoResources)
	}
}
