package node

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/zonefleet/zonefleet/pkg/auth/limit"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
)

// metrics of the node: request counters and modelled-latency histograms by
// device, namespace and operation, and the devices' statistics read at scrape
// time. Labels are bounded: device index, namespace, operation, zone state,
// chip index (at most a few dozen per device), copy path.
type metrics struct {
	s *Service
	// nsLabels bounds the namespace label values (at most MaxNamespaceLabels,
	// later ones are "other"): even an operator or a plaintext --insecure
	// client naming namespaces at will cannot grow the series without bound.
	nsLabels   *limit.Labels
	ops        *prometheus.CounterVec
	bytes      *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	errors     *prometheus.CounterVec
	copied     *prometheus.CounterVec
	peerPushed *prometheus.CounterVec
	// revokedResets counts zones reset because their grant went away.
	revokedResets *prometheus.CounterVec
	// ownerResets counts zones reset before a new owner's first I/O.
	ownerResets *prometheus.CounterVec
	// grantMissRefused counts grant-cache misses answered without an etcd
	// read (remembered miss or rate limit: limit.MissGuard).
	grantMissRefused prometheus.Counter
	// staleLayoutRefused counts calls refused because the caller's layout
	// predates the grant of a zone it addressed.
	staleLayoutRefused prometheus.Counter
	// sealedRefused counts writes refused on a sealed zone (reclaim).
	sealedRefused prometheus.Counter
	// sendTimeouts counts stream sends that missed their deadline, by
	// operation (read_stream, peer_push).
	sendTimeouts *prometheus.CounterVec
	// recvTimeouts counts client streams ended because no message came
	// within the idle deadline, by operation (write_stream).
	recvTimeouts *prometheus.CounterVec
	// limitRefusals counts streams refused by a per-namespace limit, by
	// limit (streams, inflight_bytes, revision_waiters, revision_lead).
	limitRefusals *prometheus.CounterVec
	// compactionsExpired counts compactions dropped because nobody waited.
	compactionsExpired prometheus.Counter

	zones, activeZones, openZones, maxActive, maxOpen, cacheBytes, cacheCap, waf, chipUtil, ipuUsed, ipuBudget *prometheus.Desc
	cacheStalls, cacheStallSec, admStalls, admStallSec, hostBlocks, nandPages, erases, plugged, devCopied      *prometheus.Desc
	ioErrors, zonesFailed, devReadOnly, cpFailures, tailsDropped, fsyncs, wbKicks                              *prometheus.Desc
	// the rebuild rate limit (throttle.go), node-wide: no labels
	rebuildBytes, rebuildThrottled, rebuildRate *prometheus.Desc
}

// MaxNamespaceLabels is how many distinct namespace label values a node's
// metrics carry; further namespaces are counted under "other".
const MaxNamespaceLabels = 256

