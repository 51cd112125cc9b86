package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/internal/testcluster"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// A raid5 namespace over real nodes: random appends (partial rows, full
// rows, rows completed across appends, FUA or not) against a reference;
// with a node holding a data leg stopped, every acknowledged byte reads
// back (reconstructed from parity, or from the partial-parity log for the
// row that was partial when it stopped), also through a fresh client; a
// write into the group is refused as degraded; after the node returns
// everything reads back again.
func TestParityVZoneSurvivesANode(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, 1)
	ctx := context.Background()
	admin := newClient(t, c, "")
	ns, err := admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "p", MaxActiveVzones: 2, ZonesPerVzone: 4, Redundancy: "raid5"})
	require.NoError(t, err)
	require.Equal(t, "raid5", ns.GetRedundancy())

	reg := prometheus.NewRegistry()
	cl := testcluster.Client(t, c, "p", testcluster.WithEtcd(c), testcluster.RetryDeadline(20*time.Second), testcluster.WithClock(testcluster.NewRetryClock()), testcluster.WithRegisterer(reg))

	vz, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	info, err := vz.ReportZone(ctx)
	require.NoError(t, err)
	bs := info.BlockSize
	l, err := vz.Layout(ctx)
	require.NoError(t, err)
	g0 := l.GetGroups()[0]
	require.True(t, g0.GetParity())
	row := uint64(g0.GetStripeBlocks()) * uint64(g0.GetWidth())
	rng := mrand.New(mrand.NewPCG(19, 5))
	var want []byte
	for i := 0; uint64(len(want))/bs < 3*row*uint64(l.GetGroups()[0].GetWidth()) && i < 200; i++ {
		nb := 1 + rng.Uint64N(2*row)
		b := random(int(bs * nb))
		var err error
		off := uint64(len(want)) / bs
		if i%3 == 0 {
			err = vz.WriteFUA(ctx, off, b)
		} else {
			_, err = vz.Append(ctx, b)
		}
		require.NoError(t, err)
		want = append(want, b...)
	}
	if uint64(len(want))/bs%row == 0 { // end inside a row: its protection is a PP record
		b := random(int(bs))
		_, err := vz.Append(ctx, b)
		require.NoError(t, err)
		want = append(want, b...)
	}
	require.NoError(t, vz.Flush(ctx))
	l, err = vz.Layout(ctx)
	require.NoError(t, err)
	for _, g := range l.GetGroups() {
		require.True(t, g.GetParity())
		require.Zero(t, g.GetCopies())
		require.Len(t, g.GetZones(), int(g.GetWidth()+3), "k data legs + parity + two PP logs")
		nodes := map[string]bool{}
		for _, z := range g.GetZones()[:g.GetWidth()+1] {
			require.False(t, nodes[z.GetNode()], "two legs of a parity group on %s", z.GetNode())
			nodes[z.GetNode()] = true
		}
		require.Equal(t, g.GetZones()[g.GetWidth()].GetNode(), g.GetZones()[g.GetWidth()+1].GetNode())
		require.Equal(t, g.GetZones()[g.GetWidth()].GetNode(), g.GetZones()[g.GetWidth()+2].GetNode())
	}
	readAll := func(vz *client.VZone, why string) {
		t.Helper()
		got, err := vz.Read(ctx, 0, uint64(len(want))/bs)
		require.NoError(t, err, why)
		require.True(t, bytes.Equal(want, got), "parity v-zone reads back other bytes (%s)", why)
	}
	readAll(vz, "all nodes up")

	// offloaded recycling is refused on parity v-zones, typed
	dst, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	_, err = cl.Compact(ctx, []client.Copy{{Src: vz.ID(), SrcOff: 0, Dst: dst.ID(), DstOff: 0, Blocks: 1}})
	require.ErrorIs(t, err, zerr.ErrZoneState)
	require.NoError(t, dst.Reset(ctx))

	// stop the node of data leg 0 of the last (open, partial-row) group
	last := l.GetGroups()[len(l.GetGroups())-1]
	victim := last.GetZones()[0].GetNode()
	var idx int
	_, err = fmt.Sscanf(victim, "node-%d", &idx)
	require.NoError(t, err)
	require.NoError(t, c.StopNode(idx-1))

	readAll(vz, victim+" down")
	require.Greater(t, testutil.ToFloat64(counter(t, reg, "zonefleet_client_degraded_reads_total")), 0.0)
	cl2 := newClient(t, c, "p") // a fresh client: no cached row parity, layout from the arbiter
	info2, err := cl2.VZone(vz.ID()).ReportZone(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(len(want))/bs, info2.WritePointer, "the write pointer from the parity and PP log standing in for the lost leg")
	readAll(cl2.VZone(vz.ID()), victim+" down, fresh client")

	r0 := nodeRetries(t, reg)
	_, err = vz.Append(ctx, random(int(bs)))
	require.ErrorIs(t, err, zerr.ErrZoneState)
	require.True(t, zerr.IsDegraded(err), "%v", err)
	require.Equal(t, r0, nodeRetries(t, reg), "a degraded write does not wait out the retries")

	// the workload goes on in a new v-zone once the arbiter sees the node
	// gone: placed on the two live nodes (width 1 + parity), readable
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
	// finishing it seals the open row first (its zones' write pointers
	// then say nothing); the stopped node's zone answers UNAVAILABLE
	require.ErrorIs(t, vz.Finish(testcluster.MustFail(ctx)), zerr.ErrUnavailable)
	readAll(vz, victim+" down, finished")
	readAll(newClient(t, c, "p").VZone(vz.ID()), victim+" down, finished, fresh client")

	nv, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	var more []byte
	for i := 0; i < 12 || uint64(len(more))/bs%row == 0; i++ { // ends inside a row
		b := random(int(bs * (1 + rng.Uint64N(3*row))))
		_, err := nv.Append(ctx, b)
		require.NoError(t, err)
		more = append(more, b...)
	}
	nl, err := nv.Layout(ctx)
	require.NoError(t, err)
	for _, g := range nl.GetGroups() {
		require.True(t, g.GetParity())
		for _, z := range g.GetZones() {
			require.NotEqual(t, victim, z.GetNode(), "a new parity group on the stopped node")
		}
	}
	readMore := func(why string) {
		t.Helper()
		got, err := nv.Read(ctx, 0, uint64(len(more))/bs)
		require.NoError(t, err, why)
		require.True(t, bytes.Equal(more, got), "the new v-zone reads back other bytes (%s)", why)
	}
	readMore(victim + " down")
	// finished with every node up and a partial row: readable with a data
	// leg's node down
	require.NoError(t, nv.Finish(ctx))
	nvl, err := nv.Layout(ctx)
	require.NoError(t, err)
	readMore(victim + " down, new v-zone finished")

	require.NoError(t, c.StartNode(ctx, idx-1))
	readAll(cl2.VZone(vz.ID()), victim+" back")
	readAll(vz, victim+" back, first client")
	readMore(victim + " back")

	// stop the node of a data leg of the finished new v-zone
	lg := nvl.GetGroups()[len(nvl.GetGroups())-1]
	v2 := lg.GetZones()[int(lg.GetWidth())-1].GetNode()
	var idx2 int
	_, err = fmt.Sscanf(v2, "node-%d", &idx2)
	require.NoError(t, err)
	require.NoError(t, c.StopNode(idx2-1))
	readMore(v2 + " down, new v-zone finished")
	fresh := newClient(t, c, "p")
	got, err := fresh.VZone(nv.ID()).Read(ctx, 0, uint64(len(more))/bs)
	require.NoError(t, err)
	require.True(t, bytes.Equal(more, got), "a finished parity v-zone reads back other bytes with %s down (fresh client)", v2)
}

