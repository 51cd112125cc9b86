package arbiter

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of one arbiter; namespace gauges are exported by the leader only.
type metrics struct {
	leader          prometheus.Gauge
	essentials      *prometheus.GaugeVec // {namespace}
	spares          *prometheus.GaugeVec // {namespace, kind=provisioned|owned|lent|borrowed|recalled|in_use}
	activeVZones    *prometheus.GaugeVec // {namespace}
	openGroups      *prometheus.GaugeVec // {width}: open stripe groups by width
	nodes           *prometheus.GaugeVec // {state=available|unavailable}
	allocations     *prometheus.CounterVec
	allocatedZones  *prometheus.CounterVec
	overdrive       *prometheus.CounterVec // {kind=local|lend|recall|return|reclaim}
	namespaceEvents *prometheus.CounterVec // {op=create|update|delete}
	width           prometheus.Histogram
	allocLatency    prometheus.Histogram
	mutations       prometheus.Counter   // state changes committed
	noops           prometheus.Counter   // mutations that changed nothing (nothing written)
	txns            prometheus.Counter   // etcd transactions of committed mutations
	txnBytes        prometheus.Counter   // key+value bytes written by them
	alarm           *prometheus.GaugeVec // {alarm=nospace|corrupt}
	compactions     prometheus.Counter
	dbSize          prometheus.Gauge
	rebuilds        *prometheus.CounterVec // {outcome=ok|error}
	rebuildBlocks   prometheus.Counter
	rebuildWaiting  prometheus.Gauge
	degradedVZones  *prometheus.GaugeVec // {namespace}
	fdpGranted      prometheus.Gauge
	tokens          *prometheus.CounterVec // {caller=admin|namespace|other, outcome=issued|rate_limited|refused}

	mu    sync.Mutex
	known map[string]bool
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "zonefleet_arbiter_is_leader",
			Help: "1 while this arbiter is the elected leader."}),
		essentials: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "zonefleet_arbiter_namespace_essential_zones",
			Help: "Essential active zones provisioned to a namespace."}, []string{"namespace"}),
		spares: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "zonefleet_arbiter_namespace_spare_zones",
			Help: "Spare active zones of a namespace by kind (provisioned = owned + lent)."}, []string{"namespace", "kind"}),
		activeVZones: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "zonefleet_arbiter_namespace_active_vzones",
			Help: "Open v-zones of a namespace."}, []string{"namespace"}),
		openGroups: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "zonefleet_arbiter_open_stripe_groups",
			Help: "Open stripe groups by stripe width."}, []string{"width"}),
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "zonefleet_arbiter_nodes",
			Help: "Nodes in the shadow view by state (available, unavailable, down: gone longer than the down timeout)."}, []string{"state"}),
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_arbiter_allocations_total",
			Help: "Stripe groups allocated."}, []string{"namespace"}),
		allocatedZones: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_arbiter_allocated_zones_total",
			Help: "Physical zones allocated to stripe groups."}, []string{"namespace"}),
		overdrive: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_arbiter_overdrive_events_total",
			Help: "Overdrive events: local (group wider than minimum), lend, recall, return, reclaim."}, []string{"kind"}),
		namespaceEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_arbiter_namespace_operations_total",
			Help: "Namespace creations, updates and deletions."}, []string{"op"}),
		width: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "zonefleet_arbiter_stripe_width_zones",
			Help: "Width of allocated stripe groups.", Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128}}),
		allocLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "zonefleet_arbiter_allocation_duration_seconds",
			Help: "Latency of stripe-group allocations (queue + etcd commit).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		mutations: prometheus.NewCounter(prometheus.CounterOpts{Name: "zonefleet_arbiter_state_mutations_total",
			Help: "State changes committed to etcd."}),
		noops: prometheus.NewCounter(prometheus.CounterOpts{Name: "zonefleet_arbiter_state_noop_mutations_total",
			Help: "Mutations that changed nothing and wrote nothing to etcd."}),
		txns: prometheus.NewCounter(prometheus.CounterOpts{Name: "zonefleet_arbiter_etcd_transactions_total",
			Help: "etcd transactions written by committed state changes."}),
		txnBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "zonefleet_arbiter_etcd_written_bytes_total",
			Help: "Key and value bytes the arbiter wrote to etcd in state transactions."}),
		alarm: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "zonefleet_arbiter_etcd_alarm",
			Help: "1 while etcd reports the alarm (nospace: database quota exceeded, state changes fail; corrupt)."}, []string{"alarm"}),
		compactions: prometheus.NewCounter(prometheus.CounterOpts{Name: "zonefleet_arbiter_etcd_compactions_total",
			Help: "etcd history compactions requested by the leader."}),
		dbSize: prometheus.NewGauge(prometheus.GaugeOpts{Name: "zonefleet_arbiter_etcd_db_size_bytes",
			Help: "Size of the etcd database file as last reported to the leader."}),
		rebuilds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_arbiter_rebuilds_total",
			Help: "Copies of mirrored legs on down nodes rebuilt on another node, by outcome (ok, error)."}, []string{"outcome"}),
		rebuildBlocks: prometheus.NewCounter(prometheus.CounterOpts{Name: "zonefleet_arbiter_rebuild_blocks_total",
			Help: "Blocks copied or rebuilt node to node by rebuilds of mirrored and raid5 legs."}),
		rebuildWaiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "zonefleet_arbiter_degraded_zones",
			Help: "Copies of mirrored legs and legs of raid5 groups on down nodes not rebuilt yet (the leader's last rebuild check)."}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_arbiter_token_issuance_total",
			Help: "IssueToken requests by caller kind and outcome (issued, rate_limited, refused)."}, []string{"caller", "outcome"}),
		degradedVZones: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "zonefleet_arbiter_degraded_vzones",
			Help: "V-zones of a mirrored or parity namespace with a zone on an unavailable or down node (reads served by the other copies or reconstructed from parity)."}, []string{"namespace"}),
		fdpGranted: prometheus.NewGauge(prometheus.GaugeOpts{Name: "zonefleet_arbiter_fdp_granted_bytes",
			Help: "FDP drive capacity granted to fdp namespaces (their capacity quotas, in whole LBAs)."}),
		known: map[string]bool{},
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.leader, m.essentials, m.spares, m.activeVZones, m.openGroups, m.nodes,
			m.allocations, m.allocatedZones, m.overdrive, m.namespaceEvents, m.width, m.allocLatency,
			m.mutations, m.noops, m.txns, m.txnBytes, m.alarm, m.compactions, m.dbSize, m.rebuilds, m.rebuildBlocks, m.rebuildWaiting, m.degradedVZones, m.tokens, m.fdpGranted} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	for _, k := range []string{"ok", "error"} {
		m.rebuilds.WithLabelValues(k)
	}
	for _, k := range []string{"nospace", "corrupt"} {
		m.alarm.WithLabelValues(k)
	}
	for _, k := range []string{"local", "lend", "recall", "return", "reclaim"} {
		m.overdrive.WithLabelValues(k)
	}
	return m, nil
}

