package fsbench

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkParallelCluster is the parallel_*_scaling points of `zctl bench
// fs` alone, for profiles: the mount over an in-process cluster, one and
// four threads writing (then reading) one 16 MiB file each, 16 passes. It
// reports both ratios.
//
//	go test ./pkg/bench/fs -run '^$' -bench ParallelCluster -benchtime 1x \
//	  -cpuprofile cpu.out -mutexprofile mutex.out -blockprofile block.out
func BenchmarkParallelCluster(b *testing.B) {
	for i := 0; i < b.N; i++ {
		m, done := mountCluster(b)
		out, err := parallel(context.Background(), m.dir, dropper(m.fs), Options{SeqMiB: 64, SeqTotalMiB: 1024, Parallel: 4})
		require.NoError(b, err)
		for _, r := range out {
			b.ReportMetric(r.ZoneFleet, r.Workload)
		}
		done()
	}
}
