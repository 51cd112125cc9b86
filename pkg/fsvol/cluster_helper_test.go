package fsvol_test

import (
	"testing"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/internal/testcluster"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// tenantCluster starts an in-process cluster of nodes (tiny drives, no drive
// clock) with namespace ns, and returns it with a client of ns. Both close
// when the test ends.
func tenantCluster(t testing.TB, nodes int, ns string, maxActive, zonesPerVZone uint32) (*localcluster.Cluster, *client.Client) {
	t.Helper()
	return tenantClusterWith(t, localcluster.Config{Nodes: nodes}, ns, maxActive, zonesPerVZone)
}

// tenantClusterWith is tenantCluster with more of the cluster's
// configuration (Dir, Clock and Device are set here).
func tenantClusterWith(t testing.TB, cfg localcluster.Config, ns string, maxActive, zonesPerVZone uint32) (*localcluster.Cluster, *client.Client) {
	t.Helper()
	return testcluster.Tenant(t, cfg, &v1.CreateNamespaceRequest{Name: ns, MaxActiveVzones: maxActive, ZonesPerVzone: zonesPerVZone})
}
