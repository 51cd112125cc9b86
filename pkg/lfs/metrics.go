package lfs

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/zonefleet/zonefleet/pkg/clock"
)

// metrics are the zonefleet_fs_* Prometheus metrics. Labels are bounded:
// op names, GC kind and method, block kind and move path, log name.
type metrics struct {
	ops        *prometheus.CounterVec
	opErrors   *prometheus.CounterVec
	opLatency  *prometheus.HistogramVec
	bytesC     *prometheus.CounterVec
	blocksW    *prometheus.CounterVec
	segOpen    prometheus.Counter
	gcRuns     *prometheus.CounterVec
	gcDuration *prometheus.HistogramVec
	moved      *prometheus.CounterVec
	cps        *prometheus.CounterVec
	cpDuration prometheus.Histogram
	cpShared   prometheus.Counter
	recycled   *prometheus.CounterVec
	plugged    *prometheus.CounterVec
	pgcSplit   prometheus.Counter
	logWrites  *prometheus.GaugeVec
	throttled  prometheus.Counter
	gauges     *gaugeCollector // the live gauges registered at mount (nil: none)
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_fs_operations_total",
			Help: "File system operations by op."}, []string{"op"}),
		opErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_fs_operation_errors_total",
			Help: "File system operations that failed, by op and errno."}, []string{"op", "errno"}),
		opLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "zonefleet_fs_operation_duration_seconds",
			Help: "Latency of file system operations by op.", Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12)}, []string{"op"}),
		bytesC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_fs_bytes_total",
			Help: "Bytes read and written by users."}, []string{"dir"}),
		blocksW: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_fs_blocks_written_total",
			Help: "Blocks written to the drives by the file system, by kind (data, node)."}, []string{"kind"}),
		segOpen: prometheus.NewCounter(prometheus.CounterOpts{Name: "zonefleet_fs_segments_opened_total",
			Help: "Segments (v-zones) opened for logs."}),
		gcRuns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_fs_gc_runs_total",
			Help: "Segment recycling runs by kind (foreground, background) and method (host_copy, izc)."}, []string{"kind", "method"}),
		gcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "zonefleet_fs_gc_duration_seconds",
			Help: "Duration of one recycling run.", Buckets: prometheus.ExponentialBuckets(1e-4, 4, 10)}, []string{"kind", "method"}),
		moved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_fs_gc_blocks_moved_total",
			Help: "Valid blocks moved by recycling, by path (host_copy, izc, host_dirty, host_cached)."}, []string{"path"}),
		cps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_fs_checkpoints_total",
			Help: "Checkpoints taken, by cause (" + strings.Join(checkpointCauses, ", ") + ")."}, []string{"cause"}),
		cpShared: prometheus.NewCounter(prometheus.CounterOpts{Name: "zonefleet_fs_checkpoint_requests_shared_total",
			Help: "Checkpoint requests (fsync after a name changed, a directory's fsync, syncfs) answered by a checkpoint another request began after them (group commit)."}),
		recycled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_fs_recycled_segments_total",
			Help: "Segments recycled, by method (tl: threaded logging reuses its holes; compaction: its valid blocks moved)."}, []string{"method"}),
		plugged: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_fs_tl_plugged_blocks_total",
			Help: "Blocks the drives plugged (copied) for threaded logging, by when (on_demand: with a write; background: at the end of threaded logging)."}, []string{"when"}),
		pgcSplit: prometheus.NewCounter(prometheus.CounterOpts{Name: "zonefleet_fs_gc_split_migrations_total",
			Help: "Host-copy victim migrations whose reads P-GC split across workers (more than half of the victim valid)."}),
		cpDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "zonefleet_fs_checkpoint_duration_seconds",
			Help: "Duration of a checkpoint.", Buckets: prometheus.ExponentialBuckets(1e-4, 4, 10)}),
		logWrites: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "zonefleet_fs_log_writes_in_flight",
			Help: "Volume writes in flight per log (a data log's write lanes write concurrently)."}, []string{"log"}),
		throttled: prometheus.NewCounter(prometheus.CounterOpts{Name: "zonefleet_fs_write_throttled_seconds_total",
			Help: "Seconds writes waited for room in the dirty-page budget (write-back slower than the writers)."}),
	}
	if reg != nil {
		// a remount in the same process keeps counting in the registered collectors
		m.ops = register(reg, m.ops)
		m.opErrors = register(reg, m.opErrors)
		m.opLatency = register(reg, m.opLatency)
		m.bytesC = register(reg, m.bytesC)
		m.blocksW = register(reg, m.blocksW)
		m.segOpen = register(reg, m.segOpen)
		m.logWrites = register(reg, m.logWrites)
		m.gcRuns = register(reg, m.gcRuns)
		m.gcDuration = register(reg, m.gcDuration)
		m.moved = register(reg, m.moved)
		m.cps = register(reg, m.cps)
		m.recycled = register(reg, m.recycled)
		m.plugged = register(reg, m.plugged)
		m.cpDuration = register(reg, m.cpDuration)
		m.cpShared = register(reg, m.cpShared)
		m.pgcSplit = register(reg, m.pgcSplit)
		m.throttled = register(reg, m.throttled)
	}
	for _, l := range []string{"tl", "compaction"} {
		m.recycled.WithLabelValues(l)
	}
	for _, l := range []string{"on_demand", "background"} {
		m.plugged.WithLabelValues(l)
	}
	return m
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if old, ok := are.ExistingCollector.(C); ok {
				return old
			}
		}
	}
	return c
}

