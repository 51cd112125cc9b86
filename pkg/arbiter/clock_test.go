package arbiter

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/cluster"
)

// The leader's background reclaim runs on the arbiter's Clock: on a virtual
// clock nothing happens while the clock stands still, however long the wall
// time, and the namespace idle past T_ReadOnly is frozen and reclaimed once
// the clock is advanced past it and a reclaim tick.
func TestBackgroundReclaimOnVirtualClock(t *testing.T) {
	tc := newTestCluster(t)
	comp := newMemCompactor()
	tc.comp = comp
	vc := clock.NewVirtual()
	tc.cfg = func(c *Config) {
		c.Clock, c.Now = vc, nil // timestamps from the virtual clock too
		c.ReclaimInterval = 10 * time.Second
	}
	tc.addNode("n0", []cluster.DeviceInfo{testDevice(0)}, false)
	tc.addNode("n1", []cluster.DeviceInfo{testDevice(0)}, false)
	a := tc.start("arb-0:9000")
	tc.leader(a)
	tc.waitNodes(a, 2)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "f", MARLogical: 2, ZonesPerVZone: 1024})
	require.NoError(t, err)
	l, err := a.OpenVZone(ctx, "f", 0)
	require.NoError(t, err)
	src := l.Groups[0]
	fi, err := a.GetNamespace(ctx, "f")
	require.NoError(t, err)
	require.Greater(t, src.Width, fi.MinWidth, "overdriven")
	comp.write(src, l.BlockSize, 10)

	frozen := func() bool {
		fi, err := a.GetNamespace(ctx, "f")
		require.NoError(t, err)
		return fi.Frozen
	}
	// Ticks before T_ReadOnly (1 min) reclaim nothing. The reclaim check
	// a tick starts runs on the arbiter's goroutine: the next check of
	// the namespace below may come before it, never a reclaim.
	vc.Advance(30 * time.Second)
	assert.False(t, frozen(), "idle for 30 s of the clock")

	vc.Advance(45 * time.Second) // 75 s idle > T_ReadOnly, a tick at 80 s
	vc.Advance(10 * time.Second)
	require.Eventually(t, frozen, time.Minute, 5*time.Millisecond, "a reclaim tick froze the idle namespace")
	require.Eventually(t, func() bool {
		l, err := a.Layout(ctx, "f", 0)
		return err == nil && l.Groups[len(l.Groups)-1].Width == fi.MinWidth
	}, time.Minute, 5*time.Millisecond, "and reclaimed its v-zone to the minimum width")
}
