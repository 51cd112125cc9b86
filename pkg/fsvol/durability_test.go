package fsvol_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/internal/testcluster"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

type env struct {
	cl  *localcluster.Cluster
	c   *client.Client
	reg *prometheus.Registry
}

// newEnv starts a three-node cluster with namespace "fs" (v-zones of four
// zones, eight active) and a client of it that gives up on a node after
// retryDeadline.
func newEnv(t *testing.T, retryDeadline time.Duration) env {
	t.Helper()
	reg := prometheus.NewRegistry()
	cl, c := testcluster.Tenant(t, localcluster.Config{Nodes: 3}, &v1.CreateNamespaceRequest{Name: "fs", MaxActiveVzones: 8, ZonesPerVzone: 4},
		testcluster.RetryDeadline(retryDeadline), testcluster.WithRegisterer(reg))
	return env{cl: cl, c: c, reg: reg}
}

// flushes is how many drive flushes the client has completed.
func (e env) flushes(t *testing.T) int {
	t.Helper()
	mfs, err := e.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "zonefleet_client_ops_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == "flush" {
					return int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return 0
}

func (e env) nodeIndex(t *testing.T, id string) int {
	t.Helper()
	for i, n := range e.cl.Info().Nodes {
		if n.ID == id {
			return i
		}
	}
	t.Fatalf("no node %s", id)
	return -1
}

// fsync never lies: Flush sends one flush per dirty drive (not per v-zone
// per drive); while a drive's node is down every Flush fails — a retry too,
// the failed drive stays dirty — and once the node is back Flush succeeds.
func TestFlushFailsUntilEveryDriveIsDurable(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 500*time.Millisecond)
	vol, err := fsvol.New(ctx, e.c, fsvol.Options{MaxZones: 28})
	require.NoError(t, err)
	t.Cleanup(func() { _ = vol.Close(ctx) })
	block := make([]byte, 4*vol.Geometry().BlockSize)

	// Several v-zones over the same three drives.
	var zones []lfs.ZoneID
	perZone := 0
	drives := map[client.DeviceRef]bool{}
	for i := 0; i < 5; i++ {
		z, err := vol.OpenZone(ctx)
		require.NoError(t, err)
		require.NoError(t, vol.Write(ctx, z, 0, block, false))
		zones = append(zones, z)
		// the drives this write reached (a small write: one leg's)
		devs, err := e.c.VZone(uint64(z)).DevicesOf(ctx, 0, 4)
		require.NoError(t, err)
		all, err := e.c.VZone(uint64(z)).Devices(ctx)
		require.NoError(t, err)
		perZone += len(all)
		for _, d := range devs {
			drives[d] = true
		}
	}
	require.LessOrEqual(t, len(drives), 3)
	before := e.flushes(t)
	require.NoError(t, vol.Flush(ctx))
	assert.Equal(t, len(drives), e.flushes(t)-before, "one flush per drive written, not %d (per v-zone per drive)", perZone)
	before = e.flushes(t)
	require.NoError(t, vol.Flush(ctx))
	assert.Equal(t, 0, e.flushes(t)-before, "nothing written since: nothing to flush")

	// Write again, then take down a node holding a drive the write reached.
	z := zones[0]
	require.NoError(t, vol.Write(ctx, z, 4, block, false))
	devs, err := e.c.VZone(uint64(z)).DevicesOf(ctx, 4, 4)
	require.NoError(t, err)
	down := e.nodeIndex(t, devs[0].Node)
	require.NoError(t, e.cl.StopNode(down))
	for try := 0; try < 3; try++ {
		err := vol.Flush(ctx)
		require.Error(t, err, "flush %d while node %s is down must fail", try, devs[0].Node)
		assert.ErrorIs(t, err, zerr.ErrUnavailable)
	}

	require.NoError(t, e.cl.StartNode(ctx, down))
	require.Eventually(t, func() bool { return vol.Flush(ctx) == nil }, 30*time.Second, 100*time.Millisecond,
		"flush succeeds once the node is back")
	before = e.flushes(t)
	require.NoError(t, vol.Flush(ctx))
	assert.Equal(t, 0, e.flushes(t)-before, "the drives that failed were flushed by the successful retry")
	got := make([]byte, len(block))
	require.NoError(t, vol.Read(ctx, z, 4, got))
	assert.Equal(t, block, got)

	// A one-block write dirties the drive of its leg only: the next Flush
	// syncs that one, not every drive of the v-zone.
	one := zones[1]
	require.NoError(t, vol.Write(ctx, one, 4, block[:vol.Geometry().BlockSize], false))
	reached, err := e.c.VZone(uint64(one)).DevicesOf(ctx, 4, 1)
	require.NoError(t, err)
	all, err := e.c.VZone(uint64(one)).Devices(ctx)
	require.NoError(t, err)
	require.Len(t, reached, 1, "striping without copies: one leg, one drive")
	require.Greater(t, len(all), 1)
	before = e.flushes(t)
	require.NoError(t, vol.Flush(ctx))
	assert.Equal(t, 1, e.flushes(t)-before, "one drive flushed, not the v-zone's %d", len(all))
}

