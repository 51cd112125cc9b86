package node

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/cluster"
)

// TestRevocationResetDoesNotBlockTheWatch: a reset that cannot run (its
// zone's lock is held by a slow reader) delays only its own zone: the watch
// keeps applying every other grant change, the zone stays out of reach until
// its reset ran, and its new owner is admitted after it.
func TestRevocationResetDoesNotBlockTheWatch(t *testing.T) {
	cli := etcdClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const node = "slowreset"
	clearGrants(t, cli, node)
	release := make(chan struct{})
	var mu sync.Mutex
	var resets []uint32
	g, err := WatchGrantsFunc(ctx, cli, node, quiet, func(_, zone uint32) {
		if zone == 7 {
			<-release // a reader holds zone 7's lock
		}
		mu.Lock()
		resets = append(resets, zone)
		mu.Unlock()
	})
	require.NoError(t, err)
	put := func(zone uint32, ns string) {
		v, err := cluster.EncodeGrant(cluster.Grant{Namespace: ns})
		require.NoError(t, err)
		_, err = cli.Put(ctx, cluster.GrantKey(node, 0, zone), string(v))
		require.NoError(t, err)
	}
	del := func(zone uint32) {
		_, err := cli.Delete(ctx, cluster.GrantKey(node, 0, zone))
		require.NoError(t, err)
	}
	put(7, "a")
	put(8, "a")
	require.Eventually(t, func() bool { return g.Len() == 2 }, 10*time.Second, 5*time.Millisecond)

	del(7)      // its reset blocks
	put(7, "b") // re-granted at once
	put(9, "c")
	del(8)
	// The watch went on: later events applied, zone 8's reset ran.
	require.Eventually(t, func() bool {
		_, ok9 := g.Lookup(0, 9)
		_, ok8 := g.Lookup(0, 8)
		mu.Lock()
		defer mu.Unlock()
		return ok9 && !ok8 && len(resets) == 1 && resets[0] == 8
	}, 10*time.Second, 5*time.Millisecond, "the watch loop is blocked by one zone's reset")
	gr, ok := g.Lookup(0, 7)
	require.True(t, ok)
	assert.Equal(t, "b", gr.Namespace)
	assert.False(t, g.Cached("b", 0, 7), "zone 7 is out of reach until its reset ran")
	assert.True(t, g.Held("b", 0, 7), "but granted: its I/O waits for the reset instead of being refused")
	assert.False(t, g.Held("a", 0, 7))
	assert.True(t, g.Cached("c", 0, 9))
	assert.Equal(t, 1, g.PendingResets())

	// The check waits for the reset: once it is parked on it (the point
	// where it would have returned otherwise), it has not returned.
	checked := make(chan error, 1)
	go func() { checked <- g.Check("b", 0, 7) }()
	require.Eventually(t, func() bool { return g.resetWaits.Load() == 1 }, 30*time.Second, time.Millisecond,
		"the check waits for the zone's reset")
	select {
	case err := <-checked:
		t.Fatalf("the new owner was admitted before the reset: %v", err)
	default:
	}
	close(release)
	require.NoError(t, <-checked, "admitted once the reset ran")
	assert.True(t, g.Cached("b", 0, 7))
	assert.Zero(t, g.PendingResets())
	mu.Lock()
	assert.Equal(t, []uint32{8, 7}, resets)
	mu.Unlock()
}

// TestWaitResetsWaitsForARunningReset: the node closes its devices only
// after WaitResets, so WaitResets must not return while a revocation reset
// is still running (a reset on a closed device or owner file raced the
// shutdown before it existed).
func TestWaitResetsWaitsForARunningReset(t *testing.T) {
	cli := etcdClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const node = "waitresets"
	clearGrants(t, cli, node)
	started, release := make(chan struct{}), make(chan struct{})
	var finished bool // written by the reset, read after WaitResets: the race detector checks the ordering
	g, err := WatchGrantsFunc(ctx, cli, node, quiet, func(_, zone uint32) {
		close(started)
		<-release
		finished = true
	})
	require.NoError(t, err)
	v, err := cluster.EncodeGrant(cluster.Grant{Namespace: "a"})
	require.NoError(t, err)
	_, err = cli.Put(ctx, cluster.GrantKey(node, 0, 3), string(v))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return g.Len() == 1 }, 10*time.Second, 5*time.Millisecond)
	_, err = cli.Delete(ctx, cluster.GrantKey(node, 0, 3))
	require.NoError(t, err)
	<-started
	cancel() // shutdown: the watch stops, the running reset does not

	waited := make(chan struct{})
	go func() { g.WaitResets(); close(waited) }()
	require.Eventually(t, func() bool { return g.drainWaits.Load() == 1 }, 30*time.Second, time.Millisecond)
	select {
	case <-waited:
		t.Fatal("WaitResets returned while a reset was running")
	default:
	}
	close(release)
	select {
	case <-waited:
	case <-time.After(time.Minute): // a hang guard only
		t.Fatal("WaitResets did not return after the reset finished")
	}
	assert.True(t, finished, "WaitResets returned after the reset")
}
