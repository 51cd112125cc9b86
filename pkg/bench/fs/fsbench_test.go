package fsbench_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	fsbench "github.com/zonefleet/zonefleet/pkg/bench/fs"
)

// BenchmarkThroughput is the throughput part alone (mount over the cluster,
// loopback, devvol; one run each), for profiles:
//
//	go test ./pkg/bench/fs -run '^$' -bench Throughput -benchtime 1x \
//	  -cpuprofile cpu.out -mutexprofile mutex.out -blockprofile block.out
//	go tool pprof -top -nodecount 40 fsbench.test cpu.out
func BenchmarkThroughput(b *testing.B) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		b.Skipf("no /dev/fuse: %v", err)
	}
	for i := 0; i < b.N; i++ {
		res, err := fsbench.Run(context.Background(), fsbench.Options{Dir: b.TempDir(), Runs: 1, NoRecycling: true, NoThreadScaling: true})
		require.NoError(b, err)
		for _, t := range res.Throughput {
			b.ReportMetric(t.VsLoopback, t.Workload+"_vs_loopback")
		}
		b.ReportMetric(res.ParallelReadScaling, "parallel_read_scaling")
		b.ReportMetric(res.ParallelWriteScaling, "parallel_write_scaling")
	}
}