func (m *metrics) op(op string, d time.Duration, err error) {
	m.ops.WithLabelValues(op).Inc()
	m.opLatency.WithLabelValues(op).Observe(d.Seconds())
	if err != nil {
		m.opErrors.WithLabelValues(op, Errno(err).Error()).Inc()
	}
}
func (m *metrics) bytes(dir string, n int) { m.bytesC.WithLabelValues(dir).Add(float64(n)) }
func (m *metrics) blocks(kind string, n int) {
	m.blocksW.WithLabelValues(kind).Add(float64(n))
}
func (m *metrics) segOpened() { m.segOpen.Inc() }

// checkpointCauses are the bounded values of the cause label.
var checkpointCauses = []string{"mount", "unmount", "mkfs", "fsck", "sync", "fsync", "timer", "dirty_nodes", "gc", "pre_invalid", "tl", "other"}

func (m *metrics) checkpoint(d time.Duration, cause string) {
	m.cps.WithLabelValues(cause).Inc()
	m.cpDuration.Observe(d.Seconds())
}
func (m *metrics) gc(kind, method string, d time.Duration, st moveStat) {
	m.gcRuns.WithLabelValues(kind, method).Inc()
	m.gcDuration.WithLabelValues(kind, method).Observe(d.Seconds())
	m.moved.WithLabelValues("host_copy").Add(float64(st.hostCopy))
	m.moved.WithLabelValues("izc").Add(float64(st.izc))
	m.moved.WithLabelValues("host_dirty").Add(float64(st.hostDirty))
	m.moved.WithLabelValues("host_cached").Add(float64(st.hostCached))
	if st.pgcWorkers > 1 {
		m.pgcSplit.Inc()
	}
}

// gaugeCollector exports live gauges computed from Stats at scrape time.
type gaugeCollector struct {
	fs                           *FS
	free, dirty, active, used    *prometheus.Desc
	waf, written, user, byKind   *prometheus.Desc
	readOnly                     *prometheus.Desc
	preInvalid, tlShare, cbShare *prometheus.Desc
}

func registerGauges(fs *FS, reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	var g *gaugeCollector
	defer func() { fs.m.gauges = g }()
	g = &gaugeCollector{fs: fs,
		free:       prometheus.NewDesc("zonefleet_fs_segments_free", "Free segments (v-zones the file system may still open).", nil, nil),
		dirty:      prometheus.NewDesc("zonefleet_fs_segments_dirty", "In-use segments that are not log heads.", nil, nil),
		active:     prometheus.NewDesc("zonefleet_fs_segments_active", "Segments that are log heads.", nil, nil),
		used:       prometheus.NewDesc("zonefleet_fs_used_blocks", "User blocks in use.", nil, nil),
		waf:        prometheus.NewDesc("zonefleet_fs_write_amplification_ratio", "All blocks written to the drives / user blocks written.", nil, nil),
		written:    prometheus.NewDesc("zonefleet_fs_drive_blocks_written_total", "All blocks written to the drives (data, nodes, metadata, moves).", nil, nil),
		user:       prometheus.NewDesc("zonefleet_fs_user_blocks_written_total", "Data and node blocks written on behalf of users.", nil, nil),
		byKind:     prometheus.NewDesc("zonefleet_fs_blocks_written_by_kind_total", "Blocks written to the drives by kind: node (the node logs, for any reason), meta (checkpoint records and snapshots), user_data (data pages users wrote; moves excluded).", []string{"kind"}, nil),
		preInvalid: prometheus.NewDesc("zonefleet_fs_pre_invalid_blocks", "Blocks valid at the last checkpoint and invalid now (threaded logging cannot reuse them before the next checkpoint).", nil, nil),
		tlShare:    prometheus.NewDesc("zonefleet_fs_tl_share_ratio", "Share of recycled segments reused by threaded logging (vs compaction).", nil, nil),
		cbShare:    prometheus.NewDesc("zonefleet_fs_copyback_share_ratio", "Share of the blocks the drives copied (IZC) that moved by on-chip copyback.", nil, nil),
		readOnly:   prometheus.NewDesc("zonefleet_fs_read_only", "1 when the file system went read-only after an I/O error it could not reconcile, else 0.", nil, nil),
	}
	if err := reg.Register(g); err != nil {
		g = nil
	}
}

