package lfs_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// newIPUVol is newVol with the drive's in-place update budget set.
func newIPUVol(t testing.TB, zones, ppb, budget int) *devvol.Volume {
	t.Helper()
	c := devvol.TestConfig(zones, ppb)
	c.IPUBudgetBlocks, c.IPURegionBlocks = budget, 0
	d, err := zns.Create(filepath.Join(t.TempDir(), "dev0"), c, clock.Off())
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	v, err := devvol.New(d)
	require.NoError(t, err)
	return v
}

// syncedFile creates p with size bytes of pattern tag and makes it durable
// with a marked inode (a create is checkpointed by its first fsync; the
// second fsync writes the marked inode that records the size).
func syncedFile(t *testing.T, fs *lfs.FS, p string, size int, tag byte) (lfs.Handle, []byte) {
	t.Helper()
	data := bytes.Repeat([]byte{tag}, size)
	require.NoError(t, writeFile(fs, p, data, true))
	ino, err := walk(fs, p)
	require.NoError(t, err)
	h, err := fs.Open(bg, ino, syscall.O_RDWR)
	require.NoError(t, err)
	_, err = fs.Write(bg, h, 0, data)
	require.NoError(t, err)
	require.NoError(t, fs.Fsync(bg, h, false))
	return h, data
}

// TestFsyncInPlace: a tiny fsynced overwrite goes in place and writes no
// direct node (fdatasync: no inode either); without the option it is
// logged with its nodes. The update survives a crash.
func TestFsyncInPlace(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ipu       int
		datasync  bool
		inPlace   uint64 // blocks updated in place
		maxWrites uint64 // blocks written to the drives by the fsync
		minWrites uint64
	}{
		{"fdatasync in place", 8, true, 1, 1, 1},
		{"fsync in place writes the inode", 8, false, 1, 2, 2},
		{"fdatasync logged", 0, true, 0, 1 << 20, 3},
		{"more dirty pages than the limit", 1, true, 0, 1 << 20, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVol(t, 24, 8)
			fs := mkfsMount(t, v, lfs.Options{IPUFsyncBlocks: tc.ipu})
			h, want := syncedFile(t, fs, "f", 16*4096, 'a')
			upd := bytes.Repeat([]byte{'b'}, 4096)
			n := 1
			if tc.name == "more dirty pages than the limit" {
				n = 2
			}
			for i := 0; i < n; i++ {
				_, err := fs.Write(bg, h, int64(4096*(2+i)), upd)
				require.NoError(t, err)
				copy(want[4096*(2+i):], upd)
			}
			s0 := fs.Stats()
			require.NoError(t, fs.Fsync(bg, h, tc.datasync))
			s1 := fs.Stats()
			require.Equal(t, tc.inPlace, s1.IPUBlocks-s0.IPUBlocks)
			w := s1.DriveBlocksWritten - s0.DriveBlocksWritten
			require.GreaterOrEqual(t, w, tc.minWrites)
			require.LessOrEqual(t, w, tc.maxWrites)
			fs.Abandon() // a crash: nothing more is written
			fs2, err := lfs.Mount(bg, v, lfs.Options{})
			require.NoError(t, err)
			got, err := readFile(fs2, "f")
			require.NoError(t, err)
			require.True(t, bytes.Equal(want, got), "the fsynced update is lost")
			rep, err := fs2.Fsck(bg)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
			require.NoError(t, fs2.Unmount(bg))
		})
	}
}

// TestFsyncInPlaceBudget: once the drive's budget is spent the updates go
// to the log, and every fsynced version survives a crash.
func TestFsyncInPlaceBudget(t *testing.T) {
	v := newIPUVol(t, 24, 8, 2)
	fs := mkfsMount(t, v, lfs.Options{IPUFsyncBlocks: 4})
	h, want := syncedFile(t, fs, "f", 8*4096, 'a')
	for i := 0; i < 6; i++ {
		upd := bytes.Repeat([]byte{byte('c' + i)}, 4096)
		_, err := fs.Write(bg, h, int64(4096*i), upd)
		require.NoError(t, err)
		copy(want[4096*i:], upd)
		require.NoError(t, fs.Fsync(bg, h, true))
	}
	// the same block again: no new budget for a block updated already
	_, err := fs.Write(bg, h, 0, bytes.Repeat([]byte{'z'}, 4096))
	require.NoError(t, err)
	copy(want, bytes.Repeat([]byte{'z'}, 4096))
	require.NoError(t, fs.Fsync(bg, h, true))
	st := fs.Stats()
	require.Equal(t, uint64(3), st.IPUBlocks, "two blocks in place, the first again")
	require.Equal(t, uint64(4), st.IPUFallbacks)
	fs.Abandon()
	fs2, err := lfs.Mount(bg, v, lfs.Options{})
	require.NoError(t, err)
	got, err := readFile(fs2, "f")
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
	require.NoError(t, fs2.Unmount(bg))
}

