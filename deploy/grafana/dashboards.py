#!/usr/bin/env python3
"""Generates deploy/grafana/dashboards/*.json: the ZoneFleet Grafana dashboards.

Edit the panels here and run `python3 deploy/grafana/dashboards.py`; commit
both. Dashboard uids are stable (links and the panel test in test/deploy use
them); panel ids are stable within a dashboard (the test names a panel as
<dashboard uid>/<panel id>). Queries use fixed [1m]/[5m] windows (no Grafana
template variables) so the test can send them to Prometheus verbatim.
"""
import json
import os

DS = {"type": "prometheus", "uid": "zonefleet-prometheus"}
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboards")


def panel(pid, title, targets, kind="timeseries", unit=None, w=12, h=8, desc=None, stack=False, maxv=None):
    p = {
        "id": pid,
        "type": kind,
        "title": title,
        "datasource": DS,
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DS, "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {},
        "_size": (w, h),
    }
    if desc:
        p["description"] = desc
    if unit:
        p["fieldConfig"]["defaults"]["unit"] = unit
    if maxv is not None:
        p["fieldConfig"]["defaults"]["max"] = maxv
        p["fieldConfig"]["defaults"]["min"] = 0
    if kind == "timeseries":
        p["fieldConfig"]["defaults"]["custom"] = {"lineWidth": 1, "fillOpacity": 10 if not stack else 60,
                                                  "stacking": {"mode": "normal" if stack else "none"}}
        p["options"] = {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull"]},
                        "tooltip": {"mode": "multi"}}
    if kind == "stat":
        p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value", "graphMode": "area"}
    if kind == "table":
        p["targets"][0]["format"] = "table"
        p["targets"][0]["instant"] = True
    return p


def dashboard(uid, title, panels, tags):
    x = y = 0
    rowh = 0
    out = []
    for p in panels:
        w, h = p.pop("_size")
        if x + w > 24:
            x, y, rowh = 0, y + rowh, 0
        p["gridPos"] = {"x": x, "y": y, "w": w, "h": h}
        x += w
        rowh = max(rowh, h)
        out.append(p)
    return {
        "uid": uid,
        "title": title,
        "tags": ["zonefleet"] + tags,
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": False,
        "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "templating": {"list": []},
        "annotations": {"list": []},
        "links": [{"type": "dashboards", "tags": ["zonefleet"], "asDropdown": True, "title": "ZoneFleet"}],
        "panels": out,
    }


cluster = dashboard("zonefleet-cluster", "ZoneFleet / Cluster overview", [
    panel(1, "Nodes available (leader's view)", [('max(zonefleet_arbiter_nodes{state="available"} and on(instance) zonefleet_arbiter_is_leader == 1)', "available")], "stat", w=4, h=4),
    panel(2, "Nodes unavailable", [('max(zonefleet_arbiter_nodes{state="unavailable"} and on(instance) zonefleet_arbiter_is_leader == 1)', "unavailable")], "stat", w=4, h=4),
    panel(3, "Namespaces", [("count(max by (namespace) (zonefleet_arbiter_namespace_essential_zones))", "namespaces")], "stat", w=4, h=4),
    panel(4, "Arbiter leader", [('max by (arbiter) (zonefleet_arbiter_is_leader) == 1', "{{arbiter}}")], "stat", w=4, h=4),
    panel(5, "Zones used (all drives)", [('sum(zonefleet_node_zones{state!="empty"}) / sum(zonefleet_node_zones)', "used")], "stat", unit="percentunit", w=4, h=4),
    panel(6, "Processes up", [('sum by (component) (up{component!="client"})', "{{component}}")], "stat", w=4, h=4),
    panel(7, "Capacity: zones by state", [("sum by (state) (zonefleet_node_zones)", "{{state}}")], stack=True,
          desc="Physical zones of every drive of every node, by zone state."),
    panel(8, "Host bytes written / read", [('sum by (op) (rate(zonefleet_node_io_bytes_total{op=~"write|append|read"}[1m]))', "{{op}}")], unit="Bps"),
    panel(9, "Errors: failed node I/O by code", [("sum by (node, code) (rate(zonefleet_node_io_errors_total[1m]))", "{{node}} {{code}}")], unit="reqps",
          desc="Failed I/O requests by gRPC code (FAILED_PRECONDITION: write-pointer or zone-state errors of clients; UNAVAILABLE/DATA_LOSS: drive trouble)."),
    panel(10, "Errors: gRPC requests not OK", [('sum by (component, code) (rate(zonefleet_grpc_requests_total{code!="OK"}[1m]))', "{{component}} {{code}}")], unit="reqps"),
    panel(11, "gRPC requests by process", [("sum by (job, instance) (rate(zonefleet_grpc_requests_total[1m]))", "{{job}} {{instance}}")], unit="reqps"),
    panel(12, "Essential + spare zones per namespace", [('max by (namespace) (zonefleet_arbiter_namespace_essential_zones)', "{{namespace}} essential"),
                                                         ('max by (namespace) (zonefleet_arbiter_namespace_spare_zones{kind="provisioned"})', "{{namespace}} spares")]),
    panel(13, "etcd: has leader, leader changes", [("min(etcd_server_has_leader)", "has leader (min over members)"),
                                                   ("max(etcd_server_leader_changes_seen_total)", "leader changes")]),
    panel(14, "Build", [("zonefleet_build_info", "")], "table"),
], ["overview"])

