package client_test

import (
	"bytes"
	"context"
	"fmt"
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

// A mirror:2 namespace over real nodes: every leg has two copies on
// distinct nodes; with one node stopped every acknowledged byte still reads
// back (degraded reads), also through a fresh client that has to find the
// write pointer without that node; new v-zones land on the live nodes and
// take writes; zone_compaction and TL_open are refused (they would change
// one copy only).
func TestMirroredVZoneSurvivesANode(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, 1)
	ctx := context.Background()
	admin := newClient(t, c, "")
	ns, err := admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "m", MaxActiveVzones: 2, ZonesPerVzone: 4, Redundancy: "mirror:2"})
	require.NoError(t, err)
	require.Equal(t, "mirror:2", ns.GetRedundancy())

	reg := prometheus.NewRegistry()
	cl := testcluster.Client(t, c, "m", testcluster.WithEtcd(c), testcluster.RetryDeadline(20*time.Second), testcluster.WithClock(testcluster.NewRetryClock()), testcluster.WithRegisterer(reg))

	vz, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	info, err := vz.ReportZone(ctx)
	require.NoError(t, err)
	bs := info.BlockSize
	var want []byte
	for i := 0; i < 24; i++ { // appends across stripe groups
		b := random(int(bs) * (1 + i*7%29))
		off, err := vz.Append(ctx, b)
		require.NoError(t, err)
		require.Equal(t, uint64(len(want))/bs, off)
		want = append(want, b...)
	}
	l, err := vz.Layout(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, l.GetGroups())
	for _, g := range l.GetGroups() {
		require.Equal(t, uint32(2), g.GetCopies())
		require.Len(t, g.GetZones(), int(2*g.GetWidth()))
		for i := uint32(0); i < g.GetWidth(); i++ {
			require.NotEqual(t, g.GetZones()[i].GetNode(), g.GetZones()[g.GetWidth()+i].GetNode(), "copies of leg %d on one node", i)
		}
	}

	// offloaded recycling is refused on mirrored v-zones, typed
	dst, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	_, err = cl.Compact(ctx, []client.Copy{{Src: vz.ID(), SrcOff: 0, Dst: dst.ID(), DstOff: 0, Blocks: 1}})
	require.ErrorIs(t, err, zerr.ErrZoneState)
	require.ErrorIs(t, dst.Reset(ctx), nil)

	// a second v-zone, open with one stripe group
	w, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	_, err = w.Append(ctx, random(int(bs)*3))
	require.NoError(t, err)
	wl, err := w.Layout(ctx)
	require.NoError(t, err)

	// stop a node holding a copy in w's open group (and in the first v-zone's)
	victim := wl.GetGroups()[len(wl.GetGroups())-1].GetZones()[0].GetNode()
	holds := false
	for _, g := range l.GetGroups() {
		for _, z := range g.GetZones() {
			holds = holds || z.GetNode() == victim
		}
	}
	require.True(t, holds, "the first v-zone has no copy on %s", victim)
	var idx int
	_, err = fmt.Sscanf(victim, "node-%d", &idx)
	require.NoError(t, err)
	require.NoError(t, c.StopNode(idx-1))

	readAll := func(vz *client.VZone) {
		t.Helper()
		got, err := vz.Read(ctx, 0, uint64(len(want))/bs)
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got), "mirrored v-zone reads back other bytes with %s down", victim)
	}
	readAll(vz)
	require.Greater(t, testutil.ToFloat64(counter(t, reg, "zonefleet_client_degraded_reads_total")), 0.0)

	// a write into w's group, which has a copy on the stopped node, is
	// refused at once as degraded (the caller continues in another v-zone)
	r0 := nodeRetries(t, reg)
	_, err = w.Append(ctx, random(int(bs)*2))
	require.ErrorIs(t, err, zerr.ErrZoneState)
	require.True(t, zerr.IsDegraded(err), "%v", err)
	require.NotErrorIs(t, err, zerr.ErrUnavailable, "a degraded write is not retried as UNAVAILABLE")
	require.Equal(t, r0, nodeRetries(t, reg), "a degraded write does not wait out the retries")
	require.Greater(t, testutil.ToFloat64(counter(t, reg, "zonefleet_client_degraded_writes_total")), 0.0)
	readAll(vz) // the node is suspected now: read from the other copy at once

	cl2 := newClient(t, c, "m") // knows nothing: layout and write pointer from the live copies
	vz2 := cl2.VZone(vz.ID())
	info2, err := vz2.ReportZone(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(len(want))/bs, info2.WritePointer)
	readAll(vz2)

	// once the arbiter sees the node gone, a new v-zone avoids it and takes writes
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
	// the arbiter finishes the v-zone; the stopped node's zones answer
	// UNAVAILABLE (the file system retries such finishes at checkpoints)
	require.ErrorIs(t, vz.Finish(testcluster.MustFail(ctx)), zerr.ErrUnavailable)
	nv, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	b := random(int(bs) * 40)
	_, err = nv.Append(ctx, b)
	require.NoError(t, err)
	nl, err := nv.Layout(ctx)
	require.NoError(t, err)
	for _, g := range nl.GetGroups() {
		for _, z := range g.GetZones() {
			require.NotEqual(t, victim, z.GetNode(), "a new stripe group on the stopped node")
		}
	}
	got, err := nv.Read(ctx, 0, 40)
	require.NoError(t, err)
	require.True(t, bytes.Equal(b, got))

	// the operator declares the node lost: the copies it held of the
	// finished v-zone are rebuilt node to node on the other nodes, and a
	// fresh client reads every byte from the new layout
	err = admin.RemoveNode(ctx, victim)
	require.ErrorIs(t, err, zerr.ErrZoneState, "it still holds zones: marked down, rebuild started")
	require.Eventually(t, func() bool {
		arb, err := cl.Arbiter(ctx)
		if err != nil {
			return false
		}
		l, err := arb.GetVZone(ctx, &v1.VZoneRequest{Namespace: "m", Id: vz.ID()})
		if err != nil {
			return false
		}
		for _, g := range l.GetGroups() {
			for _, z := range g.GetZones() {
				if z.GetNode() == victim {
					return false
				}
			}
		}
		return true
	}, 60*time.Second, 100*time.Millisecond, "the finished v-zone's copies leave the lost node")
	cl3 := newClient(t, c, "m")
	readAll(cl3.VZone(vz.ID()))
	readAll(vz) // the first client refreshes its layout

	// the node returns: everything still reads back
	require.NoError(t, c.StartNode(ctx, idx-1))
	readAll(vz)
	readAll(cl3.VZone(vz.ID()))
}

// nodeRetries is the client's count of node call retries (every backoff a
// node call slept, whatever its operation): a call that did not add to it
// did not wait out a retry deadline, however long the busy machine took.
func nodeRetries(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "zonefleet_client_retries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			op := ""
			for _, l := range m.GetLabel() {
				op = l.GetValue()
			}
			if op != "arbiter" {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

func counter(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: "copy"}, func() float64 { return mf.GetMetric()[0].GetCounter().GetValue() })
		}
	}
	t.Fatalf("metric %s not registered", name)
	return nil
}
