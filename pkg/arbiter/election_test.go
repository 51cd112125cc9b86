package arbiter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func TestFollowerAnswersWithLeaderAddress(t *testing.T) {
	tc := newTestCluster(t)
	tc.addNode("n0", []cluster.DeviceInfo{testDevice(0)}, false)
	arbs := []*testArb{tc.start("arb-0:9000"), tc.start("arb-1:9000"), tc.start("arb-2:9000")}
	l := tc.leader(arbs...)
	ctx := context.Background()
	for _, a := range arbs {
		if a == l {
			continue
		}
		_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "x", MARLogical: 1, ZonesPerVZone: 1})
		var nl *zerr.NotLeaderError
		require.True(t, errors.As(err, &nl), "%v", err)
		assert.Equal(t, l.Addr(), nl.Leader)
		_, err = a.ListNamespaces(ctx)
		require.ErrorIs(t, err, zerr.ErrNotLeader)
		addr, err := a.LeaderAddr(ctx)
		require.NoError(t, err)
		assert.Equal(t, l.Addr(), addr)
		st, err := a.Status(ctx)
		require.NoError(t, err)
		assert.False(t, st.Leader)
		assert.Equal(t, l.Addr(), st.LeaderAddr)
	}
	_, err := l.CreateNamespace(ctx, NamespaceSpec{Name: "x", MARLogical: 1, ZonesPerVZone: 1})
	require.NoError(t, err)
}

type acked struct {
	ns     string
	layout Layout
}

// TestLeaderKillLosesNoAcknowledgedChange kills the leader (no lease
// revocation) during a stream of requests; the new leader serves every
// acknowledged namespace and layout.
func TestLeaderKillLosesNoAcknowledgedChange(t *testing.T) {
	tc := newTestCluster(t)
	tc.addNode("n0", []cluster.DeviceInfo{testDevice(0)}, false)
	tc.addNode("n1", []cluster.DeviceInfo{testDevice(0)}, false)
	arbs := []*testArb{tc.start("arb-0:9000"), tc.start("arb-1:9000"), tc.start("arb-2:9000")}
	first := tc.leader(arbs...)
	tc.waitNodes(first, 2)
	ctx := context.Background()

	var mu sync.Mutex
	var live = arbs
	var done []acked
	var afterKill atomic.Int32
	killed := make(chan struct{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the request stream
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			cur := append([]*testArb(nil), live...)
			mu.Unlock()
			name := fmt.Sprintf("s%02d", i)
			_, err := onLeader(t, cur, func(a *testArb) (NamespaceInfo, error) {
				return a.CreateNamespace(ctx, NamespaceSpec{Name: name, MARLogical: 1, ZonesPerVZone: 2})
			})
			if errors.Is(err, zerr.ErrAlreadyExists) { // an earlier attempt committed before the leader died
				err = nil
			}
			if !assert.NoError(t, err, "create %s", name) {
				return
			}
			l, err := onLeader(t, cur, func(a *testArb) (Layout, error) {
				l, err := a.OpenVZone(ctx, name, 0)
				if errors.Is(err, zerr.ErrZoneState) {
					return a.Layout(ctx, name, 0)
				}
				return l, err
			})
			if !assert.NoError(t, err, "open %s/0", name) {
				return
			}
			mu.Lock()
			done = append(done, acked{name, l})
			mu.Unlock()
			select {
			case <-killed:
				afterKill.Add(1)
			default:
			}
			if i >= 24 { // 25 namespaces × MAR_logical 1 fit in 32 essentials
				return
			}
		}
	}()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(done) >= 5 }, 60*time.Second, time.Millisecond)
	first.kill()
	close(killed)
	mu.Lock()
	live = nil
	for _, a := range arbs {
		if a != first {
			live = append(live, a)
		}
	}
	mu.Unlock()
	wg.Wait()
	close(stop)
	assert.Positive(t, afterKill.Load(), "requests were served after the kill")

	next := tc.leader(live...)
	require.True(t, first != next, "a new leader")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, done, 25)
	for _, ack := range done {
		info, err := next.GetNamespace(ctx, ack.ns)
		require.NoError(t, err, ack.ns)
		assert.Equal(t, uint32(1), info.ActiveVZones, ack.ns)
		l, err := next.Layout(ctx, ack.ns, 0)
		require.NoError(t, err)
		assert.Equal(t, ack.layout, l, "layout of %s/0", ack.ns)
	}
	checkInvariants(t, tc, next, "after failover")
}