drives = dashboard("zonefleet-drives", "ZoneFleet / Drives", [
    panel(1, "Chip utilization (mean per drive)", [("avg by (node, device) (zonefleet_node_chip_utilization_ratio)", "{{node}}/{{device}}")], unit="percentunit", maxv=1,
          desc="Busy share of modelled time per chip (die), averaged over a drive's chips."),
    panel(2, "Chip utilization per chip", [("zonefleet_node_chip_utilization_ratio", "{{node}}/{{device}} chip {{chip}}")], unit="percentunit", maxv=1),
    panel(3, "WAF (NAND programmed / host written)", [("zonefleet_node_waf_ratio", "{{node}}/{{device}}")]),
    panel(4, "Zones by state", [("sum by (state) (zonefleet_node_zones)", "{{state}}")], stack=True),
    panel(5, "Active zones vs MAR", [("zonefleet_node_active_zones", "{{node}}/{{device}} active"),
                                     ("zonefleet_node_max_active_zones", "{{node}}/{{device}} MAR")]),
    panel(6, "Open zones vs MOR", [("zonefleet_node_open_zones", "{{node}}/{{device}} open"),
                                   ("zonefleet_node_max_open_zones", "{{node}}/{{device}} MOR")]),
    panel(7, "Write cache stalls", [("sum by (node) (rate(zonefleet_node_write_cache_stalls_total[1m]))", "{{node}} stalls/s"),
                                    ("sum by (node) (rate(zonefleet_node_write_cache_stall_seconds_total[1m]))", "{{node}} stalled s/s")]),
    panel(8, "Admission control: paced writes", [("sum by (node) (rate(zonefleet_node_admission_stalls_total[1m]))", "{{node}} paced/s"),
                                                 ("sum by (node) (rate(zonefleet_node_admission_stall_seconds_total[1m]))", "{{node}} paced s/s")]),
    panel(9, "Write cache occupancy", [("zonefleet_node_write_cache_bytes / zonefleet_node_write_cache_capacity_bytes", "{{node}}/{{device}}")], unit="percentunit", maxv=1),
    panel(10, "Copyback share of in-device copies", [('sum by (node) (zonefleet_node_device_copied_blocks_total{path="copyback"}) / sum by (node) (zonefleet_node_device_copied_blocks_total)', "{{node}}")],
          unit="percentunit", maxv=1, desc="Blocks copied on-chip (copyback) over all blocks copied inside the drive (copyback + read-and-program), since start."),
    panel(11, "Compaction blocks by path", [('sum by (path) (rate(zonefleet_node_compaction_blocks_total[1m])) or label_replace(sum(rate(zonefleet_node_peer_pushed_blocks_total[1m])), "path", "remote", "", "")', "{{path}}")], stack=True,
          desc="Blocks of zone compactions served by the nodes: copyback and read_program inside a drive, remote = pushed to a peer node."),
    panel(12, "Blocks pushed to peers", [("sum by (node) (rate(zonefleet_node_peer_pushed_blocks_total[1m]))", "{{node}}")]),
    panel(13, "I/O by op", [("sum by (op) (rate(zonefleet_node_io_total[1m]))", "{{op}}")], unit="reqps"),
    panel(14, "Modelled device latency p99 by op", [("histogram_quantile(0.99, sum by (le, op) (rate(zonefleet_node_io_latency_seconds_bucket[1m])))", "{{op}}")], unit="s"),
    panel(15, "NAND programs and erases", [("sum by (node) (rate(zonefleet_node_nand_programmed_pages_total[1m]))", "{{node}} pages/s"),
                                           ("sum by (node) (rate(zonefleet_node_erases_total[1m]))", "{{node}} erases/s"),
                                           ("sum by (node) (rate(zonefleet_node_host_written_blocks_total[1m]))", "{{node}} host blocks/s")]),
    panel(16, "TL plugging", [("sum by (when) (rate(zonefleet_node_plugged_blocks_total[1m]))", "{{when}}")]),
    panel(17, "IPU region", [("zonefleet_node_ipu_used_blocks", "{{node}}/{{device}} used"), ("zonefleet_node_ipu_budget_blocks", "{{node}}/{{device}} budget")]),
    panel(18, "Zones reset after a revoked grant", [("sum by (node) (increase(zonefleet_node_revoked_zone_resets_total[5m]))", "{{node}}")]),
], ["drives"])

