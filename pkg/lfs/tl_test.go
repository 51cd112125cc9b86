package lfs_test

import (
	"fmt"
	"math/rand"
	"sort"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/ondisk"
)

// fillOverwrite fills fs to about 90 % with files of fileBlocks blocks and
// overwrites random blocks of random files for passes passes, checking every
// block's checksum and fsck after each pass.
func fillOverwrite(t *testing.T, fs *lfs.FS, seed int64, passes int, after func(pass int)) {
	st, err := fs.Statfs(bg)
	require.NoError(t, err)
	const fileBlocks = 16
	nfiles := int(st.Blocks*9/10) / (fileBlocks + 2)
	vers := make([][]int, nfiles)
	inos := make([]uint64, nfiles)
	write := func(f int, blocks []int) {
		h, err := fs.Open(bg, inos[f], syscall.O_RDWR)
		require.NoError(t, err)
		for _, i := range blocks {
			_, err := fs.Write(bg, h, int64(i)*4096, block(f, vers[f][i], i))
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
		vers[f] = make([]int, fileBlocks)
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
				require.NoError(t, checkBlock(buf, f, vers[f][i], i), "file %d block %d", f, i)
			}
			require.NoError(t, fs.Release(bg, h))
		}
	}
	verify()
	st, err = fs.Statfs(bg)
	require.NoError(t, err)
	require.Greater(t, float64(st.Blocks-st.Bfree)/float64(st.Blocks), 0.85, "filled to about 90%%")
	rng := rand.New(rand.NewSource(seed))
	for pass := 0; pass < passes; pass++ {
		for n := 0; n < nfiles; n++ {
			f := rng.Intn(nfiles)
			// partial overwrites leave segments partly valid: threaded
			// logging has holes to fill, compaction blocks to move
			var blocks []int
			for i := 0; i < fileBlocks; i++ {
				if rng.Intn(3) == 0 {
					vers[f][i]++
					blocks = append(blocks, i)
				}
			}
			write(f, blocks)
			if rng.Intn(8) == 0 {
				require.NoError(t, fs.FsyncIno(bg, inos[f]))
			}
		}
		verify()
		rep, err := fs.Fsck(bg)
		require.NoError(t, err)
		require.Empty(t, rep.Problems, "pass %d", pass)
		if after != nil {
			after(pass)
		}
	}
}

// ZNS+ mode at 90 %: hybrid segment recycling reuses most victims by
// threaded logging, every block keeps its checksum, fsck is clean after each
// pass and after a remount.
func TestZNSPlusFillOverwrite(t *testing.T) {
	v := newVol(t, 64, 8)
	reg := prometheus.NewRegistry()
	fs := mkfsMount(t, v, lfs.Options{Mode: lfs.ModeZNSPlus, Registry: reg})
	require.Equal(t, lfs.ModeZNSPlus, fs.Mode())
	fillOverwrite(t, fs, 7, 4, nil)
	s := fs.Stats()
	t.Logf("zns+: TL %d, compacted %d (share %.2f, HSR chose compaction %d), plugged %d on demand + %d background, pre-invalid %d/%d, alpha %.2f (node %.2f) beta %.2f, checkpoints %v, izc %d, WAF %.2f",
		s.TLRecycledSegments, s.CompactedSegments, s.TLShare, s.HSRCompaction, s.PluggedOnDemand, s.PluggedBackground,
		s.PreInvalidBlocks, s.PreInvalidThreshold, s.Alpha, s.AlphaNode, s.Beta, s.CheckpointsByCause, s.MovedIZC, s.WAF)
	require.Positive(t, s.TLRecycledSegments)
	require.Greater(t, s.TLShare, 0.25, "threaded logging reuses a good share of the victims")
	require.Zero(t, fs.MixedSegments(), "threaded logging reuses a segment of the log's own type only")
	require.Positive(t, s.PluggedOnDemand+s.PluggedBackground)
	require.Equal(t, "zns+", s.Mode)
	require.NoError(t, fs.Unmount(bg))
	fs, err := lfs.Mount(bg, v, lfs.Options{Mode: lfs.ModeZNSPlus})
	require.NoError(t, err)
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
}