// TestRestartAllArbiters stops every arbiter and starts new ones: every
// namespace, layout and grant is still there and unchanged.
func TestRestartAllArbiters(t *testing.T) {
	tc := newTestCluster(t)
	tc.addNode("n0", []cluster.DeviceInfo{testDevice(0), testDevice(1)}, false)
	tc.addNode("n1", []cluster.DeviceInfo{testDevice(0)}, false)
	a0, a1 := tc.start("arb-0:9000"), tc.start("arb-1:9000")
	l := tc.leader(a0, a1)
	tc.waitNodes(l, 2)
	ctx := context.Background()
	for _, n := range []string{"a", "b", "c"} {
		_, err := l.CreateNamespace(ctx, NamespaceSpec{Name: n, MARLogical: 3, ZonesPerVZone: 64, Weight: 2})
		require.NoError(t, err)
	}
	for _, n := range []string{"a", "b", "c"} {
		for id := uint64(0); id < 3; id++ {
			_, err := l.OpenVZone(ctx, n, id)
			require.NoError(t, err)
		}
		_, err := l.NextStripeGroup(ctx, n, 1)
		require.NoError(t, err)
		_, err = l.FinishVZone(ctx, n, 2)
		require.NoError(t, err)
	}
	require.NoError(t, l.ResetVZone(ctx, "b", 0))
	nsBefore, err := l.ListNamespaces(ctx)
	require.NoError(t, err)
	stBefore, _ := leaderState(t, l)
	grantsBefore := tc.grants()
	revBefore := grantRevisions(t, tc)
	require.Len(t, revBefore, len(grantsBefore))
	require.NotEmpty(t, grantsBefore)

	a0.stop()
	a1.stop()

	// While no arbiter runs, the grant keys drift: an orphan, a wrong and a
	// missing grant. The next leader repairs them without deleting any grant
	// of a zone in use (nodes reset a zone whose grant is deleted).
	var wrongZ, missingZ cluster.PhysZone
	for z := range grantsBefore {
		if wrongZ.Node == "" {
			wrongZ = z
		} else if missingZ.Node == "" {
			missingZ = z
		}
	}
	orphan := cluster.PhysZone{Node: "n1", Device: 0, Zone: 999}
	mess, err := tc.cli.Put(ctx, orphan.GrantKey(), `{"namespace":"ghost","vzone":1}`)
	require.NoError(t, err)
	_, err = tc.cli.Put(ctx, wrongZ.GrantKey(), `{"namespace":"a","vzone":77}`)
	require.NoError(t, err)
	_, err = tc.cli.Delete(ctx, missingZ.GrantKey())
	require.NoError(t, err)
	revBefore = nil

	b0, b1 := tc.start("arb-0:9000"), tc.start("arb-1:9000")
	nl := tc.leader(b0, b1)
	tc.waitNodes(nl, 2)
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second) // guard only
	defer cancel()
	events := tc.cli.Watch(wctx, cluster.GrantsRoot(), clientv3.WithPrefix(), clientv3.WithRev(mess.Header.Revision+3))
	now, err := tc.cli.Get(ctx, "x")
	require.NoError(t, err)
	var deleted []string
	reached := false
	for wr := range events {
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				deleted = append(deleted, string(ev.Kv.Key))
			}
		}
		if wr.Header.Revision >= now.Header.Revision {
			reached = true
			break
		}
		require.NoError(t, tc.cli.RequestProgress(wctx)) // answered with the current revision
	}
	require.True(t, reached, "watched the grants up to the repair")
	assert.Equal(t, []string{orphan.GrantKey()}, deleted, "only the orphan grant was deleted")
	nsAfter, err := nl.ListNamespaces(ctx)
	require.NoError(t, err)
	for i := range nsBefore { // activity is in memory: a new leader restarts T_ReadOnly
		nsBefore[i].LastWrite, nsAfter[i].LastWrite = time.Time{}, time.Time{}
	}
	assert.Equal(t, nsBefore, nsAfter)
	stAfter, _ := leaderState(t, nl)
	assert.Equal(t, stBefore, stAfter)
	assert.Equal(t, grantsBefore, tc.grants())
	revAfter := grantRevisions(t, tc)
	rewritten := 0
	for k, rev := range revAfter {
		if rev > mess.Header.Revision {
			rewritten++
			assert.Contains(t, []string{wrongZ.GrantKey(), missingZ.GrantKey()}, k)
		}
	}
	assert.Equal(t, 2, rewritten, "only the wrong and the missing grant were written")
	for _, n := range []string{"a", "c"} {
		lay, err := nl.Layout(ctx, n, 1)
		require.NoError(t, err)
		assert.Len(t, lay.Groups, 2)
	}
	checkInvariants(t, tc, nl, "after restart")
	// The new leader keeps serving.
	_, err = nl.OpenVZone(ctx, "b", 0)
	require.NoError(t, err)
	checkInvariants(t, tc, nl, "after restart and open")
}

