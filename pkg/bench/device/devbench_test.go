package devbench

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRunDeterministicKeys(t *testing.T) {
	o := Options{Dir: t.TempDir(), WriteDuration: 50 * time.Millisecond, WriterCounts: []int{1, 2}}
	r, err := Run(context.Background(), o)
	require.NoError(t, err)
	// copyback pays under chip-bound compaction: about 1/0.90 for MLC
	require.Greater(t, r.CopybackCompactionSpeedup, 1.05)
	require.Less(t, r.CopybackCompactionSpeedup, 1.0/0.90+0.02)
	require.Greater(t, r.ReadProgramCompactionMillis, r.CopybackCompactionMillis)
	// reads during a compaction wait for one piece, not for the compaction
	require.Greater(t, r.ReadDuringCompactionMicros, r.ReadIdleMicros)
	require.Greater(t, r.ReadDuringCompactionVsIdle, 1.0)
	require.Less(t, 10*r.ReadDuringCompactionMicros, r.CompactionLeftAtReadMicros)
	require.Less(t, r.IZCVsHostCopy, 1.0)
	// a host copy that reads block by block synchronously is a much weaker
	// baseline than one that issues all reads at once (F2FS)
	require.Less(t, r.IZCVsHostCopyParallel4K, 1.0)
	require.Greater(t, r.HostCopySync4KMillis, 2*r.HostCopyParallel4KMillis)
	require.Less(t, r.IZCVsHostCopySync4K, r.IZCVsHostCopyParallel4K)
	require.Greater(t, r.SeqWriteChipUtilization, 0.9)
	require.LessOrEqual(t, r.SeqWriteChipUtilization, 1.0)
	require.Greater(t, r.TLBackgroundPlugRatio, 0.0)
	require.Len(t, r.WriteMiBPerSecond, 2)
	r2, err := Run(context.Background(), o)
	require.NoError(t, err)
	// everything on the virtual clock is identical run to run
	r.WriteMiBPerSecond, r2.WriteMiBPerSecond = nil, nil
	require.Equal(t, r, r2)
	b, err := json.Marshal(r)
	require.NoError(t, err)
	for _, k := range []string{"copyback_compaction_speedup", "copyback_compaction_ms", "read_program_compaction_ms",
		"read_idle_us", "read_during_compaction_us", "read_during_compaction_vs_idle", "compaction_left_at_read_us",
		"izc_vs_host_copy", "host_copy_parallel_4k_ms", "host_copy_sync_4k_ms", "izc_vs_host_copy_parallel_4k", "izc_vs_host_copy_sync_4k", "seq_write_chip_utilization", "tl_background_plug_ratio", "write_mib_per_second"} {
		require.Contains(t, string(b), `"`+k+`"`)
	}
	require.NotContains(t, string(b), "copyback_vs_read_program")
	var sb strings.Builder
	require.NoError(t, r.WriteTable(&sb))
	require.Contains(t, sb.String(), "izc_vs_host_copy")
	require.Contains(t, sb.String(), "copyback_compaction_speedup")
	tlc, err := Run(context.Background(), Options{Dir: t.TempDir(), Media: "TLC", WriteDuration: time.Millisecond, WriterCounts: []int{1}})
	require.NoError(t, err)
	// TLC's ratio 0.94 saves less than MLC's 0.90
	require.Greater(t, tlc.CopybackCompactionSpeedup, 1.0)
	require.Less(t, tlc.CopybackCompactionSpeedup, r.CopybackCompactionSpeedup)
}

// BenchmarkDevice prints the full table:
//
//	go test -run x -bench Device -benchtime 1x ./pkg/devbench
//
// DEVBENCH_MEDIA=TLC selects another media preset.
func BenchmarkDevice(b *testing.B) {
	for i := 0; i < b.N; i++ {
		r, err := Run(context.Background(), Options{Media: os.Getenv("DEVBENCH_MEDIA")})
		if err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			_ = r.WriteTable(os.Stdout)
			_ = json.NewEncoder(os.Stdout).Encode(r)
		}
	}
}
