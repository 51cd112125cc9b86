package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// A zone revoked from one v-zone of a namespace and granted to another (a
// reclaim moves groups and reuses the freed zones at once) is refused to a
// caller whose layout predates the new grant: through that stale layout a
// write would land in the other v-zone's zone and a read return its data.
// The caller gets STALE_LAYOUT (its client reloads the layout) and nothing
// changes; a layout at or after the grant, or a caller sending no revision
// (tools, direct clients), is served.
func TestStaleLayoutIsRefused(t *testing.T) {
	n := startNode(t, "stale", true)
	ctx := context.Background()
	cli := etcdClient(t)
	put := func(vzone uint64) int64 {
		v, err := cluster.EncodeGrant(cluster.Grant{Namespace: "a", VZone: vzone})
		require.NoError(t, err)
		r, err := cli.Put(ctx, cluster.GrantKey("stale", 0, 2), string(v))
		require.NoError(t, err)
		return r.Header.Revision
	}
	const start = 2 * 2048 // zone 2
	at := func(rev int64) context.Context { return wire.WithMinRevision(asNS("a"), rev) }

	r1 := put(7)
	waitGrant(t, n, 2, "a")
	_, err := n.client.Write(at(r1), &v1.WriteRequest{Lba: start, Data: randBlocks(t, 2)})
	require.NoError(t, err)

	// The arbiter moves v-zone 7 away and gives the zone to v-zone 9.
	_, err = cli.Delete(ctx, cluster.GrantKey("stale", 0, 2))
	require.NoError(t, err)
	r2 := put(9)
	require.Greater(t, r2, r1)
	waitGrant(t, n, 2, "a")
	require.Eventually(t, func() bool { return zoneWP(t, n.client, 2) == start }, 5*time.Second, 5*time.Millisecond, "the revocation reset the zone")

	tests := []struct {
		name string
		rev  int64
		ok   bool
	}{
		{"layout before the grant", r1, false},
		{"layout of the grant", r2, true},
		{"no revision sent", 0, true},
	}
	wp := uint64(start)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := n.client.Write(at(tt.rev), &v1.WriteRequest{Lba: wp, Data: randBlocks(t, 1)})
			_, rerr := n.client.Read(at(tt.rev), &v1.ReadRequest{Lba: start, Blocks: 1})
			if !tt.ok {
				require.ErrorIs(t, err, zerr.ErrStaleLayout)
				assert.Contains(t, err.Error(), "stale/0/2 was granted at etcd revision")
				require.ErrorIs(t, rerr, zerr.ErrStaleLayout, "no read of the other v-zone's data")
				assert.Equal(t, wp, zoneWP(t, n.client, 2), "nothing written")
				return
			}
			require.NoError(t, err)
			wp++
			assert.Equal(t, wp, zoneWP(t, n.client, 2))
			require.NoError(t, rerr)
		})
	}
	assert.Contains(t, scrape(t, n.http), "zonefleet_node_stale_layout_refused_total 2")
}
