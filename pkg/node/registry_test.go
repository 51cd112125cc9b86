package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/internal/leakcheck"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/etcdlocal"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

var testEtcd *etcdlocal.Server

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "node-etcd-")
	if err != nil {
		panic(err)
	}
	testEtcd, err = etcdlocal.Start(dir, "")
	if err != nil {
		panic(err)
	}
	// The goroutines running now are the embedded etcd's, which the
	// cleanup closes; the check ignores them (they wind down
	// asynchronously) and nothing started by the tests.
	leakcheck.Main(m, func() {
		if fuzzNode.stop != nil {
			fuzzNode.stop()
		}
		testEtcd.Close()
		_ = os.RemoveAll(dir)
	}, goleak.IgnoreCurrent())
}

func etcdClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := testEtcd.Client()
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// clearGrants deletes the grants of node left by an earlier run of the
// same test (go test -count=N shares the package's etcd).
func clearGrants(t *testing.T, cli *clientv3.Client, node string) {
	t.Helper()
	_, err := cli.Delete(context.Background(), cluster.GrantsPrefix(node), clientv3.WithPrefix())
	require.NoError(t, err)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func testRecord(id string) cluster.NodeRecord {
	return cluster.NodeRecord{ID: id, Addr: "127.0.0.1:1", Version: "test", Devices: []cluster.DeviceInfo{{
		Index: 0, Channels: 2, Ways: 2, DZone: 2, FCGs: 2, MAR: 6, MOR: 4, BlockSize: 4096, PageSize: 16384,
		ZoneSize: 64, ZoneCapacity: 64, NumZones: 16, Media: "MLC",
	}}}
}

func TestRegistrationLifecycle(t *testing.T) {
	cli := etcdClient(t)
	ctx := context.Background()
	// A lease long enough that no stall of a saturated machine lets it
	// expire between two renewals: the test is the renewals, not etcd's
	// expiry.
	reg, err := Register(ctx, cli, testRecord("reg-1"), 10*time.Second, quiet)
	require.NoError(t, err)

	get := func() (cluster.NodeRecord, bool) {
		resp, err := cli.Get(ctx, cluster.NodeKey("reg-1"))
		require.NoError(t, err)
		if len(resp.Kvs) == 0 {
			return cluster.NodeRecord{}, false
		}
		rec, err := cluster.DecodeNode(string(resp.Kvs[0].Key), resp.Kvs[0].Value)
		require.NoError(t, err)
		return rec, true
	}
	rec, ok := get()
	require.True(t, ok)
	assert.Equal(t, uint32(16), rec.Devices[0].NumZones)

	// The keep-alive renews the lease: wait for etcd's answers to two
	// renewals (the first goes out at once, the next a third of the TTL
	// later); then the same lease is alive and the record still there.
	kept := func() (clientv3.LeaseID, int) {
		reg.mu.Lock()
		defer reg.mu.Unlock()
		return reg.lease, reg.kept
	}
	lease, _ := kept()
	require.Eventually(t, func() bool { _, n := kept(); return n >= 2 }, 2*time.Minute, 10*time.Millisecond,
		"the keep-alive renews the lease")
	ttl, err := cli.TimeToLive(ctx, lease)
	require.NoError(t, err)
	assert.Positive(t, ttl.TTL, "lease renewed")
	l, _ := kept()
	assert.Equal(t, lease, l, "the same lease, renewed rather than replaced")
	assert.Zero(t, reg.Reregistrations())
	_, ok = get()
	assert.True(t, ok, "record kept alive")

	// Losing the lease (as after a partition longer than the TTL) registers again.
	_, err = cli.Revoke(ctx, lease)
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, ok := get(); return ok && reg.Reregistrations() == 1 }, 10*time.Second, 50*time.Millisecond)

	require.NoError(t, reg.Close(ctx))
	_, ok = get()
	assert.False(t, ok, "a clean shutdown removes the record at once")
}

func TestRegisterRejectsBadRecord(t *testing.T) {
	_, err := Register(context.Background(), etcdClient(t), cluster.NodeRecord{ID: "bad/id"}, time.Second, quiet)
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
}

