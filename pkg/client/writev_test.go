package client_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// A leg of several stripe units goes to its node as the caller's buffers,
// without being gathered: on 8 MiB zones striped one block at a time over
// two nodes, every leg is thousands of 4 KiB pieces — in one unary write
// (a 2 MiB write: 1 MiB legs) and in a write stream (a 12 MiB write: 6 MiB
// legs, above the unary limit, sent as 1 MiB messages of 256 buffers) —
// and the v-zone reads back byte for byte, each zone holding its blocks.
func TestWriteLegsOfManyPieces(t *testing.T) {
	t.Parallel()
	dev := localcluster.SmallDevice()
	dev.DZone = 2 // 8 MiB zones
	c := startClusterOf(t, 2, 0, dev)
	ctx := context.Background()
	admin := newClient(t, c, "")
	nodes, err := admin.ListNodes(ctx)
	require.NoError(t, err)
	require.Len(t, nodes, 2)
	zoneCap := nodes[0].GetDevices()[0].GetZoneCapacity()
	require.GreaterOrEqual(t, zoneCap*4096, uint64(8<<20))

	dcfg := c.AdminClientConfig()
	dcfg.Namespace = "static"
	direct := client.NewDirect(dcfg)
	t.Cleanup(direct.Close)
	g := &v1.StripeGroup{Width: 2, StripeBlocks: 1, Capacity: 2 * zoneCap}
	for _, n := range nodes {
		g.Zones = append(g.Zones, &v1.PhysicalZone{Node: n.GetId(), Addr: n.GetAddr(), Zone: 3, Available: true})
	}
	vz := direct.StaticVZone(&v1.VZone{Id: 1, State: v1.VZoneState_VZONE_STATE_OPEN, Capacity: g.Capacity, Groups: []*v1.StripeGroup{g}})

	small := random(2 << 20)
	big := random(12 << 20)
	require.NoError(t, vz.Write(ctx, 0, small))
	require.NoError(t, vz.Write(ctx, uint64(len(small))/4096, big))
	want := append(append([]byte{}, small...), big...)
	check := func() {
		got := make([]byte, len(want))
		require.NoError(t, vz.ReadInto(ctx, 0, got))
		if !bytes.Equal(want, got) {
			i := 0
			for i < len(want) && want[i] == got[i] {
				i++
			}
			z := 0
			for j := i; j < len(got) && got[j] == 0; j++ {
				z++
			}
			t.Fatalf("v-zone content differs from byte %d (block %d) of %d; %d zero bytes there", i, i/4096, len(want), z)
		}
	}
	check()
	// and each zone holds its half: every other block, in order
	for i, n := range nodes {
		zone := make([]byte, len(want)/2)
		leg := direct.StaticVZone(&v1.VZone{Id: 2 + uint64(i), State: v1.VZoneState_VZONE_STATE_OPEN, Capacity: zoneCap,
			Groups: []*v1.StripeGroup{{Width: 1, StripeBlocks: 1, Capacity: zoneCap, Zones: []*v1.PhysicalZone{g.Zones[i]}}}})
		require.NoError(t, leg.ReadInto(ctx, 0, zone), "node %s", n.GetId())
		for b := 0; b < len(zone)/4096; b++ {
			src := (2*b + i) * 4096
			require.True(t, bytes.Equal(want[src:src+4096], zone[b*4096:(b+1)*4096]), "node %s block %d", n.GetId(), b)
		}
	}
}
