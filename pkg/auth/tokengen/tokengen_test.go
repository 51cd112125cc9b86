package tokengen

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/etcdlocal"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestBumpFollowRevoke(t *testing.T) {
	srv, err := etcdlocal.Start(t.TempDir(), "")
	require.NoError(t, err)
	defer srv.Close()
	cli, err := srv.Client()
	require.NoError(t, err)
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	tab := New()
	assert.NoError(t, tab.Revoked("a", 0), "nothing loaded: nothing revoked")
	assert.False(t, tab.Loaded())

	g, err := Bump(ctx, cli, "a")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), g)
	require.NoError(t, tab.Follow(ctx, cli, quiet))
	assert.True(t, tab.Loaded())
	assert.Equal(t, uint64(1), tab.Generation("a"), "Follow returns after the first load")
	assert.Error(t, tab.Revoked("a", 0))
	assert.NoError(t, tab.Revoked("a", 1))
	assert.NoError(t, tab.Revoked("b", 0), "another namespace is untouched")

	g, err = Bump(ctx, cli, "a")
	require.NoError(t, err)
	assert.Equal(t, uint64(2), g)
	require.Eventually(t, func() bool { return tab.Revoked("a", 1) != nil }, 30*time.Second, 5*time.Millisecond, "the watch delivers the bump")
	assert.NoError(t, tab.Revoked("a", 2))

	cur, rev, err := Current(ctx, cli, "a")
	require.NoError(t, err)
	assert.Equal(t, uint64(2), cur)
	assert.NotZero(t, rev)

	// Concurrent bumps never lose one (compare-and-swap).
	done := make(chan uint64, 8)
	for i := 0; i < 8; i++ {
		go func() {
			g, err := Bump(ctx, cli, "c")
			assert.NoError(t, err)
			done <- g
		}()
	}
	seen := map[uint64]bool{}
	for i := 0; i < 8; i++ {
		seen[<-done] = true
	}
	assert.Len(t, seen, 8)
	cur, _, err = Current(ctx, cli, "c")
	require.NoError(t, err)
	assert.Equal(t, uint64(8), cur)

	// A malformed record is refused with a typed error, never taken as 0.
	_, err = cli.Put(ctx, Key("d"), "{bad")
	require.NoError(t, err)
	_, _, err = Current(ctx, cli, "d")
	assert.ErrorIs(t, err, zerr.ErrCorrupt)
	_, err = cli.Put(ctx, Key("d"), `{"version":9,"generation":1}`)
	require.NoError(t, err)
	_, _, err = Current(ctx, cli, "d")
	assert.ErrorIs(t, err, zerr.ErrCorrupt)
}
