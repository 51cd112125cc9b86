package arbiter

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// oneLeader starts one arbiter with n nodes of one 16-die device (MAR 32) each.
func oneLeader(t *testing.T, nodes int) (*testCluster, *testArb) {
	tc := newTestCluster(t)
	for i := 0; i < nodes; i++ {
		tc.addNode(fmt.Sprintf("n%d", i), []cluster.DeviceInfo{testDevice(0)}, false)
	}
	a := tc.start("arb-0:9000")
	tc.leader(a)
	tc.waitNodes(a, nodes)
	return tc, a
}

func TestNamespaceCRUD(t *testing.T) {
	tc, a := oneLeader(t, 2) // N_essential = 32, N_spare = 32
	ctx := context.Background()

	info, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "a", MARLogical: 4, ZonesPerVZone: 16})
	require.NoError(t, err)
	assert.Equal(t, uint32(32), info.Essentials)
	assert.Equal(t, uint32(32), info.SparesProvisioned)
	assert.Equal(t, uint32(8), info.MinWidth)

	info, err = a.CreateNamespace(ctx, NamespaceSpec{Name: "b", MARLogical: 8, ZonesPerVZone: 16, Weight: 3})
	require.NoError(t, err)
	assert.Equal(t, uint32(24), info.Essentials, "weight 3 of 4")
	assert.Equal(t, uint32(24), info.SparesProvisioned)
	assert.Equal(t, uint32(2), info.MinWidth, "24/8 = 3, rounded down to a power of two")
	ai, err := a.GetNamespace(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, uint32(8), ai.Essentials, "reprovisioned")
	assert.Equal(t, uint32(2), ai.MinWidth)

	list, err := a.ListNamespaces(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, "a", list[0].Name)
	assert.Equal(t, "b", list[1].Name)

	bad := []struct {
		name string
		spec NamespaceSpec
		want error
	}{
		{"exists", NamespaceSpec{Name: "a", MARLogical: 1, ZonesPerVZone: 1}, zerr.ErrAlreadyExists},
		{"empty name", NamespaceSpec{Name: "", MARLogical: 1, ZonesPerVZone: 1}, zerr.ErrInvalidArgument},
		{"slash", NamespaceSpec{Name: "a/b", MARLogical: 1, ZonesPerVZone: 1}, zerr.ErrInvalidArgument},
		{"space", NamespaceSpec{Name: "a b", MARLogical: 1, ZonesPerVZone: 1}, zerr.ErrInvalidArgument},
		{"zero mar", NamespaceSpec{Name: "c", MARLogical: 0, ZonesPerVZone: 1}, zerr.ErrInvalidArgument},
		{"not pow2", NamespaceSpec{Name: "c", MARLogical: 1, ZonesPerVZone: 6}, zerr.ErrInvalidArgument},
		{"zero zones", NamespaceSpec{Name: "c", MARLogical: 1, ZonesPerVZone: 0}, zerr.ErrInvalidArgument},
		// 32 essentials over weights 1+3+1: c would get 6 < 10.
		{"not enough essentials", NamespaceSpec{Name: "c", MARLogical: 10, ZonesPerVZone: 4}, zerr.ErrNoResources},
		// c would get 6 >= 1, but b would drop to 19 < ... no: b keeps 19 >= 8; a drops to 6 >= 4. So use a big weight.
		{"starves others", NamespaceSpec{Name: "c", MARLogical: 1, ZonesPerVZone: 4, Weight: 100}, zerr.ErrNoResources},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := a.CreateNamespace(ctx, tt.spec)
			require.ErrorIs(t, err, tt.want)
			after, err := a.ListNamespaces(ctx)
			require.NoError(t, err)
			assert.Equal(t, list, after, "nothing changed")
		})
	}
	var nr *zerr.NoResourcesError
	_, err = a.CreateNamespace(ctx, NamespaceSpec{Name: "c", MARLogical: 10, ZonesPerVZone: 4})
	require.True(t, errors.As(err, &nr))
	assert.Equal(t, uint64(10), nr.Requested)
	assert.Equal(t, uint64(6), nr.Available)

	for _, name := range []string{"", "zz", "a/b"} {
		_, err := a.GetNamespace(ctx, name)
		require.Error(t, err)
		require.Error(t, a.DeleteNamespace(ctx, name, true))
	}
	_, err = a.GetNamespace(ctx, "zz")
	require.ErrorIs(t, err, zerr.ErrNotFound)

	// v-zone errors.
	_, err = a.OpenVZone(ctx, "zz", 0)
	require.ErrorIs(t, err, zerr.ErrNotFound)
	_, err = a.NextStripeGroup(ctx, "a", 0)
	require.ErrorIs(t, err, zerr.ErrZoneState)
	_, err = a.FinishVZone(ctx, "a", 0)
	require.ErrorIs(t, err, zerr.ErrZoneState)
	l, err := a.Layout(ctx, "a", 0)
	require.NoError(t, err)
	assert.Equal(t, VZoneEmpty, l.State)
	for i := uint64(0); i < 4; i++ {
		_, err = a.OpenVZone(ctx, "a", i)
		require.NoError(t, err)
	}
	_, err = a.OpenVZone(ctx, "a", 4)
	var tma *zerr.TooManyActiveError
	require.True(t, errors.As(err, &tma), "%v", err)
	assert.Equal(t, uint32(4), tma.Limit)
	_, err = a.OpenVZone(ctx, "a", 0)
	require.ErrorIs(t, err, zerr.ErrZoneState)
	checkInvariants(t, tc, a, "opened")

	require.ErrorIs(t, a.DeleteNamespace(ctx, "a", false), zerr.ErrZoneState, "open v-zones need force")
	_, err = a.GetNamespace(ctx, "a")
	require.NoError(t, err)
	require.NoError(t, a.DeleteNamespace(ctx, "a", true))
	_, err = a.GetNamespace(ctx, "a")
	require.ErrorIs(t, err, zerr.ErrNotFound)
	bi, err := a.GetNamespace(ctx, "b")
	require.NoError(t, err)
	assert.Equal(t, uint32(32), bi.Essentials)
	checkInvariants(t, tc, a, "deleted")
	assert.Empty(t, tc.grants(), "a's grants are revoked")
}

