package arbiter

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// fillVZone opens v-zone id of ns and allocates stripe groups until it is
// full, then finishes it; it returns the first allocation error.
func fillVZone(ctx context.Context, a *Arbiter, ns string, id uint64) error {
	if _, err := a.OpenVZone(ctx, ns, id); err != nil {
		return err
	}
	for {
		_, err := a.NextStripeGroup(ctx, ns, id)
		if errors.Is(err, zerr.ErrZoneFull) {
			break
		}
		if err != nil {
			_, _ = a.FinishVZone(ctx, ns, id)
			return err
		}
	}
	_, err := a.FinishVZone(ctx, ns, id)
	return err
}

// A namespace with a capacity quota has its physical zones reserved: a
// quota the cluster cannot reserve is refused (nothing created), a
// namespace without a quota stops at what the quotas leave, and the
// namespace with one fills all of it, whatever the other wrote first.
func TestCapacityQuotaIsReserved(t *testing.T) {
	tc, a := oneLeader(t, 2) // 2 × 1024 zones
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "big", MARLogical: 4, ZonesPerVZone: 16})
	require.NoError(t, err)
	// "big" writes first: 4 full v-zones (64 zones)
	for id := uint64(0); id < 4; id++ {
		require.NoError(t, fillVZone(ctx, a.Arbiter, "big", id))
	}

	_, err = a.CreateNamespace(ctx, NamespaceSpec{Name: "huge", MARLogical: 4, ZonesPerVZone: 16, VZones: 125})
	require.Error(t, err, "2000 zones reserved + 64 held > 2048")
	assert.ErrorIs(t, err, zerr.ErrNoResources)
	_, err = a.GetNamespace(ctx, "huge")
	assert.ErrorIs(t, err, zerr.ErrNotFound, "a refused namespace is not created")

	q, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "q", MARLogical: 4, ZonesPerVZone: 16, VZones: 120})
	require.NoError(t, err)
	assert.Equal(t, uint64(1920), q.quotaZones())

	// "big" has no quota: it gets what the reservation leaves (2048 - 1920
	// = 128 zones, 64 more), then a typed refusal
	var bigErr error
	for id := uint64(4); id < 64 && bigErr == nil; id++ {
		bigErr = fillVZone(ctx, a.Arbiter, "big", id)
	}
	require.Error(t, bigErr)
	assert.ErrorIs(t, bigErr, zerr.ErrNoResources)
	assert.Contains(t, bigErr.Error(), "quotas")
	big, err := a.GetNamespace(ctx, "big")
	require.NoError(t, err)
	assert.LessOrEqual(t, big.AllocatedZones, uint32(128))
	assert.Greater(t, big.AllocatedZones, uint32(64), "it did grow into the unreserved zones")

	// "q" fills its whole quota
	for id := uint64(0); id < 120; id++ {
		require.NoError(t, fillVZone(ctx, a.Arbiter, "q", id), "v-zone %d of the quota", id)
	}
	got, err := a.GetNamespace(ctx, "q")
	require.NoError(t, err)
	assert.Equal(t, uint32(1920), got.AllocatedZones)
	_, err = a.OpenNewVZone(ctx, "q")
	assert.ErrorIs(t, err, zerr.ErrNoResources, "past its quota")
	checkInvariants(t, tc, a, "quotas")

	// what "q" gives back is its own again, not "big"'s
	require.NoError(t, a.ResetVZone(ctx, "q", 7))
	_, err = a.OpenVZone(ctx, "big", 100)
	assert.ErrorIs(t, err, zerr.ErrNoResources, "q's freed zones stay reserved for q")
	require.NoError(t, fillVZone(ctx, a.Arbiter, "q", 7))
}