// One-block appends write a PP record each (a header block and the row's
// XOR so far, up to a stripe unit), so a PP log fills long before its group
// and the group switches to its other PP log, resetting it and writing from
// its start (several times here). Then a switch's record write fails after
// the reset (injected): the write is not acknowledged, and with the node
// of the data leg holding the open row's last acknowledged block down,
// everything acknowledged reads back — the open row from the older log's
// record, which the reset of the other log did not touch (with one log
// reset in place, the open row's acknowledged prefix would be lost). Not
// parallel: it sets the package-wide PP hook.
func TestParityPPLogWrapsAround(t *testing.T) {
	c := startCluster(t, 3, 1)
	ctx := context.Background()
	admin := newClient(t, c, "")
	_, err := admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "p", MaxActiveVzones: 1, ZonesPerVzone: 4, Redundancy: "raid5"})
	require.NoError(t, err)
	cl := newClient(t, c, "p")
	vz, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	info, err := vz.ReportZone(ctx)
	require.NoError(t, err)
	bs := info.BlockSize
	l, err := vz.Layout(ctx)
	require.NoError(t, err)
	g := l.GetGroups()[0]
	require.Len(t, g.GetZones(), int(g.GetWidth())+3, "k data legs + parity + two PP logs")
	k := int(g.GetWidth())
	require.Equal(t, g.GetZones()[k].GetNode(), g.GetZones()[k+1].GetNode())
	require.Equal(t, g.GetZones()[k].GetNode(), g.GetZones()[k+2].GetNode())
	zoneCap := g.GetCapacity() / uint64(g.GetWidth())
	S := uint64(g.GetStripeBlocks())
	row := S * uint64(g.GetWidth())
	n := zoneCap*2/3 + 1 // at least 2 PP blocks each: more than a PP zone holds
	require.Less(t, n, g.GetCapacity(), "the appends stay in the first group")
	var want []byte
	for i := uint64(0); i < n; i++ {
		b := random(int(bs))
		_, err := vz.Append(ctx, b)
		require.NoError(t, err)
		want = append(want, b...)
	}

	// the next switch whose open row holds acknowledged blocks fails its
	// record's write after the reset
	injected := errors.New("injected: the record's write after the reset failed")
	var failedCover uint64
	defer client.SetPPTestHook(func(_ uint32, _, covered uint64) error {
		if failedCover == 0 && covered >= 2 {
			failedCover = covered
			return injected
		}
		return nil
	})()
	for failedCover == 0 {
		require.Less(t, uint64(len(want))/bs+1, g.GetCapacity(), "no PP log switch in the first group")
		b := random(int(bs))
		_, err := vz.Append(ctx, b)
		if failedCover != 0 {
			require.ErrorIs(t, err, injected)
			break
		}
		require.NoError(t, err)
		want = append(want, b...)
	}
	acked := uint64(len(want)) / bs
	require.Equal(t, acked%row, failedCover-1, "the open row's acknowledged prefix")
	leg := int((failedCover - 2) / S) // holds the open row's last acknowledged block
	victim := g.GetZones()[leg].GetNode()
	var idx int
	_, err = fmt.Sscanf(victim, "node-%d", &idx)
	require.NoError(t, err)
	require.NoError(t, c.StopNode(idx-1))
	got, err := newClient(t, c, "p").VZone(vz.ID()).Read(ctx, 0, acked)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "reads back other bytes with %s down after a PP log switch failed past its reset", victim)
}

