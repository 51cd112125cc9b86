package lfs_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// degradeVol answers the first write into each of the next `left` zones
// written like a mirrored v-zone that lost a copy: half of the blocks land
// (a PartialWriteError when that is more than none), then a degraded
// ZoneStateError; the zone takes no more writes.
type degradeVol struct {
	lfs.Volume
	mu   sync.Mutex
	left int
	dead map[lfs.ZoneID]bool
	only map[lfs.ZoneID]bool // degrade these zones at their next write, whatever its size
	hits int
	fin  map[lfs.ZoneID]bool // zones finished
	// refuse: the next opens are refused for want of active zones (-1:
	// all of them), as the arbiter does while degraded zones' finishes
	// have not given theirs back
	refuse int
}

func (d *degradeVol) OpenZone(ctx context.Context) (lfs.ZoneID, error) {
	d.mu.Lock()
	if d.refuse != 0 {
		if d.refuse > 0 {
			d.refuse--
		}
		d.mu.Unlock()
		return 0, &zerr.TooManyActiveError{Limit: 9}
	}
	d.mu.Unlock()
	return d.Volume.OpenZone(ctx)
}

func (d *degradeVol) Finish(ctx context.Context, z lfs.ZoneID) error {
	d.mu.Lock()
	if d.fin == nil {
		d.fin = map[lfs.ZoneID]bool{}
	}
	d.fin[z] = true
	d.mu.Unlock()
	return d.Volume.Finish(ctx, z)
}

func (d *degradeVol) Write(ctx context.Context, z lfs.ZoneID, off uint64, data []byte, fua bool) error {
	d.mu.Lock()
	if d.dead[z] {
		d.mu.Unlock()
		return &zerr.ZoneStateError{Zone: uint64(z), State: zerr.StateDegraded, Op: "write"}
	}
	if d.only[z] {
		d.hits++
		d.dead[z] = true
		d.mu.Unlock()
		return &zerr.ZoneStateError{Zone: uint64(z), State: zerr.StateDegraded, Op: "write"}
	}
	if d.left == 0 || off == 0 && len(data) < 2*4096 {
		d.mu.Unlock()
		return d.Volume.Write(ctx, z, off, data, fua)
	}
	d.left--
	d.hits++
	d.dead[z] = true
	d.mu.Unlock()
	half := len(data) / 4096 / 2
	deg := &zerr.ZoneStateError{Zone: uint64(z), State: zerr.StateDegraded, Op: "write"}
	if half == 0 {
		return deg
	}
	if err := d.Volume.Write(ctx, z, off, data[:half*4096], fua); err != nil {
		return err
	}
	return &lfs.PartialWriteError{Zone: z, Off: off, Written: uint64(half), Err: deg}
}

// Reset empties the zone: a new v-zone, with all its copies, behind the id.
func (d *degradeVol) Reset(ctx context.Context, z lfs.ZoneID) error {
	d.mu.Lock()
	delete(d.dead, z)
	delete(d.only, z)
	d.mu.Unlock()
	return d.Volume.Reset(ctx, z)
}

// A write that meets a degraded (mirrored, copy lost) zone continues in new
// segments: fsync succeeds, and after a remount the file reads back whole
// and fsck is clean.
func TestDegradedZoneContinuesInNewSegment(t *testing.T) {
	dv := &degradeVol{Volume: newVol(t, 24, 4), dead: map[lfs.ZoneID]bool{}}
	fs := mkfsMount(t, dv, lfs.Options{Mode: lfs.ModeZNS})
	data := bytes.Repeat([]byte("mirrored copy lost "), 40000) // ~760 KiB
	dv.mu.Lock()
	dv.left = 2
	dv.mu.Unlock()
	require.NoError(t, writeFile(fs, "f", data, true), "fsync continues past degraded zones")
	require.Equal(t, 2, dv.hits, "two zones refused the write")
	// the degraded zones are finished at once: over the cluster that gives
	// their active resources back (left open, each kept one until the next
	// mount, and a node loss that degrades every log ran the namespace out)
	dv.mu.Lock()
	for z := range dv.dead {
		require.True(t, dv.fin[z], "degraded zone %d finished", z)
	}
	dv.mu.Unlock()
	require.NoError(t, fs.Unmount(bg))

	remountReads(t, dv, "f", data)
}

