package arbiter

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// fullVZone opens v-zone id, allocates all its stripe groups and finishes it.
func fullVZone(t *testing.T, a *testArb, ns string, id uint64) Layout {
	t.Helper()
	ctx := context.Background()
	_, err := a.OpenVZone(ctx, ns, id)
	require.NoError(t, err)
	for {
		_, err := a.NextStripeGroup(ctx, ns, id)
		if errors.Is(err, zerr.ErrZoneFull) {
			break
		}
		require.NoError(t, err)
	}
	l, err := a.FinishVZone(ctx, ns, id)
	require.NoError(t, err)
	return l
}

// Threaded logging at the arbiter: fenced by the generation, counted as an
// active v-zone (TooManyOpen over MAR_logical) with its zones active on
// their devices, persisted in the v-zone's record (a new leader sees it),
// ended by FinishVZone.
func TestTLOpenVZone(t *testing.T) {
	tc, a := oneLeader(t, 2)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "a", MARLogical: 2, ZonesPerVZone: 16})
	require.NoError(t, err)
	v0 := fullVZone(t, a, "a", 0)
	v1 := fullVZone(t, a, "a", 1)
	_, ix := leaderState(t, a)
	assert.Zero(t, ix.usage["a"].ActiveVZones)
	activeBefore := uint32(0)
	for _, n := range ix.devActive {
		activeBefore += n
	}

	_, err = a.TLOpenVZone(ctx, "a", 0, v0.Generation-1)
	assert.True(t, errors.Is(err, zerr.ErrStaleLayout), "%v", err)
	_, err = a.TLOpenVZone(ctx, "a", 5, 0)
	assert.True(t, errors.Is(err, zerr.ErrZoneState), "an empty v-zone: %v", err)

	l, err := a.TLOpenVZone(ctx, "a", 0, v0.Generation)
	require.NoError(t, err)
	assert.True(t, l.TL)
	assert.Equal(t, VZoneOpen, l.State)
	assert.Greater(t, l.Generation, v0.Generation)
	st, ix := leaderState(t, a)
	assert.Equal(t, uint32(1), ix.usage["a"].ActiveVZones)
	activeAfter := uint32(0)
	for _, n := range ix.devActive {
		activeAfter += n
	}
	assert.Equal(t, activeBefore+st.Namespaces["a"].VZones[0].zoneCount(), activeAfter, "every zone of the TL v-zone is active on its device")
	checkInvariants(t, tc, a, "after TL_open")
	again, err := a.TLOpenVZone(ctx, "a", 0, 0)
	require.NoError(t, err, "idempotent")
	assert.Equal(t, l.Generation, again.Generation)

	// Persisted: the record says so, and a new leader counts it.
	resp, err := tc.cli.Get(ctx, vzKey("a", 0))
	require.NoError(t, err)
	var rec VZone
	require.NoError(t, json.Unmarshal(resp.Kvs[0].Value, &rec))
	assert.True(t, rec.TL)
	assert.NotZero(t, rec.Incarnation)
	a.stop()
	b := tc.start("arb-1:9000")
	tc.leader(b)
	tc.waitNodes(b, 2)
	_, ix = leaderState(t, b)
	assert.Equal(t, uint32(1), ix.usage["a"].ActiveVZones, "the new leader counts the TL v-zone")
	lb, err := b.Layout(ctx, "a", 0)
	require.NoError(t, err)
	assert.True(t, lb.TL)
	_, err = b.NextStripeGroup(ctx, "a", 0)
	assert.True(t, errors.Is(err, zerr.ErrZoneState), "no stripe group in threaded logging: %v", err)

	// MAR_logical 2: one open v-zone more, then a second TL_open is refused.
	_, err = b.OpenVZone(ctx, "a", 2)
	require.NoError(t, err)
	_, err = b.TLOpenVZone(ctx, "a", 1, v1.Generation)
	assert.True(t, errors.Is(err, zerr.ErrTooManyOpen), "%v", err)
	l1, err := b.Layout(ctx, "a", 1)
	require.NoError(t, err)
	assert.False(t, l1.TL, "refused: nothing changed")
	assert.Equal(t, VZoneFull, l1.State)

	// Finish ends threaded logging and gives the slot back.
	f, err := b.FinishVZone(ctx, "a", 0)
	require.NoError(t, err)
	assert.False(t, f.TL)
	assert.Equal(t, VZoneFull, f.State)
	_, err = b.TLOpenVZone(ctx, "a", 1, v1.Generation)
	require.NoError(t, err)
	checkInvariants(t, tc, b, "after finish and a second TL_open")
}

