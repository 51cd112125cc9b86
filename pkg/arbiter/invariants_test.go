package arbiter

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/cluster"
)

func discardLogger() *slog.Logger {
	if os.Getenv("ARBITER_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// leaderState returns the leader's committed state.
func leaderState(t *testing.T, a *testArb) (*State, *index) {
	t.Helper()
	st, ix, err := a.snapshot(context.Background())
	require.NoError(t, err)
	return st, ix
}

// checkInvariants checks the allocation and accounting invariants on the
// leader's state and on the grants in etcd.
func checkInvariants(t *testing.T, tc *testCluster, a *testArb, step string) {
	t.Helper()
	st, ix := leaderState(t, a)

	// No physical zone in two stripe groups; no die collision inside a group.
	seen := map[cluster.PhysZone]string{}
	for name, ns := range st.Namespaces {
		for _, vz := range ns.VZones {
			for _, g := range vz.allGroups() {
				require.Equal(t, int(g.zoneCount()), len(g.Zones), "%s: group width × copies (+ 3 for parity)", step)
				dies := map[dieKey]bool{}
				for _, z := range g.Zones {
					where := vzoneName(name, vz.ID)
					if prev, dup := seen[z]; dup {
						t.Fatalf("%s: zone %s in %s and %s", step, z, prev, where)
					}
					seen[z] = where
					d := st.dieOf(z)
					require.False(t, dies[d], "%s: die collision inside a stripe group of %s: %v", step, where, d)
					dies[d] = true
				}
				if g.Parity { // data legs and parity leg on distinct nodes, the two PP logs with the parity leg
					require.Len(t, g.Zones, int(g.Width)+3, "%s: k data legs, the parity leg and two PP logs", step)
					nodes := map[string]bool{}
					for _, z := range g.Zones[:g.Width+1] {
						require.False(t, nodes[z.Node], "%s: two legs of a parity group of %s on node %s", step, vzoneName(name, vz.ID), z.Node)
						nodes[z.Node] = true
					}
					require.Equal(t, g.Zones[g.Width].Node, g.Zones[g.Width+1].Node, "%s: the partial-parity log is not on the parity leg's node", step)
					require.Equal(t, g.Zones[g.Width].Node, g.Zones[g.Width+2].Node, "%s: the second partial-parity log is not on the parity leg's node", step)
					require.Zero(t, g.Copies)
				}
				for i := uint32(0); i < g.Width; i++ { // the copies of a leg on distinct nodes
					nodes := map[string]bool{}
					for c := uint32(0); c < g.copies(); c++ {
						n := g.Zones[c*g.Width+i].Node
						require.False(t, nodes[n], "%s: two copies of leg %d of a group of %s on node %s", step, i, vzoneName(name, vz.ID), n)
						nodes[n] = true
					}
				}
				require.LessOrEqual(t, uint32(1), g.Width)
				require.True(t, isPow2(g.Width), "%s: width %d not a power of two", step, g.Width)
				require.Equal(t, g.zoneCount(), g.Essentials+g.Spares, "%s: width split", step)
			}
		}
	}
	// Grants in etcd are exactly the state's grants (none twice: keys are unique per zone).
	require.Equal(t, wantedGrants(st), tc.grants(), "%s: grants in etcd", step)

	// Device MAR respected.
	for dk, n := range ix.devActive {
		d, ok := st.device(dk.Node, dk.Device)
		require.True(t, ok)
		if st.Nodes[dk.Node].Available {
			require.LessOrEqual(t, n, d.MAR, "%s: device %v over MAR", step, dk)
		}
	}

	// Provisioning and spares conservation.
	ess, spare := clusterResources(st)
	require.Equal(t, ess, st.Essentials, step)
	require.Equal(t, spare, st.Spares, step)
	var sumE, sumS, sumLent, sumBorrowed uint32
	for name, ns := range st.Namespaces {
		info := a.nsInfo(st, ix, name, ns)
		require.Equal(t, info.SparesProvisioned, info.SparesOwned+info.SparesLent, "%s: %s owned+lent != provisioned", step, name)
		require.LessOrEqual(t, info.SparesLent, info.SparesProvisioned, step)
		sumE += ns.Essentials
		sumS += ns.Spares
		sumLent += info.SparesLent
		sumBorrowed += info.SparesBorrowed
	}
	if len(st.Namespaces) > 0 {
		require.Equal(t, st.Essentials, sumE, "%s: essentials not all provisioned", step)
		require.Equal(t, st.Spares, sumS, "%s: spares not all provisioned", step)
	}
	require.Equal(t, sumLent, sumBorrowed, "%s: lent != borrowed", step)
	for _, l := range st.Loans {
		require.NotEqual(t, l.Lender, l.Borrower, step)
		require.NotNil(t, st.Namespaces[l.Lender], step)
		require.NotNil(t, st.Namespaces[l.Borrower], step)
		require.Positive(t, l.Count, step)
	}
}

// checkDieOrder checks the serial allocator's die rule for a group allocated
// from state before: no chosen zone's die was more populated than an unused
// candidate die (collisions only once every die is populated).
func checkDieOrder(t *testing.T, before *State, name string, vzone uint64, g StripeGroup, step string) {
	t.Helper()
	before, err := cloneState(before)
	require.NoError(t, err)
	if vz := before.Namespaces[name].VZones[vzone]; vz != nil && vz.openGroup() != nil {
		vz.openGroup().Open = false // NextStripeGroup closes the open group first
	}
	ix := buildIndex(before)
	cands := candidates(before, ix)
	chosen := map[dieKey]bool{}
	var maxChosen uint32
	for _, z := range g.Zones {
		d := before.dieOf(z)
		chosen[d] = true
		maxChosen = max(maxChosen, ix.dieActive[d])
	}
	for _, c := range cands {
		if !chosen[c.die] {
			assert.LessOrEqual(t, maxChosen, ix.dieActive[c.die], "%s: die %v (active %d) skipped for a more populated die (%d)",
				step, c.die, ix.dieActive[c.die], maxChosen)
		}
	}
}
