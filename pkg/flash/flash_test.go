package flash

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func TestPresetsAndResolve(t *testing.T) {
	for _, tc := range []struct {
		media string
		read  time.Duration
		prog  time.Duration
		ratio float64
	}{{"TLC", 60 * time.Microsecond, 700 * time.Microsecond, 0.94}, {"mlc", 35 * time.Microsecond, 390 * time.Microsecond, 0.90}, {"ZNAND", 3 * time.Microsecond, 100 * time.Microsecond, 0.94}} {
		c := Defaults()
		c.Media = tc.media
		require.NoError(t, c.Validate())
		r := c.Resolved()
		require.Equal(t, tc.read, r.ReadLatency)
		require.Equal(t, tc.prog, r.ProgramLatency)
		require.Equal(t, tc.ratio, r.CopybackRatio)
	}
	c := Defaults()
	c.ReadLatency = time.Millisecond // explicit values win over the preset
	require.Equal(t, time.Millisecond, c.Resolved().ReadLatency)
}

func TestModelQueuesAndCache(t *testing.T) {
	c := Small()
	c.WriteCacheBytes = 2 * 16384
	m := NewModel(c)
	p := Presets["MLC"]
	// two programs on one chip queue; on two chips they overlap
	a := m.Program(0, 0)
	b := m.Program(0, 0)
	require.Equal(t, p.DMA+p.Program, a)
	require.Equal(t, a+p.Program, b)
	x := m.Program(0, 1) // chip 1 is on channel 1
	require.Equal(t, p.DMA+p.Program, x)
	// cache: third chunk waits for the first release
	require.Equal(t, time.Duration(0), m.CacheAdmit(0, 16384))
	require.Equal(t, time.Duration(0), m.CacheAdmit(0, 16384))
	m.CacheRelease(500, 16384)
	m.CacheRelease(900, 16384)
	require.Equal(t, time.Duration(500), m.CacheAdmit(10, 16384))
	require.Equal(t, int64(1), m.CacheStalls.Load())
	require.Equal(t, int64(2*16384), m.CacheUsed(600))
	require.Equal(t, int64(16384), m.CacheUsed(1000))
	require.InDelta(t, 0.9, float64(m.CopybackLatency())/float64(m.ReadProgramChipTime()), 1e-6)
}

// A copyback holds its chip for ratio x (read + program), less than the read
// and program it replaces, and never touches the channel; read-and-program
// is chip read, DMA out, DMA in, chip program.
func TestCopybackChipTime(t *testing.T) {
	for _, media := range []string{"TLC", "MLC", "ZNAND"} {
		t.Run(media, func(t *testing.T) {
			c := Small()
			c.Media = media
			m := NewModel(c)
			p := Presets[media]
			cb := m.CopybackLatency()
			require.Equal(t, time.Duration(float64(p.Read+p.Program)*p.CopybackRatio), cb)
			require.Less(t, cb, p.Read+p.Program)
			// chip 0 and chip 2 share channel 0: a copyback on chip 0 leaves
			// the channel free for chip 2's DMA
			require.Equal(t, cb, m.Copyback(0, 0))
			require.Equal(t, p.Read+p.DMA, m.Read(0, 2, c.PageSize/c.BlockSize))
			// read-and-program on chip 1: array read, DMA out, DMA in, program
			r := m.ReadArray(0, 1)
			x := m.Transfer(r, 1, 4)
			y := m.Transfer(x, 1, 4)
			e := m.ProgramArray(y, 1)
			require.Equal(t, p.Read+2*p.DMA+p.Program, e)
			require.Equal(t, m.ReadProgramLatency(), e)
			require.Equal(t, p.Read+p.Program, m.ChipBusy(1))
			require.Equal(t, cb, m.ChipBusy(0))
		})
	}
}

func TestConfigJSONFlat(t *testing.T) {
	c := Defaults()
	c.Media = "TLC"
	c.ZoneCapacity = 4000
	b, err := json.Marshal(c)
	require.NoError(t, err)
	require.Contains(t, string(b), `"d_zone":16`)
	require.Contains(t, string(b), `"read_latency_ns":0`)
	var back Config
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, c, back)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	for k, v := range m {
		switch v.(type) {
		case map[string]any, []any:
			t.Fatalf("config field %s is not flat", k)
		}
	}
}

