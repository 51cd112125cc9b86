package fdpbench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func find(t *testing.T, r *Result, workload, placement, handles string) Row {
	t.Helper()
	for _, x := range r.Rows {
		if x.Workload == workload && x.Placement == placement && x.Handles == handles {
			return x
		}
	}
	t.Fatalf("no row %s/%s/%s", workload, placement, handles)
	return Row{}
}

// TestPlacementBands checks the direction and size of the figures: a
// lifetime-matched placement of circular logs has WAF 1 and clearly below
// one handle; on the three-stream workload matched handles beat one handle
// and hints uncorrelated with lifetimes do not help.
func TestPlacementBands(t *testing.T) {
	o := Defaults()
	o.Passes, o.BlocksPerChip = 1.5, 32
	o.Workloads = []string{"lifetime", "three-stream"}
	r, err := Run(context.Background(), o)
	require.NoError(t, err)
	for _, x := range r.Rows {
		require.GreaterOrEqual(t, x.WAF, 1.0, "%+v", x)
		require.Greater(t, x.HostBytes, uint64(0))
		require.Greater(t, x.ChipUtil, 0.0)
		require.LessOrEqual(t, x.ChipUtil, 1.0)
	}
	lm, l1, ln := find(t, r, "lifetime", "matched", "2 ii"), find(t, r, "lifetime", "one-handle", "2 ii"), find(t, r, "lifetime", "no-fdp", "1")
	require.Less(t, lm.WAF, 1.02, "lifetime-matched circular logs die together")
	require.Zero(t, lm.GCCopies)
	require.Greater(t, l1.WAF, lm.WAF+0.1)
	require.InDelta(t, l1.WAF, ln.WAF, 0.05, "one handle of an FDP drive is a conventional SSD")
	require.Greater(t, lm.HostMBps, l1.HostMBps, "less GC, more host throughput on the same chips")

	tm, tc, t1 := find(t, r, "three-stream", "matched", "3 ii"), find(t, r, "three-stream", "crossed", "3 ii"), find(t, r, "three-stream", "one-handle", "3 ii")
	require.Less(t, tm.WAF, t1.WAF-0.3)
	require.Greater(t, tc.WAF, tm.WAF+0.3, "hints uncorrelated with lifetimes")
	require.Greater(t, find(t, r, "three-stream", "matched", "3 pi").WAF, 0.99)
}

// TestDeterministic: the same options give the same figures.
func TestDeterministic(t *testing.T) {
	o := Defaults()
	o.Passes, o.BlocksPerChip = 0.25, 32 // a small drive: the figures' equality is the point, not their values
	o.Workloads = []string{"hotcold", "varmail", "lfs-fileserver"}
	o.LFSUtilizations, o.LFSOverwrite = []float64{0.8}, 0.2
	a, err := Run(context.Background(), o)
	require.NoError(t, err)
	b, err := Run(context.Background(), o)
	require.NoError(t, err)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	require.Equal(t, string(ja), string(jb))
	require.Len(t, a.LFS, len(LFSVolumes))
	var ta, tb bytes.Buffer
	require.NoError(t, a.WriteTable(&ta))
	require.NoError(t, b.WriteTable(&tb))
	require.Equal(t, ta.String(), tb.String())
	_, err = Run(context.Background(), Options{Workloads: []string{"nope"}})
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)
}

// TestFileSystemWorkloads: on fileserver and varmail, the file system's
// hints (journal, metadata, data on their own handles) lower the WAF well
// below one handle, which behaves as a conventional SSD; the measured phase
// writes what Passes asks; the plot is written.
func TestFileSystemWorkloads(t *testing.T) {
	o := Defaults()
	o.Passes = 0.5
	o.Workloads = []string{"fileserver", "varmail"}
	o.BlocksPerChip = 32
	r, err := Run(context.Background(), o)
	require.NoError(t, err)
	require.Len(t, r.Rows, 8)
	for _, x := range r.Rows {
		require.GreaterOrEqual(t, x.WAF, 1.0, "%+v", x)
		require.GreaterOrEqual(t, float64(x.HostBytes), o.Passes*o.Utilization*float64(56<<20)*float64(o.BlocksPerChip)/64*0.99, "%+v", x)
	}
	for _, w := range o.Workloads {
		h, one, none := find(t, r, w, "fs-hints", "3 ii"), find(t, r, w, "one-handle", "3 ii"), find(t, r, w, "no-fdp", "1")
		t.Logf("%s: WAF hints %.3f one %.3f none %.3f; MB/s hints %.1f one %.1f", w, h.WAF, one.WAF, none.WAF, h.HostMBps, one.HostMBps)
		require.Less(t, h.WAF, one.WAF-0.1, "%s: file-system hints", w)
		require.Less(t, h.GCCopies, one.GCCopies, w)
		require.InDelta(t, one.WAF, none.WAF, 0.05, "%s: one handle of an FDP drive is a conventional SSD", w)
		require.Greater(t, h.HostMBps, one.HostMBps, w)
	}
	path := filepath.Join(t.TempDir(), "waf.png")
	require.NoError(t, r.Plot(path))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(b, []byte("\x89PNG")), "a PNG")
}
