package flash

import (
	"container/heap"
	"sort"
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
	linkIn   resource // host to device, with Config.DuplexLink

	cacheMu        sync.Mutex
	cacheUsed      int64
	releases       relHeap
	CacheStalls    atomic.Int64
	CacheStallTime atomic.Int64 // ns
	cacheHighWater atomic.Int64
	// Per-die back-pressure (Config.WriteCacheDieBytes > 0): each chip's
	// cached, unprogrammed bytes and when they leave. Under cacheMu.
	pool      timeline
	dies      []timeline
	DieStalls atomic.Int64
	// Read priority (Config.ReadPriority): each chip's queued work. Under rpMu.
	rpMu sync.Mutex
	rp   []rpChip
	// Multi-queue write cache (Config.WriteCacheQueues > 1): one lock,
	// occupancy and drain queue per queue; queued is their total
	// occupancy, for the high water.
	queues []cacheQueue
	queued atomic.Int64
}

// cacheQueue is one queue of a multi-queue write cache: the single pool's
// algorithm (CacheAdmit) on its share of the capacity. Padded to its own
// cache lines so that writers of different queues share no line.
type cacheQueue struct {
	mu       sync.Mutex
	used     int64
	releases relHeap
	_        [64]byte
}

// rpChip is a chip's queue under read priority. The work other than reads
// (programs, copybacks, erases, SLC programs) runs back to back from anchor
// to pfree; reads are served from their arrival, after the operation in
// progress and earlier reads, up to rfree.
type rpChip struct {
	anchor, pfree, rfree time.Duration
}

// timeline is an occupancy that changes at given times: base (everything
// up to the last fold) plus pending changes in time order. Unlike the
// shared pool's counter, it holds admissions that take effect in the future
// (a write that waited for its die), so a write arriving earlier does not
// see their bytes yet, and a write that fits now but not once they arrive
// waits for them to drain.
type timeline struct {
	base  int64
	ev    []release // sorted by at; n < 0 for a release
	total int64     // base + every pending change: the occupancy after the last one
}

func (tl *timeline) add(at time.Duration, n int64) {
	tl.total += n
	i := sort.Search(len(tl.ev), func(i int) bool { return tl.ev[i].at > at })
	tl.ev = append(tl.ev, release{})
	copy(tl.ev[i+1:], tl.ev[i:])
	tl.ev[i] = release{at, n}
}

// fold moves every change up to at into base.
func (tl *timeline) fold(at time.Duration) {
	i := 0
	for i < len(tl.ev) && tl.ev[i].at <= at {
		tl.base += tl.ev[i].n
		i++
	}
	tl.ev = tl.ev[i:]
}

// at is the occupancy at time t (after fold(<= t)).
func (tl *timeline) at(t time.Duration) int64 {
	u := tl.base
	for _, e := range tl.ev {
		if e.at > t {
			break
		}
		u += e.n
	}
	return u
}

// firstFit is the first time >= t at which n more bytes fit under lim,
// counting only what is admitted by then: a write may enter a die ahead of
// a larger one that waits for the same die and was scheduled for later (as
// a controller that hands freed buffer space to whichever waiting write
// fits), over-committing the die's share by at most that write until the
// die drains.
func (tl *timeline) firstFit(t time.Duration, n, lim int64) time.Duration {
	u := tl.base
	i := 0
	for ; i < len(tl.ev) && tl.ev[i].at <= t; i++ {
		u += tl.ev[i].n
	}
	if u+n <= lim {
		return t
	}
	for ; i < len(tl.ev); i++ {
		u += tl.ev[i].n
		if u+n <= lim && (i+1 == len(tl.ev) || tl.ev[i+1].at > tl.ev[i].at) {
			return tl.ev[i].at
		}
	}
	if k := len(tl.ev); k > 0 {
		return max(t, tl.ev[k-1].at)
	}
	return t
}

// earliest is the first time >= t from which n more bytes fit under lim
// at every later change (or, if they never do, the last change).
func (tl *timeline) earliest(t time.Duration, n, lim int64) time.Duration {
	// Scan from the last change backwards with cur the occupancy after
	// change i (total minus the changes after it) and peak the maximum
	// after it; the scan stops at the first change that does not fit, so
	// it costs what it looks at, not the whole timeline.
	// Never fitting (bytes that are never released, e.g. partial chunks,
	// fill it): admit after the last change.
	best := t
	if k := len(tl.ev); k > 0 {
		best = max(t, tl.ev[k-1].at)
	}
	peak := int64(-1 << 62)
	cur := tl.total
	for i := len(tl.ev) - 1; i >= -1; i-- {
		at := t
		if i >= 0 {
			at = max(tl.ev[i].at, t)
		}
		if max(cur, peak)+n > lim {
			break
		}
		best = at
		if i >= 0 && tl.ev[i].at <= t {
			break
		}
		peak = max(peak, cur)
		if i >= 0 {
			cur -= tl.ev[i].n // now the occupancy after change i-1 (base for i = 0)
		}
	}
	return best
}