// TestCacheDieBackpressure: with the default policy a write to an idle die
// waits behind a slow die's backlog once the pool is full; with per-die
// back-pressure the slow die holds at most its limit, so a write to another
// die is admitted at once while the next write to the slow die waits for
// that die's own program.
func TestCacheDieBackpressure(t *testing.T) {
	const ms = time.Millisecond
	c := Small()
	c.WriteCacheBytes = 128 << 10
	require.NoError(t, c.Validate())
	m := NewModel(c)
	for _, rel := range []time.Duration{10 * ms, 20 * ms} { // chip 0's backlog fills the pool
		require.Equal(t, time.Duration(0), m.CacheAdmitDies(0, 64<<10, []ChipBytes{{0, 64 << 10}}))
		m.CacheReleaseChip(rel, 64<<10, 0)
	}
	require.Equal(t, 10*ms, m.CacheAdmitDies(0, 64<<10, []ChipBytes{{1, 64 << 10}}), "shared pool: chip 1 waits for chip 0")

	c.WriteCacheDieBytes = 64 << 10
	require.NoError(t, c.Validate())
	m = NewModel(c)
	require.Equal(t, time.Duration(0), m.CacheAdmitDies(0, 64<<10, []ChipBytes{{0, 64 << 10}}))
	m.CacheReleaseChip(10*ms, 64<<10, 0)
	require.Equal(t, time.Duration(0), m.CacheAdmitDies(0, 64<<10, []ChipBytes{{1, 64 << 10}}), "per die: chip 1 is not held back")
	m.CacheReleaseChip(ms, 64<<10, 1)
	require.Equal(t, 10*ms, m.CacheAdmitDies(0, 16<<10, []ChipBytes{{0, 16 << 10}}), "per die: chip 0 waits for its own program")
	require.Equal(t, int64(1), m.DieStalls.Load())

	// First fit: a 16 KiB write passes a 64 KiB one waiting for the same die.
	c.WriteCacheBytes = 1 << 20
	m = NewModel(c)
	require.Equal(t, time.Duration(0), m.CacheAdmitDies(0, 64<<10, []ChipBytes{{0, 64 << 10}}))
	for i := 1; i <= 4; i++ {
		m.CacheReleaseChip(time.Duration(i)*ms, 16<<10, 0)
	}
	require.Equal(t, 4*ms, m.CacheAdmitDies(0, 64<<10, []ChipBytes{{0, 64 << 10}}))
	require.Equal(t, ms, m.CacheAdmitDies(0, 16<<10, []ChipBytes{{0, 16 << 10}}))

	c.WriteCacheDieBytes = 1
	require.Error(t, c.Validate(), "a limit below a page")
}

// Validate refuses geometries past its bounds with a typed error naming the
// field, before anything sizes memory or a file from them.
func TestValidateBounds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mut   func(c *Config)
		field string
	}{
		{"blocks per chip", func(c *Config) { c.BlocksPerChip = 1_000_000_000 }, "blocks_per_chip"},
		{"drive bytes", func(c *Config) { c.BlocksPerChip, c.PagesPerBlock = 1<<20, 1<<10 }, "blocks_per_chip"},
		{"channels", func(c *Config) { c.Channels = 1 << 13 }, "channels"},
		{"chips", func(c *Config) { c.Channels, c.Ways = 1<<12, 2 }, "ways"},
		{"pages per block", func(c *Config) { c.PagesPerBlock = 1 << 17 }, "pages_per_block"},
		{"page size", func(c *Config) { c.PageSize = 1 << 25 }, "page_size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			tc.mut(&c)
			err := c.Validate()
			var ia *zerr.InvalidArgumentError
			require.ErrorAs(t, err, &ia)
			require.Equal(t, tc.field, ia.Field, err.Error())
		})
	}
	c := Defaults()
	c.BlocksPerChip = 1 << 16 // 256 GiB of flash: allowed
	require.NoError(t, c.Validate())
}

// TestReadPriority: behind a backlog of queued programs, a read waits for
// the program in progress only (with ReadPriority) or for the whole backlog
// (the default FIFO); the programs queued behind the read move by its time.
func TestReadPriority(t *testing.T) {
	const progs = 10
	for _, tc := range []struct {
		name     string
		priority bool
		arrive   func(p time.Duration) time.Duration
		wantEnd  func(p, r time.Duration) time.Duration
	}{
		{"fifo", false, func(time.Duration) time.Duration { return 0 }, func(p, r time.Duration) time.Duration { return progs*p + r }},
		{"priority at a boundary", true, func(time.Duration) time.Duration { return 0 }, func(p, r time.Duration) time.Duration { return r }},
		{"priority mid-program", true, func(p time.Duration) time.Duration { return 3*p + p/2 }, func(p, r time.Duration) time.Duration { return 4*p + r }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Small()
			c.ReadPriority = tc.priority
			m := NewModel(c)
			rc := c.Resolved()
			p, r := rc.ProgramLatency, rc.ReadLatency
			for range progs {
				m.ProgramArray(0, 0)
			}
			at := tc.arrive(p)
			end := m.ReadArray(at, 0)
			require.Equal(t, tc.wantEnd(p, r), end)
			next := m.ProgramArray(0, 0)
			require.Equal(t, (progs+1)*p+r, next, "the chip's busy time is conserved")
			require.Equal(t, (progs+1)*p+r, m.ChipBusy(0))
			// a second read arriving while the first is served runs right after it
			if tc.priority {
				require.Equal(t, end+r, m.ReadArray(at, 0))
			}
		})
	}
}

