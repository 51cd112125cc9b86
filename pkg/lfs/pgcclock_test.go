package lfs_test

import (
	"context"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// turnClock is an lfs.TurnClock for tests: one goroutine's modelled time,
// set forwards by WaitUntil and anywhere by SetNow; timers fire inline
// once the time passes them.
type turnClock struct {
	now    time.Duration
	timers []*turnTimer
}

type turnTimer struct {
	at   time.Duration
	f    func()
	dead bool
}

func (c *turnClock) Now() time.Duration { return c.now }
func (c *turnClock) Kind() clock.Kind   { return clock.KindVirtual }

func (c *turnClock) WaitUntil(ctx context.Context, t time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.SetNow(max(c.now, t))
	return nil
}

func (c *turnClock) AfterFunc(t time.Duration, f func()) func() bool {
	tm := &turnTimer{at: t, f: f}
	c.timers = append(c.timers, tm)
	return func() bool {
		was := !tm.dead
		tm.dead = true
		return was
	}
}

func (c *turnClock) SetNow(t time.Duration) {
	c.now = t
	sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].at < c.timers[j].at })
	for len(c.timers) > 0 && c.timers[0].at <= t {
		tm := c.timers[0]
		c.timers = c.timers[1:]
		if !tm.dead {
			tm.dead = true
			tm.f()
		}
	}
}

// latVol charges every read a modelled time per block on the clock (a
// drive with a channel per request) while armed and records when each
// began.
type latVol struct {
	lfs.Volume
	clk    *turnClock
	lat    time.Duration
	armed  bool
	starts []time.Duration
}

func (v *latVol) Read(ctx context.Context, z lfs.ZoneID, off uint64, buf []byte) error {
	if v.armed {
		v.starts = append(v.starts, v.clk.Now())
		if err := v.clk.WaitUntil(ctx, v.clk.Now()+v.lat*time.Duration(len(buf)/4096)); err != nil {
			return err
		}
	}
	return v.Volume.Read(ctx, z, off, buf)
}

// TestPGCTurnsOverlapInModelledTime: on a TurnClock P-GC's workers take
// turns on the recycler's goroutine, each from the read phase's start: with
// two workers two victim reads begin at the phase's start, the read phase
// takes about half of one worker's (the shares are of blocks, and a read
// costs per block here), and the same blocks move; two runs give the same
// modelled times.
func TestPGCTurnsOverlapInModelledTime(t *testing.T) {
	type outcome struct {
		moved, splits uint64
		read          time.Duration
		starts        []time.Duration
	}
	run := func(t *testing.T, workers int) outcome {
		clk := &turnClock{}
		lv := &latVol{Volume: newVol(t, 32, 8), clk: clk, lat: 10 * time.Microsecond}
		pol := &mostValid{move: lfs.HostCopy}
		fs := mkfsMount(t, lv, lfs.Options{Clock: clk, Policy: pol, CacheBlocks: 16, PGCWorkers: workers, WriteLanes: 1, ReadAheadBlocks: -1})
		const files, fileBlocks = 12, 16
		for f := 0; f < files; f++ {
			_, h, err := fs.Create(bg, lfs.RootIno, "f"+string(rune('a'+f)), 0o644, 0, 0, syscall.O_RDWR)
			require.NoError(t, err)
			for i := 0; i < fileBlocks; i++ {
				_, err := fs.Write(bg, h, int64(i)*4096, block(f, 1, i))
				require.NoError(t, err)
			}
			require.NoError(t, fs.Release(bg, h))
		}
		require.NoError(t, fs.Sync(bg))
		for f := 0; f < files; f += 3 { // a quarter of every third file rewritten
			a, err := fs.Lookup(bg, lfs.RootIno, "f"+string(rune('a'+f)))
			require.NoError(t, err)
			h, err := fs.Open(bg, a.Ino, syscall.O_RDWR)
			require.NoError(t, err)
			for _, i := range []int{1, 5, 9, 13} {
				_, err := fs.Write(bg, h, int64(i)*4096, block(f, 2, i))
				require.NoError(t, err)
			}
			require.NoError(t, fs.Release(bg, h))
		}
		require.NoError(t, fs.Sync(bg))
		// every page read back uncached: host copy reads the victim
		fs.DropCleanCache()
		s0 := fs.Stats()
		pol.zones = fs.DataZones()
		lv.armed = true
		ok, err := fs.RecycleOnce(bg)
		lv.armed = false
		require.NoError(t, err)
		require.True(t, ok)
		s := fs.Stats()
		rep, err := fs.Fsck(bg)
		require.NoError(t, err)
		require.Empty(t, rep.Problems)
		require.NoError(t, fs.Unmount(bg))
		return outcome{moved: s.MovedHostCopy - s0.MovedHostCopy, splits: s.PGCSplitMigrations - s0.PGCSplitMigrations,
			read: s.CompactionPhases.Read - s0.CompactionPhases.Read, starts: lv.starts}
	}
	one, two := run(t, 1), run(t, 2)
	t.Logf("1 worker: read phase %v, reads at %v; 2 workers: read phase %v, reads at %v", one.read, one.starts, two.read, two.starts)
	require.Greater(t, len(one.starts), 2, "the victim is read in several runs")
	require.Equal(t, one.moved, two.moved, "the same blocks moved")
	require.Zero(t, one.splits)
	require.Equal(t, uint64(1), two.splits)
	require.Equal(t, two.starts[0], two.starts[1], "the second worker starts at the phase's start")
	require.Less(t, one.starts[0], one.starts[1], "one worker reads one run after another")
	require.Less(t, two.read, one.read*3/4, "the workers' reads overlap in modelled time")
	again := run(t, 2)
	require.Equal(t, two, again, "the turns replay exactly")
}