func TestVZoneLifecycle(t *testing.T) {
	tc, a := oneLeader(t, 2)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "a", MARLogical: 4, ZonesPerVZone: 16, VZones: 8})
	require.NoError(t, err)
	_, err = a.OpenVZone(ctx, "a", 8)
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)

	l, err := a.OpenVZone(ctx, "a", 3)
	require.NoError(t, err)
	require.Len(t, l.Groups, 1)
	g := l.Groups[0]
	assert.Equal(t, VZoneOpen, l.State)
	assert.True(t, g.Open)
	// m = 32/4 = 8; EWMA 1 -> reap min(32, 32) -> 40 -> 32, capped by 16 zones per v-zone.
	assert.Equal(t, uint32(16), g.Width)
	assert.Equal(t, uint32(8), g.Essentials)
	assert.Equal(t, uint32(8), g.Spares)
	assert.Equal(t, uint32(16<<10), g.StripeSize, "width 2x minimum -> stripe halved")
	assert.Equal(t, uint32(4096), l.BlockSize)
	assert.Equal(t, uint64(1000), l.ZoneCapacity)
	nodes := map[string]int{}
	for _, z := range g.Zones {
		nodes[z.Node]++
	}
	assert.Equal(t, map[string]int{"n0": 8, "n1": 8}, nodes, "spread across nodes")
	gr := tc.grants()
	for _, z := range g.Zones {
		assert.Equal(t, cluster.Grant{Namespace: "a", VZone: 3, Group: 0, Generation: l.Generation}, gr[z])
	}

	// OpenNewVZone takes the lowest empty id.
	ln, err := a.OpenNewVZone(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, uint64(0), ln.VZone)
	vzs, err := a.ListVZones(ctx, "a")
	require.NoError(t, err)
	require.Len(t, vzs, 2)
	assert.Equal(t, []uint64{0, 3}, []uint64{vzs[0].VZone, vzs[1].VZone})
	require.NoError(t, a.ResetVZone(ctx, "a", 0))

	_, err = a.NextStripeGroup(ctx, "a", 3)
	var zf *zerr.ZoneFullError
	require.True(t, errors.As(err, &zf), "all 16 zones used: %v", err)

	l2, err := a.FinishVZone(ctx, "a", 3)
	require.NoError(t, err)
	assert.Equal(t, VZoneFull, l2.State)
	assert.False(t, l2.Groups[0].Open)
	_, err = a.FinishVZone(ctx, "a", 3)
	require.NoError(t, err, "finish is idempotent")
	info, err := a.GetNamespace(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, uint32(0), info.ActiveVZones)
	assert.Equal(t, uint32(16), info.AllocatedZones)
	assert.Len(t, tc.grants(), 16, "full v-zone keeps its grants")

	require.NoError(t, a.ResetVZone(ctx, "a", 3))
	require.NoError(t, a.ResetVZone(ctx, "a", 3), "reset of an empty v-zone is a no-op")
	assert.Empty(t, tc.grants())
	l3, err := a.Layout(ctx, "a", 3)
	require.NoError(t, err)
	assert.Equal(t, VZoneEmpty, l3.State)
	checkInvariants(t, tc, a, "end")
}

