package grafana

// ri is the rate window of every rate()/increase(): Grafana's
// $__rate_interval (at least four scrape intervals, wider when zoomed out).
const ri = "[$__rate_interval]"

// Dashboard uids (stable: dashboard links and test/deploy name them).
const (
	ClusterUID = "zonefleet-cluster"
	DrivesUID  = "zonefleet-drives"
	ArbiterUID = "zonefleet-arbiter"
	FSUID      = "zonefleet-fs"
)

// Dashboards returns every dashboard, in file order.
func Dashboards() []Dashboard { return []Dashboard{cluster(), drives(), arbiter(), fs()} }

// leader keeps the series of the arbiter that leads (namespace gauges are
// exported by the leader only; node counts by every arbiter).
const leader = " and on(instance) zonefleet_arbiter_is_leader == 1"

func cluster() Dashboard {
	return dashboard(ClusterUID, "ZoneFleet / Cluster overview",
		"Health of the whole cluster at a glance; each row links to the component's dashboard.", []string{"overview"},
		row(100, "Health"),
		pn(panel(1, "stat", "Nodes available (leader's view)", []query{q(`max(zonefleet_arbiter_nodes{state="available", `+sel("instance")+`}`+leader+`)`, "available")},
			unit("none"), thresholds(0.0, "red", 1.0, "green"), linkTo(DrivesUID, "Drives"))),
		pn(panel(2, "stat", "Nodes unavailable", []query{q(`max(zonefleet_arbiter_nodes{state="unavailable", `+sel("instance")+`}`+leader+`)`, "unavailable")},
			unit("none"), thresholds(1.0, "red"), linkTo(DrivesUID, "Drives"),
			desc("Nodes whose etcd lease expired (alert ZoneFleetNodeLeaseLost)."))),
		pn(panel(3, "stat", "Namespaces", []query{q(`count(max by (namespace) (zonefleet_arbiter_namespace_essential_zones{`+sel("namespace")+`}))`, "namespaces")},
			unit("none"), linkTo(ArbiterUID, "Arbiter"))),
		pn(panel(4, "stat", "Arbiter leader", []query{q(`max by (arbiter) (zonefleet_arbiter_is_leader{`+sel("instance")+`}) == 1`, "{{arbiter}}")},
			unit("none"), linkTo(ArbiterUID, "Arbiter"), desc("The arbiter holding the election (alert ZoneFleetNoArbiterLeader when none)."))),
		pn(panel(5, "stat", "Zones used (all drives)", []query{q(`sum(zonefleet_node_zones{state!="empty", `+sel("node", "device")+`}) / sum(zonefleet_node_zones{`+sel("node", "device")+`})`, "used")},
			unit("percentunit"), maxv(1), thresholds(0.8, "orange", 0.9, "red"), linkTo(DrivesUID, "Drives"))),
		pn(panel(6, "stat", "Processes up", []query{q(`sum by (component) (up{component!="client", `+sel("instance")+`})`, "{{component}}")},
			unit("none"), thresholds(0.0, "red", 1.0, "green"))),
		row(101, "Capacity and I/O"),
		pn(panel(7, "timeseries", "Capacity: zones by state", []query{q(`sum by (state) (zonefleet_node_zones{`+sel("node", "device")+`})`, "{{state}}")},
			unit("short"), stacked(), desc("Physical zones of the selected drives, by zone state (read-only and offline zones: alert ZoneFleetDriveDegraded)."))),
		pn(panel(8, "timeseries", "Host bytes written / read", []query{q(`sum by (op) (rate(zonefleet_node_io_bytes_total{op=~"write|append|read", `+sel("namespace", "node", "device")+`}`+ri+`))`, "{{op}}")},
			unit("Bps"))),
		pn(panel(12, "timeseries", "Essential + spare zones per namespace", []query{
			q(`max by (namespace) (zonefleet_arbiter_namespace_essential_zones{`+sel("namespace")+`})`, "{{namespace}} essential"),
			q(`max by (namespace) (zonefleet_arbiter_namespace_spare_zones{kind="provisioned", `+sel("namespace")+`})`, "{{namespace}} spares")},
			unit("short"), linkTo(ArbiterUID, "Arbiter"))),
		row(102, "Errors"),
		pn(panel(9, "timeseries", "Errors: failed node I/O by code", []query{q(`sum by (node, code) (rate(zonefleet_node_io_errors_total{`+sel("node", "device")+`}`+ri+`))`, "{{node}} {{code}}")},
			unit("reqps"), thresholds(0.5, "red"),
			desc("Failed I/O requests by gRPC code (FAILED_PRECONDITION: write-pointer or zone-state errors of clients; UNAVAILABLE/DATA_LOSS: drive trouble)."))),
		pn(panel(10, "timeseries", "Errors: gRPC requests not OK", []query{q(`sum by (component, code) (rate(zonefleet_grpc_requests_total{code!="OK", `+sel("instance")+`}`+ri+`))`, "{{component}} {{code}}")},
			unit("reqps"), thresholds(1.0, "red"))),
		pn(panel(11, "timeseries", "gRPC requests by process", []query{q(`sum by (job, instance) (rate(zonefleet_grpc_requests_total{`+sel("instance")+`}`+ri+`))`, "{{job}} {{instance}}")},
			unit("reqps"))),
		row(103, "etcd and builds"),
		pn(panel(13, "timeseries", "etcd: has leader, leader changes", []query{
			q(`min(etcd_server_has_leader{`+sel("instance")+`})`, "has leader (min over members)"),
			q(`max(etcd_server_leader_changes_seen_total{`+sel("instance")+`})`, "leader changes")},
			unit("none"))),
		pn(panel(15, "timeseries", "etcd: database size vs quota", []query{
			q(`max by (member) (etcd_mvcc_db_total_size_in_bytes{`+sel("instance")+`})`, "{{member}} db size"),
			q(`max(etcd_server_quota_backend_bytes{`+sel("instance")+`})`, "quota")},
			unit("bytes"), desc("At the quota etcd raises the NOSPACE alarm and refuses writes (alerts ZoneFleetEtcdDBNearQuota, ZoneFleetEtcdAlarm)."))),
		pn(panel(14, "table", "Build", []query{q(`zonefleet_build_info{`+sel("instance")+`}`, "")}, unit("none"), size(24, 6))),
	)
}