// NewModel builds a model for a valid config.
func NewModel(cfg Config) *Model {
	cfg = cfg.Resolved()
	g := cfg.Geometry()
	m := &Model{g: g, chips: make([]resource, g.Chips), channels: make([]resource, g.Channels),
		dies: make([]timeline, g.Chips), rp: make([]rpChip, g.Chips)}
	if cfg.WriteCacheQueues > 1 {
		m.queues = make([]cacheQueue, cfg.WriteCacheQueues)
	}
	m.cfg.Store(&cfg)
	return m
}

// SetConfig swaps the run-time knobs (latencies, link, cache size). Geometry
// fields must not change.
func (m *Model) SetConfig(cfg Config) { cfg = cfg.Resolved(); m.cfg.Store(&cfg) }

func (m *Model) conf() *Config { return m.cfg.Load() }

// Geometry is the geometry the model was built for: another device that
// books on the same chips (sharing the model) must have its chip count,
// channels and chunk size.
func (m *Model) Geometry() Geometry { return m.g }

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

// LinkIn models a host-to-device transfer of n bytes (a write's data)
// starting no earlier than at: on the link's own direction with
// Config.DuplexLink, else as Link.
func (m *Model) LinkIn(at time.Duration, n int) time.Duration {
	c := m.conf()
	if !c.DuplexLink {
		return m.Link(at, n)
	}
	d := time.Duration(float64(n) / float64(c.HostLinkBytesPerSec) * 1e9)
	_, end := m.linkIn.reserve(at, d)
	return end
}

// ReadArray books a flash page read (array sensing) on chip only; returns
// when the data is in the chip's page register.
//
// With Config.ReadPriority the read waits only for the chip operation in
// progress at its arrival (or, arriving while earlier reads are queued,
// runs right after them) and goes ahead of the queued work behind it,
// which then ends later by the read's time. Work already booked keeps the
// end it was given (its caller has it); the chip's later bookings start
// after the added read time, so the chip's busy time is conserved. The
// queued work is taken to run back to back in ProgramLatency units to find
// the operation in progress.
func (m *Model) ReadArray(at time.Duration, chip int) time.Duration {
	if !m.conf().ReadPriority {
		_, r := m.chips[chip].reserve(at, m.conf().ReadLatency)
		return r
	}
	m.rpMu.Lock()
	defer m.rpMu.Unlock()
	c, dur := &m.rp[chip], m.conf().ReadLatency
	s := max(at, c.rfree)
	if s >= c.anchor && s < c.pfree {
		// queued work runs at s: wait for the unit in progress unless it
		// starts exactly at s (the read arrived before it started)
		if p := m.conf().ProgramLatency; p > 0 {
			if ps := c.anchor + (s-c.anchor)/p*p; ps < s {
				s = min(ps+p, c.pfree)
			}
		}
	}
	e := s + dur
	if c.pfree > s { // the queued work behind the read moves by its time
		c.pfree += dur
		c.anchor = max(c.anchor+dur, e)
	}
	c.rfree = e
	m.chips[chip].busy.Add(int64(dur))
	m.chips[chip].free.Store(int64(max(c.pfree, c.rfree)))
	return e
}

// chipWork books dur of non-read work (program, copyback, erase) on chip
// no earlier than at; returns its end.
func (m *Model) chipWork(at, dur time.Duration, chip int) time.Duration {
	if !m.conf().ReadPriority {
		_, e := m.chips[chip].reserve(at, dur)
		return e
	}
	m.rpMu.Lock()
	defer m.rpMu.Unlock()
	c := &m.rp[chip]
	s := max(at, c.pfree, c.rfree)
	if s > c.pfree { // the chip had no queued work at s: a new run
		c.anchor = s
	}
	c.pfree = s + dur
	m.chips[chip].busy.Add(int64(dur))
	m.chips[chip].free.Store(int64(max(c.pfree, c.rfree)))
	return c.pfree
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
	return m.chipWork(at, m.conf().ProgramLatency, chip)
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
	return m.chipWork(d, m.conf().SLCProgramLatency, chip)
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
	return m.chipWork(at, m.CopybackLatency(), chip)
}