func grantRevisions(t *testing.T, tc *testCluster) map[string]int64 {
	resp, err := tc.cli.Get(context.Background(), cluster.GrantsRoot(), clientv3.WithPrefix())
	require.NoError(t, err)
	out := map[string]int64{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kv.ModRevision
	}
	return out
}

// TestNodeLoss: a node's lease ends; its zones are unavailable, the
// namespaces using them are degraded, nothing is forgotten; it comes back.
func TestNodeLoss(t *testing.T) {
	tc := newTestCluster(t)
	tc.addNode("n0", []cluster.DeviceInfo{testDevice(0)}, false)
	lease := tc.addNode("n1", []cluster.DeviceInfo{testDevice(0)}, true)
	a := tc.start("arb-0:9000")
	tc.leader(a)
	tc.waitNodes(a, 2)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "a", MARLogical: 4, ZonesPerVZone: 16})
	require.NoError(t, err)
	l, err := a.OpenVZone(ctx, "a", 0)
	require.NoError(t, err)
	var onN1 []cluster.PhysZone
	for _, z := range l.Groups[0].Zones {
		if z.Node == "n1" {
			onN1 = append(onN1, z)
		}
	}
	require.NotEmpty(t, onN1)
	grants := tc.grants()

	_, err = tc.cli.Revoke(ctx, lease)
	require.NoError(t, err)
	tc.waitNodes(a, 1)
	info, err := a.GetNamespace(ctx, "a")
	require.NoError(t, err)
	assert.True(t, info.Degraded)
	assert.ElementsMatch(t, onN1, info.UnavailableZones)
	assert.Equal(t, uint32(16), info.Essentials, "reprovisioned over n0 only")
	assert.Equal(t, uint32(16), info.EssentialsInUse+info.SparesInUse, "accounting kept")
	nodes, err := a.Nodes(ctx)
	require.NoError(t, err)
	require.Len(t, nodes, 2)
	assert.False(t, nodes[1].Available)
	assert.Equal(t, uint32(len(onN1)), nodes[1].AllocatedZones)
	assert.Equal(t, grants, tc.grants(), "grants kept")
	// New allocations avoid the lost node.
	l2, err := a.OpenVZone(ctx, "a", 1)
	require.NoError(t, err)
	for _, z := range l2.Groups[0].Zones {
		assert.Equal(t, "n0", z.Node)
	}
	checkInvariants(t, tc, a, "node lost")

	tc.addNode("n1", []cluster.DeviceInfo{testDevice(0)}, true)
	tc.waitNodes(a, 2)
	info, err = a.GetNamespace(ctx, "a")
	require.NoError(t, err)
	assert.False(t, info.Degraded)
	assert.Equal(t, uint32(32), info.Essentials)
	checkInvariants(t, tc, a, "node back")

	// A new node grows the pool; open stripe groups are not disturbed.
	tc.addNode("n2", []cluster.DeviceInfo{testDevice(0), testDevice(1)}, false)
	tc.waitNodes(a, 3)
	info, err = a.GetNamespace(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, uint32(64), info.Essentials)
	assert.Equal(t, uint32(64), info.SparesProvisioned)
	for id, want := range map[uint64]Layout{0: l, 1: l2} {
		got, err := a.Layout(ctx, "a", id)
		require.NoError(t, err)
		assert.Equal(t, want, got, "v-zone %d untouched", id)
	}
	checkInvariants(t, tc, a, "node added")
}
