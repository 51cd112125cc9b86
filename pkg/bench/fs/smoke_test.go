//go:build benchsmoke

// The wall-clock runs of the benchmark (a FUSE mount over an in-process
// cluster on the realtime clock): `make bench-smoke` runs them, not `make
// test`, since their operations take wall time and a busy machine stretches
// them past the file system's retry deadlines.

package fsbench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	fsbench "github.com/zonefleet/zonefleet/pkg/bench/fs"
	"github.com/zonefleet/zonefleet/pkg/bench/hostenv"
)

// A small run of every part: the keys are there and the numbers make sense.
func TestSmokeRunSmall(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	// UntilRecycled: churn 0.3 at TimeScale 0.25 did not always reach a GC
	// on a loaded machine; the runs go on (bounded) until one recycled.
	res, err := fsbench.Run(context.Background(), fsbench.Options{Dir: t.TempDir(), SeqMiB: 4, SeqTotalMiB: 10, RandOps: 256, Utils: []int{80}, Churn: 0.3, Threads: 2, TimeScale: 0.25,
		Runs: 1, Parallel: 2, ScalingThreads: []int{1, 4}, UntilRecycled: true})
	require.NoError(t, err)
	require.Len(t, res.Throughput, 4)
	for _, tp := range res.Throughput {
		switch tp.Workload {
		case "seq_write_1m", "seq_read_1m":
			assert.Equal(t, int64(12<<20), tp.Bytes, "%s: three passes over the 4 MiB file cover 10 MiB", tp.Workload)
		default:
			assert.Equal(t, int64(256*4096), tp.Bytes, tp.Workload)
		}
	}
	assert.Positive(t, res.ParallelReadScaling)
	assert.Equal(t, runtime.GOMAXPROCS(0), res.GOMAXPROCS)
	assert.Equal(t, "unix", res.NodeTransport, "the mount reaches the nodes as `zctl local up`'s does")
	assert.Equal(t, runtime.NumCPU(), res.CPUs)
	want, _ := hostenv.Describe()
	assert.Equal(t, want, res.HostPageReporting)
	assert.Positive(t, res.ParallelWriteScaling)
	assert.Contains(t, res.LoopbackScaling, "parallel_read_scaling")
	// the CPU ceiling: the CPUs over the cores one thread used — about 1 or
	// more (one thread keeps at most every CPU busy), and finite (a FUSE
	// thread keeps at least a twentieth of a core busy)
	for _, k := range []string{"parallel_read_scaling", "parallel_write_scaling"} {
		c := res.ParallelCPUCeiling[k]
		assert.Greater(t, c, 0.9, k)
		assert.LessOrEqual(t, c, float64(runtime.NumCPU())*20, k)
		assert.Positive(t, res.LoopbackScaling[k+"_cpu_ceiling"], k)
	}
	// the parallel write point on the volume alone, same run: two streams
	// against one, each moving what one thread moves
	v := res.VolumeWriteScaling
	require.NotNil(t, v)
	assert.Equal(t, 2, v.Streams)
	assert.Positive(t, v.OneMiBPerSecond)
	assert.Positive(t, v.ManyMiBPerSecond)
	assert.InDelta(t, v.ManyMiBPerSecond/v.OneMiBPerSecond, v.Scaling, 1e-9, "one run: the median ratio is the ratio")
	assert.Greater(t, v.CPUCeiling, 0.9)
	require.Len(t, res.Devvol, 4, "the same workloads over devvol")
	for _, tp := range res.Devvol {
		assert.Positive(t, tp.ZoneFleet, tp.Workload)
		assert.InDelta(t, tp.ZoneFleet/tp.Loopback, res.DevvolVsFuseLoopback[tp.Workload], 1e-9)
	}
	require.Len(t, res.FileserverThreads, 2)
	assert.Equal(t, 4, res.FileserverThreads[1].Threads)
	assert.InDelta(t, res.FileserverThreads[1].MiBPerSecond/res.FileserverThreads[0].MiBPerSecond, res.FileserverThreadScaling, 1e-9, "one round: the median ratio is the ratio")
	assert.Equal(t, []float64{res.FileserverThreads[0].MiBPerSecond}, res.FileserverThreadSamples["threads_1"], "one sample per round")
	assert.Equal(t, []float64{res.FileserverThreads[1].MiBPerSecond}, res.FileserverThreadSamples["threads_4"])
	for _, tp := range res.Throughput {
		assert.Positive(t, tp.ZoneFleet, tp.Workload)
		assert.Positive(t, tp.Loopback, tp.Workload)
		assert.InDelta(t, tp.ZoneFleet/tp.Loopback, res.VsFuseLoopback[tp.Workload], 1e-9)
		// the process's CPU time over the point, per GiB: at least the
		// copies a FUSE write or read makes cost something measurable
		assert.Positive(t, tp.CPUPerGiB, "%s: cpu per GiB", tp.Workload)
		assert.Positive(t, tp.LoopbackCPUPerGiB, "%s: loopback cpu per GiB", tp.Workload)
	}
	require.Len(t, res.Recycling, 3)
	for _, r := range res.Recycling {
		assert.Positive(t, r.GCRuns, "%s: segments recycled", r.Method)
		assert.GreaterOrEqual(t, r.WAF, 1.0, r.Method)
		assert.InDelta(t, r.AvgGCMs, r.AvgReadMs+r.AvgCopyMs+r.AvgWriteCPMs, r.AvgGCMs*0.01+0.01, "%s: phases add up", r.Method)
	}
	assert.Equal(t, []string{"host_copy", "host_copy_pgc", "izc"}, []string{res.Recycling[0].Method, res.Recycling[1].Method, res.Recycling[2].Method})
	assert.Positive(t, res.Recycling[0].MovedHost, "host copy moves through the host")
	assert.Positive(t, res.Recycling[1].MovedHost, "host copy with P-GC moves through the host")
	assert.Zero(t, res.Recycling[0].PGCSplits, "host_copy is without P-GC")
	assert.Positive(t, res.Recycling[2].MovedIZC, "IZC moves on the drives")
	assert.Contains(t, res.IZCvsHostCopy, "util_80")
	assert.Contains(t, res.PGCvsHostCopy, "util_80")
	var buf bytes.Buffer
	require.NoError(t, res.WriteTable(&buf))
	assert.Contains(t, buf.String(), "vs_fuse_loopback")
	assert.Contains(t, buf.String(), "cpu s/GiB zonefleet")
	assert.Contains(t, buf.String(), "volume_write_scaling")
	js, err := json.Marshal(res)
	require.NoError(t, err)
	assert.Contains(t, string(js), `"vs_fuse_loopback":{`)
	assert.Contains(t, string(js), `"mount_cpu_seconds_per_gib":`)
	assert.Contains(t, string(js), `"parallel_read_scaling":`)
	assert.Contains(t, string(js), `"parallel_write_scaling":`)
	assert.Contains(t, string(js), `"volume_write_scaling":{`)
	assert.Contains(t, string(js), `"fileserver_16_vs_1_threads":`)
}

// TestSmokeUntilRecycled: a churn far too small to recycle anything (1 % of the
// capacity at 80 %) still yields a recycling run that recycled segments and
// moved blocks its way, because UntilRecycled drives the workload on.
func TestSmokeUntilRecycled(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	res, err := fsbench.Run(context.Background(), fsbench.Options{Dir: t.TempDir(), SeqMiB: 1, RandOps: 16, Utils: []int{80}, Churn: 0.01, Threads: 2, TimeScale: 0.25,
		Runs: 1, Parallel: 1, SkipLoopRef: true, NoDevvol: true, NoThreadScaling: true, UntilRecycled: true, NoPGC: true})
	require.NoError(t, err)
	require.Len(t, res.Recycling, 2)
	for _, r := range res.Recycling {
		assert.Positive(t, r.GCRuns, "%s: segments recycled", r.Method)
	}
	assert.Positive(t, res.Recycling[0].MovedHost, "host copy moves through the host")
	assert.Positive(t, res.Recycling[1].MovedIZC, "IZC moves on the drives")
}
