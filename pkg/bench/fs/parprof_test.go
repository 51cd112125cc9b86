package fsbench

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// BenchmarkParallelCluster is the parallel_*_scaling points of `zctl bench
// fs` alone, for profiles: the mount over an in-process cluster, one and
// four threads writing (then reading) one 16 MiB file each, 16 passes. It
// reports both ratios.
//
//	go test ./pkg/bench/fs -run '^$' -bench ParallelCluster -benchtime 1x \
//	  -cpuprofile cpu.out -mutexprofile mutex.out -blockprofile block.out
func BenchmarkParallelCluster(b *testing.B) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		b.Skipf("no /dev/fuse: %v", err)
	}
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		cl, err := startCluster(ctx, filepath.Join(dir, "c"), "off", 1, nil)
		require.NoError(b, err)
		vol, err := fsvol.New(ctx, cl.c, fsvol.Options{})
		require.NoError(b, err)
		require.NoError(b, lfs.Mkfs(ctx, vol, lfs.MkfsOptions{}))
		m, err := mountLFS(ctx, vol, filepath.Join(dir, "m"), lfs.Options{Move: lfs.Compact})
		require.NoError(b, err)
		out, err := parallel(ctx, m.dir, Options{SeqMiB: 64, SeqTotalMiB: 1024, Parallel: 4})
		require.NoError(b, err)
		for _, r := range out {
			b.ReportMetric(r.ZoneFleet, r.Workload)
		}
		require.NoError(b, m.unmount(ctx))
		require.NoError(b, vol.Close(ctx))
		cl.close()
	}
}
