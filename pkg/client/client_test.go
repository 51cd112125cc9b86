package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/internal/testcluster"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func startCluster(t *testing.T, nodes, arbiters int) *localcluster.Cluster {
	t.Helper()
	return startClusterOf(t, nodes, arbiters, localcluster.TinyDevice())
}

// startClusterOf is startCluster with drives of configuration dev.
func startClusterOf(t *testing.T, nodes, arbiters int, dev flash.Config) *localcluster.Cluster {
	t.Helper()
	return testcluster.Start(t, localcluster.Config{Nodes: nodes, Arbiters: arbiters, Device: dev})
}

// newClient is a client of ns (the operator's for "") that watches
// layouts in etcd and retries for 20 s.
func newClient(t *testing.T, c *localcluster.Cluster, ns string) *client.Client {
	t.Helper()
	return testcluster.Client(t, c, ns, testcluster.WithEtcd(c), testcluster.RetryDeadline(20*time.Second))
}

func createNS(t *testing.T, c *localcluster.Cluster, name string, zonesPerVZone uint32) {
	t.Helper()
	testcluster.CreateNamespace(t, c, &v1.CreateNamespaceRequest{Name: name, MaxActiveVzones: 2, ZonesPerVzone: zonesPerVZone})
}

func random(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// A random v-zone workload compared byte for byte with a reference, crossing
// stripe-group boundaries; the write pointer is recovered by a second client.
func TestRandomWorkloadAgainstReference(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, 1)
	createNS(t, c, "w", 32)
	cl := newClient(t, c, "w")
	ctx := context.Background()
	vz, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	info, err := vz.ReportZone(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(0), info.WritePointer)
	bs := info.BlockSize
	groupCap := info.AllocatedUpTo
	target := min(info.Capacity-8, 3*groupCap+37) // past the first stripe group

	rng := mrand.New(mrand.NewPCG(7, 7))
	var ref []byte
	for uint64(len(ref))/bs < target {
		n := min(uint64(1+rng.IntN(300)), target-uint64(len(ref))/bs)
		data := random(int(n * bs))
		if rng.IntN(2) == 0 {
			require.NoError(t, vz.Write(ctx, uint64(len(ref))/bs, data))
		} else {
			off, err := vz.Append(ctx, data)
			require.NoError(t, err)
			require.Equal(t, uint64(len(ref))/bs, off)
		}
		ref = append(ref, data...)
	}
	info, err = vz.ReportZone(ctx)
	require.NoError(t, err)
	assert.Equal(t, target, info.WritePointer)
	assert.GreaterOrEqual(t, info.Groups, 2, "the writes crossed stripe groups")

	for i := 0; i < 200; i++ {
		off := rng.Uint64N(target)
		n := min(1+rng.Uint64N(400), target-off)
		got, err := vz.Read(ctx, off, n)
		require.NoError(t, err)
		require.True(t, bytes.Equal(ref[off*bs:(off+n)*bs], got), "read %d blocks at %d", n, off)
	}
	// Beyond the write pointer: zeroes.
	got, err := vz.Read(ctx, target, 4)
	require.NoError(t, err)
	assert.Equal(t, make([]byte, 4*bs), got)

	// A second client finds the write pointer from the drives.
	cl2 := newClient(t, c, "w")
	info2, err := cl2.VZone(vz.ID()).ReportZone(ctx)
	require.NoError(t, err)
	assert.Equal(t, target, info2.WritePointer)
	all, err := cl2.VZone(vz.ID()).Read(ctx, 0, target)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(ref, all), "whole v-zone")

	// Typed errors.
	err = vz.Write(ctx, target+1, random(int(bs)))
	var wp *zerr.WritePointerError
	require.ErrorAs(t, err, &wp)
	assert.Equal(t, target, wp.Expected)
	_, err = vz.Read(ctx, info.Capacity, 1)
	assert.ErrorIs(t, err, zerr.ErrOutOfRange)
	err = vz.Write(ctx, target, make([]byte, 100))
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)

	// Locate names a node, device, zone and chip.
	loc, err := vz.Locate(ctx, 0)
	require.NoError(t, err)
	assert.NotEmpty(t, loc.Node)
	assert.Less(t, loc.Chip, uint32(8))

	// Finish, then reset: the v-zone is empty again and writable from 0.
	require.NoError(t, vz.Finish(ctx))
	assert.ErrorIs(t, vz.Write(ctx, target, random(int(bs))), zerr.ErrZoneState)
	require.NoError(t, vz.Reset(ctx))
	info, err = vz.ReportZone(ctx)
	require.NoError(t, err)
	assert.Equal(t, "empty", info.State)
}

