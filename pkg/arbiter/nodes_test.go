package arbiter

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/daemon"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/node"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

const nodeToken = "node-admin"

type realNode struct {
	id     string
	client v1.ZonedDeviceClient
	rec    cluster.NodeRecord
	grants *node.Grants
}

// waitGrantsApplied waits until every node's grant watch has applied every
// etcd event up to now (a lagging watch included): the revocations and
// grants committed so far are then in force on the nodes.
func waitGrantsApplied(t *testing.T, tc *testCluster, nodes map[string]*realNode) {
	t.Helper()
	resp, err := tc.cli.Get(context.Background(), "/", clientv3.WithCountOnly())
	require.NoError(t, err)
	rev := resp.Header.Revision
	for id, n := range nodes {
		require.Eventually(t, func() bool { return n.grants.CatchUp(context.Background(), rev) == nil }, time.Minute, 10*time.Millisecond,
			"node %s's grants apply etcd revision %d", id, rev)
	}
}

// startRealNode runs a real ssdnode service (pkg/node over a pkg/zns device
// in a temp dir, gRPC on loopback) that enforces the grants in tc's etcd,
// and registers it.
func startRealNode(t *testing.T, tc *testCluster, id string) *realNode {
	t.Helper()
	return startLaggingNode(t, tc, id, 0)
}

// startLaggingNode is startRealNode with the node's grant watch delivering
// every event (and progress notification) lag late, as a node whose etcd
// watch stream is slow or congested.
func startLaggingNode(t *testing.T, tc *testCluster, id string, lag time.Duration) *realNode {
	t.Helper()
	cfg := flash.Small()
	cfg.DZone, cfg.MaxOpenZones, cfg.MaxActiveZones = 1, 8, 8 // 4 single-chip FCGs
	dev, err := zns.Create(filepath.Join(t.TempDir(), "dev0.zns"), cfg, clock.Off())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cli := newClient(t, tc.pfx)
	if lag > 0 {
		cli.Watcher = &laggingWatcher{Watcher: cli.Watcher, lag: lag}
	}
	// As cmd/ssdnode does: a revoked grant resets its zone.
	var svc *node.Service
	ready := make(chan struct{})
	grants, err := node.WatchGrantsFunc(ctx, cli, id, discardLogger(), func(d, z uint32) {
		select {
		case <-ready:
			svc.ResetRevoked(d, z)
		case <-ctx.Done():
		}
	})
	require.NoError(t, err)
	svc, err = node.New(node.Config{ID: id, AdminToken: nodeToken}, []*zns.Device{dev}, grants, discardLogger())
	require.NoError(t, err)
	close(ready)
	dm, err := daemon.New(daemon.Config{Name: "ssdnode", GRPCListen: "127.0.0.1:0"}, discardLogger())
	require.NoError(t, err)
	v1.RegisterZonedDeviceServer(dm.GRPC, svc)
	done := make(chan error, 1)
	go func() { done <- dm.Run(ctx) }()
	conn, err := grpc.NewClient(dm.GRPCAddr(), append(rpcerr.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		<-done
		_ = conn.Close()
		svc.Close()
		_ = dev.Close()
		cli.Close()
	})
	rec := svc.Record(dm.GRPCAddr(), "test", time.Now())
	b, err := cluster.EncodeNode(rec)
	require.NoError(t, err)
	_, err = tc.cli.Put(ctx, cluster.NodeKey(id), string(b))
	require.NoError(t, err)
	return &realNode{id: id, client: v1.NewZonedDeviceClient(conn), rec: rec, grants: grants}
}

// startRealCluster runs real nodes n0 and n1 (their grant watches lag
// behind etcd by lag) and a leading arbiter that reclaims through them.
func startRealCluster(t *testing.T, lag time.Duration) (*testCluster, *testArb, map[string]*realNode, *NodeCompactor) {
	t.Helper()
	tc := newTestCluster(t)
	nodes := map[string]*realNode{}
	for _, id := range []string{"n0", "n1"} {
		nodes[id] = startLaggingNode(t, tc, id, lag)
	}
	compCli := newClient(t, tc.pfx)
	t.Cleanup(func() { compCli.Close() }) // after comp.Close (cleanups run last first)
	comp := NewNodeCompactor(compCli, nodeToken)
	t.Cleanup(func() { _ = comp.Close() })
	tc.comp = comp
	a := tc.start("arb-0:9000")
	tc.leader(a)
	tc.waitNodes(a, 2)
	return tc, a, nodes, comp
}

// writeStriped writes the first total logical blocks of group g (block b
// holds blockData(b)) through the real nodes as namespace ns, stripe unit
// by stripe unit, as a client striping RAID-0 would.
func writeStriped(t *testing.T, nodes map[string]*realNode, ns string, g StripeGroup, dev cluster.DeviceInfo, total uint64) {
	t.Helper()
	bs := int(dev.BlockSize)
	stripe := uint64(g.StripeSize) / uint64(bs)
	for b := uint64(0); b < total; {
		z, off := locate(g, uint32(bs), b)
		n := min(stripe-b%stripe, total-b)
		var data []byte
		for k := uint64(0); k < n; k++ {
			data = append(data, blockData(b+k, bs)...)
		}
		lba := uint64(z.Zone)*dev.ZoneSize + off
		retryNotOwner(t, func() error {
			_, err := nodes[z.Node].client.Write(wire.WithNamespace(context.Background(), ns), &v1.WriteRequest{Device: z.Device, Lba: lba, Data: data})
			return err
		})
		b += n
	}
}

