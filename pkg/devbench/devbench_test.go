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
	require.InDelta(t, 0.90*425/473, r.CopybackVsReadProgram, 0.001) // chip-side copyback vs unloaded read-and-program
	require.Less(t, r.IZCVsHostCopy, 1.0)
	require.Greater(t, r.SeqWriteChipUtilization, 0.9)
	require.LessOrEqual(t, r.SeqWriteChipUtilization, 1.0)
	require.Greater(t, r.TLBackgroundPlugRatio, 0.0)
	require.Len(t, r.WriteMiBPerSecond, 2)
	r2, err := Run(context.Background(), o)
	require.NoError(t, err)
	require.Equal(t, r.IZCVsHostCopy, r2.IZCVsHostCopy)
	require.Equal(t, r.TLBackgroundPlugRatio, r2.TLBackgroundPlugRatio)
	b, err := json.Marshal(r)
	require.NoError(t, err)
	for _, k := range []string{"copyback_vs_read_program", "izc_vs_host_copy", "seq_write_chip_utilization", "tl_background_plug_ratio", "write_mib_per_second"} {
		require.Contains(t, string(b), `"`+k+`"`)
	}
	var sb strings.Builder
	require.NoError(t, r.WriteTable(&sb))
	require.Contains(t, sb.String(), "izc_vs_host_copy")
	tlc, err := Run(context.Background(), Options{Dir: t.TempDir(), Media: "TLC", WriteDuration: time.Millisecond, WriterCounts: []int{1}})
	require.NoError(t, err)
	require.InDelta(t, 0.94*760/808, tlc.CopybackVsReadProgram, 0.001)
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