// Erase models erasing one block on chip.
func (m *Model) Erase(at time.Duration, chip int) time.Duration {
	return m.chipWork(at, m.conf().EraseLatency, chip)
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
// it is CacheAdmit. Otherwise the write is admitted at the first time at
// which every chip it writes holds at most WriteCacheDieBytes with it (first
// fit: a small write may pass a larger one waiting for the same die) and
// from which the pool holds at most WriteCacheBytes with it (bytes leave a
// chip and the pool when their program completes: CacheReleaseChip). A die that cannot
// keep up with its writers thus holds back only the writes that go to it,
// and at most WriteCacheDieBytes of the pool; a write larger than the limit
// on one chip waits for that chip to drain completely (and is then
// admitted: the limit never blocks forever). Arrival times must not go
// backwards by more than a host-link transfer (pkg/zns calls it in
// submission order).
func (m *Model) CacheAdmitDies(at time.Duration, n int64, per []ChipBytes) time.Duration {
	c := m.conf()
	lim, cap := c.WriteCacheDieBytes, c.WriteCacheBytes
	if lim <= 0 || cap <= 0 {
		return m.CacheAdmit(at, n)
	}
	m.cacheMu.Lock()
	defer m.cacheMu.Unlock()
	t := at
	for _, p := range per {
		if p.Chip < 0 || p.Chip >= len(m.dies) {
			continue
		}
		d := &m.dies[p.Chip]
		d.fold(at)
		t = max(t, d.firstFit(at, min(p.Bytes, lim), lim))
	}
	if t > at {
		m.DieStalls.Add(1)
	}
	m.pool.fold(at)
	if p := m.pool.earliest(t, min(n, cap), cap); p > t {
		m.CacheStalls.Add(1)
		t = p
	}
	if t > at {
		m.CacheStallTime.Add(int64(t - at))
	}
	for _, p := range per {
		if p.Chip >= 0 && p.Chip < len(m.dies) {
			m.dies[p.Chip].add(t, p.Bytes)
		}
	}
	m.pool.add(t, n)
	if u := m.pool.at(t); u > m.cacheHighWater.Load() {
		m.cacheHighWater.Store(u)
	}
	return t
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
	defer m.cacheMu.Unlock()
	if m.conf().WriteCacheDieBytes <= 0 {
		heap.Push(&m.releases, release{at, n})
		return
	}
	m.pool.add(at, -n)
	if chip >= 0 && chip < len(m.dies) {
		m.dies[chip].add(at, -n)
	}
}

// CacheQueues is the number of write-cache queues (0: one shared pool).
func (m *Model) CacheQueues() int { return len(m.queues) }

// CacheAdmitQueue admits n bytes arriving at time at into write-cache
// queue q mod CacheQueues and returns when they are admitted:
// CacheAdmit on the queue's share of the capacity, under the queue's own
// lock. With one shared pool (Config.WriteCacheQueues <= 1) it is
// CacheAdmit. Bytes stay until CacheReleaseQueue with the same q.
func (m *Model) CacheAdmitQueue(at time.Duration, n int64, q uint64) time.Duration {
	if len(m.queues) == 0 {
		return m.CacheAdmit(at, n)
	}
	cap := m.conf().WriteCacheBytes / int64(len(m.queues))
	if cap <= 0 {
		return at
	}
	cq := &m.queues[queueIndex(q, len(m.queues))]
	cq.mu.Lock()
	defer cq.mu.Unlock()
	t := at
	var freed int64
	for len(cq.releases) > 0 && cq.releases[0].at <= t {
		freed += heap.Pop(&cq.releases).(release).n
	}
	if cq.used-freed+n > cap {
		m.CacheStalls.Add(1)
		for cq.used-freed+n > cap && len(cq.releases) > 0 {
			r := heap.Pop(&cq.releases).(release)
			freed += r.n
			t = max(t, r.at)
		}
		m.CacheStallTime.Add(int64(t - at))
	}
	cq.used += n - freed
	if u := m.queued.Add(n - freed); u > m.cacheHighWater.Load() {
		m.raiseHighWater(u)
	}
	return t
}

// CacheReleaseQueue frees n cache bytes of queue q at time at (when their
// program on chip completes). With one shared pool it is CacheReleaseChip.
func (m *Model) CacheReleaseQueue(at time.Duration, n int64, q uint64, chip int) {
	if len(m.queues) == 0 {
		m.CacheReleaseChip(at, n, chip)
		return
	}
	cq := &m.queues[queueIndex(q, len(m.queues))]
	cq.mu.Lock()
	heap.Push(&cq.releases, release{at, n})
	cq.mu.Unlock()
}

func queueIndex(q uint64, n int) uint64 { return q % uint64(n) }

// raiseHighWater sets the high water to u unless it is already higher.
func (m *Model) raiseHighWater(u int64) {
	for {
		h := m.cacheHighWater.Load()
		if u <= h || m.cacheHighWater.CompareAndSwap(h, u) {
			return
		}
	}
}

// CacheUsed is the occupancy at time at.
func (m *Model) CacheUsed(at time.Duration) int64 {
	if len(m.queues) > 0 {
		var u int64
		for i := range m.queues {
			cq := &m.queues[i]
			cq.mu.Lock()
			var freed int64
			for len(cq.releases) > 0 && cq.releases[0].at <= at {
				freed += heap.Pop(&cq.releases).(release).n
			}
			cq.used -= freed
			m.queued.Add(-freed)
			u += cq.used
			cq.mu.Unlock()
		}
		return u
	}
	m.cacheMu.Lock()
	defer m.cacheMu.Unlock()
	for len(m.releases) > 0 && m.releases[0].at <= at {
		m.cacheUsed -= heap.Pop(&m.releases).(release).n
	}
	if m.conf().WriteCacheDieBytes > 0 {
		return m.cacheUsed + m.pool.at(at)
	}
	return m.cacheUsed
}

// CacheHighWater is the largest occupancy seen.
func (m *Model) CacheHighWater() int64 { return m.cacheHighWater.Load() }