func drives() Dashboard {
	nd := sel("node", "device")
	return dashboard(DrivesUID, "ZoneFleet / Drives",
		"The emulated ZNS+ drives of the ssdnodes: utilization, zones, write path, I/O and compaction. Filter by node and drive.", []string{"drives"},
		row(100, "Utilization"),
		pn(panel(1, "timeseries", "Chip utilization (mean per drive)", []query{q(`avg by (node, device) (zonefleet_node_chip_utilization_ratio{`+nd+`})`, "{{node}}/{{device}}")},
			unit("percentunit"), maxv(1), thresholds(0.9, "orange"),
			desc("Busy share of modelled time per chip (die), averaged over a drive's chips."))),
		pn(panel(2, "timeseries", "Chip utilization per chip", []query{q(`zonefleet_node_chip_utilization_ratio{`+nd+`}`, "{{node}}/{{device}} chip {{chip}}")},
			unit("percentunit"), maxv(1), thresholds(0.9, "orange"))),
		pn(panel(3, "timeseries", "WAF (NAND programmed / host written)", []query{q(`zonefleet_node_waf_ratio{`+nd+`}`, "{{node}}/{{device}}")},
			unit("none"), thresholds(2.0, "orange", 4.0, "red"))),
		pn(panel(9, "timeseries", "Write cache occupancy", []query{q(`zonefleet_node_write_cache_bytes{`+nd+`} / zonefleet_node_write_cache_capacity_bytes{`+nd+`}`, "{{node}}/{{device}}")},
			unit("percentunit"), maxv(1), thresholds(0.9, "orange"))),
		row(101, "Zones"),
		pn(panel(4, "timeseries", "Zones by state", []query{q(`sum by (state) (zonefleet_node_zones{`+nd+`})`, "{{state}}")}, unit("short"), stacked(),
			desc("read-only and offline zones mean a failing drive (alert ZoneFleetDriveDegraded)."))),
		pn(panel(5, "timeseries", "Active zones vs MAR", []query{
			q(`zonefleet_node_active_zones{`+nd+`}`, "{{node}}/{{device}} active"),
			q(`zonefleet_node_max_active_zones{`+nd+`}`, "{{node}}/{{device}} MAR")}, unit("short"))),
		pn(panel(6, "timeseries", "Open zones vs MOR", []query{
			q(`zonefleet_node_open_zones{`+nd+`}`, "{{node}}/{{device}} open"),
			q(`zonefleet_node_max_open_zones{`+nd+`}`, "{{node}}/{{device}} MOR")}, unit("short"))),
		pn(panel(17, "timeseries", "IPU region", []query{
			q(`zonefleet_node_ipu_used_blocks{`+nd+`}`, "{{node}}/{{device}} used"),
			q(`zonefleet_node_ipu_budget_blocks{`+nd+`}`, "{{node}}/{{device}} budget")}, unit("short"))),
		pn(panel(18, "timeseries", "Zones reset after a revoked grant", []query{q(`sum by (node) (increase(zonefleet_node_revoked_zone_resets_total{`+nd+`}`+ri+`))`, "{{node}}")},
			unit("short"))),
		row(102, "Write path"),
		pn(panel(7, "timeseries", "Write cache stalls", []query{
			q(`sum by (node) (rate(zonefleet_node_write_cache_stalls_total{`+nd+`}`+ri+`))`, "{{node}} stalls/s"),
			q(`sum by (node) (rate(zonefleet_node_write_cache_stall_seconds_total{`+nd+`}`+ri+`))`, "{{node}} stalled s/s")},
			unit("ops"), unitOf("B", "percentunit"))),
		pn(panel(8, "timeseries", "Admission control: paced writes", []query{
			q(`sum by (node) (rate(zonefleet_node_admission_stalls_total{`+nd+`}`+ri+`))`, "{{node}} paced/s"),
			q(`sum by (node) (rate(zonefleet_node_admission_stall_seconds_total{`+nd+`}`+ri+`))`, "{{node}} paced s/s")},
			unit("ops"), unitOf("B", "percentunit"))),
		pn(panel(20, "timeseries", "Backing-file fdatasyncs", []query{q(`sum by (node, file) (rate(zonefleet_node_fsyncs_total{`+nd+`}`+ri+`))`, "{{node}} {{file}}")},
			unit("ops"), desc("fdatasyncs of the drives' backing files (data, journal, owners); concurrent callers share one. A rate that grows with the write rate means small syncs on the write path."))),
		pn(panel(15, "timeseries", "NAND programs and erases", []query{
			q(`sum by (node) (rate(zonefleet_node_nand_programmed_pages_total{`+nd+`}`+ri+`))`, "{{node}} pages/s"),
			q(`sum by (node) (rate(zonefleet_node_erases_total{`+nd+`}`+ri+`))`, "{{node}} erases/s"),
			q(`sum by (node) (rate(zonefleet_node_host_written_blocks_total{`+nd+`}`+ri+`))`, "{{node}} host blocks/s")}, unit("ops"))),
		pn(panel(16, "timeseries", "TL plugging", []query{q(`sum by (when) (rate(zonefleet_node_plugged_blocks_total{`+nd+`}`+ri+`))`, "{{when}}")}, unit("ops"))),
		row(103, "I/O"),
		pn(panel(13, "timeseries", "I/O by op", []query{q(`sum by (op) (rate(zonefleet_node_io_total{`+sel("namespace", "node", "device")+`}`+ri+`))`, "{{op}}")}, unit("reqps"))),
		pn(panel(14, "timeseries", "Modelled device latency p99 by op", []query{q(`histogram_quantile(0.99, sum by (le, op) (rate(zonefleet_node_io_latency_seconds_bucket{`+sel("namespace", "node", "device")+`}`+ri+`)))`, "{{op}}")},
			unit("s"), thresholds(0.01, "orange", 0.1, "red"))),
		row(104, "Compaction"),
		pn(panel(10, "timeseries", "Copyback share of in-device copies", []query{q(`sum by (node) (zonefleet_node_device_copied_blocks_total{path="copyback", `+nd+`}) / sum by (node) (zonefleet_node_device_copied_blocks_total{`+nd+`})`, "{{node}}")},
			unit("percentunit"), maxv(1), desc("Blocks copied on-chip (copyback) over all blocks copied inside the drive (copyback + read-and-program), since start."))),
		pn(panel(11, "timeseries", "Compaction blocks by path", []query{q(`sum by (path) (rate(zonefleet_node_compaction_blocks_total{`+nd+`}`+ri+`)) or label_replace(sum(rate(zonefleet_node_peer_pushed_blocks_total{`+nd+`}`+ri+`)), "path", "remote", "", "")`, "{{path}}")},
			unit("ops"), stacked(), desc("Blocks of zone compactions served by the nodes: copyback and read_program inside a drive, remote = pushed to a peer node."))),
		pn(panel(12, "timeseries", "Blocks pushed to peers", []query{q(`sum by (node) (rate(zonefleet_node_peer_pushed_blocks_total{`+nd+`}`+ri+`))`, "{{node}}")}, unit("ops"))),
		pn(panel(19, "timeseries", "Rebuild traffic vs the node's rebuild rate", []query{
			q(`sum by (node) (rate(zonefleet_node_rebuild_bytes_total{`+sel("node")+`}`+ri+`))`, "{{node}} rebuild bytes/s"),
			q(`max by (node) (zonefleet_node_rebuild_rate_limit_bytes_per_second{`+sel("node")+`} > 0)`, "{{node}} limit (--rebuild-rate)"),
			q(`sum by (node) (rate(zonefleet_node_rebuild_throttled_seconds_total{`+sel("node")+`}`+ri+`))`, "{{node}} throttled s/s")},
			unit("Bps"), unitOf("C", "short"),
			desc("Bytes the node's drives read or write for rebuilds (mirror copies and raid5 legs, as source or target) against its --rebuild-rate, and the time rebuild I/O waited for it (per second; several rebuild streams can wait at once)."))),
		// FDP drives are numbered apart from the zoned drives (fdp0, fdp1,
		// ...): their panels filter on the node only.
		row(105, "FDP drives"),
		pn(panel(21, "timeseries", "FDP WAF (media / host bytes written)", []query{
			q(`sum by (node, device) (rate(zonefleet_fdp_media_bytes_total{`+sel("node")+`}`+ri+`)) / sum by (node, device) (rate(zonefleet_fdp_host_bytes_total{`+sel("node")+`}`+ri+`))`, "{{node}}/fdp{{device}}"),
			q(`zonefleet_fdp_write_amplification_ratio{`+sel("node")+`}`, "{{node}}/fdp{{device}} since start")},
			unit("none"), thresholds(2.0, "orange", 4.0, "red"),
			desc("Write amplification of the FDP drives over the interval (media bytes written, host writes and GC copies, over host bytes written) and over the drive's life (the statistics log page, zctl fdp stats). Near 1 when placement matches data lifetimes."))),
		pn(panel(22, "timeseries", "FDP bytes written and erased", []query{
			q(`sum by (node) (rate(zonefleet_fdp_host_bytes_total{`+sel("node")+`}`+ri+`))`, "{{node}} host written"),
			q(`sum by (node) (rate(zonefleet_fdp_media_bytes_total{`+sel("node")+`}`+ri+`))`, "{{node}} media written"),
			q(`sum by (node) (rate(zonefleet_fdp_media_erased_bytes_total{`+sel("node")+`}`+ri+`))`, "{{node}} media erased")},
			unit("Bps"), desc("The statistics log page as rates: host bytes written, media bytes written (host writes and GC copies), media bytes erased (reclaim units garbage collection freed)."))),
		pn(panel(23, "timeseries", "FDP garbage collection copies", []query{
			q(`sum by (node, device) (rate(zonefleet_fdp_gc_copies_total{`+sel("node")+`}`+ri+`))`, "{{node}}/fdp{{device}}")},
			unit("ops"), desc("Logical blocks the device-side garbage collection moved per second (copyback or read and program); each collection also erases its victim unit (media erased)."))),
		pn(panel(24, "timeseries", "FDP free reclaim units", []query{
			q(`zonefleet_fdp_free_reclaim_units{`+sel("node")+`}`, "{{node}}/fdp{{device}} group {{group}}")},
			unit("short"),
			desc("Free reclaim units (of the current size) per reclaim group; garbage collection keeps a reserve, so a group at 0 is out of reclaimable flash."))),
		pn(panel(25, "stat", "FDP drives read-only", []query{
			q(`max by (node, device) (zonefleet_fdp_read_only{`+sel("node")+`})`, "{{node}}/fdp{{device}}")},
			unit("none"), thresholds(1.0, "red"),
			desc("1 when a failed file operation made the drive read-only (every write, trim and flush fails until it is reopened)."))),
	)
}