// prefillHoles fills fs to about 80 % with fsynced files of 16 blocks and
// overwrites half of their blocks (fsynced), so that closed segments have
// holes for threaded logging. It returns the files' names and contents.
func prefillHoles(t *testing.T, fs *lfs.FS, seed int64) map[string][]byte {
	st, err := fs.Statfs(bg)
	require.NoError(t, err)
	const fileBlocks = 16
	n := int(st.Blocks*8/10) / (fileBlocks + 2)
	rng := rand.New(rand.NewSource(seed))
	files := map[string][]byte{}
	for f := 0; f < n; f++ {
		d := make([]byte, fileBlocks*4096)
		rng.Read(d)
		p := fmt.Sprintf("p%04d", f)
		require.NoError(t, writeFile(fs, p, d, false))
		files[p] = d
	}
	for p, d := range files {
		ino, err := walk(fs, p)
		require.NoError(t, err)
		h, err := fs.Open(bg, ino, syscall.O_RDWR)
		require.NoError(t, err)
		for i := 0; i < fileBlocks; i += 2 {
			rng.Read(d[i*4096 : (i+1)*4096])
			_, err := fs.Write(bg, h, int64(i)*4096, d[i*4096:(i+1)*4096])
			require.NoError(t, err)
		}
		require.NoError(t, fs.Release(bg, h))
	}
	require.NoError(t, fs.Sync(bg))
	return files
}

// A crash (the client dies: every later volume call fails) while threaded
// logging writes into a recycled segment's holes: the last checkpoint is
// consistent, the mount rolls forward what the log wrote after it, every
// fsynced file holds a version since its fsync, and fsck is clean. Each
// round crashes at a different call; threaded logging happens in the rounds.
func TestCrashDuringThreadedLogging(t *testing.T) {
	v := newVol(t, 48, 8)
	require.NoError(t, lfs.Mkfs(bg, v, lfs.MkfsOptions{}))
	fs, err := lfs.Mount(bg, v, lfs.Options{Mode: lfs.ModeZNSPlus})
	require.NoError(t, err)
	files := prefillHoles(t, fs, 1)
	require.NoError(t, fs.Unmount(bg))
	h := &history{cur: map[string][]byte{}, versions: map[string][][]byte{}, synced: map[string]bool{}}
	for p, d := range files {
		h.record(p, d, true)
	}
	names := make([]string, 0, len(files))
	for p := range files {
		names = append(names, p)
	}
	sort.Strings(names)
	rng := rand.New(rand.NewSource(5))
	var tl uint64
	for round := 0; round < 10; round++ {
		cv := &crashVol{Volume: v}
		cv.left.Store(1 << 40)
		fs, err := lfs.Mount(bg, cv, lfs.Options{Mode: lfs.ModeZNSPlus, CacheBlocks: 64})
		require.NoError(t, err, "round %d", round)
		cv.left.Store(int64(100 + rng.Intn(600)))
		for i := 0; ; i++ {
			p := names[rng.Intn(len(names))]
			h.mu.Lock()
			cur := h.cur[p]
			h.mu.Unlock()
			ino, err := walk(fs, p)
			if err != nil {
				break
			}
			hd, err := fs.Open(bg, ino, syscall.O_RDWR)
			if err != nil {
				break
			}
			off := rng.Intn(len(cur)/4096) * 4096
			d := make([]byte, 4096*(1+rng.Intn(3)))
			rng.Read(d)
			next := setAt(append([]byte(nil), cur...), off, d)
			h.record(p, next, false)
			if _, err := fs.Write(bg, hd, int64(off), d); err != nil {
				fs.Release(bg, hd)
				break
			}
			if rng.Intn(4) == 0 {
				if err := fs.Fsync(bg, hd, false); err != nil {
					fs.Release(bg, hd)
					break
				}
				h.record(p, next, true)
			}
			fs.Release(bg, hd)
		}
		tl += fs.Stats().TLRecycledSegments
		fs.Abandon()

		rep, err := lfs.Fsck(bg, v, false)
		require.NoError(t, err, "round %d", round)
		require.Empty(t, rep.Problems, "round %d: checkpoint not consistent", round)
		fs, err = lfs.Mount(bg, v, lfs.Options{Mode: lfs.ModeZNSPlus})
		require.NoError(t, err, "round %d", round)
		for _, p := range names {
			got, err := readFile(fs, p)
			require.NoError(t, err, "round %d: fsynced %s lost", round, p)
			h.mu.Lock()
			vs := h.versions[p]
			h.mu.Unlock()
			require.NoError(t, blockwiseVersion(got, vs), "round %d: %s", round, p)
			// what is on the drives now is where the next round starts
			h.record(p, got, true)
		}
		rep, err = fs.Fsck(bg)
		require.NoError(t, err)
		require.Empty(t, rep.Problems, "round %d: after roll-forward", round)
		require.NoError(t, fs.Unmount(bg))
	}
	t.Logf("segments recycled by threaded logging before the crashes: %d", tl)
	require.Positive(t, tl, "the crashes hit threaded logging")
}