// TestAllocationInvariants runs a random sequence of operations and checks
// every invariant after each step.
func TestAllocationInvariants(t *testing.T) {
	tc, a := oneLeader(t, 3)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"a", "b", "c", "d"}
	nodes := 3
	ops := map[string]int{}
	for step := 0; step < 500; step++ {
		name := names[rng.IntN(len(names))]
		vz := uint64(rng.IntN(6))
		st0, _ := leaderState(t, a)
		if existing := sortedKeys(st0.Namespaces); len(existing) > 0 && rng.IntN(10) < 8 {
			name = existing[rng.IntN(len(existing))]
		}
		var openIDs []uint64
		if ns := st0.Namespaces[name]; ns != nil {
			for _, id := range sortedKeys(ns.VZones) {
				if ns.VZones[id].openGroup() != nil {
					openIDs = append(openIDs, id)
				}
			}
		}
		if len(openIDs) > 0 && rng.IntN(5) > 0 {
			vz = openIDs[rng.IntN(len(openIDs))]
		}
		var op string
		var err error
		before, _ := leaderState(t, a)
		var newGroup *StripeGroup
		switch r := rng.IntN(100); {
		case r < 8:
			op = "create"
			_, err = a.CreateNamespace(ctx, NamespaceSpec{Name: name, MARLogical: uint32(1 + rng.IntN(3)),
				ZonesPerVZone: uint32(32) << rng.IntN(4), Weight: uint32(rng.IntN(3))})
		case r < 10:
			op = "delete"
			err = a.DeleteNamespace(ctx, name, rng.IntN(2) == 0)
		case r < 40:
			op = "open"
			var l Layout
			l, err = a.OpenVZone(ctx, name, vz)
			if err == nil {
				newGroup = &l.Groups[len(l.Groups)-1]
			}
		case r < 70:
			op = "next"
			var l Layout
			l, err = a.NextStripeGroup(ctx, name, vz)
			if err == nil {
				newGroup = &l.Groups[len(l.Groups)-1]
			}
		case r < 82:
			op = "finish"
			_, err = a.FinishVZone(ctx, name, vz)
		case r < 94:
			op = "reset"
			err = a.ResetVZone(ctx, name, vz)
		case r < 97 && nodes < 6:
			op = "add-node"
			tc.addNode(fmt.Sprintf("n%d", nodes), []cluster.DeviceInfo{testDevice(0), testDevice(1)}, false)
			nodes++
			tc.waitNodes(a, nodes)
		default:
			op = "report"
			err = a.ReportWrite(ctx, name)
		}
		if err != nil {
			// Only domain errors, never anything else; and nothing changed.
			require.True(t, errors.Is(err, zerr.ErrNotFound) || errors.Is(err, zerr.ErrAlreadyExists) ||
				errors.Is(err, zerr.ErrNoResources) || errors.Is(err, zerr.ErrZoneState) ||
				errors.Is(err, zerr.ErrZoneFull) || errors.Is(err, zerr.ErrTooManyActive) ||
				errors.Is(err, zerr.ErrInvalidArgument), "step %d %s: %v", step, op, err)
			after, _ := leaderState(t, a)
			require.Equal(t, before, after, "step %d %s failed (%v) but changed the state", step, op, err)
			ops[op+"-err"]++
			if os.Getenv("ARBITER_DEBUG") != "" {
				t.Logf("step %d %s %s/%d: %v", step, op, name, vz, err)
			}
		} else {
			ops[op]++
		}
		if newGroup != nil {
			checkDieOrder(t, before, name, vz, *newGroup, fmt.Sprintf("step %d %s", step, op))
		}
		checkInvariants(t, tc, a, fmt.Sprintf("step %d %s %s/%d", step, op, name, vz))
	}
	t.Logf("operations: %v", ops)
	for _, op := range []string{"create", "open", "next", "finish", "reset"} {
		assert.Positive(t, ops[op], "the sequence exercised %s", op)
	}
}