// The metadata log's zone loses a copy: the checkpoint continues in a new
// metadata zone with a snapshot, and a remount finds it.
func TestDegradedMetadataZoneRotates(t *testing.T) {
	dv := &degradeVol{Volume: newVol(t, 24, 4), dead: map[lfs.ZoneID]bool{}, only: map[lfs.ZoneID]bool{}}
	fs := mkfsMount(t, dv, lfs.Options{Mode: lfs.ModeZNS})
	require.NoError(t, writeFile(fs, "a", bytes.Repeat([]byte("a"), 10000), true))
	require.NoError(t, fs.Sync(bg))
	meta := fs.Stats().MetaZone
	dv.mu.Lock()
	dv.only[meta] = true
	dv.mu.Unlock()
	data := bytes.Repeat([]byte("after the loss "), 3000)
	require.NoError(t, writeFile(fs, "b", data, false))
	require.NoError(t, fs.Sync(bg), "the checkpoint moves to a new metadata zone")
	require.NotEqual(t, meta, fs.Stats().MetaZone)
	require.Equal(t, 1, dv.hits)
	ro, _ := fs.ReadOnly()
	require.False(t, ro)
	require.NoError(t, fs.Unmount(bg))

	remountReads(t, dv, "b", data)
}

// A degraded metadata zone whose replacement is refused for want of active
// zones (the burst after a node loss): the rotation waits and tries again;
// when the refusal lasts, the checkpoint fails with the typed error and the
// file system stays writable (nothing was written: no read-only), and the
// next checkpoint succeeds once a zone is free.
func TestDegradedMetadataZoneWaitsForActiveZones(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refuse  int
		syncErr bool
	}{
		{"refused twice, then granted", 2, false},
		{"refused until the limit moves", -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dv := &degradeVol{Volume: newVol(t, 24, 4), dead: map[lfs.ZoneID]bool{}, only: map[lfs.ZoneID]bool{}}
			fs := mkfsMount(t, dv, lfs.Options{Mode: lfs.ModeZNS})
			require.NoError(t, writeFile(fs, "a", bytes.Repeat([]byte("a"), 10000), true))
			require.NoError(t, fs.Sync(bg))
			meta := fs.Stats().MetaZone
			dv.mu.Lock()
			dv.only[meta] = true
			dv.refuse = tc.refuse
			dv.mu.Unlock()
			data := bytes.Repeat([]byte("after the loss "), 3000)
			require.NoError(t, writeFile(fs, "b", data, false))
			err := fs.Sync(bg)
			if tc.syncErr {
				require.ErrorIs(t, err, zerr.ErrTooManyActive)
				ro, _ := fs.ReadOnly()
				require.False(t, ro, "a refused open changed nothing: no reason to go read-only")
				dv.mu.Lock()
				dv.refuse = 0
				dv.mu.Unlock()
				err = fs.Sync(bg)
			}
			require.NoError(t, err)
			require.NotEqual(t, meta, fs.Stats().MetaZone)
			ro, _ := fs.ReadOnly()
			require.False(t, ro)
			require.NoError(t, fs.Unmount(bg))
			remountReads(t, dv, "b", data)
		})
	}
}

// remountReads mounts v again: file p reads back want and fsck is clean.
func remountReads(t *testing.T, v lfs.Volume, p string, want []byte) {
	t.Helper()
	fs, err := lfs.Mount(bg, v, lfs.Options{Mode: lfs.ModeZNS})
	require.NoError(t, err)
	got, err := readFile(fs, p)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
}