// TestFsyncInPlaceWithRecycling: in-place fsyncs race with recycling
// rounds that move the same segments (host copy and device copy); every
// fsynced block reads back after a crash, and fsck is clean.
func TestFsyncInPlaceWithRecycling(t *testing.T) {
	for _, mv := range []lfs.MoveMethod{lfs.HostCopy, lfs.Compact} {
		t.Run(fmt.Sprint(mv), func(t *testing.T) {
			v := newIPUVol(t, 24, 8, 512)
			fs := mkfsMount(t, v, lfs.Options{IPUFsyncBlocks: 4, Move: mv})
			const files, blocks = 4, 24
			hs := make([]lfs.Handle, files)
			want := make([][]byte, files)
			for i := range hs {
				hs[i], want[i] = syncedFile(t, fs, fmt.Sprintf("f%d", i), blocks*4096, byte('a'+i))
			}
			// invalid blocks in the files' segments, so that they are victims
			require.NoError(t, writeFile(fs, "junk", bytes.Repeat([]byte{'j'}, 64*4096), true))
			ino, err := walk(fs, "junk")
			require.NoError(t, err)
			_, err = fs.Setattr(bg, ino, lfs.SetattrIn{Valid: lfs.SetSize, Size: 0})
			require.NoError(t, err)
			require.NoError(t, fs.Sync(bg))
			var wg sync.WaitGroup
			var stop atomic.Bool
			var mu sync.Mutex
			for i := range hs {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					rng := rand.New(rand.NewSource(int64(i)))
					for k := 0; k < 40; k++ {
						b := rng.Intn(blocks)
						upd := bytes.Repeat([]byte{byte(k)}, 4096)
						upd[0] = byte(i)
						if _, err := fs.Write(bg, hs[i], int64(b*4096), upd); err != nil {
							t.Error(err)
							return
						}
						if err := fs.Fsync(bg, hs[i], true); err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						copy(want[i][b*4096:], upd)
						mu.Unlock()
					}
				}(i)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < 30 && !stop.Load(); r++ {
					if _, err := fs.RecycleOnce(bg); err != nil {
						t.Error(err)
						return
					}
				}
			}()
			wg.Wait()
			st := fs.Stats()
			require.NotZero(t, st.IPUBlocks)
			require.NotZero(t, st.MovedHostCopy+st.MovedIZC+st.MovedHostCached+st.MovedHostDirty, "recycling moved nothing")
			fs.Abandon()
			fs2, err := lfs.Mount(bg, v, lfs.Options{})
			require.NoError(t, err)
			for i := range hs {
				got, err := readFile(fs2, fmt.Sprintf("f%d", i))
				require.NoError(t, err)
				require.True(t, bytes.Equal(want[i], got), "file %d: a fsynced update is lost", i)
			}
			rep, err := fs2.Fsck(bg)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
			require.NoError(t, fs2.Unmount(bg))
		})
	}
}

// plOverwrites counts the in-place updates of the power-loss runs.
var plOverwrites atomic.Int64

// Overwrite passes an in-place update to the drive; it is durable on
// return, so the oracle expects it after any crash (while it runs, either
// contents).
func (o *oracleVol) Overwrite(ctx context.Context, z lfs.ZoneID, off uint64, data []byte) error {
	ow, ok := o.Volume.(lfs.Overwriter)
	if !ok {
		return fmt.Errorf("volume %T has no in-place update", o.Volume)
	}
	// in flight: each block may come back old or new
	o.mu.Lock()
	for i := 0; i < len(data)/o.bs; i++ {
		delete(o.dur, zblk{z, off + uint64(i)})
	}
	o.mu.Unlock()
	err := ow.Overwrite(ctx, z, off, data)
	if err == nil {
		plOverwrites.Add(1)
		o.mu.Lock()
		for i := 0; i < len(data)/o.bs; i++ {
			b := append([]byte(nil), data[i*o.bs:(i+1)*o.bs]...)
			o.cur[zblk{z, off + uint64(i)}] = b
			o.dur[zblk{z, off + uint64(i)}] = b
		}
		o.mu.Unlock()
	}
	return err
}

// TestPowerLossFSInPlace is TestPowerLossFS with in-place fsyncs: a power
// loss at any drive file operation, also inside an in-place update, leaves
// each fsynced file one of its versions since its last fsync block by
// block (the old or the new contents of a block being updated), the
// drive's durable blocks, and a clean fsck.
func TestPowerLossFSInPlace(t *testing.T) {
	plTL.ipu = 4
	t.Cleanup(func() { plTL.ipu = 0 })
	plOverwrites.Store(0)
	seeds, nOps, every := 3, 120, 10
	if *fsPowerLong {
		seeds, nOps, every = 40, 200, 4
	}
	runPowerLossSeeds(t, powerLossSeeds(seeds), nOps, every, false)
	t.Logf("%d in-place updates", plOverwrites.Load())
	require.NotZero(t, plOverwrites.Load(), "no fsync went in place")
}