func TestGrantsFollowEtcd(t *testing.T) {
	cli := etcdClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	put := func(dev, zone uint32, ns string) {
		v, err := cluster.EncodeGrant(cluster.Grant{Namespace: ns, VZone: 1})
		require.NoError(t, err)
		_, err = cli.Put(ctx, cluster.GrantKey("grant-node", dev, zone), string(v))
		require.NoError(t, err)
	}
	clearGrants(t, cli, "grant-node")
	put(0, 1, "a") // present before the watch starts
	_, err := cli.Put(ctx, cluster.GrantsPrefix("grant-node")+"garbage", "{")
	require.NoError(t, err)

	g, err := WatchGrants(ctx, cli, "grant-node", quiet)
	require.NoError(t, err)
	require.NoError(t, g.Check("a", 0, 1))
	err = g.Check("b", 0, 1)
	require.ErrorIs(t, err, zerr.ErrNotOwner)
	assert.Contains(t, err.Error(), `grant-node/0/1 is not granted to namespace "b"`)
	assert.ErrorIs(t, g.Check("", 0, 1), zerr.ErrNotOwner, "no namespace, no access")

	put(0, 2, "b")
	require.Eventually(t, func() bool { return g.Check("b", 0, 2) == nil }, 30*time.Second, 10*time.Millisecond)
	_, err = cli.Delete(ctx, cluster.GrantKey("grant-node", 0, 1))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return g.Check("a", 0, 1) != nil }, 30*time.Second, 10*time.Millisecond)
	gr, ok := g.Lookup(0, 2)
	require.True(t, ok)
	assert.Equal(t, "b", gr.Namespace)
	assert.Equal(t, 1, g.Len())

	// Grants of other nodes are not this node's.
	v, _ := cluster.EncodeGrant(cluster.Grant{Namespace: "a"})
	resp, err := cli.Put(ctx, cluster.GrantKey("other-node", 0, 3), string(v))
	require.NoError(t, err)
	catchUp(t, g, resp.Header.Revision)
	assert.Error(t, g.Check("a", 0, 3))
}

// A grant written to etcd is honoured as soon as the watch has applied it —
// a check that races the watch waits for it instead of refusing.
func TestGrantCheckCatchesUpWithTheWatch(t *testing.T) {
	cli := etcdClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clearGrants(t, cli, "catchup")
	var resets []uint32
	g, err := WatchGrantsFunc(ctx, cli, "catchup", quiet, func(_, zone uint32) {
		time.Sleep(50 * time.Millisecond) // a slow reset (the work, not a wait for anything)
		resets = append(resets, zone)
	})
	require.NoError(t, err)
	for i := 0; i < 20; i++ {
		v, err := cluster.EncodeGrant(cluster.Grant{Namespace: "a", Generation: uint64(i)})
		require.NoError(t, err)
		_, err = cli.Put(context.Background(), cluster.GrantKey("catchup", 0, uint32(100+i)), string(v))
		require.NoError(t, err)
		require.NoError(t, g.Check("a", 0, uint32(100+i)), "a fresh grant is honoured at once")
	}
	// Revoke and re-grant: the check passes only after the revocation's reset ran.
	v, _ := cluster.EncodeGrant(cluster.Grant{Namespace: "b"})
	_, err = cli.Delete(context.Background(), cluster.GrantKey("catchup", 0, 100))
	require.NoError(t, err)
	_, err = cli.Put(context.Background(), cluster.GrantKey("catchup", 0, 100), string(v))
	require.NoError(t, err)
	require.NoError(t, g.Check("b", 0, 100))
	assert.Equal(t, []uint32{100}, resets, "the zone was reset before its new owner was admitted")
	assert.ErrorIs(t, g.Check("a", 0, 100), zerr.ErrNotOwner)
	assert.ErrorIs(t, g.Check("a", 0, 99), zerr.ErrNotOwner, "no grant, no access")
}

// With no grant events, the watch still catches up to a revision moved by
// other keys (a node that restarted before the arbiter's writes).
func TestGrantCatchUpWithoutGrantEvents(t *testing.T) {
	cli := etcdClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g, err := WatchGrants(ctx, cli, "quiet-node", quiet)
	require.NoError(t, err)
	var rev int64
	for i := 0; i < 5; i++ {
		r, err := cli.Put(context.Background(), "/zonefleet/v1/unrelated", fmt.Sprint(i))
		require.NoError(t, err)
		rev = r.Header.Revision
	}
	require.NoError(t, g.CatchUp(context.Background(), rev), "a progress notification brings the cache to the revision")
}

// The nodes' round-robin weights follow the namespace records.
func TestWatchWeights(t *testing.T) {
	cli := etcdClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	put := func(name string, w uint32) {
		v, err := cluster.EncodeNamespace(cluster.NamespaceRecord{Name: name, Weight: w})
		require.NoError(t, err)
		_, err = cli.Put(context.Background(), cluster.NamespaceKey(name), string(v))
		require.NoError(t, err)
	}
	put("before", 4) // present before the watch
	_, err := cli.Put(context.Background(), cluster.NamespaceKey("garbage"), "{")
	require.NoError(t, err)
	w := NewWRR(1)
	require.NoError(t, WatchWeights(ctx, cli, quiet, w.SetWeight))
	assert.Equal(t, 4, w.Weight("before"))
	put("after", 2)
	require.Eventually(t, func() bool { return w.Weight("after") == 2 }, 30*time.Second, 10*time.Millisecond)
	_, err = cli.Delete(context.Background(), cluster.NamespaceKey("before"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.Weight("before") == 1 }, 30*time.Second, 10*time.Millisecond)
	assert.Equal(t, 1, w.Weight("garbage"), "a malformed record is ignored")
}