// A reset naming an incarnation releases only that opening of the v-zone.
func TestResetVZoneIncarnation(t *testing.T) {
	_, a := oneLeader(t, 2)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "a", MARLogical: 4, ZonesPerVZone: 16})
	require.NoError(t, err)
	first, err := a.OpenNewVZone(ctx, "a")
	require.NoError(t, err)
	other, err := a.OpenNewVZone(ctx, "a")
	require.NoError(t, err)
	require.NotZero(t, first.Incarnation)
	assert.NotEqual(t, first.Incarnation, other.Incarnation)
	require.NoError(t, a.ResetVZone(ctx, "a", first.VZone)) // someone else's recovery
	again, err := a.OpenNewVZone(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, first.VZone, again.VZone, "the lowest empty id is reused")
	require.NotEqual(t, first.Incarnation, again.Incarnation)

	err = a.ResetVZoneIncarnation(ctx, "a", first.VZone, first.Incarnation)
	assert.True(t, errors.Is(err, zerr.ErrStaleLayout), "%v", err)
	l, err := a.Layout(ctx, "a", first.VZone)
	require.NoError(t, err)
	assert.Equal(t, VZoneOpen, l.State, "the new opening is untouched")
	require.NoError(t, a.ResetVZoneIncarnation(ctx, "a", again.VZone, again.Incarnation))
	l, err = a.Layout(ctx, "a", first.VZone)
	require.NoError(t, err)
	assert.Equal(t, VZoneEmpty, l.State)
	require.NoError(t, a.ResetVZoneIncarnation(ctx, "a", again.VZone, again.Incarnation), "an empty v-zone: no-op")
}

// The layout hint: a v-zone opened like another takes, group by group, the
// dies of the reference's groups (the allocation invariants hold), also for
// the groups NextStripeGroup adds later, even when those dies are the most
// populated. (The effect on copyback: client TestCopybackAwareLayout.)
func TestOpenVZoneLike(t *testing.T) {
	tc, a := oneLeader(t, 2)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "a", MARLogical: 4, ZonesPerVZone: 64})
	require.NoError(t, err)
	// A second namespace halves a's share: its groups cover part of the dies.
	_, err = a.CreateNamespace(ctx, NamespaceSpec{Name: "b", MARLogical: 4, ZonesPerVZone: 64})
	require.NoError(t, err)
	ref := fullVZone(t, a, "a", 0)
	require.Greater(t, len(ref.Groups), 1)
	st, _ := leaderState(t, a)
	matched := func(l Layout) (int, int) {
		m, n := 0, 0
		for k, g := range l.Groups {
			want := ref.Groups[min(k, len(ref.Groups)-1)].Zones
			for i, z := range g.Zones {
				if i >= len(want) {
					break // a wider group: its other legs go to the reference's other dies or anywhere
				}
				n++
				if st.dieOf(z) == st.dieOf(want[i]) {
					m++
				}
			}
		}
		return m, n
	}
	first, err := a.OpenNewVZoneLike(ctx, "a", 0)
	require.NoError(t, err)
	m, n := matched(first)
	assert.Equal(t, n, m, "every leg on the die of the reference's leg")
	// Its open group now populates those dies; a second like v-zone still
	// goes there (the hint overrides the least-populated-die rule).
	second, err := a.OpenNewVZoneLike(ctx, "a", 0)
	require.NoError(t, err)
	for {
		nl, err := a.NextStripeGroup(ctx, "a", second.VZone)
		if errors.Is(err, zerr.ErrZoneFull) {
			break
		}
		require.NoError(t, err)
		second = nl
	}
	require.Greater(t, len(second.Groups), 1)
	m, n = matched(second)
	assert.Equal(t, n, m, "later groups follow the hint too")
	checkInvariants(t, tc, a, "after like allocations")
	lr, err := tc.cli.Get(ctx, vzKey("a", second.VZone))
	require.NoError(t, err)
	assert.Contains(t, string(lr.Kvs[0].Value), `"like":0`)

	// A hint naming an empty v-zone falls back to the usual placement; one
	// out of range is refused.
	require.NoError(t, a.ResetVZone(ctx, "a", 0))
	_, err = a.OpenNewVZoneLike(ctx, "a", 0)
	require.NoError(t, err)
	checkInvariants(t, tc, a, "after a hint naming an empty v-zone")
}