func widthLabel(w uint32) string {
	switch {
	case w <= 1:
		return "1"
	case w <= 2:
		return "2"
	case w <= 4:
		return "4"
	case w <= 8:
		return "8"
	case w <= 16:
		return "16"
	case w <= 32:
		return "32"
	default:
		return "64+"
	}
}

// refresh sets the gauges from a committed state.
func (m *metrics) refresh(st *State, ix *index) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.known {
		if st.Namespaces[name] == nil {
			m.forgetLocked(name)
		}
	}
	groups := map[string]float64{}
	for _, l := range []string{"1", "2", "4", "8", "16", "32", "64+"} {
		groups[l] = 0
	}
	for name, ns := range st.Namespaces {
		m.known[name] = true
		u := ix.usage[name]
		if u == nil {
			u = &nsUsage{}
		}
		m.essentials.WithLabelValues(name).Set(float64(ns.Essentials))
		m.spares.WithLabelValues(name, "provisioned").Set(float64(ns.Spares))
		m.spares.WithLabelValues(name, "owned").Set(float64(sub(ns.Spares, u.Lent)))
		m.spares.WithLabelValues(name, "lent").Set(float64(u.Lent))
		m.spares.WithLabelValues(name, "borrowed").Set(float64(u.Borrowed))
		m.spares.WithLabelValues(name, "recalled").Set(float64(u.Recalled))
		m.spares.WithLabelValues(name, "in_use").Set(float64(u.SparesInUse))
		m.activeVZones.WithLabelValues(name).Set(float64(u.ActiveVZones))
		degraded := 0
		for _, vz := range ns.VZones {
			if g := vz.openGroup(); g != nil {
				groups[widthLabel(g.Width)]++
			}
			if (ns.Spec.copies() > 1 || ns.Spec.parity()) && vzoneDegraded(st, vz) {
				degraded++
			}
		}
		m.degradedVZones.WithLabelValues(name).Set(float64(degraded))
	}
	for l, v := range groups {
		m.openGroups.WithLabelValues(l).Set(v)
	}
	var up, unavail, down float64
	for _, n := range st.Nodes {
		switch {
		case n.Available:
			up++
		case n.Down:
			down++
		default:
			unavail++
		}
	}
	m.nodes.WithLabelValues("available").Set(up)
	m.nodes.WithLabelValues("unavailable").Set(unavail)
	m.nodes.WithLabelValues("down").Set(down)
	m.fdpGranted.Set(float64(fdpGrantedBytes(st)))
}

func (m *metrics) forget(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgetLocked(name)
}

func (m *metrics) forgetLocked(name string) {
	delete(m.known, name)
	m.essentials.DeleteLabelValues(name)
	m.activeVZones.DeleteLabelValues(name)
	m.degradedVZones.DeleteLabelValues(name)
	m.spares.DeletePartialMatch(prometheus.Labels{"namespace": name})
}

// clearNamespaces drops every per-namespace gauge (on losing leadership).
func (m *metrics) clearNamespaces() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.known {
		m.forgetLocked(name)
	}
	m.openGroups.Reset()
	m.nodes.Reset()
}

// vzoneDegraded tells whether a zone of vz is on a node that is not available.
func vzoneDegraded(st *State, vz *VZone) bool {
	for _, g := range vz.Groups {
		for _, z := range g.Zones {
			if n := st.Nodes[z.Node]; n == nil || !n.Available {
				return true
			}
		}
	}
	return false
}
