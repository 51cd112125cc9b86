package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/daemon"
	"github.com/zonefleet/zonefleet/pkg/etcdlocal"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/vfs"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
	"github.com/zonefleet/zonefleet/pkg/zoneowner"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// cutProxy is a TCP proxy whose connections the test can cut: the node's
// etcd client goes through it, so its watch breaks while etcd itself keeps
// answering the test's own client.
type cutProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{l: l, target: target}
	t.Cleanup(func() { _ = l.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				_ = c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				_ = c.Close()
				continue
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.conns = nil
	}
}

// startOwnerNode runs a node whose grants come through cli and whose zone
// owners are persisted in an owner file next to its device.
func startOwnerNode(t *testing.T, id string, cli *clientv3.Client) *testNode {
	t.Helper()
	return startOwnerNodeOn(t, id, cli, nil)
}

// startOwnerNodeOn is startOwnerNode with the device and its owner file on
// mem (a crashable file system: vfs.MemFS.CrashClone is what a power loss
// would leave of both) when mem is not nil.
func startOwnerNodeOn(t *testing.T, id string, cli *clientv3.Client, mem vfs.FS) *testNode {
	t.Helper()
	dir := t.TempDir()
	var (
		d      *zns.Device
		owners []*zoneowner.Store
		err    error
	)
	if mem == nil {
		d, err = zns.Create(filepath.Join(dir, "dev0.zns"), testGeometry(), clock.Off())
		require.NoError(t, err)
		owners, err = OpenOwners(dir, []*zns.Device{d})
		require.NoError(t, err)
	} else {
		dir = "/node"
		d, err = zns.Create(dir+"/dev0.zns", testGeometry(), clock.Off(), zns.WithFS(mem), zns.WithLogger(quiet))
		require.NoError(t, err)
		st, err := zoneowner.OpenFS(mem, dir+"/dev0.owners", uint32(d.Identify().Zones))
		require.NoError(t, err)
		owners = []*zoneowner.Store{st}
	}
	devs := []*zns.Device{d}
	ctx, cancel := context.WithCancel(context.Background())
	var svc *Service
	svcReady := make(chan struct{})
	clearGrants(t, cli, id)
	grants, err := WatchGrantsFunc(ctx, cli, id, quiet, func(dev, zone uint32) {
		<-svcReady
		svc.ResetRevoked(dev, zone)
	})
	require.NoError(t, err)
	svc, err = New(Config{ID: id, AdminToken: token, Owners: owners}, devs, grants, quiet)
	require.NoError(t, err)
	require.NoError(t, svc.SeedOwners())
	close(svcReady)
	dm, err := daemon.New(daemon.Config{Name: "ssdnode", GRPCListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0"}, quiet, wire.ServerOptions()...)
	require.NoError(t, err)
	RegisterGRPC(dm.GRPC, svc)
	n := &testNode{svc: svc, addr: dm.GRPCAddr(), devs: devs, cancel: cancel, done: make(chan error, 1), dir: dir}
	go func() { n.done <- dm.Run(ctx) }()
	conn, err := grpc.NewClient(n.addr, append(rpcerr.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(append(wire.CallOptions(), grpc.MaxCallRecvMsgSize(wire.MaxMessageBytes))...))...)
	require.NoError(t, err)
	n.client = v1.NewZonedDeviceClient(conn)
	t.Cleanup(func() {
		cancel()
		<-n.done
		_ = conn.Close()
		svc.Close()
		_ = d.Close()
		for _, o := range owners {
			_ = o.Close()
		}
	})
	return n
}

// assertNothingOf: ns reading the zone sees none of old's blocks (the zone
// is empty: a read past the write pointer fails or returns zeroes).
func assertNothingOf(t *testing.T, n *testNode, ns string, lba uint64, old []byte) {
	t.Helper()
	resp, err := n.client.Read(asNS(ns), &v1.ReadRequest{Device: 0, Lba: lba, Blocks: uint32(len(old) / 4096)})
	if err == nil {
		assert.False(t, bytes.Equal(old, resp.GetData()), "the new owner read the previous owner's blocks")
		assert.True(t, bytes.Equal(make([]byte, len(old)), resp.GetData()), "the new owner reads zeroes")
	} else {
		assert.NotContains(t, err.Error(), "permission", "the new owner is refused instead of finding an empty zone")
	}
	zs, err := n.devs[0].ReportZones(zns.StateAny, lba/2048, 1)
	require.NoError(t, err)
	assert.Equal(t, zns.StateEmpty, zs[0].State, "the zone was reset before the new owner's first I/O")
}

// putGrant writes a grant and returns the etcd revision of the write.
func putGrant(t *testing.T, cli *clientv3.Client, node string, zone uint32, ns string) int64 {
	t.Helper()
	v, err := cluster.EncodeGrant(cluster.Grant{Namespace: ns, VZone: uint64(zone)})
	require.NoError(t, err)
	resp, err := cli.Put(context.Background(), cluster.GrantKey(node, 0, zone), string(v))
	require.NoError(t, err)
	return resp.Header.Revision
}

// catchUp waits until the grants cache has applied etcd revision rev: an
// event that would change anything has then done so. (CatchUp gives up
// after a few seconds; a busy machine may need more.)
func catchUp(t *testing.T, g *Grants, rev int64) {
	t.Helper()
	require.Eventually(t, func() bool { return g.CatchUp(context.Background(), rev) == nil }, time.Minute, time.Millisecond,
		"the grants watch applies revision %d", rev)
}

// TestOwnerChangeByOverwrite: the arbiter's grant repair (or a transaction
// split) overwrites the grant of a zone that held tenant a's data with one
// for tenant b — no deletion event. b's first I/O finds the zone reset.
func TestOwnerChangeByOverwrite(t *testing.T) {
	cli := etcdClient(t)
	n := startOwnerNode(t, "owner-ow", cli)
	putGrant(t, cli, "owner-ow", 1, "a")
	waitGrant(t, n, 1, "a")
	data := randBlocks(t, 4)
	_, err := n.client.Write(asNS("a"), &v1.WriteRequest{Device: 0, Lba: 2048, Data: data})
	require.NoError(t, err)
	got, err := n.client.Read(asNS("a"), &v1.ReadRequest{Device: 0, Lba: 2048, Blocks: 4})
	require.NoError(t, err)
	require.Equal(t, data, got.GetData())

	putGrant(t, cli, "owner-ow", 1, "b") // overwrite: a -> b
	waitGrant(t, n, 1, "b")
	assertNothingOf(t, n, "b", 2048, data)
	_, err = n.client.Read(asNS("a"), &v1.ReadRequest{Device: 0, Lba: 2048, Blocks: 4})
	assert.ErrorIs(t, err, zerr.ErrNotOwner, "the old owner is refused")
	assert.Equal(t, 1.0, testutil.ToFloat64(n.svc.m.ownerResets.WithLabelValues("0")))

	// b's own data survives b's later calls (one reset per owner change).
	bdata := randBlocks(t, 2)
	_, err = n.client.Write(asNS("b"), &v1.WriteRequest{Device: 0, Lba: 2048, Data: bdata})
	require.NoError(t, err)
	got, err = n.client.Read(asNS("b"), &v1.ReadRequest{Device: 0, Lba: 2048, Blocks: 2})
	require.NoError(t, err)
	assert.Equal(t, bdata, got.GetData())
	// A rewrite of the same assignment (same key, same namespace) keeps the epoch.
	catchUp(t, n.svc.grants, putGrant(t, cli, "owner-ow", 1, "b"))
	got, err = n.client.Read(asNS("b"), &v1.ReadRequest{Device: 0, Lba: 2048, Blocks: 2})
	require.NoError(t, err)
	assert.Equal(t, bdata, got.GetData(), "a grant repair of the same owner must not reset")
	assert.Equal(t, 1.0, testutil.ToFloat64(n.svc.m.ownerResets.WithLabelValues("0")))
}

// TestOwnerRecordSyncedByFlush: a new owner's first write records it
// without an fdatasync of its own (none on the first write's path), and the
// Flush that makes its data durable makes the record durable first: the
// owner file on disk names the owner once Flush answered.
func TestOwnerRecordSyncedByFlush(t *testing.T) {
	cli := etcdClient(t)
	n := startOwnerNode(t, "owner-fl", cli)
	owners := n.svc.devs[0].owners
	putGrant(t, cli, "owner-fl", 2, "a")
	waitGrant(t, n, 2, "a")
	syncs := owners.Syncs()
	data := randBlocks(t, 4)
	_, err := n.client.Write(asNS("a"), &v1.WriteRequest{Device: 0, Lba: 2 * 2048, Data: data})
	require.NoError(t, err)
	o, ok := owners.Get(2)
	require.True(t, ok)
	require.Equal(t, "a", o.Namespace)
	assert.Equal(t, syncs, owners.Syncs(), "the first write waited for an owner-file fdatasync")
	_, err = n.client.Flush(asNS("a"), &v1.FlushRequest{Device: 0})
	require.NoError(t, err)
	assert.Greater(t, owners.Syncs(), syncs, "Flush answered before the owner record was synced")
	disk, err := zoneowner.Open(filepath.Join(n.dir, "dev0.owners"), owners.Zones())
	require.NoError(t, err)
	defer disk.Close()
	o, ok = disk.Get(2)
	require.True(t, ok)
	assert.Equal(t, "a", o.Namespace, "the owner file on disk after Flush")
	assert.Equal(t, 1, int(testutil.ToFloat64(n.svc.m.ownerResets.WithLabelValues("0"))+1), "a fresh zone needs no owner-change reset")
}

// TestOwnerRecordsAcrossPowerLoss: what a power loss leaves of a drive and
// its owner file together (vfs.MemFS.CrashClone, 16 seeds at each point):
// after a's Flush, a owns its zone and its data is there; after the grant
// went to b and b's first write (reset, owner b recorded without an
// fdatasync, no flush), the file never names b as the owner of a's data: it
// names a (b's record lost: the next check resets the zone again) or b with
// the zone reset — at a power loss before any file operation of that write,
// or after it.
func TestOwnerRecordsAcrossPowerLoss(t *testing.T) {
	cli := etcdClient(t)
	mem := vfs.NewCrashableMem()
	// while armed, a power loss before every file operation of the drive
	// and the owner file
	var (
		armed  atomic.Bool
		cmu    sync.Mutex
		clones []*vfs.MemFS
	)
	hook := vfs.InjectorFunc(func(vfs.Op) error {
		if armed.Load() {
			cmu.Lock()
			clones = append(clones, mem.CrashClone(uint64(len(clones))))
			cmu.Unlock()
		}
		return nil
	})
	n := startOwnerNodeOn(t, "owner-pl", cli, vfs.WithErrors(mem, hook))
	const zone, lba = 1, 2048
	putGrant(t, cli, "owner-pl", zone, "a")
	waitGrant(t, n, zone, "a")
	adata := randBlocks(t, 4)
	_, err := n.client.Write(asNS("a"), &v1.WriteRequest{Device: 0, Lba: lba, Data: adata})
	require.NoError(t, err)
	_, err = n.client.Flush(asNS("a"), &v1.FlushRequest{Device: 0})
	require.NoError(t, err)
	reopenFrom := func(c *vfs.MemFS, seed uint64) (*zns.Device, *zoneowner.Store) {
		d, err := zns.Open("/node/dev0.zns", testGeometry(), clock.Off(), zns.WithFS(c), zns.WithLogger(quiet))
		require.NoError(t, err, "seed %d", seed)
		st, err := zoneowner.OpenFS(c, "/node/dev0.owners", uint32(d.Identify().Zones))
		require.NoError(t, err, "seed %d", seed)
		return d, st
	}
	reopen := func(seed uint64) (*zns.Device, *zoneowner.Store) { return reopenFrom(mem.CrashClone(seed), seed) }
	for seed := uint64(1); seed <= 16; seed++ {
		d, st := reopen(seed)
		o, ok := st.Get(zone)
		assert.True(t, ok && o.Namespace == "a", "seed %d: a's flushed zone lost its owner (%+v, %v)", seed, o, ok)
		got, _, err := d.Read(context.Background(), lba, 4)
		require.NoError(t, err, "seed %d", seed)
		assert.Equal(t, adata, got, "seed %d: a's flushed data", seed)
		require.NoError(t, st.Close())
		require.NoError(t, d.Close())
	}

	putGrant(t, cli, "owner-pl", zone, "b") // the grant goes to b (an overwrite: no revocation)
	waitGrant(t, n, zone, "b")
	bdata := randBlocks(t, 2)
	armed.Store(true)
	_, err = n.client.Write(asNS("b"), &v1.WriteRequest{Device: 0, Lba: lba, Data: bdata})
	armed.Store(false)
	require.NoError(t, err)
	for seed := uint64(100); seed < 116; seed++ {
		clones = append(clones, mem.CrashClone(seed)) // and after it
	}
	sawB := 0
	for i, c := range clones {
		seed := uint64(i)
		d, st := reopenFrom(c, seed)
		o, ok := st.Get(zone)
		if ok && o.Namespace == "b" {
			sawB++
			zs, err := d.ReportZones(zns.StateAny, zone, 1)
			require.NoError(t, err)
			require.LessOrEqual(t, zs[0].WP-lba, uint64(2), "seed %d: owner b with more than b's blocks in the zone", seed)
			if zs[0].WP > lba {
				got, _, err := d.Read(context.Background(), lba, zs[0].WP-lba)
				require.NoError(t, err)
				assert.NotEqual(t, adata[:len(got)], got, "seed %d: owner b over a's data", seed)
			}
		}
		require.NoError(t, st.Close())
		require.NoError(t, d.Close())
	}
	t.Logf("b's record survived %d of %d power losses (during b's first write and after it)", sawB, len(clones))
}

// TestOwnerChangeBeforeReportAndZoneManagement: a new owner's first call
// may be ReportZones or ZoneManagement instead of I/O; both run after the
// owner-change reset (no previous write pointer, no finish of the old data).
func TestOwnerChangeBeforeReportAndZoneManagement(t *testing.T) {
	cli := etcdClient(t)
	n := startOwnerNode(t, "owner-rz", cli)
	old := randBlocks(t, 4)
	for _, z := range []uint32{0, 3} {
		putGrant(t, cli, "owner-rz", z, "a")
		waitGrant(t, n, z, "a")
		_, err := n.client.Write(asNS("a"), &v1.WriteRequest{Device: 0, Lba: uint64(z) * 2048, Data: old})
		require.NoError(t, err)
		putGrant(t, cli, "owner-rz", z, "b")
		waitGrant(t, n, z, "b")
	}
	rz, err := n.client.ReportZones(asNS("b"), &v1.ReportZonesRequest{Device: 0})
	require.NoError(t, err)
	require.Len(t, rz.GetZones(), 2, "b sees exactly its two zones")
	for _, z := range rz.GetZones() {
		assert.Equal(t, z.GetStartLba(), z.GetWritePointer(), "zone %d: the previous owner's write pointer is not reported", z.GetIndex())
		assert.Equal(t, v1.ZoneState_ZONE_STATE_EMPTY, z.GetState())
	}
	assert.Equal(t, 2.0, testutil.ToFloat64(n.svc.m.ownerResets.WithLabelValues("0")))

	// The data is gone for b, through any call.
	putGrant(t, cli, "owner-rz", 1, "a")
	waitGrant(t, n, 1, "a")
	_, err = n.client.Write(asNS("a"), &v1.WriteRequest{Device: 0, Lba: 2048, Data: old})
	require.NoError(t, err)
	putGrant(t, cli, "owner-rz", 1, "b")
	waitGrant(t, n, 1, "b")
	_, err = n.client.ZoneManagement(asNS("b"), &v1.ZoneManagementRequest{Device: 0, Zone: 1, Action: v1.ZoneAction_ZONE_ACTION_FINISH})
	require.NoError(t, err)
	assert.Equal(t, 3.0, testutil.ToFloat64(n.svc.m.ownerResets.WithLabelValues("0")), "the finish ran after the owner-change reset")
	resp, err := n.client.Read(asNS("b"), &v1.ReadRequest{Device: 0, Lba: 2048, Blocks: 4})
	if err == nil {
		assert.False(t, bytes.Equal(old, resp.GetData()), "b reads a's blocks after finishing the zone")
	}
}

// TestOwnerChangeAcrossWatchBreakAndEtcdRestart: the node's watch is cut
// while the zone is taken from a and given to b (delete + create) and the
// history is compacted, then etcd restarts (a new leader term) and the node
// reconnects: it reloads its grants and never sees the deletion event (a
// reset triggered by that event alone would miss it). b's first I/O still finds the zone reset, and that
// survives a node restart (the owner is persisted with the device).
func TestOwnerChangeAcrossWatchBreakAndEtcdRestart(t *testing.T) {
	dir := t.TempDir()
	clientAddr, peerAddr := freeAddr(t), freeAddr(t)
	opts := etcdlocal.Options{PeerAddr: peerAddr, AutoCompactionRetention: -1}
	srv, err := etcdlocal.StartWith(filepath.Join(dir, "etcd"), clientAddr, opts)
	require.NoError(t, err)
	defer func() { srv.Close() }()
	direct, err := srv.Client()
	require.NoError(t, err)
	defer direct.Close()

	proxy := newCutProxy(t, clientAddr)
	viaProxy, err := clientv3.New(clientv3.Config{Endpoints: []string{proxy.l.Addr().String()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer viaProxy.Close()

	const node = "owner-wb"
	n := startOwnerNode(t, node, viaProxy)
	putGrant(t, direct, node, 2, "a")
	waitGrant(t, n, 2, "a")
	data := randBlocks(t, 8)
	_, err = n.client.Write(asNS("a"), &v1.WriteRequest{Device: 0, Lba: 2 * 2048, Data: data})
	require.NoError(t, err)

	proxy.setCut(true) // the node's watch breaks
	_, err = direct.Delete(context.Background(), cluster.GrantKey(node, 0, 2))
	require.NoError(t, err)
	putGrant(t, direct, node, 2, "b")
	resp, err := direct.Get(context.Background(), "x")
	require.NoError(t, err)
	_, err = direct.Compact(context.Background(), resp.Header.Revision, clientv3.WithCompactPhysical())
	require.NoError(t, err)

	// etcd restarts over the same data: a new leader term.
	direct.Close()
	srv.Close()
	srv, err = etcdlocal.StartWith(filepath.Join(dir, "etcd"), clientAddr, opts)
	require.NoError(t, err)
	direct, err = srv.Client()
	require.NoError(t, err)
	proxy.setCut(false)

	require.Eventually(t, func() bool {
		gr, ok := n.svc.grants.Lookup(0, 2)
		return ok && gr.Namespace == "b"
	}, 20*time.Second, 20*time.Millisecond, "the node reloads its grants after the watch break")
	assert.Zero(t, testutil.ToFloat64(n.svc.m.revokedResets.WithLabelValues("0")), "the deletion was never seen (the event-driven reset did not run)")
	assertNothingOf(t, n, "b", 2*2048, data)
	assert.Equal(t, 1.0, testutil.ToFloat64(n.svc.m.ownerResets.WithLabelValues("0")))
	o, ok := n.svc.devs[0].owners.Get(2)
	require.True(t, ok)
	assert.Equal(t, "b", o.Namespace)
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// TestCompactionTableIsBounded: compactions nobody waits for keep an entry
// each; past the per-namespace and total bounds new ones are refused with
// RESOURCE_EXHAUSTED before any work starts, other namespaces unaffected
// until the total bound.
func TestCompactionTableIsBounded(t *testing.T) {
	n := startNode(t, "bound-ops", false)
	req := &v1.ZoneCompactionRequest{Copies: []*v1.CompactionCopy{{SrcLba: 0, Blocks: 1, DstLba: 2048}}}
	n.svc.opsMu.Lock()
	for i := 0; i < MaxCompactionOpsPerNamespace; i++ {
		n.svc.ops[fmt.Sprintf("a-%d", i)] = &compactionOp{ns: "a", dev: n.svc.devs[0], remoteDone: make(chan struct{})}
	}
	n.svc.opsMu.Unlock()
	_, err := n.client.ZoneCompaction(asNS("a"), req)
	assert.ErrorIs(t, err, zerr.ErrNoResources)
	_, err = n.client.ZoneCompaction(asNS("b"), req)
	assert.NotErrorIs(t, err, zerr.ErrNoResources, "another namespace still gets a slot")

	n.svc.opsMu.Lock()
	for i := len(n.svc.ops); i < MaxCompactionOps; i++ {
		n.svc.ops[fmt.Sprintf("x-%d", i)] = &compactionOp{ns: fmt.Sprintf("ns%d", i), dev: n.svc.devs[0], remoteDone: make(chan struct{})}
	}
	n.svc.opsMu.Unlock()
	_, err = n.client.ZoneCompaction(asNS("c"), req)
	assert.ErrorIs(t, err, zerr.ErrNoResources)
	assert.Equal(t, codes.ResourceExhausted, rpcerr.ToStatus(err).Code(), "RESOURCE_EXHAUSTED on the wire")
}

// TestTrustedCopyForTenantKeepsItsData: the arbiter (here the operator's
// token) writing into a zone it has just granted to a tenant, acting for
// that tenant, records the tenant as the owner first: the tenant's own
// first call then finds the data, not a reset zone.
func TestTrustedCopyForTenantKeepsItsData(t *testing.T) {
	cli := etcdClient(t)
	n := startOwnerNode(t, "owner-tr", cli)
	putGrant(t, cli, "owner-tr", 2, "a")
	waitGrant(t, n, 2, "a")
	old := randBlocks(t, 2)
	_, err := n.client.Write(asNS("a"), &v1.WriteRequest{Device: 0, Lba: 2 * 2048, Data: old})
	require.NoError(t, err)
	_, err = cli.Delete(context.Background(), cluster.GrantKey("owner-tr", 0, 2))
	require.NoError(t, err)
	putGrant(t, cli, "owner-tr", 2, "b") // a new assignment (new epoch); the node may not have seen it yet
	require.Eventually(t, func() bool {
		zs, err := n.devs[0].ReportZones(zns.StateAny, 2, 1)
		return err == nil && zs[0].State == zns.StateEmpty
	}, 30*time.Second, 5*time.Millisecond, "the revocation reset ran")

	copied := randBlocks(t, 2)
	_, err = n.client.Write(wire.WithNamespace(asAdmin(), "b"), &v1.WriteRequest{Device: 0, Lba: 2 * 2048, Data: copied})
	require.NoError(t, err)
	got, err := n.client.Read(asNS("b"), &v1.ReadRequest{Device: 0, Lba: 2 * 2048, Blocks: 2})
	require.NoError(t, err)
	assert.Equal(t, copied, got.GetData(), "the tenant's first read finds what was copied for it")
	o, ok := n.svc.devs[0].owners.Get(2)
	require.True(t, ok)
	assert.Equal(t, "b", o.Namespace)
}
