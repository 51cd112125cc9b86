package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// acked is one acknowledged append.
type acked struct {
	vz   uint64
	off  uint64
	data []byte
}

// A random append workload on a mirror:3 namespace over 5 real nodes, checked
// against a reference: one node is stopped during the workload and declared
// lost, and a second node stops while its copies are being rebuilt. Every
// acknowledged byte reads back (through a fresh client) while they are down,
// after both are rebuilt elsewhere, and after they return.
func TestMirror3SecondFailureDuringRebuild(t *testing.T) {
	c := startCluster(t, 5, 1)
	ctx := context.Background()
	admin := newClient(t, c, "")
	_, err := admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "m3", MaxActiveVzones: 2, ZonesPerVzone: 2, Redundancy: "mirror:3"})
	require.NoError(t, err)
	cfg := c.ClientConfig("m3")
	cfg.Etcd, cfg.RetryDeadline = c.Etcd.Endpoints(), 2*time.Second
	cl, err := client.New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(cl.Close)

	var mu sync.Mutex
	var ref []acked
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { // the workload: appends, a new v-zone whenever one refuses
		defer close(done)
		rng := mrand.New(mrand.NewPCG(1, 2))
		var vz *client.VZone
		for wctx.Err() == nil {
			if vz == nil {
				v, err := cl.OpenVZone(wctx)
				if err != nil {
					time.Sleep(50 * time.Millisecond) // a retry pause, e.g. no 3 distinct nodes yet
					continue
				}
				vz = v
			}
			data := random(4096 * (1 + rng.IntN(24)))
			off, err := vz.Append(wctx, data)
			if err != nil {
				if !errors.Is(err, zerr.ErrZoneFull) && !zerr.IsDegraded(err) && wctx.Err() == nil {
					t.Logf("append: %v", err)
				}
				_ = vz.Finish(wctx)
				vz = nil
				continue
			}
			mu.Lock()
			ref = append(ref, acked{vz: vz.ID(), off: off, data: data})
			mu.Unlock()
			time.Sleep(5 * time.Millisecond) // pacing, not synchronization: the tiny drives must keep room for the rebuilds
		}
	}()
	verify := func(when string) {
		t.Helper()
		fresh := newClient(t, c, "m3")
		mu.Lock()
		all := append([]acked(nil), ref...)
		mu.Unlock()
		require.NotEmpty(t, all)
		for _, a := range all {
			got, err := fresh.VZone(a.vz).Read(ctx, a.off, uint64(len(a.data))/4096)
			require.NoError(t, err, "%s: v-zone %d at %d", when, a.vz, a.off)
			require.True(t, bytes.Equal(a.data, got), "%s: v-zone %d at %d reads back other bytes", when, a.vz, a.off)
		}
	}
	nodeIndex := func(id string) int {
		var i int
		_, err := fmt.Sscanf(id, "node-%d", &i)
		require.NoError(t, err)
		return i - 1
	}
	waitGone := func(id string) {
		require.Eventually(t, func() bool {
			nodes, err := admin.ListNodes(ctx)
			if err != nil {
				return false
			}
			for _, n := range nodes {
				if n.GetId() == id {
					return !n.GetAvailable()
				}
			}
			return true
		}, 30*time.Second, 50*time.Millisecond)
	}
	firstNode := func(skip string) string { // a node holding an acknowledged copy
		mu.Lock()
		defer mu.Unlock()
		arb, err := admin.Arbiter(ctx)
		require.NoError(t, err)
		for _, a := range ref {
			l, err := arb.GetVZone(ctx, &v1.VZoneRequest{Namespace: "m3", Id: a.vz})
			require.NoError(t, err)
			for _, g := range l.GetGroups() {
				for _, z := range g.GetZones() {
					if z.GetNode() != skip {
						return z.GetNode()
					}
				}
			}
		}
		t.Fatal("no copy found")
		return ""
	}

	// ackedMore waits until the workload acknowledged n appends more than it
	// had: the failures below hit a running workload, however slow the
	// machine. The bound only turns a stalled workload into a failure (a
	// few appends take milliseconds).
	ackedMore := func(n int, when string) {
		t.Helper()
		mu.Lock()
		want := len(ref) + n
		mu.Unlock()
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(ref) >= want
		}, 2*time.Minute, 10*time.Millisecond, "%s: %d more appends acknowledged", when, n)
	}

	ackedMore(20, "before the first failure")
	a := firstNode("")
	require.NoError(t, c.StopNode(nodeIndex(a)))
	ackedMore(10, "with one node down")
	waitGone(a)
	require.ErrorIs(t, admin.RemoveNode(ctx, a), zerr.ErrZoneState, "declared lost, rebuild started")
	b := firstNode(a)
	require.NoError(t, c.StopNode(nodeIndex(b))) // the second failure, while A's copies are rebuilt
	ackedMore(5, "with two nodes down")
	stop()
	<-done
	t.Logf("%d appends acknowledged; stopped %s, then %s during its rebuild", len(ref), a, b)
	verify("two nodes down")

	waitGone(b)
	require.ErrorIs(t, admin.RemoveNode(ctx, b), zerr.ErrZoneState)
	require.Eventually(t, func() bool {
		st, err := admin.ClusterStatus(ctx)
		return err == nil && st.GetLostCopies() == 0 && st.GetRebuilding() == 0
	}, 2*time.Minute, 100*time.Millisecond, "every copy of both lost nodes rebuilt")
	verify("after the rebuilds")
	require.NoError(t, admin.RemoveNode(ctx, a))
	require.NoError(t, admin.RemoveNode(ctx, b))

	require.NoError(t, c.StartNode(ctx, nodeIndex(a)))
	require.NoError(t, c.StartNode(ctx, nodeIndex(b)))
	verify("after they return")
}