// A zns+ mount sets the incompat feature bit FeatureThreadedLog before it
// writes threaded-logging state; a build that does not know the bit refuses
// the image, while this one mounts it in any mode.
func TestThreadedLogFeatureBit(t *testing.T) {
	v := newVol(t, 24, 8)
	fs := mkfsMount(t, v, lfs.Options{Mode: lfs.ModeIZC})
	require.NoError(t, fs.Unmount(bg))
	f, err := lfs.SuperFeatures(bg, v)
	require.NoError(t, err)
	require.Zero(t, f.Incompat&lfs.FeatureThreadedLog, "izc mounts do not set it")
	fs, err = lfs.Mount(bg, v, lfs.Options{Mode: lfs.ModeZNSPlus})
	require.NoError(t, err)
	require.Equal(t, lfs.ModeZNSPlus, fs.Mode())
	require.NoError(t, fs.Unmount(bg))
	f, err = lfs.SuperFeatures(bg, v)
	require.NoError(t, err)
	require.NotZero(t, f.Incompat&lfs.FeatureThreadedLog)
	old := lfs.KnownFeatures
	old.Incompat &^= lfs.FeatureThreadedLog
	_, err = ondisk.Check("superblock", f, old)
	require.Error(t, err, "a build without threaded logging refuses the image")
	fs, err = lfs.Mount(bg, v, lfs.Options{Mode: lfs.ModeZNS})
	require.NoError(t, err)
	require.NoError(t, fs.Unmount(bg))
}

// zns+ over a volume without TL_open falls back to izc.
func TestZNSPlusFallsBackToIZC(t *testing.T) {
	v := newVol(t, 24, 8)
	fs := mkfsMount(t, plainVol{v}, lfs.Options{Mode: lfs.ModeZNSPlus})
	require.Equal(t, lfs.ModeIZC, fs.Mode())
	require.Equal(t, "izc", fs.Stats().Mode)
	require.NoError(t, fs.Unmount(bg))
	m, err := lfs.ParseMode("zns+")
	require.NoError(t, err)
	require.Equal(t, lfs.ModeZNSPlus, m)
	_, err = lfs.ParseMode("fast")
	require.Error(t, err)
}

// plainVol hides the volume's TLOpen.
type plainVol struct{ lfs.Volume }

// fewOpen reports a smaller MaxOpen than the drives allow (keeping TLOpen).
type fewOpen struct {
	*devvol.Volume
	maxOpen int
}

func (f fewOpen) Geometry() lfs.VolumeGeometry {
	g := f.Volume.Geometry()
	g.MaxOpen = f.maxOpen
	return g
}

// zns+ with no open zone beyond the logs and the metadata zones (a
// namespace of 4 active v-zones: 2 logs + 2) falls back to izc at mount
// instead of trying and refusing every TL_open; with one more it stays zns+.
func TestZNSPlusNeedsAnOpenZoneToSpare(t *testing.T) {
	for _, tc := range []struct {
		maxOpen int
		want    lfs.Mode
		logs    int
	}{
		{4, lfs.ModeIZC, 2}, // 2 logs + 2 metadata zones: none to spare
		{5, lfs.ModeZNSPlus, 2},
		{8, lfs.ModeZNSPlus, 2}, // six logs would leave none to spare
		{9, lfs.ModeZNSPlus, 6},
		{16, lfs.ModeZNSPlus, 6},
	} {
		v := newVol(t, 24, 8)
		fs := mkfsMount(t, fewOpen{v, tc.maxOpen}, lfs.Options{Mode: lfs.ModeZNSPlus})
		require.Equal(t, tc.want, fs.Mode(), "max open %d", tc.maxOpen)
		require.Equal(t, tc.logs, fs.Logs(), "max open %d", tc.maxOpen)
		require.NoError(t, fs.Unmount(bg))
	}
}

// Mkfs formats six logs only when threaded logging keeps an open zone to
// spare beside them and the two metadata zones.
func TestMkfsLogs(t *testing.T) {
	for _, tc := range []struct{ maxOpen, logs int }{
		{4, 2}, {5, 2}, {6, 2}, {7, 2}, {8, 2}, {9, 6}, {10, 6}, {64, 6},
	} {
		require.Equal(t, tc.logs, lfs.MkfsLogs(tc.maxOpen), "max open %d", tc.maxOpen)
		if tc.maxOpen >= 5 { // 4 (the least a volume may have) has none with 2 logs
			require.GreaterOrEqual(t, tc.maxOpen-tc.logs-2, 1, "max open %d: a zone to spare", tc.maxOpen)
		}
	}
}
