package fsbench

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// BenchmarkSeqWriteCluster is the sequential-write point of `zctl bench fs`
// alone, for profiles: the mount over an in-process cluster (as the
// throughput part starts it), 16 passes of creating a 64 MiB file, writing
// it in 1 MiB writes and fsyncing it. It reports MiB/s and the seconds spent
// in fsync.
//
//	go test ./pkg/bench/fs -run '^$' -bench SeqWriteCluster -benchtime 1x \
//	  -cpuprofile cpu.out -blockprofile block.out -trace trace.out -o fsbench.test
//	go tool trace -pprof=syscall trace.out > syscall.pprof   # who waits in fdatasync
func BenchmarkSeqWriteCluster(b *testing.B) {
	for i := 0; i < b.N; i++ {
		m, done := mountCluster(b)
		seqWritePasses(b, m.dir)
		done()
	}
}

// BenchmarkSeqWriteLoopback is BenchmarkSeqWriteCluster's workload on
// go-fuse's loopback over a host directory (the baseline of `zctl bench fs`),
// for the ratio on an idle machine: run both with -count 5 and compare
// medians.
func BenchmarkSeqWriteLoopback(b *testing.B) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		b.Skipf("no /dev/fuse: %v", err)
	}
	for i := 0; i < b.N; i++ {
		t, err := loopbackTarget(b.TempDir())
		require.NoError(b, err)
		seqWritePasses(b, t.dir)
		require.NoError(b, t.close())
	}
}

// seqWritePasses creates a 64 MiB file in dir, writes it in 1 MiB writes
// and fsyncs it, 16 times, and reports MiB/s and the seconds in fsync.
func seqWritePasses(b *testing.B, dir string) {
	buf := make([]byte, 1<<20)
	p := filepath.Join(dir, "f")
	var syncT time.Duration
	t0 := time.Now()
	for pass := 0; pass < 16; pass++ {
		f, err := os.Create(p)
		require.NoError(b, err)
		for i := 0; i < 64; i++ {
			if _, err := f.Write(buf); err != nil {
				f.Close()
				require.NoError(b, err)
			}
		}
		ts := time.Now()
		err = f.Sync()
		syncT += time.Since(ts)
		require.NoError(b, f.Close())
		require.NoError(b, err)
	}
	d := time.Since(t0)
	b.ReportMetric(1024/d.Seconds(), "MiB/s")
	b.ReportMetric(syncT.Seconds(), "fsync_s")
}

// mountCluster mounts lfs (IZC) over a fresh in-process cluster as the
// throughput part of `zctl bench fs` does; done unmounts and stops it all.
// ZONEFLEET_BENCH_TCP=1 in the environment puts the mount on the nodes' TCP
// listeners with TLS (`zctl bench fs --tcp`) instead of their unix sockets.
func mountCluster(b *testing.B) (m *mounted, done func()) {
	b.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		b.Skipf("no /dev/fuse: %v", err)
	}
	ctx := context.Background()
	dir := b.TempDir()
	cl, err := startCluster(ctx, filepath.Join(dir, "c"), "off", 1, nil, localUp, os.Getenv("ZONEFLEET_BENCH_TCP") != "")
	require.NoError(b, err)
	vol, err := fsvol.New(ctx, cl.c, fsvol.Options{})
	require.NoError(b, err)
	require.NoError(b, lfs.Mkfs(ctx, vol, lfs.MkfsOptions{}))
	m, err = mountLFS(ctx, vol, filepath.Join(dir, "m"), lfs.Options{Move: lfs.Compact})
	require.NoError(b, err)
	return m, func() {
		require.NoError(b, m.unmount(ctx))
		require.NoError(b, vol.Close(ctx))
		cl.close()
	}
}

// BenchmarkSeqWriteDevvol is BenchmarkSeqWriteCluster's workload on the
// file system over one local drive (devvol, no network), the throughput
// part's devvol target: the file system's own cost without the cluster's.
func BenchmarkSeqWriteDevvol(b *testing.B) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		b.Skipf("no /dev/fuse: %v", err)
	}
	for i := 0; i < b.N; i++ {
		t, err := devvolTarget(context.Background(), b.TempDir(), Options{})
		require.NoError(b, err)
		seqWritePasses(b, t.dir)
		require.NoError(b, t.close())
	}
}
