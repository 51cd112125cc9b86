package client

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	ops         *prometheus.CounterVec
	bytes       *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	retries     *prometheus.CounterVec
	ccDecreases prometheus.Counter
	ccWaits     prometheus.Counter
	cwnd        prometheus.Histogram
	compacted   *prometheus.CounterVec
	activity    *prometheus.CounterVec
	// degradedReads: reads of a mirrored v-zone that a copy's node failed
	// and another copy served (or was tried for).
	degradedReads prometheus.Counter
	// degradedWrites: writes to a mirrored v-zone that some copies took
	// and others could not (their nodes unavailable).
	degradedWrites prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_client_ops_total",
			Help: "v-zone operations completed, by op."}, []string{"op"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_client_bytes_total",
			Help: "Bytes moved by v-zone operations, by op."}, []string{"op"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "zonefleet_client_op_duration_seconds",
			Help: "Wall time of v-zone operations, by op.", Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10)}, []string{"op"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_client_retries_total",
			Help: "Retries of transient failures, by operation."}, []string{"op"}),
		ccDecreases: prometheus.NewCounter(prometheus.CounterOpts{Name: "zonefleet_client_read_window_decreases_total",
			Help: "Multiplicative decreases of read congestion windows (a read over lat_thresh)."}),
		ccWaits: prometheus.NewCounter(prometheus.CounterOpts{Name: "zonefleet_client_read_window_waits_total",
			Help: "Reads that waited for room in their stripe group's congestion window."}),
		cwnd: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "zonefleet_client_read_window_ratio",
			Help: "Read congestion window over stripe width, observed at each read completion.", Buckets: []float64{0.125, 0.25, 0.5, 1, 1.5, 2, 3, 4}}),
		compacted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_client_compaction_blocks_total",
			Help: "Blocks moved by v-zone compactions, by path (copyback, read_program, remote, host_copy)."}, []string{"path"}),
		activity: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_client_activity_reports_total",
			Help: "Background write-activity reports to the arbiter, by outcome (ok, error)."}, []string{"outcome"}),
		degradedReads: prometheus.NewCounter(prometheus.CounterOpts{Name: "zonefleet_client_degraded_reads_total",
			Help: "Reads of a mirrored v-zone retried on another copy because a copy's node was unavailable."}),
		degradedWrites: prometheus.NewCounter(prometheus.CounterOpts{Name: "zonefleet_client_degraded_writes_total",
			Help: "Writes to a mirrored v-zone refused because a copy's node was unavailable (the caller continues in another v-zone)."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.ops, m.bytes, m.latency, m.retries, m.ccDecreases, m.ccWaits, m.cwnd, m.compacted, m.activity, m.degradedReads, m.degradedWrites} {
			_ = reg.Register(c)
		}
	}
	return m
}
