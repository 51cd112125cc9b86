package lfs_test

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/zns"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// block makes a checksummed block of file f, version ver, index i.
func block(f, ver, i int) []byte {
	b := make([]byte, 4096)
	rng := rand.New(rand.NewSource(int64(f*1_000_003 + ver*7919 + i)))
	rng.Read(b[12:4092])
	binary.LittleEndian.PutUint32(b[0:], uint32(f))
	binary.LittleEndian.PutUint32(b[4:], uint32(ver))
	binary.LittleEndian.PutUint32(b[8:], uint32(i))
	binary.LittleEndian.PutUint32(b[4092:], crc32.ChecksumIEEE(b[:4092]))
	return b
}

func checkBlock(b []byte, f, ver, i int) error {
	if crc32.ChecksumIEEE(b[:4092]) != binary.LittleEndian.Uint32(b[4092:]) {
		return fmt.Errorf("file %d block %d: checksum mismatch", f, i)
	}
	gf, gv, gi := binary.LittleEndian.Uint32(b[0:]), binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint32(b[8:])
	if int(gf) != f || int(gv) != ver || int(gi) != i {
		return fmt.Errorf("file %d block %d: holds file %d version %d block %d, want version %d", f, i, gf, gv, gi, ver)
	}
	return nil
}

func TestGCFillAndOverwrite(t *testing.T) {
	copyback := map[string]uint64{}
	defer func() {
		_, a := copyback["izc-d"]
		_, b := copyback["izc-d without copyback-aware allocation"]
		if !t.Failed() && a && b {
			require.Greater(t, copyback["izc-d"], copyback["izc-d without copyback-aware allocation"], "copyback-aware allocation copies more by copyback")
		}
	}()
	for _, tc := range []struct {
		name string
		opts lfs.Options
		seed int64
	}{
		{"host-copy", lfs.Options{Move: lfs.HostCopy, CacheBlocks: 128}, 1},
		{"izc-d", lfs.Options{Move: lfs.Compact}, 2},
		{"izc-h", lfs.Options{Move: lfs.Compact, CachedWrite: true, CacheBlocks: 1024}, 3},
		{"izc-d without copyback-aware allocation", lfs.Options{Move: lfs.Compact, NoCopybackAware: true}, 2},
		// per block by cost: MLC chip read + transfer vs a host write of a chunk
		{"izc-h/d by cost", lfs.Options{Move: lfs.Compact, CacheBlocks: 1024, FlashReadCost: 59 * time.Microsecond, HostWriteCost: 14 * time.Microsecond}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVol(t, 64, 8)
			reg := prometheus.NewRegistry()
			tc.opts.Registry = reg
			fs := mkfsMount(t, v, tc.opts)
			st, err := fs.Statfs(bg)
			require.NoError(t, err)
			const fileBlocks = 16
			nfiles := int(st.Blocks*9/10) / (fileBlocks + 2)
			vers := make([]int, nfiles)
			inos := make([]uint64, nfiles)
			write := func(f int, blocks []int) {
				h, err := fs.Open(bg, inos[f], syscall.O_RDWR)
				require.NoError(t, err)
				for _, i := range blocks {
					_, err := fs.Write(bg, h, int64(i)*4096, block(f, vers[f], i))
					require.NoError(t, err, "file %d", f)
				}
				require.NoError(t, fs.Release(bg, h))
			}
			all := make([]int, fileBlocks)
			for i := range all {
				all[i] = i
			}
			for f := range inos {
				a, h, err := fs.Create(bg, lfs.RootIno, fmt.Sprintf("f%04d", f), 0o644, 0, 0, syscall.O_RDWR)
				require.NoError(t, err)
				require.NoError(t, fs.Release(bg, h))
				inos[f] = a.Ino
				write(f, all)
			}
			verify := func() {
				buf := make([]byte, 4096)
				for f := range inos {
					h, err := fs.Open(bg, inos[f], syscall.O_RDONLY)
					require.NoError(t, err)
					for i := 0; i < fileBlocks; i++ {
						_, err := fs.Read(bg, h, int64(i)*4096, buf)
						require.NoError(t, err)
						require.NoError(t, checkBlock(buf, f, vers[f], i))
					}
					require.NoError(t, fs.Release(bg, h))
				}
			}
			verify()
			st, err = fs.Statfs(bg)
			require.NoError(t, err)
			require.Greater(t, float64(st.Blocks-st.Bfree)/float64(st.Blocks), 0.85, "filled to about 90%%")
			rng := rand.New(rand.NewSource(tc.seed))
			for pass := 0; pass < 3; pass++ {
				for _, f := range rng.Perm(nfiles) {
					vers[f]++
					write(f, all)
					if rng.Intn(10) == 0 {
						ino := inos[f]
						require.NoError(t, fs.FsyncIno(bg, ino))
					}
				}
				verify()
				rep, err := fs.Fsck(bg)
				require.NoError(t, err)
				require.Empty(t, rep.Problems, "pass %d", pass)
			}
			s := fs.Stats()
			t.Logf("%s: gc %d, host copy %d, izc %d (copyback %d planned, %d done), dirty %d, cached %d, WAF %.2f", tc.name, s.GCForeground,
				s.MovedHostCopy, s.MovedIZC, s.CopybackPlanned, s.CompactCopyback, s.MovedHostDirty, s.MovedHostCached, s.WAF)
			copyback[tc.name] = s.CompactCopyback
			require.LessOrEqual(t, s.CopybackPlanned, s.CopybackEligible, "CAB places only fully valid chunks it looked at")
			require.Positive(t, s.GCForeground)
			if tc.opts.Move == lfs.Compact {
				require.Positive(t, s.MovedIZC)
			} else {
				require.Zero(t, s.MovedIZC)
				require.Positive(t, s.MovedHostCopy)
			}
			if tc.opts.CachedWrite || tc.opts.HostWriteCost > 0 {
				require.Positive(t, s.MovedHostCached, "clean cached blocks written from the host")
			}
			require.Greater(t, s.WAF, 1.0)
			require.Positive(t, metricSum(t, reg, "zonefleet_fs_gc_runs_total"))
			require.Positive(t, metricSum(t, reg, "zonefleet_fs_operations_total"))
			require.NoError(t, fs.Unmount(bg))
			fs, err = lfs.Mount(bg, v, tc.opts)
			require.NoError(t, err)
			verify()
			require.NoError(t, fs.Unmount(bg))
		})
	}
}

