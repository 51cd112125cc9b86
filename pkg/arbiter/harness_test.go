package arbiter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/zonefleet/zonefleet/internal/leakcheck"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// One embedded etcd for the package; every test works under its own key
// prefix through a namespaced client.
var etcdEndpoint string

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func TestMain(m *testing.M) {
	cowCheck = true
	dir, err := os.MkdirTemp("", "arbiter-etcd-")
	if err != nil {
		panic(err)
	}
	var e *embed.Etcd
	for try := 0; try < 5; try++ {
		cp, err1 := freePort()
		pp, err2 := freePort()
		if err1 != nil || err2 != nil {
			panic(errors.Join(err1, err2))
		}
		cfg := embed.NewConfig()
		cfg.Dir = dir + fmt.Sprintf("/%d", try)
		cu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", cp))
		pu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", pp))
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
		cfg.InitialCluster = cfg.Name + "=" + pu.String()
		cfg.LogLevel = "error"
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		e, err = embed.StartEtcd(cfg)
		if err != nil {
			continue
		}
		select {
		case <-e.Server.ReadyNotify():
			etcdEndpoint = cu.String()
		case <-time.After(60 * time.Second):
			e.Close()
			err = errors.New("etcd did not start")
			continue
		}
		break
	}
	if etcdEndpoint == "" {
		panic(fmt.Sprintf("embedded etcd: %v", err))
	}
	leakcheck.Main(m, func() {
		e.Close()
		os.RemoveAll(dir)
	})
}

var testSeq atomic.Int64

// newClient returns a client whose keys live under pfx.
func newClient(t *testing.T, pfx string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdEndpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	cli.KV = namespace.NewKV(cli.KV, pfx)
	cli.Watcher = namespace.NewWatcher(cli.Watcher, pfx)
	cli.Lease = namespace.NewLease(cli.Lease, pfx)
	return cli
}

// fakeClock is an injectable now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type testArb struct {
	*Arbiter
	cli    *clientv3.Client
	cancel context.CancelFunc
	done   chan struct{}
	reg    *prometheus.Registry
	srv    *grpc.Server // set by startServed
}

type testCluster struct {
	t     *testing.T
	pfx   string
	cli   *clientv3.Client // test's own client (nodes, inspection)
	clock *fakeClock
	comp  Compactor
	mu    sync.Mutex
	arbs  []*testArb
	cfg   func(*Config)
}

func newTestCluster(t *testing.T) *testCluster {
	pfx := fmt.Sprintf("/t%d-%s", testSeq.Add(1), t.Name())
	tc := &testCluster{t: t, pfx: pfx, cli: newClient(t, pfx),
		clock: &fakeClock{t: time.Date(2026, 11, 22, 20, 0, 0, 0, time.UTC)}}
	t.Cleanup(func() {
		tc.mu.Lock()
		arbs := tc.arbs
		tc.mu.Unlock()
		for _, a := range arbs {
			a.stop()
		}
		tc.cli.Close()
	})
	return tc
}

// testSessionTTL is the replicas' leadership lease: long enough that no
// stall of a saturated machine lets a live leader's lease expire between
// two keep-alives. A graceful stop revokes it at once; a kill leaves it to
// expire, so a failover after a kill takes about this long.
const testSessionTTL = 10 * time.Second