// The next v-zone is opened ahead of need: after an OpenZone, a spare
// appears at the arbiter (open, empty) that Zones does not list, a stale
// Reset of its id leaves it alone, and the next OpenZone hands out exactly
// that v-zone, writable. Close gives the spare back.
func TestOpenAheadHandsOutTheSpare(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 5*time.Second)
	vol, err := fsvol.New(ctx, e.c, fsvol.Options{MaxZones: 28, OpenAhead: 1})
	require.NoError(t, err)
	first, err := vol.OpenZone(ctx)
	require.NoError(t, err)

	var spare lfs.ZoneID
	require.Eventually(t, func() bool {
		list, err := e.c.ListVZones(ctx)
		require.NoError(t, err)
		for _, l := range list {
			if l.GetState() == v1.VZoneState_VZONE_STATE_OPEN && lfs.ZoneID(l.GetId()) != first {
				spare = lfs.ZoneID(l.GetId())
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "a v-zone is opened ahead")
	zs, err := vol.Zones(ctx)
	require.NoError(t, err)
	require.Len(t, zs, 1, "the spare is not the file system's")
	assert.Equal(t, first, zs[0].ID)

	// A repeated Reset of an id that was reset and opened ahead again must
	// not empty the spare.
	require.NoError(t, vol.Reset(ctx, spare))
	second, err := vol.OpenZone(ctx)
	require.NoError(t, err)
	assert.Equal(t, spare, second, "OpenZone hands out the v-zone opened ahead")
	block := make([]byte, vol.Geometry().BlockSize)
	require.NoError(t, vol.Write(ctx, second, 0, block, true))

	require.NoError(t, vol.Close(ctx))
	list, err := e.c.ListVZones(ctx)
	require.NoError(t, err)
	open := 0
	for _, l := range list {
		if l.GetState() == v1.VZoneState_VZONE_STATE_OPEN {
			open++
		}
	}
	assert.Equal(t, 2, open, "Close reset the spare: only the two handed out stay open")
}

// Finishes run in the background, but nothing that relies on them runs
// before they land: Zones lists a finished v-zone as full; OpenZone, with
// every active resource held by finishing v-zones, still opens; Reset right
// after Finish works; a v-zone written to capacity is finished by itself.
func TestFinishOrdering(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 5*time.Second)
	vol, err := fsvol.New(ctx, e.c, fsvol.Options{MaxZones: 28, OpenAhead: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = vol.Close(ctx) })
	geo := vol.Geometry()
	block := make([]byte, geo.BlockSize)

	tests := []struct {
		name  string
		check func(t *testing.T, zones []lfs.ZoneID)
	}{
		{"Zones sees them full", func(t *testing.T, zones []lfs.ZoneID) {
			zs, err := vol.Zones(ctx)
			require.NoError(t, err)
			full := map[lfs.ZoneID]bool{}
			for _, z := range zs {
				full[z.ID] = z.State == lfs.ZoneFull
			}
			for _, z := range zones {
				assert.True(t, full[z], "v-zone %d is full once Zones returns", z)
			}
		}},
		{"OpenZone gets their resources", func(t *testing.T, zones []lfs.ZoneID) {
			var again []lfs.ZoneID
			for range zones {
				z, err := vol.OpenZone(ctx)
				require.NoError(t, err, "the active resources of finishing v-zones come back")
				again = append(again, z)
			}
			for _, z := range again {
				require.NoError(t, vol.Reset(ctx, z))
			}
		}},
		{"Reset right after Finish", func(t *testing.T, zones []lfs.ZoneID) {
			for _, z := range zones {
				require.NoError(t, vol.Reset(ctx, z))
			}
			zs, err := vol.Zones(ctx)
			require.NoError(t, err)
			assert.Empty(t, zs)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var zones []lfs.ZoneID
			for i := 0; i < geo.MaxOpen; i++ {
				z, err := vol.OpenZone(ctx)
				require.NoError(t, err)
				require.NoError(t, vol.Write(ctx, z, 0, block, false))
				zones = append(zones, z)
			}
			_, err := vol.OpenZone(ctx)
			require.True(t, errors.Is(err, zerr.ErrTooManyOpen) || errors.Is(err, zerr.ErrTooManyActive),
				"every active resource is held: %v", err)
			for _, z := range zones {
				require.NoError(t, vol.Finish(ctx, z))
			}
			tt.check(t, zones)
			for _, z := range zones {
				_ = vol.Reset(ctx, z)
			}
		})
	}

	// Written to capacity: finished without a Finish call.
	z, err := vol.OpenZone(ctx)
	require.NoError(t, err)
	require.NoError(t, vol.Write(ctx, z, 0, make([]byte, geo.ZoneBlocks*uint64(geo.BlockSize)), false))
	zs, err := vol.Zones(ctx)
	require.NoError(t, err)
	require.Len(t, zs, 1)
	assert.Equal(t, lfs.ZoneFull, zs[0].State)
	assert.Equal(t, geo.ZoneBlocks, zs[0].WP)
}

// Concurrent Flushes share rounds (group commit), each caller answered by a
// round that started after its call: eight fsyncs arriving while one round
// runs are served by one more round, not eight; and while a drive's flush
// fails every one of them gets the error.
func TestConcurrentFlushesShareRounds(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 500*time.Millisecond)
	vol, err := fsvol.New(ctx, e.c, fsvol.Options{MaxZones: 28})
	require.NoError(t, err)
	t.Cleanup(func() { _ = vol.Close(ctx) })
	block := make([]byte, 4*vol.Geometry().BlockSize)
	z, err := vol.OpenZone(ctx)
	require.NoError(t, err)

	for _, tt := range []struct {
		name     string
		nodeDown bool
	}{{"flushes succeed", false}, {"a drive is down", true}} {
		t.Run(tt.name, func(t *testing.T) {
			wp := uint64(0)
			if tt.nodeDown {
				wp = 4
			}
			require.NoError(t, vol.Write(ctx, z, wp, block, false))
			if tt.nodeDown {
				devs, err := e.c.VZone(uint64(z)).DevicesOf(ctx, wp, 4)
				require.NoError(t, err)
				down := e.nodeIndex(t, devs[0].Node)
				require.NoError(t, e.cl.StopNode(down))
				t.Cleanup(func() { require.NoError(t, e.cl.StartNode(ctx, down)) })
			}
			const n = 8
			r0, c0 := fsvol.FlushRounds(vol)
			var first sync.Once
			release := make(chan struct{})
			// The first round waits until all n calls were made.
			fsvol.SetFlushHook(vol, func() {
				first.Do(func() {
					require.Eventually(t, func() bool { _, c := fsvol.FlushRounds(vol); return c-c0 == n }, 10*time.Second, time.Millisecond)
					close(release)
				})
			})
			defer fsvol.SetFlushHook(vol, nil)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = vol.Flush(ctx)
				}()
			}
			wg.Wait()
			<-release
			r1, _ := fsvol.FlushRounds(vol)
			assert.Equal(t, uint64(2), r1-r0, "the round in flight and one more")
			for i, err := range errs {
				if tt.nodeDown {
					require.ErrorIs(t, err, zerr.ErrUnavailable, "call %d: the drive's flush failed", i)
				} else {
					require.NoError(t, err, "call %d", i)
				}
			}
		})
	}
}
