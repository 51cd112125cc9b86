package flash

import (
	"container/heap"
	"sync"
	"sync/atomic"
	"time"
)

// resource is one serially used unit (a chip, a channel, the host link) with
// a next-free time. Reservations are lock-free (CAS on the next-free time).
type resource struct {
	free atomic.Int64 // next free modelled time (ns)
	busy atomic.Int64 // accumulated busy time (ns)
}

// reserve books dur on r no earlier than at; returns start and end.
func (r *resource) reserve(at, dur time.Duration) (time.Duration, time.Duration) {
	for {
		f := r.free.Load()
		start := int64(at)
		if f > start {
			start = f
		}
		end := start + int64(dur)
		if r.free.CompareAndSwap(f, end) {
			r.busy.Add(int64(dur))
			return time.Duration(start), time.Duration(end)
		}
	}
}

// Model is the FEMU-style timing model of one device. All methods are safe
// for concurrent use; no method blocks on time.
type Model struct {
	cfg      atomic.Pointer[Config]
	g        Geometry
	chips    []resource
	channels []resource
	link     resource

	cacheMu        sync.Mutex
	cacheUsed      int64
	releases       relHeap
	CacheStalls    atomic.Int64
	CacheStallTime atomic.Int64 // ns
	cacheHighWater atomic.Int64
	// Per-die back-pressure (Config.WriteCacheDieBytes > 0): each chip's
	// cached, unprogrammed bytes and when they leave. Under cacheMu.
	dieUsed     []int64
	dieReleases []relHeap
	DieStalls   atomic.Int64
}

// NewModel builds a model for a valid config.
func NewModel(cfg Config) *Model {
	cfg = cfg.Resolved()
	g := cfg.Geometry()
	m := &Model{g: g, chips: make([]resource, g.Chips), channels: make([]resource, g.Channels),
		dieUsed: make([]int64, g.Chips), dieReleases: make([]relHeap, g.Chips)}
	m.cfg.Store(&cfg)
	return m
}

// SetConfig swaps the run-time knobs (latencies, link, cache size). Geometry
// fields must not change.
func (m *Model) SetConfig(cfg Config) { cfg = cfg.Resolved(); m.cfg.Store(&cfg) }

func (m *Model) conf() *Config { return m.cfg.Load() }

func (m *Model) dma(nblocks int) time.Duration {
	return m.conf().DMALatency * time.Duration(nblocks) / time.Duration(m.g.ChunkBlocks)
}

// Link models a host-link transfer of n bytes starting no earlier than at.
func (m *Model) Link(at time.Duration, n int) time.Duration {
	c := m.conf()
	d := time.Duration(float64(n) / float64(c.HostLinkBytesPerSec) * 1e9)
	_, end := m.link.reserve(at, d)
	return end
}

// ReadArray books a flash page read (array sensing) on chip only; returns
// when the data is in the chip's page register.
func (m *Model) ReadArray(at time.Duration, chip int) time.Duration {
	_, r := m.chips[chip].reserve(at, m.conf().ReadLatency)
	return r
}

// Transfer books the DMA of nblocks between chip's page register and the
// controller on the chip's channel (either direction); returns its end.
func (m *Model) Transfer(at time.Duration, chip, nblocks int) time.Duration {
	_, d := m.channels[chip%m.g.Channels].reserve(at, m.dma(nblocks))
	return d
}

// ProgramArray books a page program on chip only (the data is already in
// the chip's page register); returns its end.
func (m *Model) ProgramArray(at time.Duration, chip int) time.Duration {
	_, p := m.chips[chip].reserve(at, m.conf().ProgramLatency)
	return p
}

// Read models reading nblocks of one page on chip: page read, then DMA on the
// chip's channel. Returns the time the data is at the controller.
func (m *Model) Read(at time.Duration, chip, nblocks int) time.Duration {
	return m.Transfer(m.ReadArray(at, chip), chip, nblocks)
}

// Program models DMA of a page to chip then its program.
func (m *Model) Program(at time.Duration, chip int) time.Duration {
	return m.ProgramArray(m.Transfer(at, chip, m.g.ChunkBlocks), chip)
}

// SLCProgram models a program into the SLC in-place-update region of chip.
func (m *Model) SLCProgram(at time.Duration, chip, nblocks int) time.Duration {
	_, d := m.channels[chip%m.g.Channels].reserve(at, m.dma(nblocks))
	_, p := m.chips[chip].reserve(d, m.conf().SLCProgramLatency)
	return p
}

// ReadProgramLatency is the unloaded latency of copying one chunk by read
// and program: chip read + DMA out + DMA in (channel) + chip program.
func (m *Model) ReadProgramLatency() time.Duration {
	c := m.conf()
	return c.ReadLatency + 2*c.DMALatency + c.ProgramLatency
}

// ReadProgramChipTime is the time a read-and-program copy holds the chips
// (the DMAs are on the channel): read + program.
func (m *Model) ReadProgramChipTime() time.Duration {
	c := m.conf()
	return c.ReadLatency + c.ProgramLatency
}

// CopybackLatency is the time one copyback holds its chip, which is also
// its unloaded latency (it never uses the channel): copyback_ratio x (read +
// program), the normalized copyback latency of ZNS+ Table 2 applied to the
// chip-side cost of a read-and-program copy.
func (m *Model) CopybackLatency() time.Duration {
	return time.Duration(float64(m.ReadProgramChipTime()) * m.conf().CopybackRatio)
}

// Copyback models an on-chip page copy: the chip only, no channel.
func (m *Model) Copyback(at time.Duration, chip int) time.Duration {
	_, e := m.chips[chip].reserve(at, m.CopybackLatency())
	return e
}

