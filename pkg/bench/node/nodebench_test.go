package nodebench

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/zonefleet/zonefleet/pkg/bench/hostenv"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/zns"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/zerr"

	"github.com/zonefleet/zonefleet/pkg/bench/benchstat"
)

// A small run: every figure is produced, from the configured number of runs,
// and the table and JSON carry it.
func TestRunSmall(t *testing.T) {
	res, err := Run(context.Background(), Options{Dir: t.TempDir(), WriteBytes: 40 << 20, Runs: 3, RandomReads: 50,
		Clients: []int{2}, Admission: true, AdmissionWall: time.Second, TimeScale: 4, RegularWriters: 2, WritebackKickBytes: 1 << 20})
	require.NoError(t, err)
	assert.Equal(t, "1048576", res.Config["writeback_kick_bytes"])
	want, _ := hostenv.Describe()
	assert.Equal(t, want, res.Config["host_page_reporting"], "the result says whether the host takes freed pages back")
	assert.Positive(t, res.WritebackKicks, "the drives kicked their write-back")
	for _, v := range []float64{res.TCPDiscardMiBPerSecond, res.TCPFileMiBPerSecond, res.TCPFile8MiBPerSecond, res.GRPCWriteMiBPerSecond,
		res.GRPCStandardCodecStream, res.GRPCUnaryQD1, res.GRPCUnaryQD4, res.RandomReadIOPS} {
		assert.Positive(t, v)
	}
	assert.InDelta(t, res.GRPCWriteMiBPerSecond/res.TCPFileMiBPerSecond, res.GRPCvsTCPFileRatio, 1e-9)
	assert.InDelta(t, res.GRPCWriteMiBPerSecond/res.TCPDiscardMiBPerSecond, res.GRPCvsTCPDiscardRatio, 1e-9)
	assert.InDelta(t, res.TCPFileMiBPerSecond/res.TCPDiscardMiBPerSecond, res.TCPFilevsDiscardRatio, 1e-9)
	assert.Equal(t, []int{1, 2, 8}, keys(res.WriteMiBPerSecond), "1 and 8 clients are always measured")
	assert.InDelta(t, res.WriteMiBPerSecond[8]/res.WriteMiBPerSecond[1], res.ClientScaling, 1e-9)
	assert.InDelta(t, res.TCPFile8MiBPerSecond/res.TCPFileMiBPerSecond, res.TCPFileScaling, 1e-9)
	assert.InDelta(t, res.ClientScaling/res.TCPFileScaling, res.ClientScalingVsTCP, 1e-9)
	assert.Equal(t, benchstat.Median(res.Samples["tcp_file_8_streams"]), res.TCPFile8MiBPerSecond)
	// the CPUs over the cores one client kept busy: about 1 or more (one
	// client keeps at most every CPU busy), and finite
	assert.Greater(t, res.ClientScalingCPUCeiling, 0.9)
	assert.Less(t, res.ClientScalingCPUCeiling, float64(runtime.NumCPU())*20)
	for name, xs := range res.Samples {
		assert.Len(t, xs, 3, name)
	}
	assert.Equal(t, benchstat.Median(res.Samples["grpc_stream"]), res.GRPCWriteMiBPerSecond)
	assert.Equal(t, benchstat.Median(res.Samples["tcp_file"]), res.TCPFileMiBPerSecond)
	require.NotNil(t, res.Admission)
	assert.Positive(t, res.Admission.Off.Regular)
	// The busy writer may be paced to nothing in a short window on a loaded
	// machine (the token bucket is the point); somebody writes with AC on.
	assert.Positive(t, res.Admission.On.Busy+res.Admission.On.Regular)

	var buf bytes.Buffer
	require.NoError(t, res.WriteTable(&buf))
	for _, k := range []string{"grpc_vs_tcp_file_ratio", "grpc_vs_tcp_discard_ratio", "client_scaling_8_vs_1", "tcp_file_scaling_8_vs_1", "client_scaling_vs_tcp_file_scaling", "regular_writer_gain"} {
		assert.Contains(t, buf.String(), k)
	}
	js, err := json.Marshal(res)
	require.NoError(t, err)
	for _, k := range []string{`"grpc_vs_tcp_file_ratio"`, `"grpc_vs_tcp_discard_ratio"`, `"client_scaling_8_vs_1"`, `"tcp_file_scaling_8_vs_1"`, `"samples_mib_per_second"`, `"client_scaling_cpu_ceiling"`} {
		assert.Contains(t, string(js), k)
	}
}

func keys(m map[int]float64) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestMedianAndPlan(t *testing.T) {
	tests := []struct {
		xs   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{5}, 5}, {[]float64{4, 1, 3, 2}, 2.5}, {nil, 0}}
	for _, tt := range tests {
		assert.Equal(t, tt.want, benchstat.Median(tt.xs), "%v", tt.xs)
	}
	// Writers of a point take disjoint zones and together write the total.
	seen := map[uint64]bool{}
	var sum int64
	for i := 0; i < 3; i++ {
		zones, b := plan(200<<20, i, 3)
		sum += b
		assert.Len(t, zones, int((b+zoneBytes-1)/zoneBytes))
		for _, z := range zones {
			assert.False(t, seen[z], "zone %d twice", z)
			seen[z] = true
		}
	}
	assert.Equal(t, int64(198<<20), sum, "rounded down to MiB per writer")
}

func TestRunRejectsBadOptions(t *testing.T) {
	_, err := Run(context.Background(), Options{Clients: []int{64}})
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
	_, err = Run(context.Background(), Options{RegularWriters: 9})
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
	_, err = Run(context.Background(), Options{WritebackKickBytes: -1})
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
}

// With the kick off (the zero Options) the drives start no write-back.
func TestRunKickOff(t *testing.T) {
	res, err := Run(context.Background(), Options{Dir: t.TempDir(), WriteBytes: 16 << 20, Runs: 1, RandomReads: 10, Clients: []int{1}})
	require.NoError(t, err)
	assert.Equal(t, "0", res.Config["writeback_kick_bytes"])
	assert.Zero(t, res.WritebackKicks)
}

// The raw baseline moves every byte of every stream into the drive: eight
// receivers, each into its own zones, and the drive's write pointers say so.
func TestTCPRunWritesEveryStream(t *testing.T) {
	dev, err := zns.Create(filepath.Join(t.TempDir(), "d.zns"), throughputDrive(64<<20, 8), clock.Off())
	require.NoError(t, err)
	defer dev.Close()
	payload := make([]byte, mib)
	v, err := tcpRun(context.Background(), 64<<20, payload, dev, 8)
	require.NoError(t, err)
	assert.Positive(t, v)
	zs, err := dev.ReportZones(zns.StateAny, 0, 16)
	require.NoError(t, err)
	var written uint64
	for i, z := range zs {
		if i < 8 {
			assert.Equal(t, uint64(8<<20)/4096, z.WP-z.Start, "zone %d: writer %d's 8 MiB", i, i)
		}
		written += z.WP - z.Start
	}
	assert.Equal(t, uint64(64<<20)/4096, written)
}
