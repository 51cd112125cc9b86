package localcluster_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/internal/testcluster"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/node"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// A mirror:2 rebuild over real nodes under a small rebuild rate (512 KiB/s
// per node): the arbiter sends the copy as a rebuild, so the source and
// the target both charge it (their zonefleet_node_rebuild_bytes_total
// together are twice the bytes moved, the throttled seconds are
// positive), the rebuild takes at least what each node's bytes (less one
// burst) take at the rate, and every byte reads back from the new layout.
func TestMirrorRebuildThrottled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	const rateMiB = 0.5
	ctx := context.Background()
	c := testcluster.Start(t, localcluster.Config{Nodes: 3, Arbiters: 1, RebuildRate: rateMiB})
	// The retry deadline only bounds a hang: ten times what a retry
	// through a node's stop takes on a saturated machine.
	newClient := func(ns string) *client.Client {
		return testcluster.Client(t, c, ns, testcluster.WithEtcd(c), testcluster.RetryDeadline(30*time.Second))
	}
	admin := newClient("")
	_, err := admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "m", MaxActiveVzones: 2, ZonesPerVzone: 2, Redundancy: "mirror:2"})
	require.NoError(t, err)
	cl := newClient("m")
	vz, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	info, err := vz.ReportZone(ctx)
	require.NoError(t, err)
	want := random(int(info.Capacity * info.BlockSize / 2)) // half the v-zone: about a zone per leg
	_, err = vz.Append(ctx, want)
	require.NoError(t, err)
	require.NoError(t, vz.Finish(ctx))

	l, err := vz.Layout(ctx)
	require.NoError(t, err)
	victim := l.GetGroups()[0].GetZones()[0].GetNode()
	require.NoError(t, c.StopNode(nodeIndex(t, victim)))
	require.Eventually(t, func() bool {
		nodes, err := admin.ListNodes(ctx)
		if err != nil {
			return false
		}
		for _, n := range nodes {
			if n.GetId() == victim {
				return !n.GetAvailable()
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond)
	removed := time.Now()
	err = admin.RemoveNode(ctx, victim)
	require.ErrorIs(t, err, zerr.ErrZoneState, "it still holds zones: marked down, rebuild started")
	arb, err := admin.Arbiter(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		l, err := arb.GetVZone(ctx, &v1.VZoneRequest{Namespace: "m", Id: vz.ID()})
		require.NoError(t, err)
		for _, g := range l.GetGroups() {
			for _, z := range g.GetZones() {
				if z.GetNode() == victim {
					return false
				}
			}
		}
		return true
	}, 60*time.Second, 100*time.Millisecond, "the copies leave the lost node")
	took := time.Since(removed)

	rate := rateMiB * (1 << 20)
	burst := float64(node.DefaultRebuildBurst(int64(rate)))
	var total, throttled float64
	for _, n := range c.Info().Nodes {
		if n.ID == victim {
			continue
		}
		b, th := nodeRebuildMetrics(t, n.Metrics)
		total += b
		throttled += th
		if b > burst {
			require.GreaterOrEqual(t, took, time.Duration((b-burst)/rate*float64(time.Second)), "%s moved %.0f rebuild bytes", n.ID, b)
		}
	}
	require.Positive(t, total, "the arbiter's copy was sent as a rebuild and charged")
	require.Zero(t, int64(total)%2, "each byte is charged by its source and its target")
	require.Positive(t, throttled, "the rebuild waited for the rate limit")
	t.Logf("mirror rebuild under %.2f MiB/s per node: %.0f bytes moved, %.2f s throttled, %v", rateMiB, total/2, throttled, took)

	got, err := newClient("m").VZone(vz.ID()).Read(ctx, 0, uint64(len(want))/info.BlockSize)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "every byte reads back after the throttled rebuild")
}