// Erase models erasing one block on chip.
func (m *Model) Erase(at time.Duration, chip int) time.Duration {
	_, e := m.chips[chip].reserve(at, m.conf().EraseLatency)
	return e
}

// ChipIdle reports whether chip has nothing booked after at.
func (m *Model) ChipIdle(at time.Duration, chip int) bool {
	return time.Duration(m.chips[chip].free.Load()) <= at
}

// ChipFree is chip's next-free time.
func (m *Model) ChipFree(chip int) time.Duration { return time.Duration(m.chips[chip].free.Load()) }

// ChipBusy is chip's accumulated busy time.
func (m *Model) ChipBusy(chip int) time.Duration { return time.Duration(m.chips[chip].busy.Load()) }

// ---- write cache ----

type release struct {
	at time.Duration
	n  int64
}
type relHeap []release

func (h relHeap) Len() int           { return len(h) }
func (h relHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h relHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *relHeap) Push(x any)        { *h = append(*h, x.(release)) }
func (h *relHeap) Pop() any {
	o := *h
	x := o[len(o)-1]
	*h = o[:len(o)-1]
	return x
}

// CacheAdmit admits n bytes arriving at time at into the shared write cache
// and returns when they are admitted (later than at when the cache is full:
// the write waits for earlier data to drain). Bytes stay until Release.
// With a zero-sized cache it returns at.
func (m *Model) CacheAdmit(at time.Duration, n int64) time.Duration {
	m.cacheMu.Lock()
	defer m.cacheMu.Unlock()
	cap := m.conf().WriteCacheBytes
	if cap <= 0 {
		return at
	}
	t := at
	for len(m.releases) > 0 && m.releases[0].at <= t {
		m.cacheUsed -= heap.Pop(&m.releases).(release).n
	}
	if m.cacheUsed+n > cap {
		m.CacheStalls.Add(1)
		for m.cacheUsed+n > cap && len(m.releases) > 0 {
			r := heap.Pop(&m.releases).(release)
			m.cacheUsed -= r.n
			if r.at > t {
				t = r.at
			}
		}
		m.CacheStallTime.Add(int64(t - at))
	}
	m.cacheUsed += n
	if m.cacheUsed > m.cacheHighWater.Load() {
		m.cacheHighWater.Store(m.cacheUsed)
	}
	return t
}

// ChipBytes is the part of a write that goes to one chip.
type ChipBytes struct {
	Chip  int
	Bytes int64
}

// CacheAdmitDies admits a write of n bytes, of which per[i].Bytes go to
// chip per[i].Chip, arriving at time at. With Config.WriteCacheDieBytes = 0
// it is CacheAdmit. Otherwise the write first waits until every chip it
// writes holds at most WriteCacheDieBytes with it (bytes leave a chip when
// their program completes: CacheReleaseChip), then for room in the shared
// pool. A die that cannot keep up with its writers thus holds back only the
// writes that go to it, and at most WriteCacheDieBytes of the pool each; a
// write larger than the limit on one chip waits for that chip to drain
// completely.
func (m *Model) CacheAdmitDies(at time.Duration, n int64, per []ChipBytes) time.Duration {
	lim := m.conf().WriteCacheDieBytes
	if lim <= 0 || m.conf().WriteCacheBytes <= 0 {
		return m.CacheAdmit(at, n)
	}
	m.cacheMu.Lock()
	t := at
	stalled := false
	for _, p := range per {
		if p.Chip < 0 || p.Chip >= len(m.dieUsed) {
			continue
		}
		h := &m.dieReleases[p.Chip]
		for h.Len() > 0 && (*h)[0].at <= t {
			m.dieUsed[p.Chip] -= heap.Pop(h).(release).n
		}
		for m.dieUsed[p.Chip]+p.Bytes > lim && h.Len() > 0 {
			r := heap.Pop(h).(release)
			m.dieUsed[p.Chip] -= r.n
			if r.at > t {
				t, stalled = r.at, true
			}
		}
	}
	for _, p := range per {
		if p.Chip >= 0 && p.Chip < len(m.dieUsed) {
			m.dieUsed[p.Chip] += p.Bytes
		}
	}
	if stalled {
		m.DieStalls.Add(1)
	}
	m.cacheMu.Unlock()
	return m.CacheAdmit(t, n)
}

// CacheRelease frees n cache bytes at time at (when their program completes).
func (m *Model) CacheRelease(at time.Duration, n int64) {
	m.cacheMu.Lock()
	heap.Push(&m.releases, release{at, n})
	m.cacheMu.Unlock()
}

// CacheReleaseChip frees n cache bytes of chip at time at: from the shared
// pool and, with per-die back-pressure, from the chip's share.
func (m *Model) CacheReleaseChip(at time.Duration, n int64, chip int) {
	m.cacheMu.Lock()
	heap.Push(&m.releases, release{at, n})
	if m.conf().WriteCacheDieBytes > 0 && chip >= 0 && chip < len(m.dieReleases) {
		heap.Push(&m.dieReleases[chip], release{at, n})
	}
	m.cacheMu.Unlock()
}

// CacheUsed is the occupancy at time at.
func (m *Model) CacheUsed(at time.Duration) int64 {
	m.cacheMu.Lock()
	defer m.cacheMu.Unlock()
	for len(m.releases) > 0 && m.releases[0].at <= at {
		m.cacheUsed -= heap.Pop(&m.releases).(release).n
	}
	return m.cacheUsed
}

// CacheHighWater is the largest occupancy seen.
func (m *Model) CacheHighWater() int64 { return m.cacheHighWater.Load() }
