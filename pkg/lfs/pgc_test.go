package lfs_test

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// mostValid is a recycling policy for tests: the data segment (of zones,
// set before recycling: the policy runs under the table lock) with the most
// valid blocks short of full.
type mostValid struct {
	zones map[lfs.ZoneID]bool
	move  lfs.MoveMethod
}

func (p *mostValid) SelectVictim(cands []lfs.SegmentInfo, _ bool) (lfs.ZoneID, bool) {
	zs := p.zones
	best, ok := lfs.SegmentInfo{}, false
	for _, c := range cands {
		if zs[c.Zone] && c.Valid < c.Capacity && (!ok || c.Valid > best.Valid) {
			best, ok = c, true
		}
	}
	return best.Zone, ok
}

func (p *mostValid) Method(lfs.SegmentInfo, bool) lfs.MoveMethod { return p.move }

// concVol counts the reads in flight at once while armed. To make overlap
// certain without timing anything, an armed read waits until a second read
// is in flight; when none comes (one worker) it gives up after a while and
// no later read waits.
type concVol struct {
	lfs.Volume
	armed       atomic.Bool
	cur, most   atomic.Int32
	reads       atomic.Int32
	met, gaveUp chan struct{}
	metOnce     sync.Once
	upOnce      sync.Once
}

func newConcVol(v lfs.Volume) *concVol {
	return &concVol{Volume: v, met: make(chan struct{}), gaveUp: make(chan struct{})}
}

func (v *concVol) Read(ctx context.Context, z lfs.ZoneID, off uint64, buf []byte) error {
	if !v.armed.Load() {
		return v.Volume.Read(ctx, z, off, buf)
	}
	v.reads.Add(1)
	n := v.cur.Add(1)
	defer v.cur.Add(-1)
	for {
		m := v.most.Load()
		if n <= m || v.most.CompareAndSwap(m, n) {
			break
		}
	}
	if n >= 2 {
		v.metOnce.Do(func() { close(v.met) })
	}
	select {
	case <-v.met:
	case <-v.gaveUp:
	case <-time.After(3 * time.Second):
		v.upOnce.Do(func() { close(v.gaveUp) })
	}
	return v.Volume.Read(ctx, z, off, buf)
}

// TestPGCSplitsHostCopyReads: host copy of a victim more than half valid
// moves the same blocks with P-GC (2 workers) as without (1), the files read
// back intact and fsck is clean in both, and only with P-GC were two victim
// reads in flight at once (seeds/004 Algorithm 1).
func TestPGCSplitsHostCopyReads(t *testing.T) {
	type outcome struct {
		moved, read, splits uint64
		most                int32
	}
	run := func(t *testing.T, workers int) outcome {
		cv := newConcVol(newVol(t, 32, 8)) // 64-block segments
		pol := &mostValid{move: lfs.HostCopy}
		// one write lane: both runs lay the files out alike, so they pick the same victim
		fs := mkfsMount(t, cv, lfs.Options{Policy: pol, CacheBlocks: 16, PGCWorkers: workers, WriteLanes: 1})
		const files, fileBlocks = 12, 16
		inos := make([]uint64, files)
		vers := make([][]int, files)
		write := func(f int, blocks ...int) {
			h, err := fs.Open(bg, inos[f], syscall.O_RDWR)
			require.NoError(t, err)
			defer fs.Release(bg, h)
			for _, i := range blocks {
				vers[f][i]++
				_, err := fs.Write(bg, h, int64(i)*4096, block(f, vers[f][i], i))
				require.NoError(t, err)
			}
		}
		for f := range inos {
			a, h, err := fs.Create(bg, lfs.RootIno, "f"+string(rune('a'+f)), 0o644, 0, 0, syscall.O_RDWR)
			require.NoError(t, err)
			require.NoError(t, fs.Release(bg, h))
			inos[f], vers[f] = a.Ino, make([]int, fileBlocks)
			all := make([]int, fileBlocks)
			for i := range all {
				all[i] = i
			}
			write(f, all...)
		}
		require.NoError(t, fs.Sync(bg))
		// a quarter of every third file rewritten: segments 3/4+ valid
		for f := 0; f < files; f += 3 {
			write(f, 1, 5, 9, 13)
		}
		require.NoError(t, fs.Sync(bg))
		check := func(fs *lfs.FS) {
			for f, ino := range inos {
				h, err := fs.Open(bg, ino, syscall.O_RDONLY)
				require.NoError(t, err)
				buf := make([]byte, fileBlocks*4096)
				n, err := fs.Read(bg, h, 0, buf)
				require.NoError(t, err)
				require.Equal(t, len(buf), n)
				require.NoError(t, fs.Release(bg, h))
				for i := 0; i < fileBlocks; i++ {
					require.NoError(t, checkBlock(buf[i*4096:(i+1)*4096], f, vers[f][i], i))
				}
			}
			rep, err := fs.Fsck(bg)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
		}
		s0 := fs.Stats()
		pol.zones = fs.DataZones()
		cv.armed.Store(true)
		ok, err := fs.RecycleOnce(bg)
		cv.armed.Store(false)
		require.NoError(t, err)
		require.True(t, ok)
		s := fs.Stats()
		require.Equal(t, s0.CompactedSegments+1, s.CompactedSegments, "one victim compacted")
		check(fs)
		require.NoError(t, fs.Unmount(bg))
		fs2, err := lfs.Mount(bg, cv, lfs.Options{})
		require.NoError(t, err)
		check(fs2)
		require.NoError(t, fs2.Unmount(bg))
		return outcome{moved: s.MovedHostCopy - s0.MovedHostCopy, read: s.GCVictimBlocksRead - s0.GCVictimBlocksRead,
			splits: s.PGCSplitMigrations - s0.PGCSplitMigrations, most: cv.most.Load()}
	}
	one := run(t, 1)
	two := run(t, 2)
	require.Greater(t, one.read, uint64(32), "the victim was read, more than half of its 64 blocks")
	require.Equal(t, one.moved, two.moved, "the same blocks moved")
	require.Equal(t, one.read, two.read, "the same blocks read")
	require.Zero(t, one.splits)
	require.Equal(t, int32(1), one.most, "one worker: one read at a time")
	require.Equal(t, uint64(1), two.splits, "the victim's reads were split")
	require.Equal(t, int32(2), two.most, "two workers: two reads in flight at once")
}

