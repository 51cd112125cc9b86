package client_test

import (
	"bytes"
	"context"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
)

// Reads fan out to one request per physical zone of each stripe group and
// land straight in the caller's buffer: for layouts of several stripe groups
// of different widths and stripe sizes (widths above the node count put two
// legs on one node), every read of a random range matches a reference, into
// a buffer full of garbage, and blocks past the allocated groups read as
// zeroes.
func TestReadFanOutMatchesReference(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, 1)
	ctx := context.Background()
	admin := newClient(t, c, "")
	nodes, err := admin.ListNodes(ctx)
	require.NoError(t, err)
	require.Len(t, nodes, 3)
	zoneCap := nodes[0].GetDevices()[0].GetZoneCapacity()
	const bs = 4096

	dcfg := c.AdminClientConfig() // static layouts: the operator places the zones
	dcfg.Namespace = "static"
	direct := client.NewDirect(dcfg)
	t.Cleanup(direct.Close)
	nextZone := map[string]uint32{}
	type grp struct{ width, stripe uint32 }
	layout := func(id uint64, groups []grp, unallocated uint64) *v1.VZone {
		l := &v1.VZone{Id: id, State: v1.VZoneState_VZONE_STATE_OPEN}
		start := uint64(0)
		for gi, g := range groups {
			pg := &v1.StripeGroup{Index: uint32(gi), Width: g.width, StripeBlocks: g.stripe, Start: start, Capacity: uint64(g.width) * zoneCap}
			for k := uint32(0); k < g.width; k++ {
				n := nodes[(int(id)+gi+int(k))%len(nodes)]
				pg.Zones = append(pg.Zones, &v1.PhysicalZone{Node: n.GetId(), Addr: n.GetAddr(), Zone: nextZone[n.GetId()], Available: true})
				nextZone[n.GetId()]++
			}
			l.Groups = append(l.Groups, pg)
			start += pg.Capacity
		}
		l.Capacity = start + unallocated
		return l
	}
	tests := []struct {
		name   string
		groups []grp
	}{
		{"one zone", []grp{{1, 1}}},
		{"width 3, stripe 2", []grp{{3, 2}}},
		{"width 4 on 3 nodes, stripe 8", []grp{{4, 8}}},
		{"mixed widths and stripes", []grp{{1, 4}, {3, 1}, {4, 8}, {2, 16}}},
	}
	for ti, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const tail = 64 // capacity past the allocated groups: never written
			vz := direct.StaticVZone(layout(uint64(ti), tt.groups, tail))
			l, err := vz.Layout(ctx)
			require.NoError(t, err)
			written := l.GetCapacity() - tail
			rng := mrand.New(mrand.NewPCG(uint64(ti), 9))
			ref := make([]byte, 0, written*bs)
			for uint64(len(ref))/bs < written {
				n := min(1+rng.Uint64N(200), written-uint64(len(ref))/bs)
				data := random(int(n * bs))
				require.NoError(t, vz.Write(ctx, uint64(len(ref))/bs, data))
				ref = append(ref, data...)
			}
			ref = append(ref, make([]byte, tail*bs)...)
			for i := 0; i < 150; i++ {
				off := rng.Uint64N(l.GetCapacity())
				n := min(1+rng.Uint64N(300), l.GetCapacity()-off)
				if i%10 == 0 {
					n = 1 // the one-leg path
				}
				buf := bytes.Repeat([]byte{0xa5}, int(n*bs))
				require.NoError(t, vz.ReadInto(ctx, off, buf))
				require.True(t, bytes.Equal(ref[off*bs:(off+n)*bs], buf), "read %d blocks at %d", n, off)
			}
			all := bytes.Repeat([]byte{0x5a}, len(ref))
			require.NoError(t, vz.ReadInto(ctx, 0, all))
			assert.True(t, bytes.Equal(ref, all), "whole v-zone")
			got, err := vz.Read(ctx, written-1, 2)
			require.NoError(t, err)
			assert.Equal(t, ref[(written-1)*bs:(written+1)*bs], got)
			assert.Error(t, vz.ReadInto(ctx, 0, make([]byte, 100)), "not whole blocks")
			assert.Error(t, vz.ReadInto(ctx, l.GetCapacity()-1, make([]byte, 2*bs)), "past the capacity")
		})
	}
}

// A read sends one call per node, not one per stripe leg: a width-4 group
// on 2 nodes puts two legs on each, and one read of a full row costs each
// node one device read (ReadV), with the data in place.
func TestReadOneCallPerNode(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, 1)
	ctx := context.Background()
	admin := newClient(t, c, "")
	nodes, err := admin.ListNodes(ctx)
	require.NoError(t, err)
	require.Len(t, nodes, 2)
	zoneCap := nodes[0].GetDevices()[0].GetZoneCapacity()
	dcfg := c.AdminClientConfig()
	dcfg.Namespace = "static"
	direct := client.NewDirect(dcfg)
	t.Cleanup(direct.Close)
	g := &v1.StripeGroup{Width: 4, StripeBlocks: 8, Capacity: 4 * zoneCap}
	for k := 0; k < 4; k++ {
		n := nodes[k%2]
		g.Zones = append(g.Zones, &v1.PhysicalZone{Node: n.GetId(), Addr: n.GetAddr(), Zone: uint32(k / 2), Available: true})
	}
	vz := direct.StaticVZone(&v1.VZone{Id: 1, State: v1.VZoneState_VZONE_STATE_OPEN, Groups: []*v1.StripeGroup{g}, Capacity: g.Capacity})
	const bs = 4096
	data := random(64 * bs)
	require.NoError(t, vz.Write(ctx, 0, data))

	reads := func() []int {
		var out []int
		for _, n := range c.Info().Nodes {
			resp, err := http.Get(n.Metrics)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			require.NoError(t, err)
			sum := 0
			for _, line := range strings.Split(string(body), "\n") {
				if strings.HasPrefix(line, "zonefleet_node_io_total{") && strings.Contains(line, `op="read"`) {
					f := strings.Fields(line)
					v, err := strconv.ParseFloat(f[len(f)-1], 64)
					require.NoError(t, err)
					sum += int(v)
				}
			}
			out = append(out, sum)
		}
		return out
	}
	before := reads()
	buf := make([]byte, 32*bs) // one row: 4 legs, 2 per node
	require.NoError(t, vz.ReadInto(ctx, 0, buf))
	assert.True(t, bytes.Equal(data[:32*bs], buf))
	after := reads()
	for i := range after {
		assert.Equal(t, before[i]+1, after[i], "node %d: one device read for its two legs", i)
	}
	buf = make([]byte, 64*bs) // two rows: still one call per node
	require.NoError(t, vz.ReadInto(ctx, 0, buf))
	assert.True(t, bytes.Equal(data, buf))
	again := reads()
	for i := range again {
		assert.Equal(t, after[i]+1, again[i], "node %d", i)
	}
}
