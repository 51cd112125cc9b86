// Package testcluster is the one way tests start an in-process cluster:
// an embedded etcd, arbiters and ssdnodes over real gRPC
// (pkg/localcluster), with the clients the test needs, every one of them
// closed when the test ends (t.Cleanup), so the test mains' leak checks
// (internal/leakcheck) see nothing left running.
//
// Defaults suit unit and integration tests: the cluster's clock is off
// (time-dependent logic takes a clock.Virtual of the test's own, not the
// cluster's), the drives are localcluster.TinyDevice, and the data lives
// in t.TempDir(). Security (TLS, tokens) is on unless the configuration
// says Insecure; redundancy is a property of the namespace the test
// creates (CreateNamespaceRequest's fields).
package testcluster

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// LeaseTTL is the arbiters' leadership lease and the nodes' registration
// lease in a test cluster. A stopped arbiter or node revokes its lease at
// once, so a test's failover does not wait for it; it only has to outlast
// the longest stall of a keep-alive on a saturated machine (the race
// detector, tens of runnable processes on two cores), which a one- or
// two-second lease does not.
const LeaseTTL = 10 * time.Second

// Start starts a cluster of cfg and closes it when the test ends. Zero
// fields take the test defaults: Dir t.TempDir(), Clock "off", Device
// localcluster.TinyDevice(), SessionTTL and NodeLeaseTTL LeaseTTL; the
// rest take localcluster's defaults.
func Start(t testing.TB, cfg localcluster.Config) *localcluster.Cluster {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Clock == "" {
		cfg.Clock = "off"
	}
	if cfg.Device.Channels == 0 {
		cfg.Device = localcluster.TinyDevice()
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = LeaseTTL
	}
	if cfg.NodeLeaseTTL == 0 {
		cfg.NodeLeaseTTL = LeaseTTL
	}
	c, err := localcluster.Start(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Client returns a client of namespace ns (the operator's for ""), with
// the cluster's credentials and each of mods applied to its
// configuration; it is closed when the test ends.
func Client(t testing.TB, c *localcluster.Cluster, ns string, mods ...func(*client.Config)) *client.Client {
	t.Helper()
	cfg := c.ClientConfig(ns)
	for _, m := range mods {
		m(&cfg)
	}
	cl, err := client.New(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// CreateNamespace creates a namespace as the operator (a short-lived
// admin client).
func CreateNamespace(t testing.TB, c *localcluster.Cluster, req *v1.CreateNamespaceRequest) {
	t.Helper()
	ctx := context.Background()
	admin, err := client.New(ctx, c.AdminClientConfig())
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.Namespaces().Create(ctx, req)
	require.NoError(t, err)
}

// Tenant starts a cluster of cfg (as Start), creates the namespace req
// and returns the cluster and a client of that namespace (mods as for
// Client).
func Tenant(t testing.TB, cfg localcluster.Config, req *v1.CreateNamespaceRequest, mods ...func(*client.Config)) (*localcluster.Cluster, *client.Client) {
	t.Helper()
	c := Start(t, cfg)
	CreateNamespace(t, c, req)
	return c, Client(t, c, req.GetName(), mods...)
}

// RetryDeadline sets a client's retry deadline (a Client modifier).
func RetryDeadline(d time.Duration) func(*client.Config) {
	return func(cfg *client.Config) { cfg.RetryDeadline = d }
}

// WithEtcd gives a client the cluster's etcd endpoints (a Client
// modifier), for the clients that watch layouts there.
func WithEtcd(c *localcluster.Cluster) func(*client.Config) {
	return func(cfg *client.Config) { cfg.Etcd = c.Etcd.Endpoints() }
}

// WithClock puts a client's waits (backoff, retry deadlines, a mount
// lease's age) on clk, e.g. a clock.Virtual the test moves (a Client
// modifier).
func WithClock(clk clock.Clock) func(*client.Config) {
	return func(cfg *client.Config) { cfg.Clock = clk }
}

// WithRegisterer registers a client's metrics with reg (a Client modifier).
func WithRegisterer(reg prometheus.Registerer) func(*client.Config) {
	return func(cfg *client.Config) { cfg.Registerer = reg }
}
