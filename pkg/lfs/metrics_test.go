package lfs_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

func TestMetricsNamingAndRemount(t *testing.T) {
	v := newVol(t, 32, 8)
	reg := prometheus.NewRegistry()
	fs := mkfsMount(t, v, lfs.Options{Registry: reg})
	require.NoError(t, writeFile(fs, "f", make([]byte, 10000), true))
	_, err := fs.Lookup(bg, lfs.RootIno, "nope")
	require.Error(t, err)
	require.NoError(t, fs.Unmount(bg))
	fs, err = lfs.Mount(bg, v, lfs.Options{Registry: reg}) // same registry: no clash
	require.NoError(t, err)
	_, err = readFile(fs, "f")
	require.NoError(t, err)

	mfs, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	allowed := map[string]bool{"op": true, "errno": true, "dir": true, "kind": true, "method": true, "path": true, "task": true, "cause": true, "when": true, "log": true}
	for _, mf := range mfs {
		n := mf.GetName()
		names[n] = true
		require.True(t, strings.HasPrefix(n, "zonefleet_fs_"), n)
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			require.True(t, strings.HasSuffix(n, "_total"), n)
		case dto.MetricType_HISTOGRAM:
			require.True(t, strings.HasSuffix(n, "_seconds"), n)
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				require.True(t, allowed[l.GetName()], "%s has label %s", n, l.GetName())
				require.NotContains(t, l.GetValue(), "/", "no paths as labels")
			}
		}
	}
	for _, n := range []string{"zonefleet_fs_operations_total", "zonefleet_fs_operation_duration_seconds", "zonefleet_fs_bytes_total",
		"zonefleet_fs_checkpoints_total", "zonefleet_fs_segments_free", "zonefleet_fs_segments_dirty",
		"zonefleet_fs_write_amplification_ratio", "zonefleet_fs_operation_errors_total", "zonefleet_fs_blocks_written_total",
		"zonefleet_fs_background_errors_total", "zonefleet_fs_read_only", "zonefleet_fs_recycled_segments_total", "zonefleet_fs_pre_invalid_blocks", "zonefleet_fs_tl_share_ratio", "zonefleet_fs_log_writes_in_flight"} {
		require.True(t, names[n], "%s exported", n)
	}
	require.NoError(t, fs.Unmount(bg))
}