func (g *gaugeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{g.free, g.dirty, g.active, g.used, g.waf, g.written, g.user, g.byKind, g.readOnly, g.preInvalid, g.tlShare, g.cbShare} {
		ch <- d
	}
}

func (g *gaugeCollector) Collect(ch chan<- prometheus.Metric) {
	s := g.fs.Stats()
	ch <- prometheus.MustNewConstMetric(g.free, prometheus.GaugeValue, float64(s.SegmentsFree))
	ch <- prometheus.MustNewConstMetric(g.dirty, prometheus.GaugeValue, float64(s.SegmentsDirty))
	ch <- prometheus.MustNewConstMetric(g.active, prometheus.GaugeValue, float64(s.SegmentsActive))
	ch <- prometheus.MustNewConstMetric(g.used, prometheus.GaugeValue, float64(s.UsedBlocks))
	ch <- prometheus.MustNewConstMetric(g.waf, prometheus.GaugeValue, s.WAF)
	ch <- prometheus.MustNewConstMetric(g.written, prometheus.CounterValue, float64(s.DriveBlocksWritten))
	ch <- prometheus.MustNewConstMetric(g.user, prometheus.CounterValue, float64(s.UserBlocksWritten))
	ch <- prometheus.MustNewConstMetric(g.byKind, prometheus.CounterValue, float64(s.NodeBlocksWritten), "node")
	ch <- prometheus.MustNewConstMetric(g.byKind, prometheus.CounterValue, float64(s.MetaBlocksWritten), "meta")
	ch <- prometheus.MustNewConstMetric(g.byKind, prometheus.CounterValue, float64(s.UserDataBlocksWritten), "user_data")
	ro := 0.0
	if s.ReadOnly {
		ro = 1
	}
	ch <- prometheus.MustNewConstMetric(g.readOnly, prometheus.GaugeValue, ro)
	ch <- prometheus.MustNewConstMetric(g.preInvalid, prometheus.GaugeValue, float64(s.PreInvalidBlocks))
	ch <- prometheus.MustNewConstMetric(g.tlShare, prometheus.GaugeValue, s.TLShare)
	ch <- prometheus.MustNewConstMetric(g.cbShare, prometheus.GaugeValue, s.CopybackShare)
}

