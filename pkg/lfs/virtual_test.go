package lfs_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// TestVirtualClockRunsAreIdentical: with the drive and the file system on one
// virtual clock, periodic checkpoints and idle recycling run as clock
// callbacks that do I/O (and so wait on the same clock) while a single
// goroutine drives a workload. Callbacks run on their own goroutines, yet
// every run ends at the same modelled time with the same statistics: the
// virtual clock stays deterministic (benchmarks compare such runs).
func TestVirtualClockRunsAreIdentical(t *testing.T) {
	run := func() (time.Duration, lfs.Stats) {
		clk := clock.NewVirtual()
		d, err := zns.Create(filepath.Join(t.TempDir(), "dev0"), devvol.TestConfig(48, 8), clk)
		require.NoError(t, err)
		defer d.Close()
		v, err := devvol.New(d)
		require.NoError(t, err)
		fs := mkfsMount(t, v, lfs.Options{Clock: clk, BackgroundGC: 200 * time.Microsecond, CheckpointEvery: 50 * time.Microsecond, Move: lfs.Compact})
		for i := 0; i < 60; i++ {
			require.NoError(t, writeFile(fs, fmt.Sprintf("f%d", i), make([]byte, 24<<10+i*512), i%4 == 0))
			if i%2 == 0 {
				require.NoError(t, fs.Unlink(bg, lfs.RootIno, fmt.Sprintf("f%d", i)))
			}
			if i%10 == 9 {
				clk.Advance(time.Millisecond) // idle: background recycling and checkpoints fire
			}
		}
		now, st := clk.Now(), fs.Stats()
		require.NoError(t, fs.Unmount(bg))
		return now, st
	}
	now0, st0 := run()
	require.Positive(t, st0.Checkpoints, "periodic checkpoints ran as clock callbacks")
	for i := 1; i < 4; i++ {
		now, st := run()
		require.Equal(t, now0, now, "run %d: modelled end time", i)
		require.Equal(t, st0, st, "run %d: statistics", i)
	}
}
