package client_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/internal/testcluster"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// A v-zone finished while the node of one of its zones is down: the arbiter
// records it full, that zone misses its FINISH and, when the node returns,
// still reports its old write pointer. A fresh client takes a finished
// v-zone's write pointer to be its capacity (deriving it from the lagging
// zone moved the end of a finished v-zone below what its writer recorded,
// and a file system mount then found "a write pointer behind the data") and
// finishes the lagging zone; every byte written reads back.
func TestFinishedVZoneWithALaggingZone(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, 1)
	ctx := context.Background()
	createNS(t, c, "lag", 2)
	cfg := c.ClientConfig("lag")
	cfg.Etcd, cfg.RetryDeadline, cfg.Clock = c.Etcd.Endpoints(), 20*time.Second, testcluster.NewRetryClock()
	cl, err := client.New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(cl.Close)

	vz, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	info, err := vz.ReportZone(ctx)
	require.NoError(t, err)
	bs := info.BlockSize
	want := random(int(bs) * int(info.StripeBlocks) * 5) // a few stripes: every zone of the group holds data
	_, err = vz.Append(ctx, want)
	require.NoError(t, err)
	require.NoError(t, vz.Flush(ctx))
	l, err := vz.Layout(ctx)
	require.NoError(t, err)
	victim := l.GetGroups()[0].GetZones()[0].GetNode()
	var idx int
	_, err = fmt.Sscanf(victim, "node-%d", &idx)
	require.NoError(t, err)

	require.NoError(t, c.StopNode(idx-1))
	require.ErrorIs(t, vz.Finish(testcluster.MustFail(ctx)), zerr.ErrUnavailable, "the arbiter finished it; the stopped node's zone did not")
	require.NoError(t, c.StartNode(ctx, idx-1))

	cl2 := newClient(t, c, "lag")
	got, err := cl2.VZone(vz.ID()).ReportZone(ctx)
	require.NoError(t, err)
	require.Equal(t, "full", got.State)
	require.Equal(t, got.Capacity, got.WritePointer, "a finished v-zone's write pointer is its capacity")
	data, err := cl2.VZone(vz.ID()).Read(ctx, 0, uint64(len(want))/bs)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, data))

	// the lagging zone was finished by that client: its node reports it full
	l2, err := cl2.VZone(vz.ID()).Layout(ctx)
	require.NoError(t, err)
	z := l2.GetGroups()[0].GetZones()[0]
	require.Equal(t, victim, z.GetNode())
	dev, dctx, err := cl2.Device(z.GetNode(), z.GetAddr())
	require.NoError(t, err)
	rep, err := dev.ReportZones(dctx, &v1.ReportZonesRequest{Device: z.GetDevice(), StartZone: z.GetZone(), MaxZones: 1})
	require.NoError(t, err)
	require.Len(t, rep.GetZones(), 1)
	require.Equal(t, v1.ZoneState_ZONE_STATE_FULL, rep.GetZones()[0].GetState(), "the zone that missed the FINISH")
}
