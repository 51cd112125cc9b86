package lfs_test

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// BenchmarkCreateSmallFiles creates 5,000 files of 1 KiB (one block each)
// in one directory, no fsync, with the write-back goroutines running: the
// shape of a small-file create workload (bench/apps creates_1k) without
// FUSE. It reports files/s; mkfs and mount are not timed.
func BenchmarkCreateSmallFiles(b *testing.B) {
	const files = 5000
	data := make([]byte, 1024)
	for i := range data {
		data[i] = byte(i)
	}
	var secs float64
	for b.Loop() {
		b.StopTimer()
		d, err := zns.Create(filepath.Join(b.TempDir(), "dev0"), devvol.TestConfig(32, 512), clock.Off())
		require.NoError(b, err)
		v, err := devvol.New(d)
		require.NoError(b, err)
		fs := mkfsMount(b, v, lfs.Options{})
		dir, err := fs.Mkdir(bg, lfs.RootIno, "d", 0o755, 0, 0)
		require.NoError(b, err)
		b.StartTimer()
		start := b.Elapsed()
		for i := range files {
			_, h, err := fs.Create(bg, dir.Ino, fmt.Sprintf("f%05d", i), 0o644, 0, 0, syscall.O_RDWR)
			require.NoError(b, err)
			n, err := fs.Write(bg, h, 0, data)
			require.NoError(b, err)
			require.Equal(b, len(data), n)
			require.NoError(b, fs.Release(bg, h))
		}
		secs += (b.Elapsed() - start).Seconds()
		b.StopTimer()
		st := fs.Stats()
		b.Logf("checkpoints %d write-backs %d", st.Checkpoints, st.WriteBacks)
		require.NoError(b, fs.Unmount(bg))
		require.NoError(b, d.Close())
		b.StartTimer()
	}
	b.ReportMetric(float64(files*b.N)/secs, "files/s")
}