func arbiter() Dashboard {
	i, n := sel("instance"), sel("namespace")
	return dashboard(ArbiterUID, "ZoneFleet / Arbiter",
		"The eZNS control plane: leader election, nodes, namespaces' essential and spare zones, stripe groups, allocation latency.", []string{"arbiter"},
		row(100, "Leadership and nodes"),
		pn(panel(1, "stat", "Leader", []query{q(`max by (arbiter) (zonefleet_arbiter_is_leader{`+i+`})`, "{{arbiter}}")},
			unit("none"), size(8, 4), thresholds(1.0, "blue"), desc("1: the arbiter leads. No 1 anywhere: alert ZoneFleetNoArbiterLeader."))),
		pn(panel(2, "stat", "Nodes (leader's view)", []query{q(`max by (state) (zonefleet_arbiter_nodes{`+i+`}`+leader+`)`, "{{state}}")},
			unit("none"), size(8, 4), linkTo(DrivesUID, "Drives"))),
		pn(panel(3, "stat", "Namespace operations (1h)", []query{q(`sum by (op) (increase(zonefleet_arbiter_namespace_operations_total{`+i+`}[1h]))`, "{{op}}")},
			unit("none"), size(8, 4))),
		row(101, "Namespaces"),
		pn(panel(4, "timeseries", "Essential zones per namespace", []query{q(`max by (namespace) (zonefleet_arbiter_namespace_essential_zones{`+n+`})`, "{{namespace}}")},
			unit("short"), desc("Falls when the cluster lost capacity and the namespace was re-provisioned with less (alert ZoneFleetNamespaceUnderProvisioned)."))),
		pn(panel(5, "timeseries", "Spares owned / lent / borrowed per namespace", []query{q(`max by (namespace, kind) (zonefleet_arbiter_namespace_spare_zones{kind=~"owned|lent|borrowed", `+n+`})`, "{{namespace}} {{kind}}")},
			unit("short"), desc("eZNS spares: owned by the namespace, lent to others, borrowed from others (global overdrive)."))),
		pn(panel(6, "timeseries", "Spares recalled / in use", []query{q(`max by (namespace, kind) (zonefleet_arbiter_namespace_spare_zones{kind=~"recalled|in_use", `+n+`})`, "{{namespace}} {{kind}}")},
			unit("short"))),
		pn(panel(7, "timeseries", "Open v-zones per namespace", []query{q(`max by (namespace) (zonefleet_arbiter_namespace_active_vzones{`+n+`})`, "{{namespace}}")}, unit("short"))),
		pn(panel(11, "timeseries", "Stripe-group allocations per namespace", []query{
			q(`sum by (namespace) (rate(zonefleet_arbiter_allocations_total{`+n+`}`+ri+`))`, "{{namespace}} groups/s"),
			q(`sum by (namespace) (rate(zonefleet_arbiter_allocated_zones_total{`+n+`}`+ri+`))`, "{{namespace}} zones/s")}, unit("ops"), size(24, 8))),
		row(102, "Stripe groups"),
		pn(panel(8, "timeseries", "Open stripe groups by width", []query{q(`sum by (width) (zonefleet_arbiter_open_stripe_groups{`+i+`}`+leader+`)`, "width {{width}}")},
			unit("short"), stacked())),
		pn(panel(9, "bargauge", "Allocated stripe widths (5m)", []query{q(`sum by (le) (increase(zonefleet_arbiter_stripe_width_zones_bucket{`+i+`}[5m]))`, "<= {{le}}")},
			unit("short"), desc("Cumulative histogram of the widths of stripe groups allocated in the last 5 minutes."))),
		pn(panel(10, "timeseries", "Overdrive and reclaim events", []query{q(`sum by (kind) (increase(zonefleet_arbiter_overdrive_events_total{`+i+`}`+ri+`))`, "{{kind}}")},
			unit("short"), desc("local: a group wider than the minimum; lend/recall/return: global overdrive of spares; reclaim: spares taken back from a read-only namespace."))),
		pn(panel(12, "timeseries", "Allocation latency", []query{
			q(`histogram_quantile(0.5, sum by (le) (rate(zonefleet_arbiter_allocation_duration_seconds_bucket{`+i+`}`+ri+`)))`, "p50"),
			q(`histogram_quantile(0.99, sum by (le) (rate(zonefleet_arbiter_allocation_duration_seconds_bucket{`+i+`}`+ri+`)))`, "p99")},
			unit("s"), thresholds(0.1, "orange", 1.0, "red"))),
		pn(panel(15, "timeseries", "Degraded and rebuilding (mirrored and raid5 namespaces)", []query{
			q(`max by (namespace) (zonefleet_arbiter_degraded_vzones{`+i+`}`+leader+`)`, "{{namespace}} degraded v-zones"),
			q(`max(zonefleet_arbiter_degraded_zones{`+i+`}`+leader+`)`, "copies and raid5 legs on down nodes waiting for rebuild")},
			unit("short"), thresholds(1.0, "orange", 100.0, "red"),
			desc("Degraded v-zones: a copy or raid5 leg on an unavailable or down node (alert ZoneFleetVZonesDegraded). Waiting: copies and raid5 legs on down nodes, not rebuilt elsewhere yet; each is one copy fewer of its leg, or a raid5 group one failure from losing data."))),
		pn(panel(16, "timeseries", "Rebuild throughput", []query{
			q(`sum(rate(zonefleet_arbiter_rebuild_blocks_total{`+i+`}`+ri+`))`, "blocks/s"),
			q(`sum by (outcome) (rate(zonefleet_arbiter_rebuilds_total{`+i+`}`+ri+`))`, "copies or legs/s {{outcome}}")},
			unit("short"), desc("Copies of lost mirrored legs and lost raid5 legs rebuilt node to node (one zone at a time), and their blocks."))),
		row(103, "gRPC and etcd"),
		pn(panel(13, "timeseries", "Arbiter gRPC by method", []query{q(`sum by (method, code) (rate(zonefleet_grpc_requests_total{job="arbiter", `+i+`}`+ri+`))`, "{{method}} {{code}}")}, unit("reqps"))),
		pn(panel(14, "timeseries", "etcd leader changes and proposals", []query{
			q(`max(etcd_server_leader_changes_seen_total{`+i+`})`, "leader changes"),
			q(`sum(rate(etcd_server_proposals_committed_total{`+i+`}`+ri+`))`, "proposals committed/s")},
			unit("short"), unitOf("B", "ops"), linkTo(ClusterUID, "Cluster overview (etcd quota)"))),
	)
}