// TestIZCCachedChoiceByCost: the per-block IZC-H / IZC-D choice (ZNS+
// §3.2.1, Table 4) flips with the costs, and the forced policies
// (Options.CachedChunks) ignore them: with every valid block of the victim
// cached clean on the host, a host write cheaper than the chip read sends
// them from the host, a dearer one has the drives copy them; in between
// (a block costs less than the read, a whole chunk more) only the chunks
// with a single valid block go from the host.
func TestIZCCachedChoiceByCost(t *testing.T) {
	const read = 59 * time.Microsecond
	for _, tc := range []struct {
		name             string
		hostChunk        time.Duration // a host write of a whole 4-block chunk
		policy           lfs.CachedChunkPolicy
		wantHost, wantDv bool
	}{
		{"host cheaper", 14 * time.Microsecond, lfs.CachedChunksByCost, true, false},
		{"device cheaper", 400 * time.Microsecond, lfs.CachedChunksByCost, false, true},
		{"block cheaper, chunk dearer", 221 * time.Microsecond, lfs.CachedChunksByCost, true, true},
		{"costs unset: IZC-D", 0, lfs.CachedChunksByCost, false, true},
		// the forced policies ignore the costs
		{"IZC-H forced, device cheaper", 400 * time.Microsecond, lfs.CachedChunksFromHost, true, false},
		{"IZC-H forced, costs unset", 0, lfs.CachedChunksFromHost, true, false},
		{"IZC-D forced, host cheaper", 14 * time.Microsecond, lfs.CachedChunksOnDevice, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVol(t, 32, 8)
			pol := &mostValid{move: lfs.Compact}
			opts := lfs.Options{Policy: pol, CacheBlocks: 4096, FlashReadCost: read, HostWriteCost: tc.hostChunk, CachedChunks: tc.policy}
			if tc.hostChunk == 0 {
				opts.FlashReadCost = 0
			}
			fs := mkfsMount(t, v, opts)
			const files, fileBlocks = 8, 16
			var inos []uint64
			for f := 0; f < files; f++ {
				a, h, err := fs.Create(bg, lfs.RootIno, "f"+string(rune('a'+f)), 0o644, 0, 0, syscall.O_RDWR)
				require.NoError(t, err)
				for i := 0; i < fileBlocks; i++ {
					_, err := fs.Write(bg, h, int64(i)*4096, block(f, 1, i))
					require.NoError(t, err)
				}
				require.NoError(t, fs.Release(bg, h))
				inos = append(inos, a.Ino)
			}
			require.NoError(t, fs.Sync(bg))
			// every other file keeps one block of each of its 4-block chunks
			for f := 0; f < files; f += 2 {
				h, err := fs.Open(bg, inos[f], syscall.O_RDWR)
				require.NoError(t, err)
				for i := 0; i < fileBlocks; i++ {
					if i%4 != 0 {
						_, err := fs.Write(bg, h, int64(i)*4096, block(f, 2, i))
						require.NoError(t, err)
					}
				}
				require.NoError(t, fs.Release(bg, h))
			}
			require.NoError(t, fs.Sync(bg))
			s0 := fs.Stats()
			pol.zones = fs.DataZones()
			ok, err := fs.RecycleOnce(bg)
			require.NoError(t, err)
			require.True(t, ok)
			s := fs.Stats()
			require.Equal(t, s0.CompactedSegments+1, s.CompactedSegments)
			host, dev := s.MovedHostCached-s0.MovedHostCached, s.MovedIZC-s0.MovedIZC
			require.Zero(t, s.MovedHostCopy-s0.MovedHostCopy, "every block was cached")
			require.Equal(t, tc.wantHost, host > 0, "blocks written from the host: %d (device %d)", host, dev)
			require.Equal(t, tc.wantDv, dev > 0, "blocks copied on the device: %d (host %d)", dev, host)
			rep, err := fs.Fsck(bg)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
			require.NoError(t, fs.Unmount(bg))
		})
	}
	t.Run("unknown policy", func(t *testing.T) {
		v := newVol(t, 32, 8)
		require.NoError(t, lfs.Mkfs(bg, v, lfs.MkfsOptions{}))
		_, err := lfs.Mount(bg, v, lfs.Options{CachedChunks: lfs.CachedChunksOnDevice + 1})
		var ia *zerr.InvalidArgumentError
		require.ErrorAs(t, err, &ia)
		require.Equal(t, "cached_chunks", ia.Field)
	})
}
