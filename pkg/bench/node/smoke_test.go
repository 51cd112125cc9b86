//go:build benchsmoke

// The wall-clock run of the benchmark (gRPC and TCP streams timed on the
// wall clock, admission control over a wall-time window): `make
// bench-smoke` runs it, not `make test`, since a busy machine can starve a
// writer of the window.

package nodebench

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/bench/benchstat"
	"github.com/zonefleet/zonefleet/pkg/bench/hostenv"
)

// A small run: every figure is produced, from the configured number of runs,
// and the table and JSON carry it.
func TestSmokeRunSmall(t *testing.T) {
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