// start starts an arbiter replica with its own etcd client.
func (tc *testCluster) start(addr string) *testArb {
	tc.t.Helper()
	reg := prometheus.NewRegistry()
	cfg := Config{Addr: addr, SessionTTL: testSessionTTL, Now: tc.clock.Now, TReadOnly: time.Minute,
		ReclaimInterval: -1, RebuildInterval: -1, Registerer: reg, Logger: discardLogger()}
	if tc.cfg != nil {
		tc.cfg(&cfg)
	}
	cli := newClient(tc.t, tc.pfx)
	a, err := New(cfg, cli, tc.comp)
	require.NoError(tc.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ta := &testArb{Arbiter: a, cli: cli, cancel: cancel, done: make(chan struct{}), reg: reg}
	go func() {
		defer close(ta.done)
		_ = a.Run(ctx)
	}()
	tc.mu.Lock()
	tc.arbs = append(tc.arbs, ta)
	tc.mu.Unlock()
	return ta
}

// stop stops gracefully (the leadership lease is revoked).
func (ta *testArb) stop() {
	ta.cancel()
	<-ta.done
	ta.cli.Close()
}

// kill stops like a crash: the leadership lease is not revoked and expires
// after its TTL (testSessionTTL): etcd's expiry, which gives no signal
// before it happens, is the wait.
func (ta *testArb) kill() {
	if ta.srv != nil {
		ta.srv.Stop()
	}
	ta.crashed.Store(true)
	ta.cancel()
	<-ta.done
	ta.cli.Close()
}

// leader waits (generous guard) until exactly one live replica leads.
func (tc *testCluster) leader(live ...*testArb) *testArb {
	tc.t.Helper()
	var l *testArb
	require.Eventually(tc.t, func() bool {
		l = nil
		n := 0
		for _, a := range live {
			if a.IsLeader() {
				l, n = a, n+1
			}
		}
		return n == 1
	}, 60*time.Second, 10*time.Millisecond, "no leader elected")
	return l
}

func testDevice(idx uint32) cluster.DeviceInfo {
	return cluster.DeviceInfo{Index: idx, Channels: 8, Ways: 2, DZone: 1, FCGs: 16, MAR: 32, MOR: 32,
		BlockSize: 4096, PageSize: 16384, ZoneSize: 1024, ZoneCapacity: 1000, NumZones: 1024, Media: "TLC"}
}

// addNode registers a node (under a lease when withLease) and returns the lease.
func (tc *testCluster) addNode(id string, devs []cluster.DeviceInfo, withLease bool) clientv3.LeaseID {
	tc.t.Helper()
	rec := cluster.NodeRecord{ID: id, Addr: id + ":7000", Version: "test", Devices: devs, StartedAt: tc.clock.Now()}
	b, err := cluster.EncodeNode(rec)
	require.NoError(tc.t, err)
	ctx := context.Background()
	var lease clientv3.LeaseID
	var opts []clientv3.OpOption
	if withLease {
		lr, err := tc.cli.Grant(ctx, 60)
		require.NoError(tc.t, err)
		lease = lr.ID
		opts = append(opts, clientv3.WithLease(lease))
	}
	_, err = tc.cli.Put(ctx, cluster.NodeKey(id), string(b), opts...)
	require.NoError(tc.t, err)
	return lease
}

// waitNodes waits until the leader sees n available nodes.
func (tc *testCluster) waitNodes(a *testArb, n int) {
	tc.t.Helper()
	require.Eventually(tc.t, func() bool {
		s, err := a.Status(context.Background())
		return err == nil && s.Leader && s.AvailableNodes == n
	}, 60*time.Second, 10*time.Millisecond, "leader does not see %d nodes", n)
}

// grants reads every grant key.
func (tc *testCluster) grants() map[cluster.PhysZone]cluster.Grant {
	tc.t.Helper()
	resp, err := tc.cli.Get(context.Background(), cluster.GrantsRoot(), clientv3.WithPrefix())
	require.NoError(tc.t, err)
	out := map[cluster.PhysZone]cluster.Grant{}
	for _, kv := range resp.Kvs {
		pz, err := cluster.ParseGrantKey(string(kv.Key))
		require.NoError(tc.t, err)
		g, err := cluster.DecodeGrant(string(kv.Key), kv.Value)
		require.NoError(tc.t, err)
		_, dup := out[pz]
		require.False(tc.t, dup, "zone %s granted twice", pz)
		out[pz] = g
	}
	return out
}

// onLeader runs fn against the current leader of live, following
// NotLeaderError addresses and retrying unavailability until a generous guard.
func onLeader[T any](t *testing.T, live []*testArb, fn func(a *testArb) (T, error)) (T, error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var target *testArb
	for attempt := 0; ; attempt++ {
		if target == nil {
			target = live[attempt%len(live)]
		}
		v, err := fn(target)
		var nl *zerr.NotLeaderError
		switch {
		case errors.As(err, &nl):
			target = nil
			for _, a := range live {
				if a.Addr() == nl.Leader {
					target = a
				}
			}
			if target == nil {
				for _, a := range live {
					if a.IsLeader() {
						target = a
					}
				}
			}
		case errors.Is(err, zerr.ErrUnavailable):
		default:
			return v, err
		}
		if time.Now().After(deadline) {
			return v, err
		}
		time.Sleep(5 * time.Millisecond) // a client's retry pause between polls of the leader, not a wait for an event
	}
}