// A Finish that seals the open row and then fails at the arbiter leaves
// the v-zone open; the writes that follow make the seal stale (it is no
// longer the group's last PP record), and reconstruction follows the
// write pointers and the newer records again: every byte, also those
// written after the stale seal, reads back with a data leg's node down.
func TestParityStaleSealAfterAFailedFinish(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, 1)
	ctx := context.Background()
	admin := newClient(t, c, "")
	_, err := admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "p", MaxActiveVzones: 1, ZonesPerVzone: 4, Redundancy: "raid5"})
	require.NoError(t, err)
	cfg := c.ClientConfig("p")
	cfg.Etcd, cfg.RetryDeadline, cfg.Clock = c.Etcd.Endpoints(), 20*time.Second, testcluster.NewRetryClock()
	cl, err := client.New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	vz, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	info, err := vz.ReportZone(ctx)
	require.NoError(t, err)
	bs := info.BlockSize
	l, err := vz.Layout(ctx)
	require.NoError(t, err)
	g := l.GetGroups()[0]
	row := uint64(g.GetStripeBlocks()) * uint64(g.GetWidth())
	want := random(int(bs * (row + row/2 + 1))) // a full row and a partial one
	_, err = vz.Append(ctx, want)
	require.NoError(t, err)

	require.NoError(t, c.StopArbiter(0))
	require.Error(t, vz.Finish(testcluster.MustFail(ctx)), "the arbiter is stopped")
	require.NoError(t, c.StartArbiter(ctx, 0))

	more := random(int(bs * (2*row + 3))) // completes the sealed row, and more
	_, err = vz.Append(ctx, more)
	require.NoError(t, err)
	want = append(want, more...)
	require.Equal(t, g.GetIndex(), l.GetGroups()[0].GetIndex())

	victim := g.GetZones()[0].GetNode()
	var idx int
	_, err = fmt.Sscanf(victim, "node-%d", &idx)
	require.NoError(t, err)
	require.NoError(t, c.StopNode(idx-1))
	got, err := newClient(t, c, "p").VZone(vz.ID()).Read(ctx, 0, uint64(len(want))/bs)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "reads back other bytes with %s down after a stale seal", victim)
}