// Two namespaces on the same nodes cannot read each other's v-zones.
func TestNamespacesAreIsolated(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, 1)
	createNS(t, c, "a", 4)
	createNS(t, c, "b", 4)
	ctx := context.Background()
	tenant := func(ns string) *client.Client { // tenants hold their namespace token only
		cl, err := client.New(ctx, c.ClientConfig(ns))
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		return cl
	}
	a, b := tenant("a"), tenant("b")
	vz, err := a.OpenVZone(ctx)
	require.NoError(t, err)
	secret := random(64 * 4096)
	require.NoError(t, vz.Write(ctx, 0, secret))

	// b's v-zone of the same id is its own (empty): it never shows a's bytes.
	if got, err := b.VZone(vz.ID()).Read(ctx, 0, 64); err == nil {
		assert.False(t, bytes.Equal(secret, got))
	}
	// Going to a's physical zones directly is refused by the nodes.
	l, err := vz.Layout(ctx)
	require.NoError(t, err)
	for _, z := range l.GetGroups()[0].GetZones() {
		dev, bctx, err := b.Device(z.GetNode(), z.GetAddr())
		require.NoError(t, err)
		id, err := dev.Identify(bctx, &v1.IdentifyRequest{Device: z.GetDevice()})
		require.NoError(t, err)
		lba := uint64(z.GetZone()) * id.GetZoneSize()
		_, err = dev.Read(bctx, &v1.ReadRequest{Device: z.GetDevice(), Lba: lba, Blocks: 1})
		require.ErrorIs(t, err, zerr.ErrNotOwner)
		_, err = dev.Write(bctx, &v1.WriteRequest{Device: z.GetDevice(), Lba: lba + 16, Data: random(4096)})
		require.ErrorIs(t, err, zerr.ErrNotOwner)
		_, err = dev.ZoneManagement(bctx, &v1.ZoneManagementRequest{Device: z.GetDevice(), Zone: z.GetZone(), Action: v1.ZoneAction_ZONE_ACTION_RESET})
		require.ErrorIs(t, err, zerr.ErrNotOwner)
	}
	got, err := vz.Read(ctx, 0, 64)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(secret, got), "a's data is intact")
}

// Node restart during reads: the reads are retried and succeed.
func TestNodeRestartDuringReads(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, 1)
	createNS(t, c, "r", 4)
	reg := prometheus.NewRegistry()
	cfg := c.ClientConfig("r")
	cfg.Etcd, cfg.RetryDeadline, cfg.Registerer = c.Etcd.Endpoints(), 20*time.Second, reg
	cl, err := client.New(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	ctx := context.Background()
	vz, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	data := random(512 * 4096)
	require.NoError(t, vz.Write(ctx, 0, data))

	require.NoError(t, c.StopNode(0))
	restarted := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		// the node comes back once a read has retried against it
		for {
			select {
			case <-stop:
				restarted <- errors.New("no read retried")
				return
			case <-time.After(time.Millisecond): // polling the counter
			}
			if mfs, err := reg.Gather(); err == nil && retried(mfs) {
				break
			}
		}
		restarted <- c.StartNode(ctx, 0)
	}()
	for i := 0; i < 5; i++ {
		got, err := vz.Read(ctx, 0, 512)
		require.NoError(t, err, "reads retry while the node is down")
		require.True(t, bytes.Equal(data, got))
	}
	require.NoError(t, <-restarted)
}

// retried reports whether the client's metrics count a node call retry.
func retried(mfs []*dto.MetricFamily) bool {
	for _, mf := range mfs {
		if mf.GetName() != "zonefleet_client_retries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() != "arbiter" && m.GetCounter().GetValue() > 0 {
					return true
				}
			}
		}
	}
	return false
}

// Leader failover during writes: writes keep going across stripe groups.
func TestLeaderFailoverDuringWrites(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, 2)
	createNS(t, c, "f", 32)
	cl := newClient(t, c, "f")
	ctx := context.Background()
	vz, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	info, err := vz.ReportZone(ctx)
	require.NoError(t, err)
	bs := info.BlockSize
	st, err := cl.ClusterStatus(ctx)
	require.NoError(t, err)
	leader := 0
	if st.GetLeader() == c.ArbiterAddrs()[1] {
		leader = 1
	}

	var ref []byte
	var wg sync.WaitGroup
	chunk := int(info.AllocatedUpTo / 4) // four writes per stripe group: several group allocations
	writes := min(12, int(info.Capacity)/chunk)
	for i := 0; i < writes; i++ {
		if i == 2 { // the leader stops while the third write runs, and later ones need the other
			wg.Add(1)
			go func() {
				defer wg.Done()
				assert.NoError(t, c.StopArbiter(leader))
			}()
		}
		if i == writes/2 {
			wg.Wait() // the second half runs after the failover at the latest
		}
		data := random(chunk * int(bs))
		require.NoError(t, vz.Write(ctx, uint64(len(ref))/bs, data), "write %d", i)
		ref = append(ref, data...)
	}
	wg.Wait()
	st, err = cl.ClusterStatus(ctx)
	require.NoError(t, err)
	assert.Equal(t, c.ArbiterAddrs()[1-leader], st.GetLeader(), "the other arbiter leads")
	got, err := vz.Read(ctx, 0, uint64(len(ref))/bs)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(ref, got))
}

