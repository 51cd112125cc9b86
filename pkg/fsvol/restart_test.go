package fsvol_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// A cluster restarted on the same directory (zctl local up again; here on
// free ports picked anew, so no other process can hold them) serves reads
// of v-zones written before, including after v-zone resets: the nodes'
// grant caches catch up with the layouts' etcd revision through a watch
// progress notification. (A progress request sent on another watch stream
// than the grants' would leave the nodes waiting forever.)
func TestReadAfterResetAndRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := localcluster.Config{Dir: dir, Nodes: 2, Clock: "off", Device: localcluster.TinyDevice()}
	cl, err := localcluster.Start(ctx, cfg)
	require.NoError(t, err)
	admin, err := client.New(ctx, cl.AdminClientConfig())
	require.NoError(t, err)
	_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "ns", MaxActiveVzones: 4, ZonesPerVzone: 4})
	require.NoError(t, err)
	admin.Close()
	c, err := client.New(ctx, cl.ClientConfig("ns"))
	require.NoError(t, err)
	block := make([]byte, 4096)
	a, err := c.OpenVZone(ctx)
	require.NoError(t, err)
	b, err := c.OpenVZone(ctx)
	require.NoError(t, err)
	require.NoError(t, a.Write(ctx, 0, block))
	require.NoError(t, b.Write(ctx, 0, block))
	require.NoError(t, a.Reset(ctx))
	a2, err := c.OpenVZone(ctx)
	require.NoError(t, err)
	require.NoError(t, a2.Write(ctx, 0, block))
	c.Close()
	require.NoError(t, cl.Close())

	cl, err = localcluster.Start(ctx, cfg)
	require.NoError(t, err)
	defer cl.Close()
	ccfg := cl.ClientConfig("ns")
	ccfg.RetryDeadline = 10 * time.Second
	c, err = client.New(ctx, ccfg)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.VZone(b.ID()).Read(ctx, 0, 1)
	assert.NoError(t, err, "read after the restart")
}
