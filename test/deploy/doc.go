// Package deploy checks deploy/: the compose cluster, its Prometheus config
// and the Grafana dashboards.
//
// Without build tags (plain `go test ./...`) only the static checks run: the
// dashboards are well formed and every metric name in the source is in the
// metrics table in docs/operations.md.
//
// With `-tags deploy` and ZONEFLEET_DEPLOY_TEST=1 (`make test-deploy`) the
// suite brings up deploy/docker-compose.yml from scratch (it deletes the
// zonefleet_* volumes first and at the end; ZONEFLEET_DEPLOY_KEEP=1 leaves the
// cluster running), then:
//
//   - TestDashboards: runs a workload through pkg/client, scrapes the cluster
//     with a real prometheus binary (Debian's `prometheus` package; $PROMETHEUS
//     names another) using deploy/prometheus/prometheus.yml, and fails on any
//     dashboard panel query that returns no series, except the panels listed
//     in exemptPanels with their reason;
//   - TestExportedMetricsAreDocumented: every zonefleet_* metric the running
//     processes (and the client library) export is in docs/operations.md;
//   - the failure drills TestDrill*: arbiter leader killed under load, ssdnode
//     killed under load and restarted, ssdnode partitioned (docker pause) and
//     back, whole-cluster restart, etcd quorum lost (the healthchecks fail)
//     and regained.
//
// Needs docker and `docker compose` or docker-compose (ZONEFLEET_COMPOSE names
// the command), the image zonefleet:dev (`make images`), and free host ports
// (see deploy/README.md).
package deploy