arbiter = dashboard("zonefleet-arbiter", "ZoneFleet / Arbiter", [
    panel(1, "Leader", [("max by (arbiter) (zonefleet_arbiter_is_leader)", "{{arbiter}}")], "stat", w=8, h=4),
    panel(2, "Nodes (leader's view)", [("max by (state) (zonefleet_arbiter_nodes and on(instance) zonefleet_arbiter_is_leader == 1)", "{{state}}")], "stat", w=8, h=4),
    panel(3, "Namespace operations (1h)", [("sum by (op) (increase(zonefleet_arbiter_namespace_operations_total[1h]))", "{{op}}")], "stat", w=8, h=4),
    panel(4, "Essential zones per namespace", [("max by (namespace) (zonefleet_arbiter_namespace_essential_zones)", "{{namespace}}")]),
    panel(5, "Spares owned / lent / borrowed per namespace", [('max by (namespace, kind) (zonefleet_arbiter_namespace_spare_zones{kind=~"owned|lent|borrowed"})', "{{namespace}} {{kind}}")],
          desc="eZNS spares: owned by the namespace, lent to others, borrowed from others (global overdrive)."),
    panel(6, "Spares recalled / in use", [('max by (namespace, kind) (zonefleet_arbiter_namespace_spare_zones{kind=~"recalled|in_use"})', "{{namespace}} {{kind}}")]),
    panel(7, "Open v-zones per namespace", [("max by (namespace) (zonefleet_arbiter_namespace_active_vzones)", "{{namespace}}")]),
    panel(8, "Open stripe groups by width", [("sum by (width) (zonefleet_arbiter_open_stripe_groups and on(instance) zonefleet_arbiter_is_leader == 1)", "width {{width}}")], stack=True),
    panel(9, "Allocated stripe widths (5m)", [("sum by (le) (increase(zonefleet_arbiter_stripe_width_zones_bucket[5m]))", "<= {{le}}")], "bargauge",
          desc="Cumulative histogram of the widths of stripe groups allocated in the last 5 minutes."),
    panel(10, "Overdrive and reclaim events (5m)", [("sum by (kind) (increase(zonefleet_arbiter_overdrive_events_total[5m]))", "{{kind}}")],
          desc="local: a group wider than the minimum; lend/recall/return: global overdrive of spares; reclaim: spares taken back from a read-only namespace."),
    panel(11, "Stripe-group allocations per namespace", [("sum by (namespace) (rate(zonefleet_arbiter_allocations_total[1m]))", "{{namespace}} groups/s"),
                                                         ("sum by (namespace) (rate(zonefleet_arbiter_allocated_zones_total[1m]))", "{{namespace}} zones/s")]),
    panel(12, "Allocation latency", [("histogram_quantile(0.5, sum by (le) (rate(zonefleet_arbiter_allocation_duration_seconds_bucket[5m])))", "p50"),
                                     ("histogram_quantile(0.99, sum by (le) (rate(zonefleet_arbiter_allocation_duration_seconds_bucket[5m])))", "p99")], unit="s"),
    panel(13, "Arbiter gRPC by method", [('sum by (method, code) (rate(zonefleet_grpc_requests_total{job="arbiter"}[1m]))', "{{method}} {{code}}")], unit="reqps"),
    panel(14, "etcd leader changes and proposals", [("max(etcd_server_leader_changes_seen_total)", "leader changes"),
                                                    ("sum(rate(etcd_server_proposals_committed_total[1m]))", "proposals committed/s")]),
], ["arbiter"])