// Compaction of one v-zone into another moves the data through the nodes.
func TestCompactionAcrossNodes(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, 1)
	createNS(t, c, "c", 8)
	cl := newClient(t, c, "c")
	ctx := context.Background()
	src, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	dst, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	info, err := src.ReportZone(ctx)
	require.NoError(t, err)
	bs := info.BlockSize
	n := info.AllocatedUpTo // one stripe group's worth
	data := random(int(n * bs))
	require.NoError(t, src.Write(ctx, 0, data))

	// Keep every other 64-block run (a half-valid segment), packed at the destination.
	var copies []client.Copy
	var want []byte
	for off := uint64(0); off+64 <= n; off += 128 {
		copies = append(copies, client.Copy{Src: src.ID(), SrcOff: off, Dst: dst.ID(), DstOff: uint64(len(want)) / bs, Blocks: 64})
		want = append(want, data[off*bs:(off+64)*bs]...)
	}
	st, err := cl.Compact(ctx, copies)
	require.NoError(t, err)
	assert.Equal(t, uint64(len(want))/bs, st.Total(), "%+v", st)
	got, err := dst.Read(ctx, 0, uint64(len(want))/bs)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got))
	dinfo, err := dst.ReportZone(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(len(want))/bs, dinfo.WritePointer)
	t.Logf("compaction: %+v", st)

	_, err = cl.Compact(ctx, []client.Copy{{Src: src.ID(), Dst: dst.ID(), DstOff: 0, Blocks: 4}})
	assert.ErrorIs(t, err, zerr.ErrWritePointer, "a destination below its write pointer is refused")
	_, err = cl.Compact(ctx, nil)
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
}

// ResetVZones resets v-zones with one arbiter call; when the arbiter refuses
// one of them (a stale incarnation) the others are still reset, each error
// is reported where it belongs, and another tenant cannot use the call on
// someone else's v-zones.
func TestResetVZones(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, 1)
	createNS(t, c, "a", 4)
	createNS(t, c, "b", 4)
	ctx := context.Background()
	a := newClient(t, c, "a")
	v0, inc0, err := a.OpenVZoneIncarnation(ctx)
	require.NoError(t, err)
	v1z, inc1, err := a.OpenVZoneIncarnation(ctx)
	require.NoError(t, err)
	data := random(16 * 4096)
	for _, v := range []*client.VZone{v0, v1z} {
		require.NoError(t, v.Write(ctx, 0, data))
	}
	require.NoError(t, v0.Finish(ctx))

	// Another tenant naming a's v-zones is refused; nothing changes.
	b, err := client.New(ctx, c.ClientConfig("b"))
	require.NoError(t, err)
	t.Cleanup(b.Close)
	barb, err := b.Arbiter(ctx)
	require.NoError(t, err)
	_, err = barb.ResetVZones(ctx, &v1.ResetVZonesRequest{Namespace: "a", Vzones: []*v1.VZoneRequest{{Id: v0.ID()}}})
	require.Error(t, err)
	got, err := v0.Read(ctx, 0, 16)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got))

	// A stale incarnation for v1z: v0 is still reset, v1z keeps its data.
	errs := a.ResetVZones(ctx, []client.ResetRef{{ID: v0.ID(), Incarnation: inc0}, {ID: v1z.ID(), Incarnation: inc1 + 1000}})
	require.Len(t, errs, 2)
	assert.NoError(t, errs[0])
	assert.ErrorIs(t, errs[1], zerr.ErrStaleLayout)
	got, err = v1z.Read(ctx, 0, 16)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "the refused v-zone is intact")

	// Batch: the open v-zone, the already empty one, and a duplicate.
	errs = a.ResetVZones(ctx, []client.ResetRef{{ID: v1z.ID()}, {ID: v0.ID()}, {ID: v1z.ID(), Incarnation: inc1}})
	for i, err := range errs {
		assert.NoError(t, err, "ref %d", i)
	}
	vzs, err := a.ListVZones(ctx)
	require.NoError(t, err)
	assert.Empty(t, vzs, "both v-zones are empty")
	// Both ids are handed out again and written from their start.
	for i := 0; i < 2; i++ {
		v, err := a.OpenVZone(ctx)
		require.NoError(t, err)
		require.NoError(t, v.Write(ctx, 0, data))
	}
}