// Stats are the live counters of a mounted file system (zctl fs stat).
type Stats struct {
	BlockSize          int
	ZoneBlocks         uint64
	UserBlocks         uint64 // capacity users may fill
	UsedBlocks         uint64
	Nodes              uint64 // inodes + direct nodes
	MaxNodes           uint64
	ValidBlocks        uint64
	SegmentsTotal      int // data segments (MaxZones - 2 metadata zones)
	SegmentsFree       int
	SegmentsDirty      int
	SegmentsActive     int
	ReserveSegments    int
	CachedInodes       int
	CachedPages        int
	DirtyPages         int
	DirtyNodes         int
	OpenHandles        int
	Orphans            int
	CheckpointVersion  uint64
	Checkpoints        uint64
	WriteBacks         uint64 // background write-backs (batches of up to a zone)
	ReadAheadBlocks    uint64 // blocks prefetched into the page cache by read-ahead
	GCForeground       uint64
	GCBackground       uint64
	MovedHostCopy      uint64 // read to the host and written back
	MovedIZC           uint64 // copied inside the drives
	MovedHostDirty     uint64 // dirty on the host: written from the host
	MovedHostCached    uint64 // clean-cached: written from the host (IZC-H / host copy)
	CopybackPlanned    uint64 // blocks placed on the same chip by copyback-aware allocation
	CopybackEligible   uint64 // blocks of fully valid source chunks copyback-aware allocation looked at (the most it could place)
	CompactCopyback    uint64 // blocks the drives moved by copyback (Volume.Compact stats)
	CompactLocal       uint64 // blocks the drives moved by read and program
	CompactRemote      uint64 // blocks moved node to node
	IPUBlocks          uint64 // blocks fsyncs updated in place (ipu.go)
	IPUFallbacks       uint64 // in-place updates the drives refused (budget spent): the pages went to the log
	DriveBlocksWritten uint64
	UserBlocksWritten  uint64
	// The written blocks by kind (ZNS+ Fig. 7b's node and metadata
	// overhead is NodeBlocksWritten and MetaBlocksWritten over
	// UserDataBlocksWritten): blocks appended to the node logs for any
	// reason (fsync, write-back, checkpoint, host moves of nodes), blocks
	// of the metadata zone (checkpoint records and snapshots), and data
	// pages written for users (in place or to the log; moves excluded).
	NodeBlocksWritten     uint64
	MetaBlocksWritten     uint64
	UserDataBlocksWritten uint64
	WAF                   float64
	MetaZone              ZoneID
	MetaEpoch             uint64
	// Recycling modes (tl.go): the mode in effect and what hybrid segment
	// recycling did.
	Mode                string            `json:"mode"`
	TLRecycledSegments  uint64            `json:"tl_recycled_segments"` // victims reused by threaded logging
	CompactedSegments   uint64            `json:"compacted_segments"`   // victims emptied by compaction (host copy or IZC)
	TLShare             float64           `json:"tl_share"`             // TL / (TL + compacted)
	HSRCompaction       uint64            `json:"hsr_chose_compaction"` // HSR found compaction cheaper for the best TL victim
	TLRefused           uint64            `json:"tl_open_refused"`      // TL_open refused by the volume (no open zone or spare flash block group)
	TLNoBudget          uint64            `json:"tl_open_no_budget"`    // no TL_open: the open zones left for TL segments until the next checkpoint were used up
	TLNoCandidate       uint64            `json:"tl_no_candidate"`      // no TL_open: no closed segment had enough writable blocks
	PluggedOnDemand     uint64            `json:"plugged_blocks_on_demand"`
	PluggedBackground   uint64            `json:"plugged_blocks_background"`
	PreInvalidBlocks    uint64            `json:"pre_invalid_blocks"` // valid at the last checkpoint, invalid now
	PreInvalidThreshold uint64            `json:"pre_invalid_threshold"`
	Alpha               float64           `json:"hsr_alpha"`      // profiled (N_node + N_meta) / N_valid of compacting a data segment
	AlphaNode           float64           `json:"hsr_alpha_node"` // profiled N_meta / N_valid of compacting a node segment
	Beta                float64           `json:"hsr_beta"`       // profiled share of cold blocks still valid at the next TL_open
	CheckpointsByCause  map[string]uint64 `json:"checkpoints_by_cause"`
	CheckpointsShared   uint64            `json:"checkpoints_shared"`         // checkpoint requests answered by one another request began after them
	CopybackShare       float64           `json:"copyback_share"`             // blocks moved by copyback / all blocks the drives copied
	ReadOnly            bool              `json:"read_only"`                  // the file system went read-only (readonly.go)
	ReadOnlyReason      string            `json:"read_only_reason,omitempty"` // why
	// GCVictimBlocksRead counts the victim blocks host copy read to the host
	// in its read phase (CompactionPhases.Read), PGCSplitMigrations the
	// victims whose reads P-GC split across workers (Options.PGCWorkers).
	GCVictimBlocksRead uint64 `json:"gc_victim_blocks_read"`
	PGCSplitMigrations uint64 `json:"pgc_split_migrations"`
	// Compaction phases (ZNS+ Fig. 6), summed over CompactedSegments on the
	// file system's clock: init (victim selection, the victim's valid
	// bitmap and the nodes of its blocks), read (host copy: the victim's
	// valid blocks read to the host), copy (IZC: zone_compaction until its
	// copies are done), write (the moved and other dirty data blocks written
	// by the closing checkpoint) and checkpoint (its node and metadata
	// writes, the flush and the record).
	CompactionPhases CompactionPhases `json:"compaction_phases"`
	// WriteThrottled is the time writes waited for room in the dirty-page
	// budget (admit): the write-back behind the writers.
	WriteThrottled time.Duration `json:"write_throttled_ns"`
}