func newMetrics(s *Service) *metrics {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("zonefleet_node_"+name, help, append([]string{"device"}, labels...), nil)
	}
	return &metrics{
		nsLabels: limit.NewLabels(MaxNamespaceLabels),
		s:        s,
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_node_io_total",
			Help: "I/O requests served, by device, namespace and operation."}, []string{"device", "namespace", "op"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_node_io_bytes_total",
			Help: "Bytes moved by I/O requests, by device, namespace and operation."}, []string{"device", "namespace", "op"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "zonefleet_node_io_latency_seconds",
			Help:    "Modelled latency of I/O requests (reads from the device-slot request: the WRR wait and the drive), by device, namespace and operation.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 3, 12)}, []string{"device", "namespace", "op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_node_io_errors_total",
			Help: "Failed I/O requests, by device, operation and gRPC code."}, []string{"device", "op", "code"}),
		copied: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_node_compaction_blocks_total",
			Help: "Blocks moved by zone compactions served here, by path (copyback, read_program, remote)."}, []string{"device", "path"}),
		peerPushed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_node_peer_pushed_blocks_total",
			Help: "Blocks this node pushed to peer nodes for cross-node compaction."}, []string{"device"}),
		grantMissRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "zonefleet_node_grant_miss_refused_total",
			Help: "Grant-cache misses refused without an etcd read (recently absent, or over the per-namespace/global lookup rate)."}),
		staleLayoutRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "zonefleet_node_stale_layout_refused_total",
			Help: "Calls refused with STALE_LAYOUT: the caller's layout (its etcd revision) predates the grant of a zone it addressed, which the arbiter gave to another v-zone since."}),
		sealedRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "zonefleet_node_sealed_zone_refused_total",
			Help: "Writes and zone changes refused (UNAVAILABLE, retried by the client) because the zone's grant is sealed: the arbiter is moving its data (reclaim)."}),
		sendTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_node_send_timeouts_total",
			Help: "Stream messages to a client or peer that missed the send deadline (the receiver stopped reading), by operation."}, []string{"op"}),
		recvTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_node_recv_timeouts_total",
			Help: "Client streams ended because no message arrived within the stream idle deadline (a sender that went silent), by operation."}, []string{"op"}),
		limitRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_node_limit_refusals_total",
			Help: "Calls refused with RESOURCE_EXHAUSTED by a per-namespace or revision-wait limit, by limit."}, []string{"limit"}),
		compactionsExpired: prometheus.NewCounter(prometheus.CounterOpts{Name: "zonefleet_node_compactions_expired_total",
			Help: "Zone compactions dropped because nobody called WaitCompaction before their time to live ran out."}),
		revokedResets: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_node_revoked_zone_resets_total",
			Help: "Zones reset because the arbiter revoked their grant."}, []string{"device"}),
		ownerResets: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_node_owner_change_resets_total",
			Help: "Zones reset before a new owner's first I/O (grant owner differs from the owner persisted with the zone)."}, []string{"device"}),

		zones:         d("zones", "Zones by state.", "state"),
		activeZones:   d("active_zones", "Active zones (open or closed)."),
		openZones:     d("open_zones", "Open zones."),
		maxActive:     d("max_active_zones", "Active-zone limit (MAR)."),
		maxOpen:       d("max_open_zones", "Open-zone limit (MOR)."),
		cacheBytes:    d("write_cache_bytes", "Bytes in the write cache."),
		cacheCap:      d("write_cache_capacity_bytes", "Write cache size."),
		waf:           d("waf_ratio", "Write amplification: NAND blocks programmed per host block written."),
		chipUtil:      d("chip_utilization_ratio", "Share of modelled time a chip was busy.", "chip"),
		ipuUsed:       d("ipu_used_blocks", "Blocks used in the in-place-update region."),
		ipuBudget:     d("ipu_budget_blocks", "In-place-update budget."),
		cacheStalls:   d("write_cache_stalls_total", "Writes that waited for write-cache space."),
		cacheStallSec: d("write_cache_stall_seconds_total", "Modelled time writes waited for write-cache space."),
		admStalls:     d("admission_stalls_total", "Writes paced by write admission control."),
		admStallSec:   d("admission_stall_seconds_total", "Modelled time writes were paced by admission control."),
		hostBlocks:    d("host_written_blocks_total", "Blocks written by hosts."),
		nandPages:     d("nand_programmed_pages_total", "Flash pages programmed."),
		erases:        d("erases_total", "Flash block erases."),
		plugged:       d("plugged_blocks_total", "Blocks plugged by threaded logging, by when (on_demand, background).", "when"),
		devCopied:     d("device_copied_blocks_total", "Blocks copied inside the device, by path (copyback, read_program).", "path"),
		ioErrors:      d("device_io_errors_total", "Failed reads, writes and syncs of the device's backing files."),
		zonesFailed:   d("device_failed_zones_total", "Zones made read-only by a write I/O error."),
		devReadOnly:   d("device_read_only", "1 once an I/O error of the journal made the whole device read-only."),
		cpFailures:    d("journal_checkpoint_failures_total", "Device journal checkpoints that failed (the old journal stayed in use)."),
		tailsDropped:  d("journal_tails_dropped", "1 when the device's last open dropped a torn, zeroed or garbage journal tail."),
		fsyncs:        d("fsyncs_total", "fdatasyncs of the device's backing files, by file (data, journal, owners); concurrent callers share one.", "file"),
		wbKicks:       d("writeback_kicks_total", "Write-backs of the device's data file to the disk started without waiting (--writeback-kick-bytes)."),

		rebuildBytes: prometheus.NewDesc("zonefleet_node_rebuild_bytes_total",
			"Bytes this node's devices read (mirror push, raid5 PeerRead) or wrote (mirror PeerWrite, raid5 target) for rebuilds.", nil, nil),
		rebuildThrottled: prometheus.NewDesc("zonefleet_node_rebuild_throttled_seconds_total",
			"Time rebuild I/O waited for the node's rebuild rate limit (--rebuild-rate).", nil, nil),
		rebuildRate: prometheus.NewDesc("zonefleet_node_rebuild_rate_limit_bytes_per_second",
			"The node's rebuild rate limit (0 = unlimited).", nil, nil),
	}
}

