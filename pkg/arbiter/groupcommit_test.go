package arbiter

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Concurrent mutations are committed in groups (several per transaction):
// the result is the same as one at a time would give — the invariants hold,
// the grants in etcd are the state's, and the state in etcd is the state the
// leader serves — and a mutation refused inside a group (too many active
// v-zones, a stale reset) fails alone.
func TestGroupCommitConcurrentMutations(t *testing.T) {
	tc, a := oneLeader(t, 3)
	ctx := context.Background()
	for _, ns := range []string{"a", "b"} {
		_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: ns, MARLogical: 6, ZonesPerVZone: 4, VZones: 32})
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := 0
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ns := []string{"a", "b"}[w%2]
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var mine []Layout
			for i := 0; i < 40; i++ {
				switch op := rng.IntN(4); {
				case op < 2 || len(mine) == 0:
					l, err := a.OpenNewVZone(ctx, ns)
					if errors.Is(err, zerr.ErrTooManyActive) || errors.Is(err, zerr.ErrTooManyOpen) || errors.Is(err, zerr.ErrNoResources) {
						mu.Lock()
						refused++
						mu.Unlock()
						continue
					}
					require.NoError(t, err)
					mine = append(mine, l)
				case op == 2:
					_, err := a.FinishVZone(ctx, ns, mine[0].VZone)
					require.NoError(t, err)
				default:
					l := mine[rng.IntN(len(mine))]
					err := a.ResetVZones(ctx, ns, []VZoneRef{{ID: l.VZone, Incarnation: l.Incarnation + 1000}})
					require.ErrorIs(t, err, zerr.ErrStaleLayout, "a stale reset fails alone")
					require.NoError(t, a.ResetVZones(ctx, ns, []VZoneRef{{ID: l.VZone, Incarnation: l.Incarnation}}))
					mine = slicesDeleteLayout(mine, l.VZone)
				}
			}
		}()
	}
	wg.Wait()
	checkInvariants(t, tc, a, "after concurrent mutations")
	muts, txns := testutil.ToFloat64(a.m.mutations), testutil.ToFloat64(a.m.txns)
	t.Logf("%v mutations in %v transactions (%d opens refused)", muts, txns, refused)
	require.Less(t, txns, muts, "concurrent mutations shared transactions")

	// The state in etcd is the state the leader serves.
	st, _ := leaderState(t, a)
	a.mu.RLock()
	term := a.term
	a.mu.RUnlock()
	loaded, _, err := a.loadStore(ctx, term)
	require.NoError(t, err)
	want, err := cluster.Encode(st)
	require.NoError(t, err)
	got, err := cluster.Encode(loaded)
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(got))
}

func slicesDeleteLayout(ls []Layout, id uint64) []Layout {
	out := ls[:0]
	for _, l := range ls {
		if l.VZone != id {
			out = append(out, l)
		}
	}
	return out
}

// A caller whose request was cancelled while it waited for the queue may be
// the one that drains it: the others' mutations still commit (the group
// runs on a live member's context).
func TestGroupCommitDrainedByACancelledCaller(t *testing.T) {
	_, a := oneLeader(t, 2)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "a", MARLogical: 4, ZonesPerVZone: 4, VZones: 8})
	require.NoError(t, err)
	st0, _ := leaderState(t, a)
	ewma0 := st0.Namespaces["a"].EWMA
	dead, cancel := context.WithCancel(ctx)
	cancel()
	bump := func(st *State, _ *index) ([]clientv3.Op, error) {
		st.Namespaces["a"].EWMA++
		return nil, nil
	}
	ms := []*member{
		{ctx: dead, fn: bump, done: make(chan struct{})},
		{ctx: ctx, fn: bump, done: make(chan struct{})},
		{ctx: ctx, fn: bump, done: make(chan struct{})},
	}
	a.opMu.Lock()
	a.runGroup(dead, ms)
	a.opMu.Unlock()
	for i, m := range ms {
		<-m.done
		if i == 0 {
			require.ErrorIs(t, m.err, context.Canceled, "the cancelled request did not run")
			continue
		}
		require.NoError(t, m.err, "member %d", i)
	}
	st, _ := leaderState(t, a)
	require.Equal(t, ewma0+2, st.Namespaces["a"].EWMA, "both live members' changes committed")
}
