package arbiter

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/wire"
)

// laggingWatcher delivers every watch response lag after etcd sent it, in
// order: a node whose grant watch runs behind the arbiter's commits.
type laggingWatcher struct {
	clientv3.Watcher
	lag time.Duration
}

func (w *laggingWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	type stamped struct {
		resp clientv3.WatchResponse
		due  time.Time
	}
	in := w.Watcher.Watch(ctx, key, opts...)
	q := make(chan stamped, 1<<16)
	out := make(chan clientv3.WatchResponse, 1024)
	go func() { // stamps each response as it arrives: lag after etcd sent it
		defer close(q)
		for resp := range in {
			select {
			case q <- stamped{resp, time.Now().Add(w.lag)}:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { // and delivers it then (a burst is delayed lag, not lag each)
		defer close(out)
		for s := range q {
			time.Sleep(time.Until(s.due)) // the modelled lag itself, not a wait for an event
			select {
			case out <- s.resp:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// A reclaim's targets may be zones that were revoked from another v-zone of
// the same namespace a moment before. A node whose grant watch had not yet
// applied that revocation took the copy under the old grant, then applied
// the revocation and reset the zone: the reclaimed data was gone, and the
// namespace's next write through the new layout failed (found as a flaky
// fsvol TestMountSurvivesReclaimWhileIdle: "zone node-1/0/5 is not granted").
// The arbiter's copy now carries the revision of the grant it made, and the
// nodes (the pushing one and PeerWrite's receiver) apply their grants up to
// it first, so the revocation's reset runs before the copy lands.
func TestReclaimIntoZonesJustRevokedOnLaggingNodes(t *testing.T) {
	const lag = 400 * time.Millisecond
	tc, a, nodes, _ := startRealCluster(t, lag)
	ctx := context.Background()
	dev := nodes["n0"].rec.Devices[0]
	bs := int(dev.BlockSize)

	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "r", MARLogical: 2, ZonesPerVZone: 16})
	require.NoError(t, err)
	l0, err := a.OpenVZone(ctx, "r", 0)
	require.NoError(t, err)
	src := l0.Groups[0]
	info, err := a.GetNamespace(ctx, "r")
	require.NoError(t, err)
	require.Greater(t, src.Width, info.MinWidth, "v-zone 0 is overdriven")
	// v-zone 1 holds zones next to v-zone 0's on the same dies.
	l1, err := a.OpenVZone(ctx, "r", 1)
	require.NoError(t, err)

	// Data in v-zone 0: a few stripe units on every zone of the group.
	total := uint64(src.StripeSize)/uint64(bs)*uint64(src.Width) + 3
	writeStriped(t, nodes, "r", src, dev, total)

	// The nodes have applied v-zone 1's grants. Then v-zone 1 is reset (its
	// zones go back to the pool; the lagging nodes still hold the grants to
	// "r" for lag), and the reclaim of the idle namespace follows at once.
	waitGrantsApplied(t, tc, nodes)
	require.NoError(t, a.ResetVZone(ctx, "r", 1))
	tc.clock.Advance(2 * time.Minute)
	res, err := a.CheckReclaim(ctx)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, total, res[0].MovedBlocks)

	nl, err := a.Layout(ctx, "r", 0)
	require.NoError(t, err)
	freed := map[cluster.PhysZone]bool{}
	for _, z := range l1.Groups[0].Zones {
		freed[z] = true
	}
	reused := 0
	for _, g := range nl.Groups {
		for _, z := range g.Zones {
			if freed[z] {
				reused++
			}
		}
	}
	require.Positive(t, reused, "the reclaim targets include zones just revoked from v-zone 1 (%v -> %v)", l1.Groups[0].Zones, nl.Groups)

	// Every block reads back through the new layout, also once the nodes
	// have caught up with every revocation.
	waitGrantsApplied(t, tc, nodes)
	g := nl.Groups[len(nl.Groups)-1]
	require.Len(t, nl.Groups, 1)
	for b := uint64(0); b < total; b++ {
		z, off := locate(g, uint32(bs), b)
		var got []byte
		retryNotOwner(t, func() error {
			r, err := nodes[z.Node].client.Read(wire.WithNamespace(ctx, "r"), &v1.ReadRequest{Device: z.Device, Lba: uint64(z.Zone)*dev.ZoneSize + off, Blocks: 1})
			got = r.GetData()
			return err
		})
		require.True(t, bytes.Equal(blockData(b, bs), got), "block %d at %s+%d after the reclaim", b, z, off)
	}
}