// Register adds the node's metrics to reg.
func (m *metrics) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.ops, m.bytes, m.latency, m.errors, m.copied, m.peerPushed, m.revokedResets, m.ownerResets, m.grantMissRefused, m.staleLayoutRefused, m.sealedRefused, m.sendTimeouts, m.recvTimeouts, m.limitRefusals, m.compactionsExpired, m} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *metrics) observe(dev uint32, ns, op string, bytes int, lat time.Duration, err error) {
	dl := fmt.Sprint(dev)
	if err != nil {
		m.errors.WithLabelValues(dl, op, rpcerr.Code(err).String()).Inc()
		return
	}
	ns = m.nsLabels.Value(ns)
	m.ops.WithLabelValues(dl, ns, op).Inc()
	m.bytes.WithLabelValues(dl, ns, op).Add(float64(bytes))
	m.latency.WithLabelValues(dl, ns, op).Observe(lat.Seconds())
}

// Describe implements prometheus.Collector for the device statistics.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.zones, m.activeZones, m.openZones, m.maxActive, m.maxOpen, m.cacheBytes, m.cacheCap,
		m.waf, m.chipUtil, m.ipuUsed, m.ipuBudget, m.cacheStalls, m.cacheStallSec, m.admStalls, m.admStallSec, m.hostBlocks,
		m.nandPages, m.erases, m.plugged, m.devCopied, m.ioErrors, m.zonesFailed, m.devReadOnly, m.cpFailures, m.tailsDropped, m.fsyncs,
		m.wbKicks, m.rebuildBytes, m.rebuildThrottled, m.rebuildRate} {
		ch <- d
	}
}

// Collect reads every device's log page.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	g := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	c := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	rb, rw, _ := m.s.rebuild.Stats()
	c(m.rebuildBytes, float64(rb))
	c(m.rebuildThrottled, rw.Seconds())
	g(m.rebuildRate, float64(m.s.rebuild.Rate()))
	for _, dv := range m.s.devs {
		dl := fmt.Sprint(dv.idx)
		l := dv.dev.Log()
		id := dv.dev.Identify()
		for _, st := range []string{"empty", "implicitly-open", "explicitly-open", "closed", "full", "read-only", "offline"} {
			g(m.zones, float64(l.ZonesPerState[st]), dl, st)
		}
		g(m.activeZones, float64(l.ActiveZones), dl)
		g(m.openZones, float64(l.OpenZones), dl)
		g(m.maxActive, float64(id.MaxActive), dl)
		g(m.maxOpen, float64(id.MaxOpen), dl)
		g(m.cacheBytes, float64(l.CacheBytes), dl)
		g(m.cacheCap, float64(l.CacheCapacity), dl)
		g(m.waf, l.WAF, dl)
		for i, u := range l.ChipUtilization {
			g(m.chipUtil, u, dl, fmt.Sprint(i))
		}
		g(m.ipuUsed, float64(l.IPUUsed), dl)
		g(m.ipuBudget, float64(l.IPUBudget), dl)
		c(m.cacheStalls, float64(l.CacheStalls), dl)
		c(m.cacheStallSec, l.CacheStallTime.Seconds(), dl)
		n, t := dv.adm.Stalls()
		c(m.admStalls, float64(n), dl)
		c(m.admStallSec, t.Seconds(), dl)
		c(m.hostBlocks, float64(l.HostBlocksWritten), dl)
		c(m.nandPages, float64(l.NANDPagesProgrammed), dl)
		c(m.erases, float64(l.Erases), dl)
		c(m.fsyncs, float64(l.DataSyncs), dl, "data")
		c(m.fsyncs, float64(l.JournalSyncs), dl, "journal")
		c(m.wbKicks, float64(l.WritebackKicks), dl)
		if dv.owners != nil {
			c(m.fsyncs, float64(dv.owners.Syncs()), dl, "owners")
		}
		c(m.plugged, float64(l.PluggedOnDemand), dl, "on_demand")
		c(m.plugged, float64(l.PluggedBackground), dl, "background")
		chunk := float64(dv.dev.Geometry().ChunkBlocks)
		c(m.devCopied, float64(l.CopybackChunks)*chunk, dl, "copyback")
		c(m.devCopied, float64(l.ReadProgramBlocks), dl, "read_program")
		c(m.ioErrors, float64(l.IOErrors), dl)
		c(m.zonesFailed, float64(l.ZonesFailed), dl)
		ro := 0.0
		if l.ReadOnly {
			ro = 1
		}
		g(m.devReadOnly, ro, dl)
		c(m.cpFailures, float64(l.JournalCheckpointFailures), dl)
		g(m.tailsDropped, float64(l.JournalTailsDropped), dl)
	}
}