// TestDuplexLink: a write's transfer queues behind a read's on the shared
// link (the default) and not on a duplex one.
func TestDuplexLink(t *testing.T) {
	for _, duplex := range []bool{false, true} {
		c := Small()
		c.HostLinkBytesPerSec = 1_000_000_000
		c.DuplexLink = duplex
		m := NewModel(c)
		require.Equal(t, time.Millisecond, m.Link(0, 1_000_000))
		want := 2 * time.Millisecond
		if duplex {
			want = time.Millisecond
		}
		require.Equal(t, want, m.LinkIn(0, 1_000_000), "duplex %v", duplex)
	}
}

// TestCacheQueues: with WriteCacheQueues each queue runs the shared pool's
// algorithm on its share of the capacity, so a full queue stalls only its
// own writes; one queue (or none) is the shared pool, call for call.
func TestCacheQueues(t *testing.T) {
	const page = 16384
	c := Small()
	c.WriteCacheBytes, c.WriteCacheQueues = 4*page, 2 // two pages a queue
	m := NewModel(c)
	require.Equal(t, 2, m.CacheQueues())
	require.Equal(t, time.Duration(0), m.CacheAdmitQueue(0, page, 0))
	require.Equal(t, time.Duration(0), m.CacheAdmitQueue(0, page, 2)) // queue 0 again: full now
	m.CacheReleaseQueue(500, page, 0, 0)
	m.CacheReleaseQueue(900, page, 2, 1)
	require.Equal(t, time.Duration(10), m.CacheAdmitQueue(10, page, 1), "queue 1 has room while queue 0 is full")
	require.Equal(t, time.Duration(500), m.CacheAdmitQueue(10, page, 0), "queue 0 waits for its first release")
	require.Equal(t, int64(1), m.CacheStalls.Load())
	require.Equal(t, time.Duration(490), time.Duration(m.CacheStallTime.Load()))
	require.Equal(t, int64(3*page), m.CacheUsed(600))
	require.Equal(t, int64(2*page), m.CacheUsed(1000))
	require.Equal(t, int64(3*page), m.CacheHighWater())

	// The shared pool: the queue calls are CacheAdmit and CacheReleaseChip.
	for _, q := range []int{0, 1} {
		c.WriteCacheQueues = q
		a, b := NewModel(c), NewModel(c)
		require.Equal(t, 0, a.CacheQueues())
		for i := range 8 {
			at := time.Duration(i) * 100
			require.Equal(t, a.CacheAdmit(at, page), b.CacheAdmitQueue(at, page, uint64(i)))
			a.CacheReleaseChip(at+700, page, i%4)
			b.CacheReleaseQueue(at+700, page, uint64(i), i%4)
		}
		require.Equal(t, a.CacheUsed(2000), b.CacheUsed(2000))
		require.Equal(t, a.CacheStallTime.Load(), b.CacheStallTime.Load())
	}
}

// TestCacheQueuesConcurrent: writers of different queues admit and release
// concurrently (run with -race); every byte admitted is released, so the
// cache ends empty and no queue ever held more than its share.
func TestCacheQueuesConcurrent(t *testing.T) {
	const page, queues, writers, per = 16384, 4, 8, 200
	c := Small()
	c.WriteCacheBytes, c.WriteCacheQueues = queues*2*page, queues
	m := NewModel(c)
	done := make(chan struct{})
	for w := range writers {
		go func() {
			defer func() { done <- struct{}{} }()
			at := time.Duration(0)
			for i := range per {
				at = m.CacheAdmitQueue(at, page, uint64(w))
				m.CacheReleaseQueue(at+time.Duration(i%7+1)*100, page, uint64(w), w%4)
			}
		}()
	}
	for range writers {
		<-done
	}
	require.Equal(t, int64(0), m.CacheUsed(1<<62))
	require.LessOrEqual(t, m.CacheHighWater(), c.WriteCacheBytes)
}

func TestValidateCacheQueues(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func(c *Config)
	}{
		{"negative", func(c *Config) { c.WriteCacheQueues = -1 }},
		{"too many", func(c *Config) { c.WriteCacheQueues = MaxCacheQueues + 1 }},
		{"less than a page each", func(c *Config) { c.WriteCacheQueues = int(c.WriteCacheBytes/int64(c.PageSize)) + 1 }},
		{"with per-die back-pressure", func(c *Config) { c.WriteCacheQueues, c.WriteCacheDieBytes = 2, 1<<20 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			tc.mut(&c)
			var ia *zerr.InvalidArgumentError
			require.ErrorAs(t, c.Validate(), &ia)
			require.Equal(t, "write_cache_queues", ia.Field)
		})
	}
	c := Defaults()
	c.WriteCacheQueues = 16
	require.NoError(t, c.Validate())
}