// CompactionPhases is the time compaction spent per phase (see Stats).
type CompactionPhases struct {
	Init       time.Duration `json:"init_ns"`
	Read       time.Duration `json:"read_ns"`
	Copy       time.Duration `json:"copy_ns"`
	Write      time.Duration `json:"write_ns"`
	Checkpoint time.Duration `json:"checkpoint_ns"`
}

// Stats returns the live counters.
func (fs *FS) Stats() Stats {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	s := fs.stats
	s.BlockSize, s.ZoneBlocks, s.UserBlocks, s.UsedBlocks = fs.bs, fs.geo.ZoneBlocks, fs.sb.UserBlocks, fs.count.used
	s.SegmentsTotal = fs.geo.MaxZones - metaZonesReserved
	s.SegmentsFree = fs.freeSegments()
	for _, sg := range fs.segs {
		s.ValidBlocks += sg.nvalid
		if sg.log >= 0 {
			s.SegmentsActive++
		} else {
			s.SegmentsDirty++
		}
	}
	s.ReserveSegments = int(fs.sb.ReserveSegs)
	s.Nodes, s.MaxNodes = fs.count.nodes, fs.sb.MaxNodes
	s.CachedInodes, s.CachedPages, s.DirtyPages, s.DirtyNodes = len(fs.ic.inodes), fs.ic.pages, fs.ic.dirtyPages, fs.ic.dirtyNodes
	s.OpenHandles, s.Orphans = len(fs.files.handles), len(fs.files.orphans)
	s.CheckpointVersion = fs.cp.ver
	s.DriveBlocksWritten, s.UserBlocksWritten = fs.count.blocksWritten, fs.count.userBlocks
	s.NodeBlocksWritten, s.MetaBlocksWritten, s.UserDataBlocksWritten = fs.count.nodeBlocks, fs.count.metaBlocks, fs.count.userData
	if fs.count.userBlocks > 0 {
		s.WAF = float64(fs.count.blocksWritten) / float64(fs.count.userBlocks)
	}
	s.MetaZone, s.MetaEpoch = fs.cp.metaZone, fs.cp.metaEpoch
	s.Mode = fs.opts.Mode.String()
	if n := s.TLRecycledSegments + s.CompactedSegments; n > 0 {
		s.TLShare = float64(s.TLRecycledSegments) / float64(n)
	}
	s.PreInvalidBlocks, s.PreInvalidThreshold, s.Alpha, s.AlphaNode, s.Beta = fs.gc.tl.preInvalid, fs.gc.tl.thetaPI, fs.gc.tl.alpha, fs.gc.tl.alphaNode, fs.gc.tl.beta
	s.CheckpointsByCause = make(map[string]uint64, len(fs.stats.CheckpointsByCause))
	for k, v := range fs.stats.CheckpointsByCause {
		s.CheckpointsByCause[k] = v
	}
	if n := s.CompactCopyback + s.CompactLocal + s.CompactRemote; n > 0 {
		s.CopybackShare = float64(s.CompactCopyback) / float64(n)
	}
	return s
}

// startTimer arms the periodic background work (idle GC, periodic
// checkpoints). A tick never blocks: on the virtual clock it may fire inside
// an operation's own I/O wait (on the same goroutine), so it runs the work
// synchronously only when it gets the GC and checkpoint locks at once
// (TryLock; readers never hold them); on a real clock it hands the work to
// one background goroutine, where recycling moves blocks concurrently with
// readers and writers. Neither ever waits for or blocks a reader.
func (fs *FS) startTimer() {
	registerGauges(fs, fs.opts.Registry)
	fs.setupLanes()
	fs.startFlusher()
	period := fs.opts.BackgroundGC
	if p := fs.opts.CheckpointEvery; p > 0 && (period == 0 || p < period) {
		period = p
	}
	if period <= 0 || fs.clk.Kind() == clock.KindOff {
		return
	}
	var lastCP atomic.Int64
	var running atomic.Bool
	var tick func()
	tick = func() {
		if fs.bg.down.Load() {
			return
		}
		if fs.clk.Kind() == clock.KindVirtual {
			fs.backgroundSync(&lastCP)
		} else if running.CompareAndSwap(false, true) {
			fs.bg.mu.Lock()
			if !fs.bg.down.Load() {
				fs.bg.wg.Add(1)
				go func() {
					defer fs.bg.wg.Done()
					defer running.Store(false)
					fs.backgroundAsync(&lastCP)
				}()
			} else {
				running.Store(false)
			}
			fs.bg.mu.Unlock()
		}
		fs.arm(period, tick)
	}
	fs.arm(period, tick)
}