func fs() Dashboard {
	i := sel("instance")
	return dashboard(FSUID, "ZoneFleet / File system",
		"The log-structured file system and the client library of a mount (`zctl mount --metrics-listen`, Prometheus job client). Filter by instance for one mount.", []string{"fs"},
		row(100, "Operations"),
		pn(panel(1, "timeseries", "File system ops", []query{q(`sum by (op) (rate(zonefleet_fs_operations_total{`+i+`}`+ri+`))`, "{{op}}")}, unit("ops"))),
		pn(panel(2, "timeseries", "File system op latency p99", []query{q(`histogram_quantile(0.99, sum by (le, op) (rate(zonefleet_fs_operation_duration_seconds_bucket{`+i+`}`+ri+`)))`, "{{op}}")},
			unit("s"), thresholds(0.1, "orange", 1.0, "red"))),
		pn(panel(14, "timeseries", "File system errors by op and errno", []query{q(`sum by (op, errno) (rate(zonefleet_fs_operation_errors_total{`+i+`}`+ri+`))`, "{{op}} {{errno}}")},
			unit("ops"), desc("ENOSPC (no space left on device): alert ZoneFleetFSNoSpace."))),
		pn(panel(15, "timeseries", "User bytes read / written", []query{q(`sum by (dir) (rate(zonefleet_fs_bytes_total{`+i+`}`+ri+`))`, "{{dir}}")}, unit("Bps"))),
		pn(panel(17, "timeseries", "Writes waiting for the write-back", []query{q(`sum by (instance) (rate(zonefleet_fs_write_throttled_seconds_total{`+i+`}`+ri+`))`, "{{instance}}")},
			unit("percentunit"), desc("Share of wall time writes waited for room in the dirty-page budget (1: one writer always waiting): the write-back to the drives is behind the writers."))),
		pn(panel(18, "timeseries", "Mount lease: fenced, renewals by result", []query{
			q(`max by (instance) (zonefleet_fs_mount_fenced{`+i+`})`, "{{instance}} fenced"),
			q(`sum by (instance, result) (rate(zonefleet_fs_mount_lease_renewals_total{`+i+`}`+ri+`))`, "{{instance}} renewals {{result}}")},
			unit("none"), thresholds(1.0, "red"), unitOf("B", "ops"),
			desc("fenced 1: the mount lost its namespace's mount lease (another mount took it over with --force-mount, or no renewal reached the arbiter for two thirds of the TTL) and stopped writing: the file system is read-only (alert ZoneFleetMountFenced). Renewals: ok about every 5 s; failed (the arbiter did not answer) or lost (another mount holds the lease): alert ZoneFleetMountLeaseRenewalsFailing."))),
		row(101, "Segments and recycling"),
		pn(panel(3, "timeseries", "Segments: free, dirty, log heads", []query{
			q(`zonefleet_fs_segments_free{`+i+`}`, "free"), q(`zonefleet_fs_segments_dirty{`+i+`}`, "dirty"), q(`zonefleet_fs_segments_active{`+i+`}`, "log heads")},
			unit("short"), desc("Few free segments: the file system nears ENOSPC (alert ZoneFleetFSNearFull)."))),
		pn(panel(4, "timeseries", "GC time by kind", []query{q(`sum by (kind) (rate(zonefleet_fs_gc_duration_seconds_sum{`+i+`}`+ri+`))`, "{{kind}}")},
			unit("percentunit"), thresholds(0.5, "red"),
			desc("Share of wall time spent recycling segments: foreground or background. Foreground above half: alert ZoneFleetFSGCNotKeepingUp."))),
		pn(panel(5, "timeseries", "Blocks moved by GC, by path", []query{q(`sum by (path) (rate(zonefleet_fs_gc_blocks_moved_total{`+i+`}`+ri+`))`, "{{path}}")},
			unit("ops"), stacked(), desc("izc (the drives copy: copyback, read-and-program or node to node), host_copy, host_dirty, host_cached."))),
		pn(panel(6, "timeseries", "File system WAF", []query{q(`zonefleet_fs_write_amplification_ratio{`+i+`}`, "WAF (drive blocks / user blocks)")},
			unit("none"), thresholds(2.0, "orange", 4.0, "red"))),
		pn(panel(13, "timeseries", "GC runs by kind and method", []query{q(`sum by (kind, method) (rate(zonefleet_fs_gc_runs_total{`+i+`}`+ri+`))`, "{{kind}} {{method}}")}, unit("ops"))),
		pn(panel(16, "timeseries", "Blocks written by kind, checkpoints", []query{
			q(`sum by (kind) (rate(zonefleet_fs_blocks_written_total{`+i+`}`+ri+`))`, "{{kind}} blocks/s"),
			q(`sum(rate(zonefleet_fs_checkpoints_total{`+i+`}`+ri+`))`, "checkpoints/s")}, unit("ops"))),
		row(102, "Client library"),
		pn(panel(7, "timeseries", "Client v-zone ops (the mount's client library)", []query{q(`sum by (op) (rate(zonefleet_client_ops_total{`+i+`}`+ri+`))`, "{{op}}")}, unit("ops"))),
		pn(panel(8, "timeseries", "Client v-zone op latency p99", []query{q(`histogram_quantile(0.99, sum by (le, op) (rate(zonefleet_client_op_duration_seconds_bucket{`+i+`}`+ri+`)))`, "{{op}}")},
			unit("s"), thresholds(0.1, "orange", 1.0, "red"))),
		pn(panel(9, "timeseries", "Client bytes by op", []query{q(`sum by (op) (rate(zonefleet_client_bytes_total{`+i+`}`+ri+`))`, "{{op}}")}, unit("Bps"))),
		pn(panel(10, "timeseries", "Client compaction blocks by path", []query{q(`sum by (path) (rate(zonefleet_client_compaction_blocks_total{`+i+`}`+ri+`))`, "{{path}}")},
			unit("ops"), stacked(), linkTo(DrivesUID, "Drives (compaction)"))),
		pn(panel(11, "timeseries", "Client retries", []query{q(`sum by (op) (rate(zonefleet_client_retries_total{`+i+`}`+ri+`))`, "{{op}}")}, unit("ops"))),
		pn(panel(12, "timeseries", "Read congestion control", []query{
			q(`sum(rate(zonefleet_client_read_window_decreases_total{`+i+`}`+ri+`))`, "window decreases/s"),
			q(`sum(rate(zonefleet_client_read_window_waits_total{`+i+`}`+ri+`))`, "reads waiting/s"),
			q(`histogram_quantile(0.5, sum by (le) (rate(zonefleet_client_read_window_ratio_bucket{`+i+`}`+ri+`)))`, "median window / width")},
			unit("ops"), unitOf("C", "percentunit"))),
	)
}
