package arbiter

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// startServed starts an arbiter replica serving gRPC on a loopback port
// (its Addr is that port).
func (tc *testCluster) startServed() *testArb {
	tc.t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tc.t, err)
	a := tc.start(lis.Addr().String())
	srv := grpc.NewServer(rpcerr.ServerOptions()...)
	v1.RegisterArbiterServer(srv, NewServer(a.Arbiter))
	go func() { _ = srv.Serve(lis) }()
	tc.t.Cleanup(srv.Stop)
	a.srv = srv
	return a
}

// TestFullStack runs pkg/client against two served arbiters and two real
// ssdnodes: v-zone writes across stripe groups, a leader crash in between,
// then a reclaim that moves the data under the client's cached layout.
func TestFullStack(t *testing.T) {
	tc := newTestCluster(t)
	compCli := newClient(t, tc.pfx)
	t.Cleanup(func() { compCli.Close() }) // after comp.Close (cleanups run last first)
	comp := NewNodeCompactor(compCli, nodeToken)
	t.Cleanup(func() { _ = comp.Close() })
	tc.comp = comp
	n0 := startRealNode(t, tc, "n0")
	n1 := startRealNode(t, tc, "n1")
	a0, a1 := tc.startServed(), tc.startServed()
	l := tc.leader(a0, a1)
	tc.waitNodes(l, 2)
	ctx := context.Background()
	_, err := l.CreateNamespace(ctx, NamespaceSpec{Name: "fs", MARLogical: 2, ZonesPerVZone: 16})
	require.NoError(t, err)

	// A tenant client: no node admin token, so the nodes enforce the grants
	// (with the admin token a stale layout would read the reset zones).
	c, err := client.New(ctx, client.Config{Arbiters: []string{a0.Addr(), a1.Addr()}, Namespace: "fs",
		RetryDeadline: 60 * time.Second, Logger: discardLogger()})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	vz, err := c.OpenVZone(ctx)
	require.NoError(t, err)
	dev := n0.rec.Devices[0]
	bs := int(dev.BlockSize)

	// Write a bit more than the first (overdriven, 8 zones wide) stripe group holds.
	first, err := l.Layout(ctx, "fs", vz.ID())
	require.NoError(t, err)
	require.Len(t, first.Groups, 1)
	groupBlocks := uint64(first.Groups[0].Width) * first.ZoneCapacity
	var want []byte
	write := func(blocks uint64) {
		t.Helper()
		off := uint64(len(want) / bs)
		var data []byte
		for b := off; b < off+blocks; b++ {
			data = append(data, blockData(b, bs)...)
		}
		require.NoError(t, vz.Write(ctx, off, data))
		want = append(want, data...)
	}
	write(groupBlocks / 2)

	// The leader crashes; the client follows the new one.
	if l == a0 {
		a0.kill()
	} else {
		a1.kill()
	}
	write(groupBlocks/2 + 5) // crosses into a second stripe group, allocated by the new leader
	nl := tc.leader(a0, a1)
	lay, err := nl.Layout(ctx, "fs", vz.ID())
	require.NoError(t, err)
	require.Len(t, lay.Groups, 2)

	got, err := vz.Read(ctx, 0, uint64(len(want)/bs))
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "data read back through the client")

	// A second client's handle of the v-zone, its layout loaded now and
	// then left alone until its Finish below: it still caches the layout
	// from before the reclaim.
	c2, err := client.New(ctx, client.Config{Arbiters: []string{a0.Addr(), a1.Addr()}, Namespace: "fs",
		RetryDeadline: 60 * time.Second, Logger: discardLogger()})
	require.NoError(t, err)
	t.Cleanup(c2.Close)
	stale := c2.VZone(vz.ID())
	_, err = stale.Layout(ctx)
	require.NoError(t, err)
	// And a third's, for a read through the layout from before the reclaim.
	c3, err := client.New(ctx, client.Config{Arbiters: []string{a0.Addr(), a1.Addr()}, Namespace: "fs",
		RetryDeadline: 60 * time.Second, Logger: discardLogger()})
	require.NoError(t, err)
	t.Cleanup(c3.Close)
	staleR := c3.VZone(vz.ID())
	_, err = staleR.Layout(ctx)
	require.NoError(t, err)

	// Freeze the namespace: its open, overdriven stripe group is reclaimed.
	info, err := nl.GetNamespace(ctx, "fs")
	require.NoError(t, err)
	require.Greater(t, lay.Groups[1].Width, info.MinWidth)
	tc.clock.Advance(2 * time.Minute)
	res, err := nl.CheckReclaim(ctx)
	require.NoError(t, err)
	require.Len(t, res, 1)
	// The nodes learn of the revoked grants through their watches, after
	// the commit: until a node has, it still serves the released zones
	// (their data is intact) and a read through the stale layout succeeds
	// without a refresh (the flake under load: the client kept generation
	// 2). Once every released zone holding data was reset, the cached
	// grants are gone (the cache drops a grant before its reset), so a
	// read through the stale layout must fail and refresh.
	require.NotEmpty(t, res[0].ReleasedZones)
	require.Eventually(t, func() bool {
		wps, err := comp.WrittenBlocks(ctx, "fs", res[0].ReleasedZones)
		if err != nil {
			return false
		}
		for _, wp := range wps {
			if wp != 0 {
				return false
			}
		}
		return true
	}, 60*time.Second, 10*time.Millisecond, "the nodes reset the released zones")
	// A read through the stale layout: the nodes refuse the revoked zones,
	// the client refreshes and reads again (before, the read failed once
	// with NOT_OWNER, which a file system returned to its caller as EACCES).
	got, err = staleR.Read(ctx, 0, uint64(len(want)/bs))
	require.NoError(t, err, "a read through a layout the reclaim moved")
	require.True(t, bytes.Equal(want, got), "read after the reclaim through a stale handle")
	// A write through the stale layout: the nodes refuse the revoked zones,
	// the client refreshes the layout and writes through the new one. Before,
	// the write failed with NOT_OWNER, and a file system idle for TReadOnly
	// (5 minutes) went read-only at its next write to an overdriven v-zone.
	write(3)
	// The client's cached layout is stale now; its read refreshes and succeeds.
	require.Eventually(t, func() bool {
		got, err = vz.Read(ctx, 0, uint64(len(want)/bs))
		return !errors.Is(err, zerr.ErrNotOwner) && !errors.Is(err, zerr.ErrStaleLayout)
	}, 60*time.Second, 10*time.Millisecond)
	require.NoError(t, err)
	for b := 0; b < len(want)/bs; b++ {
		require.True(t, bytes.Equal(want[b*bs:(b+1)*bs], got[b*bs:(b+1)*bs]), "block %d after reclaim", b)
	}
	cl, err := vz.Layout(ctx)
	require.NoError(t, err)
	after, err := nl.Layout(ctx, "fs", vz.ID())
	require.NoError(t, err)
	require.Equal(t, after.Generation, cl.GetGeneration(), "the client refreshed its layout")

	// Finishing the v-zone finishes the zones of its current layout on the
	// drives: none of them stays open (it would hold the drive's active
	// resources). Before, Finish finished the zones of the layout it had
	// cached before the call.
	nodes := map[string]*realNode{n0.id: n0, n1.id: n1}
	actx := metadata.AppendToOutgoingContext(ctx, wire.TokenKey, nodeToken)
	for _, v := range []*client.VZone{stale} {
		require.NoError(t, v.Finish(ctx))
		fin, err := nl.Layout(ctx, "fs", v.ID())
		require.NoError(t, err)
		for _, g := range fin.Groups {
			for _, z := range g.Zones {
				r, err := nodes[z.Node].client.ReportZones(actx, &v1.ReportZonesRequest{Device: z.Device, StartZone: z.Zone, MaxZones: 1})
				require.NoError(t, err)
				require.Len(t, r.GetZones(), 1)
				st := r.GetZones()[0].GetState()
				assert.Contains(t, []v1.ZoneState{v1.ZoneState_ZONE_STATE_FULL, v1.ZoneState_ZONE_STATE_EMPTY}, st, "v-zone %d zone %s after the finish", v.ID(), z)
			}
		}
	}
	checkInvariants(t, tc, nl, "full stack")
}
