package arbiter

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// A mirror:N namespace gets stripe groups of width × N zones, the copies of
// every leg on distinct nodes, accounted as active zones of the namespace
// (its minimum width and essentials count every copy).
func TestMirroredNamespaceLayout(t *testing.T) {
	for _, tc := range []struct {
		name   string
		nodes  int
		red    string
		copies uint32
		canon  string
	}{
		{"none", 2, "", 1, "none"},
		{"mirror2 on 2 nodes", 2, "mirror:2", 2, "mirror:2"},
		{"mirror3 on 3 nodes", 3, "mirror:3", 3, "mirror:3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, a := oneLeader(t, tc.nodes) // 16 essentials + 16 spares per node
			ctx := context.Background()
			red, err := cluster.ParseRedundancy(tc.red)
			require.NoError(t, err)
			info, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "m", MARLogical: 4, ZonesPerVZone: 8, Redundancy: red})
			require.NoError(t, err)
			assert.Equal(t, tc.canon, Redundancy(info.NamespaceSpec).String())
			wantMin := pow2Floor(info.Essentials / (4 * tc.copies))
			assert.Equal(t, min(wantMin, 8), info.MinWidth)
			for id := uint64(0); id < 4; id++ {
				l, err := a.OpenVZone(ctx, "m", id)
				require.NoError(t, err)
				g := l.Groups[0]
				require.Equal(t, int(g.Width*tc.copies), len(g.Zones))
				require.Equal(t, tc.copies, g.copies())
				checkInvariants(t, cl, a, "open "+tc.name)
			}
			// a group's next stripe groups up to ZonesPerVZone data zones
			for {
				l, err := a.NextStripeGroup(ctx, "m", 0)
				if err != nil {
					break
				}
				var data uint32
				for _, g := range l.Groups {
					data += g.Width
				}
				require.LessOrEqual(t, data, uint32(8))
				if data == 8 {
					break
				}
			}
			checkInvariants(t, cl, a, "next "+tc.name)
			got, err := a.GetNamespace(ctx, "m")
			require.NoError(t, err)
			assert.LessOrEqual(t, got.EssentialsInUse, got.Essentials)
		})
	}
}

func TestMirroredNamespaceNeedsNodes(t *testing.T) {
	_, a := oneLeader(t, 2)
	ctx := context.Background()
	srv := NewServer(a.Arbiter)
	for _, bad := range []string{"mirror:1", "mirror:9", "raid6", "mirror"} {
		_, err := srv.CreateNamespace(ctx, &v1.CreateNamespaceRequest{Name: "x", MaxActiveVzones: 1, ZonesPerVzone: 4, Redundancy: bad})
		require.ErrorIs(t, rpcerr.FromError(err), zerr.ErrInvalidArgument, bad)
	}
	for _, bad := range []cluster.Redundancy{{Copies: cluster.MaxCopies + 1}, {Copies: 2, Parity: true}} {
		_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "x", MARLogical: 1, ZonesPerVZone: 4, Redundancy: bad})
		require.ErrorIs(t, err, zerr.ErrInvalidArgument, "%+v", bad)
	}
	// three copies need three nodes: the open fails, typed, and changes nothing
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "m3", MARLogical: 1, ZonesPerVZone: 4, Redundancy: cluster.Redundancy{Copies: 3}})
	require.NoError(t, err)
	_, err = a.OpenVZone(ctx, "m3", 0)
	require.ErrorIs(t, err, zerr.ErrNoResources)
	require.Contains(t, err.Error(), "3 distinct available nodes")
	l, err := a.Layout(ctx, "m3", 0)
	require.NoError(t, err)
	require.Equal(t, VZoneEmpty, l.State)
}
