package arbiter

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLocalOverdriveWidths: 2 nodes × 16 dies × MAR 32 → N_essential 32,
// N_spare 32; one namespace with MAR_logical 16 → minimum width 2. With k
// v-zones writing concurrently, EWMA(active) → k and each new stripe group
// gets pow2floor(2 + 32/k) zones: 8 for k=4, 4 for k=8, 4 for k=16 (2 + 2).
func TestLocalOverdriveWidths(t *testing.T) {
	tests := []struct {
		writers    int
		wantWidth  uint32
		wantStripe uint32
	}{
		{4, 8, 8 << 10},
		{8, 4, 16 << 10},
		{16, 4, 16 << 10},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d-writers", tt.writers), func(t *testing.T) {
			tc, a := oneLeader(t, 2)
			ctx := context.Background()
			_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "w", MARLogical: 16, ZonesPerVZone: 512})
			require.NoError(t, err)
			var wg sync.WaitGroup
			run := func(fn func(id uint64) (Layout, error)) []Layout {
				out := make([]Layout, tt.writers)
				errs := make([]error, tt.writers)
				for i := 0; i < tt.writers; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						out[i], errs[i] = fn(uint64(i))
					}()
				}
				wg.Wait()
				for _, err := range errs {
					require.NoError(t, err)
				}
				return out
			}
			run(func(id uint64) (Layout, error) { return a.OpenVZone(ctx, "w", id) })
			var last []Layout
			for round := 0; round < 6; round++ {
				last = run(func(id uint64) (Layout, error) { return a.NextStripeGroup(ctx, "w", id) })
				checkInvariants(t, tc, a, fmt.Sprintf("round %d", round))
			}
			for _, l := range last {
				g := l.Groups[len(l.Groups)-1]
				assert.Equal(t, tt.wantWidth, g.Width, "v-zone %d width", l.VZone)
				assert.Equal(t, tt.wantStripe, g.StripeSize, "v-zone %d stripe size", l.VZone)
				assert.Equal(t, uint32(2), g.Essentials)
				assert.Equal(t, g.Width-2, g.Spares)
			}
			info, err := a.GetNamespace(ctx, "w")
			require.NoError(t, err)
			assert.Equal(t, uint32(tt.writers), info.ActiveVZones)
			assert.LessOrEqual(t, info.SparesInUse, info.SparesProvisioned)
		})
	}
}

func TestStripeSize(t *testing.T) {
	tests := []struct {
		width, minWidth, block, want uint32
	}{
		{2, 2, 4096, 32 << 10},
		{4, 2, 4096, 16 << 10},
		{8, 2, 4096, 8 << 10},
		{16, 2, 4096, 4 << 10},
		{64, 2, 4096, 4 << 10}, // never below one block
		{1, 2, 4096, 32 << 10}, // narrower than minimum (end of v-zone)
		{32, 1, 512, 1 << 10},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, stripeSize(32<<10, tt.block, tt.width, tt.minWidth), "%+v", tt)
	}
}

func TestPow2Floor(t *testing.T) {
	for in, want := range map[uint32]uint32{0: 0, 1: 1, 2: 2, 3: 2, 10: 8, 16: 16, 33: 32} {
		assert.Equal(t, want, pow2Floor(in), "%d", in)
	}
}

// TestGlobalOverdrive: A writes, B is idle. After N_essential allocations B is
// inactive and its unused spares are lent to A; when B wakes they are
// recalled and come back at A's next stripe-group finish.
func TestGlobalOverdrive(t *testing.T) {
	tc, a := oneLeader(t, 2) // N_essential 32, N_spare 32
	ctx := context.Background()
	for _, n := range []string{"a", "b"} {
		_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: n, MARLogical: 2, ZonesPerVZone: 1024})
		require.NoError(t, err)
	}
	get := func(n string) NamespaceInfo {
		info, err := a.GetNamespace(ctx, n)
		require.NoError(t, err)
		return info
	}
	for _, n := range []string{"a", "b"} {
		info := get(n)
		require.Equal(t, uint32(16), info.Essentials)
		require.Equal(t, uint32(16), info.SparesProvisioned)
		require.Equal(t, uint32(8), info.MinWidth)
	}
	_, err := a.OpenVZone(ctx, "a", 0)
	require.NoError(t, err)
	// Allocate until B has been idle for N_essential physical zone allocations.
	for i := 0; get("b").SparesLent == 0; i++ {
		require.Less(t, i, 20, "b never became inactive")
		_, err := a.NextStripeGroup(ctx, "a", 0)
		require.NoError(t, err)
		checkInvariants(t, tc, a, fmt.Sprintf("a writes %d", i))
	}
	bi, ai := get("b"), get("a")
	assert.True(t, bi.Inactive)
	assert.False(t, ai.Inactive)
	assert.Equal(t, uint32(16), bi.SparesLent, "all of b's unused spares")
	assert.Equal(t, uint32(0), bi.SparesOwned)
	assert.Equal(t, uint32(16), ai.SparesBorrowed)

	// A's next stripe group uses the borrowed spares: 8 + 32/1 → 32 wide.
	l, err := a.NextStripeGroup(ctx, "a", 0)
	require.NoError(t, err)
	g := l.Groups[len(l.Groups)-1]
	assert.Equal(t, uint32(32), g.Width)
	assert.Equal(t, uint32(24), g.Spares, "more than a's own 16 spares")

	// B wakes: its loans are recalled; it gets essentials only meanwhile.
	lb, err := a.OpenVZone(ctx, "b", 0)
	require.NoError(t, err)
	assert.Equal(t, uint32(8), lb.Groups[0].Width)
	assert.Equal(t, uint32(0), lb.Groups[0].Spares)
	bi, ai = get("b"), get("a")
	assert.False(t, bi.Inactive)
	assert.Equal(t, uint32(16), bi.SparesRecalled)
	assert.Equal(t, uint32(16), bi.SparesLent, "still lent until a finishes a group")
	assert.Equal(t, uint32(16), ai.SparesBorrowed)
	checkInvariants(t, tc, a, "recalled")

	// A finishes its stripe group: recalled spares return to B.
	_, err = a.FinishVZone(ctx, "a", 0)
	require.NoError(t, err)
	bi, ai = get("b"), get("a")
	assert.Equal(t, uint32(0), bi.SparesLent)
	assert.Equal(t, uint32(16), bi.SparesOwned)
	assert.Equal(t, uint32(0), ai.SparesBorrowed)
	checkInvariants(t, tc, a, "returned")

	// B's next group overdrives with its own spares again.
	lb, err = a.NextStripeGroup(ctx, "b", 0)
	require.NoError(t, err)
	assert.Equal(t, uint32(16), lb.Groups[len(lb.Groups)-1].Width, "8 + 16/EWMA(1) = 24 → 16")
	checkInvariants(t, tc, a, "b overdrives")
}