// backgroundSync is one tick's work done in place, when the locks are free.
func (fs *FS) backgroundSync(lastCP *atomic.Int64) {
	if fs.inflight.Load() > 0 {
		return // fired inside an operation's I/O wait: the FS is not idle
	}
	if !fs.gc.mu.TryLock() {
		return
	}
	defer fs.gc.mu.Unlock()
	if !fs.cp.mu.TryLock() {
		return
	}
	defer fs.cp.mu.Unlock()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed || fs.failed != nil {
		return
	}
	ctx := context.Background()
	now := fs.clk.Now()
	if fs.opts.BackgroundGC > 0 && now-fs.bg.lastOp >= fs.opts.BackgroundGC {
		_, err := fs.gcOnce(ctx, false, true)
		fs.noteBackground(bgGC, err)
	}
	if fs.opts.CheckpointEvery > 0 && now-time.Duration(lastCP.Load()) >= fs.opts.CheckpointEvery && (fs.ic.dirtyNodes > 0 || fs.ic.dirtyPages > 0) {
		fs.cp.cause = "timer"
		fs.noteBackground(bgCheckpoint, fs.checkpoint(ctx, false))
		lastCP.Store(int64(now))
	}
}

// backgroundAsync is one tick's work on the background goroutine.
func (fs *FS) backgroundAsync(lastCP *atomic.Int64) {
	ctx := context.Background()
	fs.mu.Lock()
	if fs.closed || fs.failed != nil {
		fs.mu.Unlock()
		return
	}
	now := fs.clk.Now()
	idle := fs.opts.BackgroundGC > 0 && now-fs.bg.lastOp >= fs.opts.BackgroundGC
	fs.mu.Unlock()
	if idle && fs.gc.mu.TryLock() {
		_, err := fs.gcOnce(ctx, false, false)
		fs.noteBackground(bgGC, err)
		fs.gc.mu.Unlock()
	}
	if fs.opts.CheckpointEvery > 0 && now-time.Duration(lastCP.Load()) >= fs.opts.CheckpointEvery {
		fs.cp.mu.Lock()
		fs.mu.Lock()
		if !fs.closed && fs.failed == nil && (fs.ic.dirtyNodes > 0 || fs.ic.dirtyPages > 0) {
			fs.cp.cause = "timer"
			fs.noteBackground(bgCheckpoint, fs.checkpoint(ctx, false))
			lastCP.Store(int64(now))
		}
		fs.mu.Unlock()
		fs.cp.mu.Unlock()
	}
}

// arm schedules tick; AfterFunc may run it at once, so no lock is held.
func (fs *FS) arm(period time.Duration, tick func()) {
	if fs.bg.down.Load() {
		return
	}
	stop := fs.clk.AfterFunc(fs.clk.Now()+period, tick)
	fs.bg.mu.Lock()
	fs.bg.stopTimer = stop
	fs.bg.mu.Unlock()
}

// stopBackground stops the ticks and waits for the background goroutine
// (no lock of the FS may be held).
func (fs *FS) stopBackground() {
	fs.bg.mu.Lock()
	fs.bg.down.Store(true)
	stop := fs.bg.stopTimer
	fs.bg.mu.Unlock()
	if stop != nil {
		stop()
	}
	if fs.wb.stop != nil {
		fs.wb.stopOnce.Do(func() { close(fs.wb.stop) })
	}
	fs.bg.wg.Wait()
}

// checkpointBy counts one checkpoint of cause.
func (s *Stats) checkpointBy(cause string) {
	if s.CheckpointsByCause == nil {
		s.CheckpointsByCause = map[string]uint64{}
	}
	s.CheckpointsByCause[cause]++
}
