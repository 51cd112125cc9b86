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
	mrand "math/rand/v2"
	"net"
	"strconv"
	"strings"
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
// localcluster.TinyDevice(), SessionTTL and NodeLeaseTTL LeaseTTL,
// BasePort a free block of ports below the kernel's ephemeral range (see
// pickBasePort); the rest take localcluster's defaults.
func Start(t testing.TB, cfg localcluster.Config) *localcluster.Cluster {
	t.Helper()
	ownDir := cfg.Dir == ""
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
	pick := cfg.BasePort == 0 && cfg.Nodes <= maxNodes && cfg.Arbiters <= maxArbiters
	for attempt := 1; ; attempt++ {
		if ownDir {
			cfg.Dir = t.TempDir() // a fresh one for every attempt
		}
		if pick {
			cfg.BasePort = pickBasePort(cfg)
		}
		c, err := localcluster.Start(context.Background(), cfg)
		if err != nil && pick && ownDir && attempt < 10 && strings.Contains(err.Error(), "address already in use") {
			continue // another process took a port of the block meanwhile
		}
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
}

// The ports of a cluster with a BasePort (localcluster.Config): etcd at
// the base, arbiter i at base+10+2i, node i at base+30+2i (each with its
// metrics port next to it), so a block of 100 holds up to 10 arbiters and
// 35 nodes.
const (
	maxArbiters, maxNodes = 10, 35
	// blocks of 100 ports from 10000 to 31999: below Linux's ephemeral
	// range (32768-60999), from which the kernel picks the ports of
	// outgoing connections and of listeners on port 0
	lowBase, baseBlocks = 10000, 220
)

// pickBasePort returns a random base whose ports are free now. A node
// restarts on the address it had (clients and layouts name it), and a
// port picked by listening on port 0 is in the ephemeral range: while the
// node is stopped, any outgoing connection on the host may take it, and
// the restart fails ("address already in use"). Ports below that range
// are only taken by listeners that name them.
func pickBasePort(cfg localcluster.Config) int {
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	ports := func(base int) []int {
		out := []int{base}
		for i := 0; i < cfg.Arbiters; i++ {
			out = append(out, base+10+2*i, base+11+2*i)
		}
		for i := 0; i < cfg.Nodes; i++ {
			out = append(out, base+30+2*i, base+31+2*i)
		}
		return out
	}
	for {
		base := lowBase + 100*mrand.IntN(baseBlocks)
		free := true
		for _, p := range ports(base) {
			l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
			if err != nil {
				free = false
				break
			}
			_ = l.Close()
		}
		if free {
			return base
		}
	}
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
