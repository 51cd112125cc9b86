package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"

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
	require.Eventually(t, func() bool { return zoneWP(t, n.client, 2) == start }, 30*time.Second, 5*time.Millisecond, "the revocation reset the zone")

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

// A sealed grant (the arbiter moving the zone's data, eZNS reclaim) refuses
// the namespace's writes and zone changes with UNAVAILABLE and serves its
// reads; the arbiter's report of the zone at the seal's revision waits for
// the writes admitted before the seal, so the write pointer it reads is the
// last one. Unsealed, the writes go on.
func TestSealedZoneRefusesWrites(t *testing.T) {
	n := startNode(t, "sealed", true)
	ctx := context.Background()
	cli := etcdClient(t)
	put := func(sealed bool) int64 {
		v, err := cluster.EncodeGrant(cluster.Grant{Namespace: "a", VZone: 4, Sealed: sealed})
		require.NoError(t, err)
		r, err := cli.Put(ctx, cluster.GrantKey("sealed", 0, 3), string(v))
		require.NoError(t, err)
		return r.Header.Revision
	}
	const start = 3 * 2048
	put(false)
	waitGrant(t, n, 3, "a")
	_, err := n.client.Write(asNS("a"), &v1.WriteRequest{Lba: start, Data: randBlocks(t, 2)})
	require.NoError(t, err)

	rev := put(true)
	require.Eventually(t, func() bool { return n.svc.grants.Sealed(0, 3) }, 30*time.Second, 5*time.Millisecond)
	_, err = n.client.Write(asNS("a"), &v1.WriteRequest{Lba: start + 2, Data: randBlocks(t, 1)})
	require.ErrorIs(t, err, zerr.ErrUnavailable)
	assert.Contains(t, err.Error(), "sealed")
	_, err = n.client.ZoneManagement(asNS("a"), &v1.ZoneManagementRequest{Zone: 3, Action: v1.ZoneAction_ZONE_ACTION_FINISH})
	require.ErrorIs(t, err, zerr.ErrUnavailable, "no finish either")
	r, err := n.client.Read(asNS("a"), &v1.ReadRequest{Lba: start, Blocks: 2})
	require.NoError(t, err, "reads go on")
	assert.Len(t, r.GetData(), 2*4096)
	assert.Equal(t, uint64(start+2), zoneWP(t, n.client, 3))

	// A write admitted before the seal (it holds the zone): the arbiter's
	// report at the seal's revision waits for it.
	put(false)
	require.Eventually(t, func() bool { return !n.svc.grants.Sealed(0, 3) }, 30*time.Second, 5*time.Millisecond)
	d := n.svc.devs[0]
	unlock, err := n.svc.holdWrite(asNSIncoming("a"), d, start+2, 1)
	require.NoError(t, err)
	rev = put(true)
	reported := make(chan error, 1)
	go func() {
		_, err := n.client.ReportZones(wire.WithMinRevision(wire.WithNamespace(asAdmin(), "a"), rev), &v1.ReportZonesRequest{StartZone: 3, MaxZones: 1})
		reported <- err
	}()
	// Once the report waits on the zone (the point where it would have
	// answered otherwise), it has not answered.
	require.Eventually(t, func() bool { return n.svc.sealWaits.Load() == 1 }, 30*time.Second, time.Millisecond,
		"the report waits for the write admitted before the seal")
	select {
	case err := <-reported:
		t.Fatalf("the report did not wait for the write admitted before the seal: %v", err)
	default:
	}
	unlock()
	require.NoError(t, <-reported)

	put(false)
	require.Eventually(t, func() bool { return !n.svc.grants.Sealed(0, 3) }, 30*time.Second, 5*time.Millisecond)
	_, err = n.client.Write(asNS("a"), &v1.WriteRequest{Lba: start + 2, Data: randBlocks(t, 1)})
	require.NoError(t, err, "unsealed: the writes go on where they were")
	assert.Contains(t, scrape(t, n.http), "zonefleet_node_sealed_zone_refused_total 2")
}

func asNSIncoming(ns string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs(wire.NamespaceKey, ns))
}