// TestResetVZones resets v-zones in one batch: all of them or none.
func TestResetVZones(t *testing.T) {
	tc, a := oneLeader(t, 2)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "a", MARLogical: 4, ZonesPerVZone: 4, VZones: 8})
	require.NoError(t, err)
	var ls []Layout
	for i := 0; i < 3; i++ {
		l, err := a.OpenNewVZone(ctx, "a")
		require.NoError(t, err)
		ls = append(ls, l)
	}
	_, err = a.FinishVZone(ctx, "a", ls[0].VZone)
	require.NoError(t, err)
	before := tc.grants()
	require.Len(t, before, 12)

	for _, tt := range []struct {
		name string
		refs []VZoneRef
		want error
	}{
		{"stale incarnation", []VZoneRef{{ID: ls[0].VZone}, {ID: ls[1].VZone, Incarnation: ls[1].Incarnation + 100}}, zerr.ErrStaleLayout},
		{"id out of range", []VZoneRef{{ID: ls[0].VZone}, {ID: 8}}, zerr.ErrInvalidArgument},
		{"twice", []VZoneRef{{ID: ls[0].VZone}, {ID: ls[0].VZone}}, zerr.ErrInvalidArgument},
		{"too many", make([]VZoneRef, MaxResetBatch+1), zerr.ErrInvalidArgument},
		{"unknown namespace", []VZoneRef{{ID: 0}}, zerr.ErrNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ns := "a"
			if tt.want == zerr.ErrNotFound {
				ns = "nope"
			}
			require.ErrorIs(t, a.ResetVZones(ctx, ns, tt.refs), tt.want)
			assert.Equal(t, before, tc.grants(), "a refused batch changes nothing")
		})
	}
	require.NoError(t, a.ResetVZones(ctx, "a", nil), "an empty batch is a no-op")

	// A full, an open (by its incarnation) and an empty v-zone in one call.
	require.NoError(t, a.ResetVZones(ctx, "a", []VZoneRef{{ID: ls[0].VZone}, {ID: ls[1].VZone, Incarnation: ls[1].Incarnation}, {ID: 7}}))
	gr := tc.grants()
	require.Len(t, gr, 4, "only the third v-zone keeps its grants")
	for _, z := range ls[2].Groups[0].Zones {
		assert.Equal(t, ls[2].VZone, gr[z].VZone)
	}
	for _, id := range []uint64{ls[0].VZone, ls[1].VZone} {
		l, err := a.Layout(ctx, "a", id)
		require.NoError(t, err)
		assert.Equal(t, VZoneEmpty, l.State)
	}
	info, err := a.GetNamespace(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, uint32(1), info.ActiveVZones)
	assert.Equal(t, uint32(4), info.AllocatedZones)
	checkInvariants(t, tc, a, "batch reset")
}