func blockData(b uint64, bs int) []byte {
	out := make([]byte, bs)
	for i := 0; i+8 <= bs; i += 8 {
		binary.LittleEndian.PutUint64(out[i:], b)
	}
	return out
}

// retryNotOwner retries while the node has not seen a grant yet.
func retryNotOwner(t *testing.T, fn func() error) {
	t.Helper()
	var err error
	require.Eventually(t, func() bool {
		err = fn()
		return !errors.Is(err, zerr.ErrNotOwner)
	}, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, err)
}

// TestReclaimOnRealNodes: an overdriven stripe group written through real
// ssdnodes is reclaimed with the nodes' zone_compaction (local and pushed to
// the peer node) and every block reads back through the new layout.
func TestReclaimOnRealNodes(t *testing.T) {
	tc, a, nodes, comp := startRealCluster(t, 0)
	ctx := context.Background()
	dev := nodes["n0"].rec.Devices[0]
	require.Equal(t, uint32(4), dev.FCGs)
	bs := int(dev.BlockSize)

	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "r", MARLogical: 2, ZonesPerVZone: 16})
	require.NoError(t, err)
	l, err := a.OpenVZone(ctx, "r", 0)
	require.NoError(t, err)
	src := l.Groups[0]
	require.Equal(t, uint32(8), src.Width, "essentials 4 + spares → every die of both nodes")
	info, err := a.GetNamespace(ctx, "r")
	require.NoError(t, err)
	m := info.MinWidth
	require.Equal(t, uint32(4), m)

	// Write more than one minimum-width group holds, stripe unit by stripe unit.
	zoneCap := l.ZoneCapacity
	total := uint64(m)*zoneCap + zoneCap/2 + 3
	writeStriped(t, nodes, "r", src, dev, total)
	written, err := comp.WrittenBlocks(ctx, "r", src.Zones)
	require.NoError(t, err)
	var sum uint64
	for _, w := range written {
		sum += w
	}
	require.Equal(t, total, sum)

	tc.clock.Advance(2 * time.Minute)
	res, err := a.CheckReclaim(ctx)
	require.NoError(t, err)
	require.Len(t, res, 1)
	assert.Equal(t, total, res[0].MovedBlocks)
	assert.Equal(t, 2, res[0].TargetGroups)
	checkInvariants(t, tc, a, "reclaimed on real nodes")

	nl, err := a.Layout(ctx, "r", 0)
	require.NoError(t, err)
	require.Len(t, nl.Groups, 2)
	for b := uint64(0); b < total; b++ {
		g := nl.Groups[b/(uint64(m)*zoneCap)]
		z, off := locate(g, uint32(bs), b%(uint64(m)*zoneCap))
		var got []byte
		retryNotOwner(t, func() error {
			r, err := nodes[z.Node].client.Read(wire.WithNamespace(ctx, "r"), &v1.ReadRequest{Device: z.Device, Lba: uint64(z.Zone)*dev.ZoneSize + off, Blocks: 1})
			got = r.GetData()
			return err
		})
		require.True(t, bytes.Equal(blockData(b, bs), got), "block %d at %s+%d", b, z, off)
	}
	// The source zones are no longer the namespace's.
	for _, z := range src.Zones {
		stillOurs := false
		for _, g := range nl.Groups {
			for _, nz := range g.Zones {
				stillOurs = stillOurs || nz == z
			}
		}
		if stillOurs {
			continue
		}
		require.Eventually(t, func() bool {
			_, err := nodes[z.Node].client.Read(wire.WithNamespace(ctx, "r"), &v1.ReadRequest{Device: z.Device, Lba: uint64(z.Zone) * dev.ZoneSize, Blocks: 1})
			return errors.Is(err, zerr.ErrNotOwner)
		}, 30*time.Second, 5*time.Millisecond, fmt.Sprintf("zone %s still readable by r", z))
	}
	// Released zones were reset by the arbiter (through the node's admin call).
	wp, err := comp.WrittenBlocks(ctx, "r", src.Zones)
	require.NoError(t, err)
	assert.Equal(t, make([]uint64, len(src.Zones)), wp)
	// The nodes reset the released source zones when their grants went away.
	require.Eventually(t, func() bool {
		wp, err := comp.WrittenBlocks(ctx, "r", src.Zones)
		return err == nil && slices.Equal(wp, make([]uint64, len(src.Zones)))
	}, 30*time.Second, 5*time.Millisecond)
	fi, err := a.GetNamespace(ctx, "r")
	require.NoError(t, err)
	assert.True(t, fi.Frozen)
	assert.Equal(t, uint32(0), fi.SparesInUse)
}
