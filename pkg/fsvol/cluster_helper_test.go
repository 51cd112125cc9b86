package fsvol_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
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
	ctx := context.Background()
	cfg.Dir, cfg.Clock, cfg.Device = t.TempDir(), "off", localcluster.TinyDevice()
	cl, err := localcluster.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	admin, err := client.New(ctx, cl.AdminClientConfig())
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: ns, MaxActiveVzones: maxActive, ZonesPerVzone: zonesPerVZone})
	require.NoError(t, err)
	c, err := client.New(ctx, cl.ClientConfig(ns))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return cl, c
}
