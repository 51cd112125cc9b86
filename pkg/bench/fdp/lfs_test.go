package fdpbench

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func findLFS(t *testing.T, r *Result, wl string, util float64, vol string) LFSRow {
	t.Helper()
	for _, x := range r.LFS {
		if x.Workload == wl && x.Utilization == util && x.Volume == vol {
			return x
		}
	}
	t.Fatalf("no lfs row %s %v %s", wl, util, vol)
	return LFSRow{}
}

// TestLFSFigure: lfs runs fileserver and varmail on ZNS, ZNS+ and FDP on
// one flash configuration. Asserted only what the mechanisms fix: a ZNS
// drive has no device-side garbage collection (device WAF 1, flash WAF =
// fs WAF); on FDP, the logs on their own handles leave the drive no more
// to copy than all logs on one handle (a zone's reset invalidates whole
// reclaim units of its handle instead of blocks scattered among other
// logs' data); only zns+ uses threaded logging or in-storage copies.
func TestLFSFigure(t *testing.T) {
	o := Defaults()
	o.Workloads = []string{"lfs-fileserver", "lfs-varmail"}
	o.LFSOverwrite = 0.5
	if raceDetector || testing.Short() {
		o.LFSOverwrite, o.LFSUtilizations = 0.3, []float64{0.85}
	}
	r, err := Run(context.Background(), o)
	require.NoError(t, err)
	require.Len(t, r.LFS, 2*len(o.LFSUtilizations)*len(LFSVolumes))
	for _, x := range r.LFS {
		require.Greater(t, x.ThroughputMBps, 0.0, "%+v", x)
		require.GreaterOrEqual(t, x.FSWAF, 1.0, "%+v", x)
		require.GreaterOrEqual(t, x.DeviceWAF, 1.0, "%+v", x)
		require.Greater(t, x.ChipUtil, 0.0, "%+v", x)
		require.LessOrEqual(t, x.ChipUtil, 1.0, "%+v", x)
		switch x.Volume {
		case "zns", "zns+":
			require.Equal(t, 1.0, x.DeviceWAF, "%+v", x)
			require.Equal(t, x.FSWAF, x.FlashWAF, "%+v", x)
			require.Zero(t, x.DeviceGCCopies)
		default:
			require.Zero(t, x.IZCMoved, "%+v", x)
			require.Zero(t, x.TLSegments, "%+v", x)
		}
		if x.Volume == "zns" {
			require.Zero(t, x.IZCMoved, "%+v", x)
			require.Zero(t, x.TLSegments, "%+v", x)
		}
	}
	for _, wl := range []string{"fileserver", "varmail"} {
		for _, u := range o.LFSUtilizations {
			m, one := findLFS(t, r, wl, u, "fdp-matched"), findLFS(t, r, wl, u, "fdp-one-handle")
			require.LessOrEqual(t, m.DeviceWAF, one.DeviceWAF, "%s at %v: matched %+v one handle %+v", wl, u, m, one)
			require.LessOrEqual(t, m.DeviceGCCopies, one.DeviceGCCopies, "%s at %v", wl, u)
		}
	}
	var b bytes.Buffer
	require.NoError(t, r.WriteTable(&b))
	t.Log("\n" + b.String())
}

// TestLFSOptions: bad options of the lfs figure are typed errors.
func TestLFSOptions(t *testing.T) {
	for _, o := range []Options{{LFSChips: 7}, {LFSZones: 4}, {LFSUtilizations: []float64{1.2}}} {
		o.Workloads = []string{"lfs-varmail"}
		_, err := Run(context.Background(), o)
		require.ErrorIs(t, err, zerr.ErrInvalidArgument, "%+v", o)
	}
}
