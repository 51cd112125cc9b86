package fsvol_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// TestParityFSRidesThroughNodeLoss is issue 19's file-system test for a
// raid5 namespace (2 data legs + a parity leg + the partial-parity log per
// group, on 4 real nodes). The node holding a data leg of finished v-zones
// (and of the metadata log's, when one node holds both) stops: every file
// reads back (reconstructed from parity or from partial-parity records),
// fsyncs and a checkpoint succeed (writes move to groups on the live
// nodes, the degraded ones are finished and give their active zones back,
// so 9 active v-zones are enough); the node returns and a fresh mount reads
// every file with fsck clean. Parity legs are not rebuilt (the arbiter says
// so), so the test ends with the node's return. A fresh mount while the
// node is down records the finished v-zones at capacity; the node's zones
// missed their FINISH, and the client finishes them when it first derives
// such a v-zone's write pointer after the node returns (without that, the
// last mount found "a write pointer behind the data" and went read-only).
func TestParityFSRidesThroughNodeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and stops a node")
	}
	ctx := context.Background()
	cl, err := localcluster.Start(ctx, localcluster.Config{Dir: t.TempDir(), Nodes: 4, Clock: "off", Device: localcluster.TinyDevice(), SessionTTL: time.Second})
	require.NoError(t, err)
	defer cl.Close()
	admin, err := client.New(ctx, cl.AdminClientConfig())
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "fs", MaxActiveVzones: 9, ZonesPerVzone: 2, Redundancy: "raid5"})
	require.NoError(t, err)
	mount := func() (*fsvol.Volume, *lfs.FS, func()) {
		ccfg := cl.ClientConfig("fs")
		ccfg.RetryDeadline = time.Second
		c, err := client.New(ctx, ccfg)
		require.NoError(t, err)
		vol, err := fsvol.New(ctx, c, fsvol.Options{MaxZones: 60})
		require.NoError(t, err)
		clk := clock.Realtime(1)
		fs, err := lfs.Mount(ctx, vol, lfs.Options{Clock: clk, Mode: lfs.ModeZNS, RetryDeadline: 10 * time.Second, CacheBlocks: 96})
		require.NoError(t, err)
		return vol, fs, func() { clk.Stop(); c.Close() }
	}
	{
		c, err := client.New(ctx, cl.ClientConfig("fs"))
		require.NoError(t, err)
		vol, err := fsvol.New(ctx, c, fsvol.Options{MaxZones: 60})
		require.NoError(t, err)
		require.NoError(t, lfs.Mkfs(ctx, vol, lfs.MkfsOptions{OPPercent: 20}))
		c.Close()
	}
	_, fs, closeFS := mount()
	ops := fsOps{fs}
	files := map[string][]byte{}
	write := func(prefix string, n int) {
		for i := 0; i < n; i++ {
			name := fmt.Sprintf("%s-%02d", prefix, i)
			data := content(name, 0, 20<<10+i*1000)
			require.NoError(t, ops.write(ctx, name, data, true), "fsync of %s", name)
			files[name] = data
		}
	}
	check := func(ops fsOps, when string) {
		for name, want := range files {
			got, err := ops.read(ctx, name)
			require.NoError(t, err, "%s: read %s", when, name)
			require.True(t, bytes.Equal(want, got), "%s: %s reads back other bytes", when, name)
		}
	}
	write("before", 40) // more than a segment: finished v-zones with data

	// the victim: a node with a DATA leg of a finished v-zone (parity
	// legs are never read while all data legs answer), preferring one that
	// also holds a data leg of the metadata log's v-zone
	meta := uint64(fs.Stats().MetaZone)
	arb, err := admin.Arbiter(ctx)
	require.NoError(t, err)
	list, err := arb.ListVZones(ctx, &v1.ListVZonesRequest{Namespace: "fs"})
	require.NoError(t, err)
	metaNodes, holders := map[string]bool{}, map[string]bool{}
	for _, l := range list.GetVzones() {
		for _, g := range l.GetGroups() {
			require.True(t, g.GetParity(), "v-zone %d: a raid5 namespace's group without parity", l.GetId())
			require.Len(t, g.GetZones(), int(g.GetWidth())+2, "k data legs + parity + partial-parity log")
			for _, z := range g.GetZones()[:g.GetWidth()] {
				if uint64(l.GetId()) == meta {
					metaNodes[z.GetNode()] = true
				} else if l.GetState() == v1.VZoneState_VZONE_STATE_FULL {
					holders[z.GetNode()] = true
				}
			}
		}
	}
	require.NotEmpty(t, holders, "no finished v-zone")
	victimID := ""
	for n := range holders {
		if victimID == "" || metaNodes[n] && !metaNodes[victimID] || metaNodes[n] == metaNodes[victimID] && n < victimID {
			victimID = n
		}
	}
	victim := -1
	for i, n := range cl.Info().Nodes {
		if n.ID == victimID {
			victim = i
		}
	}
	require.GreaterOrEqual(t, victim, 0)
	require.NoError(t, cl.StopNode(victim))
	t.Logf("stopped %s (data leg of the metadata log: %v)", victimID, metaNodes[victimID])

	check(ops, "node down")
	write("during", 16)
	require.NoError(t, fs.Sync(ctx), "a checkpoint with a data leg of the metadata log gone")
	ro, _ := fs.ReadOnly()
	require.False(t, ro)
	check(ops, "node down, after writes")
	require.NoError(t, fs.Unmount(ctx))
	closeFS()

	_, fsDown, closeDown := mount()
	check(fsOps{fsDown}, "node down, fresh mount")
	require.NoError(t, fsDown.Unmount(ctx))
	closeDown()

	require.NoError(t, cl.StartNode(ctx, victim))
	_, fs2, close2 := mount()
	defer close2()
	check(fsOps{fs2}, "node back, fresh mount")
	rep, err := fs2.Fsck(ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs2.Unmount(ctx))
}
