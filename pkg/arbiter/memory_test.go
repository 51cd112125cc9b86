package arbiter

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/cluster"
)

// TestInMemoryPolicy: the in-memory arbiter runs the leader's policy
// without etcd: provisioning, local overdrive, global overdrive to the only
// active namespace, reclaim-free recall on wake, and rejects bad input.
func TestInMemoryPolicy(t *testing.T) {
	ctx := context.Background()
	dev := cluster.DeviceInfo{Index: 0, Channels: 4, Ways: 4, DZone: 1, FCGs: 16, MAR: 32, MOR: 32, BlockSize: 4096,
		PageSize: 16384, ZoneSize: 256, ZoneCapacity: 256, NumZones: 16 * 8, Media: "MLC"}
	now := time.Unix(0, 0)
	a, err := NewInMemory(Config{Now: func() time.Time { return now }, Logger: slog.New(slog.DiscardHandler)}, []cluster.NodeRecord{{ID: "n1", Addr: "x", Devices: []cluster.DeviceInfo{dev}}}, nil)
	require.NoError(t, err)
	for _, n := range []string{"a", "b"} {
		_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: n, MARLogical: 4, ZonesPerVZone: 64})
		require.NoError(t, err)
	}
	ia, err := a.GetNamespace(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, uint32(8), ia.Essentials)
	require.Equal(t, uint32(8), ia.SparesProvisioned)
	require.Equal(t, uint32(2), ia.MinWidth)

	// Local overdrive: one v-zone takes its essentials plus all spares (width 8).
	l, err := a.OpenNewVZone(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, uint32(8), l.Groups[0].Width)
	// Namespace b never allocates: after N_essential allocations it is
	// inactive and lends its unused spares to a.
	for i := 0; i < 3; i++ {
		l, err = a.NextStripeGroup(ctx, "a", l.VZone)
		require.NoError(t, err)
	}
	ia, err = a.GetNamespace(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, uint32(8), ia.SparesBorrowed)
	require.Equal(t, uint32(16), l.Groups[len(l.Groups)-1].Width, "borrowed spares widen the next group")

	// b wakes: its loan is recalled and returns at a's next group.
	_, err = a.OpenNewVZone(ctx, "b")
	require.NoError(t, err)
	ib, err := a.GetNamespace(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, uint32(8), ib.SparesRecalled)
	_, err = a.NextStripeGroup(ctx, "a", l.VZone)
	require.NoError(t, err)
	ib, err = a.GetNamespace(ctx, "b")
	require.NoError(t, err)
	require.Zero(t, ib.SparesLent, "recalled spares return at the borrower's next group")

	_, err = NewInMemory(Config{}, []cluster.NodeRecord{{ID: "bad id"}}, nil)
	require.Error(t, err)
	_, err = NewInMemory(Config{}, []cluster.NodeRecord{{ID: "n"}, {ID: "n"}}, nil)
	require.Error(t, err)
}