fs = dashboard("zonefleet-fs", "ZoneFleet / File system", [
    # zonefleet_fs_* are pkg/lfs's metrics (names as on main), served with the
    # client's by `zctl mount --metrics-listen 127.0.0.1:7901` (job "client").
    panel(1, "File system ops", [("sum by (op) (rate(zonefleet_fs_operations_total[1m]))", "{{op}}")], unit="ops"),
    panel(2, "File system op latency p99", [("histogram_quantile(0.99, sum by (le, op) (rate(zonefleet_fs_operation_duration_seconds_bucket[1m])))", "{{op}}")], unit="s"),
    panel(3, "Segments: free, dirty, log heads", [("zonefleet_fs_segments_free", "free"), ("zonefleet_fs_segments_dirty", "dirty"), ("zonefleet_fs_segments_active", "log heads")]),
    panel(4, "GC time by kind", [("sum by (kind) (rate(zonefleet_fs_gc_duration_seconds_sum[1m]))", "{{kind}}")], unit="percentunit",
          desc="Share of wall time spent recycling segments: foreground or background."),
    panel(5, "Blocks moved by GC, by path", [("sum by (path) (rate(zonefleet_fs_gc_blocks_moved_total[1m]))", "{{path}}")], stack=True,
          desc="izc (the drives copy: copyback, read-and-program or node to node), host_copy, host_dirty, host_cached."),
    panel(6, "File system WAF", [("zonefleet_fs_write_amplification_ratio", "WAF (drive blocks / user blocks)")]),
    panel(7, "Client v-zone ops (the mount's client library)", [("sum by (op) (rate(zonefleet_client_ops_total[1m]))", "{{op}}")], unit="ops"),
    panel(8, "Client v-zone op latency p99", [("histogram_quantile(0.99, sum by (le, op) (rate(zonefleet_client_op_duration_seconds_bucket[1m])))", "{{op}}")], unit="s"),
    panel(9, "Client bytes by op", [("sum by (op) (rate(zonefleet_client_bytes_total[1m]))", "{{op}}")], unit="Bps"),
    panel(10, "Client compaction blocks by path", [("sum by (path) (rate(zonefleet_client_compaction_blocks_total[1m]))", "{{path}}")], stack=True),
    panel(11, "Client retries", [("sum by (op) (rate(zonefleet_client_retries_total[1m]))", "{{op}}")]),
    panel(12, "Read congestion control", [("rate(zonefleet_client_read_window_decreases_total[1m])", "window decreases/s"),
                                          ("rate(zonefleet_client_read_window_waits_total[1m])", "reads waiting/s"),
                                          ("histogram_quantile(0.5, sum by (le) (rate(zonefleet_client_read_window_ratio_bucket[5m])))", "median window / width")]),
    panel(13, "GC runs by kind and method", [("sum by (kind, method) (rate(zonefleet_fs_gc_runs_total[1m]))", "{{kind}} {{method}}")]),
    panel(14, "File system errors by op and errno", [("sum by (op, errno) (rate(zonefleet_fs_operation_errors_total[1m]))", "{{op}} {{errno}}")]),
    panel(15, "User bytes read / written", [("sum by (dir) (rate(zonefleet_fs_bytes_total[1m]))", "{{dir}}")], unit="Bps"),
    panel(16, "Blocks written by kind, checkpoints", [("sum by (kind) (rate(zonefleet_fs_blocks_written_total[1m]))", "{{kind}} blocks/s"),
                                                     ("rate(zonefleet_fs_checkpoints_total[1m])", "checkpoints/s")]),
], ["fs"])

os.makedirs(OUT, exist_ok=True)
for d in (cluster, drives, arbiter, fs):
    with open(os.path.join(OUT, d["uid"] + ".json"), "w") as f:
        json.dump(d, f, indent=2, sort_keys=True)
        f.write("\n")
    print(d["uid"], len(d["panels"]), "panels")
