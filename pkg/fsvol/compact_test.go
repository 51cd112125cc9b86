package fsvol_test

import (
	"bytes"
	"context"
	"errors"
	mrand "math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/internal/testcluster"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// fillZone opens a v-zone and writes it to capacity with random blocks.
func fillZone(t *testing.T, ctx context.Context, vol *fsvol.Volume, rng *mrand.Rand) (lfs.ZoneID, []byte) {
	t.Helper()
	geo := vol.Geometry()
	bs := geo.BlockSize
	z, err := vol.OpenZone(ctx)
	require.NoError(t, err)
	data := make([]byte, int(geo.ZoneBlocks)*bs)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for off := 0; off < int(geo.ZoneBlocks); off += 16 {
		n := min(16, int(geo.ZoneBlocks)-off)
		require.NoError(t, vol.Write(ctx, z, uint64(off), data[off*bs:(off+n)*bs], false))
	}
	return z, data
}

// Asynchronous compaction (the default): Compact returns with the copies
// pending; a Read, Write, TLOpen or Reset touching a v-zone the compaction
// copies from or into waits for it, and then sees the copied data.
func TestAsyncCompactionOrdering(t *testing.T) {
	ctx := context.Background()
	_, c := tenantCluster(t, 3, "ac", 8, 2)
	vol, err := fsvol.New(ctx, c, fsvol.Options{MaxZones: 16, OpenAhead: -1})
	require.NoError(t, err)
	defer vol.Close(ctx)
	geo := vol.Geometry()
	bs := geo.BlockSize
	require.GreaterOrEqual(t, geo.ZoneBlocks, uint64(64))
	rng := mrand.New(mrand.NewPCG(7, 8))
	src, data := fillZone(t, ctx, vol, rng)
	blocks := func(b, n int) []byte { return data[b*bs : (b+n)*bs] }

	// gated compacts copies with the compaction held pending until the
	// returned release is called.
	gated := func(copies ...lfs.Copy) func() {
		t.Helper()
		gate := make(chan struct{})
		fsvol.SetCompactHook(vol, func() { <-gate })
		_, err := vol.Compact(ctx, copies)
		fsvol.SetCompactHook(vol, nil)
		require.NoError(t, err)
		require.Equal(t, 1, vol.Compactions().Pending)
		return func() { close(gate) }
	}
	// waits runs op, checks that it is still waiting after a while, releases
	// the compaction and returns op's result.
	waits := func(what string, release func(), op func() error) {
		t.Helper()
		res := make(chan error, 1)
		go func() { res <- op() }()
		select {
		case err := <-res:
			t.Fatalf("%s returned (%v) while the compaction it touches is pending", what, err)
		case <-time.After(300 * time.Millisecond):
		}
		release()
		select {
		case err := <-res:
			require.NoError(t, err, what)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s still waits after the compaction ended", what)
		}
		require.Zero(t, vol.Compactions().Pending, what)
	}

	// Read of the destination.
	d1, err := vol.OpenZone(ctx)
	require.NoError(t, err)
	release := gated(lfs.Copy{Src: src, SrcOff: 0, Dst: d1, DstOff: 0, Blocks: 8},
		lfs.Copy{Src: src, SrcOff: 16, Dst: d1, DstOff: 8, Blocks: 8})
	buf := make([]byte, 16*bs)
	waits("read of the destination", release, func() error { return vol.Read(ctx, d1, 0, buf) })
	require.True(t, bytes.Equal(buf[:8*bs], blocks(0, 8)))
	require.True(t, bytes.Equal(buf[8*bs:], blocks(16, 8)))

	// Write to the destination, after the copies.
	release = gated(lfs.Copy{Src: src, SrcOff: 24, Dst: d1, DstOff: 16, Blocks: 8})
	extra := bytes.Repeat([]byte{0xa5}, bs)
	waits("write to the destination", release, func() error { return vol.Write(ctx, d1, 24, extra, false) })
	buf = make([]byte, 9*bs)
	require.NoError(t, vol.Read(ctx, d1, 16, buf))
	require.True(t, bytes.Equal(buf[:8*bs], blocks(24, 8)))
	require.True(t, bytes.Equal(buf[8*bs:], extra))

	// TL_open of the source (written to capacity, so finished).
	d2, err := vol.OpenZone(ctx)
	require.NoError(t, err)
	release = gated(lfs.Copy{Src: src, SrcOff: 32, Dst: d2, DstOff: 0, Blocks: 8})
	bm := make([]byte, (geo.ZoneBlocks+7)/8)
	for i := range bm {
		bm[i] = 0xff
	}
	waits("TL_open of the source", release, func() error { return vol.TLOpen(ctx, src, bm) })
	require.NoError(t, vol.Finish(ctx, src))

	// Reset of the source: the copies read it first.
	release = gated(lfs.Copy{Src: src, SrcOff: 40, Dst: d2, DstOff: 8, Blocks: 8})
	waits("reset of the source", release, func() error { return vol.Reset(ctx, src) })
	buf = make([]byte, 16*bs)
	require.NoError(t, vol.Read(ctx, d2, 0, buf))
	require.True(t, bytes.Equal(buf, blocks(32, 16)))

	// Flush waits for every pending compaction.
	d3, err := vol.OpenZone(ctx)
	require.NoError(t, err)
	release = gated(lfs.Copy{Src: d2, SrcOff: 0, Dst: d3, DstOff: 0, Blocks: 16})
	waits("flush", release, func() error { return vol.Flush(ctx) })
	require.NoError(t, vol.Read(ctx, d3, 0, buf))
	require.True(t, bytes.Equal(buf, blocks(32, 16)))
	cs := vol.Compactions()
	require.EqualValues(t, 5, cs.Submitted)
	require.Zero(t, cs.Failed)
	require.EqualValues(t, 8+8+8+8+8+16, cs.Stats.Copyback+cs.Stats.Local+cs.Stats.Remote)
}

// An asynchronous compaction whose source node is down fails in the
// background: Flush (and a request touching its v-zones) returns a typed
// *fsvol.CompactionError, again at every retry while the node is down (the
// checkpoint naming the destinations is never written); once the node is
// back, the next Flush repairs the copies by host copy and succeeds, and
// the destination holds the data.
func TestAsyncCompactionFailureSurfacesAtFlush(t *testing.T) {
	ctx := context.Background()
	cl, c := testcluster.Tenant(t, localcluster.Config{Nodes: 3}, &v1.CreateNamespaceRequest{Name: "fs", MaxActiveVzones: 8, ZonesPerVzone: 1},
		testcluster.RetryDeadline(500*time.Millisecond))
	vol, err := fsvol.New(ctx, c, fsvol.Options{MaxZones: 16, OpenAhead: -1})
	require.NoError(t, err)
	defer vol.Close(ctx)
	bs := vol.Geometry().BlockSize
	rng := mrand.New(mrand.NewPCG(9, 10))
	src, data := fillZone(t, ctx, vol, rng)
	require.NoError(t, vol.Flush(ctx))
	sl, err := vol.Locate(ctx, src, 0)
	require.NoError(t, err)
	// a destination on another node
	var dst lfs.ZoneID
	for i := 0; ; i++ {
		require.Less(t, i, 6, "no v-zone opened off node %s", sl.Node)
		z, err := vol.OpenZone(ctx)
		require.NoError(t, err)
		l, err := vol.Locate(ctx, z, 0)
		require.NoError(t, err)
		if l.Node != sl.Node {
			dst = z
			break
		}
	}
	victim := -1
	for i, n := range cl.Info().Nodes {
		if n.ID == sl.Node {
			victim = i
		}
	}
	require.NoError(t, cl.StopNode(victim))

	_, err = vol.Compact(ctx, []lfs.Copy{{Src: src, SrcOff: 4, Dst: dst, DstOff: 0, Blocks: 12}})
	require.NoError(t, err, "submitted: the failure comes later")
	for i := 0; i < 2; i++ {
		err = vol.Flush(ctx)
		var ce *fsvol.CompactionError
		require.True(t, errors.As(err, &ce), "flush %d: %v", i, err)
		require.Contains(t, ce.Zones, dst)
		require.True(t, errors.Is(err, zerr.ErrUnavailable), "flush %d: %v", i, err)
	}
	err = vol.Read(ctx, dst, 0, make([]byte, bs))
	require.True(t, errors.Is(err, zerr.ErrUnavailable), "a read of the destination: %v", err)
	require.Equal(t, 1, vol.Compactions().Pending)

	require.NoError(t, cl.StartNode(ctx, victim))
	require.NoError(t, cl.WaitReady(ctx))
	require.Eventually(t, func() bool { return vol.Flush(ctx) == nil }, 30*time.Second, 200*time.Millisecond)
	cs := vol.Compactions()
	require.Zero(t, cs.Pending)
	require.EqualValues(t, 1, cs.Failed)
	require.EqualValues(t, 1, cs.Repaired)
	buf := make([]byte, 12*bs)
	require.NoError(t, vol.Read(ctx, dst, 0, buf))
	require.True(t, bytes.Equal(buf, data[4*bs:16*bs]), "the repaired copies")
}
