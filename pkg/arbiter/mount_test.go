package arbiter

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// One mount lease per namespace: a second holder is refused while the
// first's runs, renewals keep it, it expires on the arbiter's clock, force
// takes it over, release frees it (only for its holder), and bad requests
// change nothing.
func TestMountLease(t *testing.T) {
	tc, a := oneLeader(t, 1)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "fs", MARLogical: 4, ZonesPerVZone: 4})
	require.NoError(t, err)
	ttl := 15 * time.Second

	l, err := a.AcquireMount(ctx, "fs", "host-a pid 1", ttl, false)
	require.NoError(t, err)
	assert.Equal(t, "host-a pid 1", l.Holder)
	assert.True(t, tc.clock.Now().Add(ttl).Equal(l.Expires), "expires %v", l.Expires)

	_, err = a.AcquireMount(ctx, "fs", "host-b pid 2", ttl, false)
	require.ErrorIs(t, err, zerr.ErrAlreadyExists)
	assert.Contains(t, err.Error(), "host-a pid 1", "the refusal names the holder")

	tc.clock.Advance(10 * time.Second)
	_, err = a.AcquireMount(ctx, "fs", "host-a pid 1", ttl, false) // renewal
	require.NoError(t, err)
	tc.clock.Advance(10 * time.Second) // 20 s after the first, 10 after the renewal
	_, err = a.AcquireMount(ctx, "fs", "host-b pid 2", ttl, false)
	require.ErrorIs(t, err, zerr.ErrAlreadyExists, "the renewal extended it")

	tc.clock.Advance(6 * time.Second) // past the renewed lease
	_, err = a.AcquireMount(ctx, "fs", "host-b pid 2", ttl, false)
	require.NoError(t, err, "an expired lease is free")

	require.NoError(t, a.ReleaseMount(ctx, "fs", "host-a pid 1"), "a release by a non-holder is a no-op")
	_, err = a.AcquireMount(ctx, "fs", "host-a pid 1", ttl, false)
	require.ErrorIs(t, err, zerr.ErrAlreadyExists, "b still holds it")

	_, err = a.AcquireMount(ctx, "fs", "host-c pid 3", ttl, true)
	require.NoError(t, err, "force takes it from a live holder")
	_, err = a.AcquireMount(ctx, "fs", "host-b pid 2", ttl, false)
	require.ErrorIs(t, err, zerr.ErrAlreadyExists, "b's next renewal learns it lost the lease")

	require.NoError(t, a.ReleaseMount(ctx, "fs", "host-c pid 3"))
	_, err = a.AcquireMount(ctx, "fs", "host-b pid 2", ttl, false)
	require.NoError(t, err, "released")

	for _, bad := range []struct {
		holder string
		ttl    time.Duration
	}{{"", ttl}, {string(make([]byte, 300)), ttl}, {"x", 2 * time.Hour}, {"x", time.Millisecond}} {
		_, err := a.AcquireMount(ctx, "fs", bad.holder, bad.ttl, true)
		assert.ErrorIs(t, err, zerr.ErrInvalidArgument, "holder %d bytes, ttl %v", len(bad.holder), bad.ttl)
	}
	_, err = a.AcquireMount(ctx, "nope", "x", ttl, false)
	assert.ErrorIs(t, err, zerr.ErrNotFound)
	_, err = a.AcquireMount(ctx, "fs", "host-c pid 3", ttl, false)
	assert.ErrorIs(t, err, zerr.ErrAlreadyExists, "the refused requests changed nothing: b holds it")
}
