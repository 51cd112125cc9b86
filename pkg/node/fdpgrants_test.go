package node

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/fdp"
)

// The fdp grant cache follows the namespace records: a grant just
// written is found (the lookup waits for the watch), a weight change
// keeps it, a deleted one is revoked before any later record applies, so
// the range granted again is trimmed by the time the next tenant sees it.
func TestFDPGrantsFollowNamespaceRecords(t *testing.T) {
	cli := etcdClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	put := func(name string, w uint32, e *cluster.FDPExtent) {
		b, err := cluster.EncodeNamespace(cluster.NamespaceRecord{Name: name, Weight: w, FDP: e})
		require.NoError(t, err)
		_, err = cli.Put(ctx, cluster.NamespaceKey(name), string(b))
		require.NoError(t, err)
	}
	ext := cluster.FDPExtent{Node: "fg-node", Device: 0, FirstLBA: 10, LBAs: 20, Handles: []uint32{1, 2}}
	put("fdpg-a", 1, &ext)

	revoked := make(chan cluster.FDPExtent, 8)
	g, err := WatchFDPGrants(ctx, cli, quiet, func(e cluster.FDPExtent) { revoked <- e })
	require.NoError(t, err)

	got, ok, err := g.Lookup(ctx, "fdpg-a")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, ext, got)
	_, ok, err = g.Lookup(ctx, "fdpg-none")
	require.NoError(t, err)
	assert.False(t, ok, "no record, no grant")
	put("fdpg-zoned", 1, nil)
	_, ok, err = g.Lookup(ctx, "fdpg-zoned")
	require.NoError(t, err)
	assert.False(t, ok, "a zoned namespace has no grant")

	other := cluster.FDPExtent{Node: "fg-node", Device: 0, FirstLBA: 40, LBAs: 5, Handles: []uint32{3}}
	put("fdpg-b", 1, &other)
	got, ok, err = g.Lookup(ctx, "fdpg-b")
	require.NoError(t, err)
	require.True(t, ok, "a grant just written is found")
	assert.Equal(t, other, got)

	put("fdpg-a", 5, &ext)
	_, err = cli.Delete(ctx, cluster.NamespaceKey("fdpg-a"))
	require.NoError(t, err)
	put("fdpg-c", 1, &ext) // the same range, granted again
	got, ok, err = g.Lookup(ctx, "fdpg-c")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, ext, got)
	select {
	case e := <-revoked:
		assert.Equal(t, ext, e, "the deleted grant, revoked before the new one applied")
	default:
		t.Fatal("the new grant was visible before the old one was revoked")
	}
	assert.Empty(t, revoked, "a weight change revokes nothing")
	_, ok, err = g.Lookup(ctx, "fdpg-a")
	require.NoError(t, err)
	assert.False(t, ok)

	for _, n := range []string{"fdpg-b", "fdpg-c", "fdpg-zoned"} {
		_, err = cli.Delete(ctx, cluster.NamespaceKey(n))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return len(revoked) == 2 }, 20*time.Second, 5*time.Millisecond, "b and c revoked")
}

// At the start the LBAs no grant holds on this node's drives are
// trimmed (namespaces deleted while the node was down); the granted
// ranges, and other nodes' grants, change nothing.
func TestFDPSweepUngranted(t *testing.T) {
	o := DefaultOptions()
	o.DataDir = t.TempDir()
	o.Device = testGeometry()
	o.Device.BlocksPerChip = 64
	o.FDP.Devices = 1
	o.FDP.Handles = []string{"ii"}
	devs, err := OpenFDPDevices(o, clock.Off())
	require.NoError(t, err)
	d := devs[0]
	t.Cleanup(func() { _ = d.Close() })
	ctx := context.Background()
	bs := d.BlockSize()
	lbas := d.Configs().LBAs
	require.Greater(t, lbas, uint64(64))
	marked := func(lba uint64) []byte { return bytes.Repeat([]byte{byte(lba + 1)}, bs) }
	written := []uint64{0, 9, 10, 29, 30, 45, 50, lbas - 1}
	for _, lba := range written {
		_, err := d.Write(ctx, lba, marked(lba), fdp.PlacementID{}, fdp.Flags{})
		require.NoError(t, err)
	}
	f := &FDPService{devs: devs, node: "me", log: quiet}
	require.NoError(t, f.sweepUngranted(ctx, []cluster.FDPExtent{
		{Node: "me", Device: 0, FirstLBA: 10, LBAs: 20},
		{Node: "me", Device: 0, FirstLBA: 45, LBAs: 1},
		{Node: "other", Device: 0, FirstLBA: 0, LBAs: 10},
		{Node: "me", Device: 1, FirstLBA: 50, LBAs: 10},
	}))
	kept := map[uint64]bool{10: true, 29: true, 45: true}
	for _, lba := range written {
		got, _, err := d.Read(ctx, lba, 1)
		require.NoError(t, err)
		if kept[lba] {
			assert.Equal(t, marked(lba), got, "granted LBA %d", lba)
		} else {
			assert.Equal(t, make([]byte, bs), got, "ungranted LBA %d", lba)
		}
	}
}