// metricSum sums the samples of a counter family in reg.
func metricSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	found := false
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		found = true
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	require.True(t, found, "metric %s registered", name)
	return sum
}

func TestBackgroundGCWhenIdle(t *testing.T) {
	clk := clock.NewVirtual()
	v := newVol(t, 48, 8)
	fs := mkfsMount(t, v, lfs.Options{Clock: clk, BackgroundGC: time.Second, CheckpointEvery: 500 * time.Millisecond})
	// make dirty segments: write files, then delete every other one
	for i := 0; i < 60; i++ {
		require.NoError(t, writeFile(fs, fmt.Sprintf("f%d", i), make([]byte, 32<<10), false))
	}
	for i := 0; i < 60; i += 2 {
		require.NoError(t, fs.Unlink(bg, lfs.RootIno, fmt.Sprintf("f%d", i)))
	}
	cp := fs.Stats().Checkpoints
	clk.Advance(10 * time.Second)
	s := fs.Stats()
	require.Positive(t, s.GCBackground, "idle file system recycles in the background")
	require.Greater(t, s.Checkpoints, cp, "periodic checkpoint")
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
}

// With drives on the virtual clock, an operation's own I/O wait advances the
// clock and may fire the background tick on the same goroutine: the tick must
// not wait for the file system lock (no deadlock), and idle recycling still runs.
func TestBackgroundTickDuringIOOnVirtualClock(t *testing.T) {
	clk := clock.NewVirtual()
	d, err := zns.Create(filepath.Join(t.TempDir(), "dev0"), devvol.TestConfig(48, 8), clk)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	v, err := devvol.New(d)
	require.NoError(t, err)
	fs := mkfsMount(t, v, lfs.Options{Clock: clk, BackgroundGC: 50 * time.Microsecond, CheckpointEvery: 20 * time.Microsecond, Move: lfs.Compact})
	for i := 0; i < 80; i++ {
		require.NoError(t, writeFile(fs, fmt.Sprintf("f%d", i), make([]byte, 32<<10), i%3 == 0))
		if i%2 == 0 {
			require.NoError(t, fs.Unlink(bg, lfs.RootIno, fmt.Sprintf("f%d", i)))
		}
	}
	clk.Advance(time.Second)
	require.Positive(t, fs.Stats().GCBackground)
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
}
