package zns

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/vfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// TestJournalSyncDoesNotBlockAppends: while a journal fdatasync is in flight
// (a SyncZone waits for it), other zones' state changes still append to the
// journal, and SyncZones of other zones share that sync or the next one
// instead of queueing one each.
func TestJournalSyncDoesNotBlockAppends(t *testing.T) {
	var armed atomic.Bool
	entered := make(chan struct{}, 16)
	release := make(chan struct{})
	var journalSyncs atomic.Int32
	hook := vfs.InjectorFunc(func(o vfs.Op) error {
		if o.Kind == vfs.OpSync && strings.Contains(o.Path, ".journal") { // a checkpointed journal is the renamed .tmp
			journalSyncs.Add(1)
			if armed.Load() {
				entered <- struct{}{}
				<-release
			}
		}
		return nil
	})
	d, err := Create("/dev/zns0", plCfg(), clock.Off(), WithFS(vfs.WithErrors(vfs.NewCrashableMem(), hook)), WithLogger(quiet))
	require.NoError(t, err)
	var once sync.Once
	unblock := func() { armed.Store(false); once.Do(func() { close(release) }) }
	defer d.Close()
	defer unblock() // before Close, also when the test fails while a sync is held
	ctx := context.Background()
	g := d.g
	blk := make([]byte, g.BlockSize)
	// zones 0..3 are opened by a write each: a journal record each, not synced
	for z := uint64(0); z < 4; z++ {
		_, err := d.Write(ctx, z*g.ZoneSize, blk, Flags{})
		require.NoError(t, err)
	}
	armed.Store(true)
	first := make(chan error, 1)
	go func() { first <- d.SyncZone(0) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("SyncZone of a zone opened since the last sync did not sync the journal")
	}
	before := journalSyncs.Load()
	// opening another zone (a journal append, no journal sync) completes
	// while the sync is held
	done := make(chan error, 1)
	go func() { _, err := d.Write(ctx, 5*g.ZoneSize, blk, Flags{}); done <- err }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a journal append waited for an fdatasync in flight")
	}
	// SyncZones of zones 1..3 queue behind the held sync and share one round
	others := make(chan error, 3)
	for z := uint64(1); z < 4; z++ {
		go func() { others <- d.SyncZone(z) }()
	}
	// Wait until all three wait for the held round: only then does the
	// count below show that they shared one.
	jf := d.j.f.(*syncFile)
	require.Eventually(t, func() bool { return jf.g.Waiting() == 3 }, time.Minute, time.Millisecond,
		"SyncZones of zones 1..3 wait for the journal sync in flight")
	unblock()
	require.NoError(t, <-first)
	for i := 0; i < 3; i++ {
		require.NoError(t, <-others)
	}
	require.Equal(t, int32(1), journalSyncs.Load()-before, "SyncZones of 3 zones share one journal sync after the held one")
}

// TestSyncZone: a reset is durable when it returns (a power loss right after
// keeps it, whatever else is lost), so SyncZone then costs nothing; the
// first write of the new generation does not wait for a journal sync (its
// zone-open record is synced by the next SyncZone, Flush or FUA write), and
// no power loss before that brings back the old generation's data, even
// once the new generation has overwritten both write pointer slots.
func TestSyncZone(t *testing.T) {
	mem := vfs.NewCrashableMem()
	d, err := Create("/dev/zns0", plCfg(), clock.Off(), WithFS(mem), WithLogger(quiet))
	require.NoError(t, err)
	ctx := context.Background()
	g := d.g
	old := make([]byte, 4*g.BlockSize)
	for i := range old {
		old[i] = 0xA5
	}
	_, err = d.Write(ctx, g.ZoneSize, old, Flags{})
	require.NoError(t, err)
	_, err = d.Flush(ctx)
	require.NoError(t, err)
	syncs := d.Log().JournalSyncs
	_, err = d.ZoneMgmt(ctx, 1, ActionReset, false)
	require.NoError(t, err)
	assert.Equal(t, syncs+1, d.Log().JournalSyncs, "a reset syncs the journal once")
	crashCheck := func(what string, maxWP uint64) {
		t.Helper()
		for seed := uint64(1); seed <= 8; seed++ {
			crashed, err := Open("/dev/zns0", plCfg(), clock.Off(), WithFS(mem.CrashClone(seed)), WithLogger(quiet))
			require.NoError(t, err, "seed %d", seed)
			zs, err := crashed.ReportZones(StateAny, 1, 1)
			require.NoError(t, err)
			wp := zs[0].WP - zs[0].Start
			require.LessOrEqual(t, wp, maxWP, "%s, seed %d: a power loss brought the reset zone's old data back (state %s)", what, seed, zs[0].State)
			if wp > 0 {
				// unflushed blocks may be lost (zeros) but never the old
				// generation's
				got, _, err := crashed.Read(ctx, g.ZoneSize, wp)
				require.NoError(t, err)
				assert.Equal(t, -1, bytes.IndexByte(got, old[0]), "%s, seed %d: the old generation's data is back", what, seed)
			} else {
				assert.Contains(t, []ZoneState{StateEmpty, StateClosed}, zs[0].State, "%s, seed %d", what, seed)
			}
			require.NoError(t, crashed.Close())
		}
	}
	crashCheck("after the reset", 0)
	require.NoError(t, d.SyncZone(1))
	assert.Equal(t, syncs+1, d.Log().JournalSyncs, "SyncZone after a reset found it durable")
	// the new generation: block after block, one slot each (both slots of
	// the old generation are overwritten by the second)
	fresh := make([]byte, 3*g.BlockSize)
	for i := range fresh {
		fresh[i] = 0x5A
	}
	for b := 0; b < 3; b++ {
		_, err = d.Write(ctx, g.ZoneSize+uint64(b), fresh[b*g.BlockSize:(b+1)*g.BlockSize], Flags{})
		require.NoError(t, err)
		assert.Equal(t, syncs+1, d.Log().JournalSyncs, "write %d of the new generation synced the journal", b)
		crashCheck("new generation before a sync", uint64(b+1))
	}
	require.NoError(t, d.SyncZone(1))
	assert.Equal(t, syncs+2, d.Log().JournalSyncs, "SyncZone syncs the record that opened the zone")
	require.NoError(t, d.SyncZone(1))
	assert.Equal(t, syncs+2, d.Log().JournalSyncs, "a second SyncZone found it durable")
	_, err = d.Flush(ctx)
	require.NoError(t, err)
	for seed := uint64(1); seed <= 8; seed++ {
		crashed, err := Open("/dev/zns0", plCfg(), clock.Off(), WithFS(mem.CrashClone(seed)), WithLogger(quiet))
		require.NoError(t, err, "seed %d", seed)
		zs, err := crashed.ReportZones(StateAny, 1, 1)
		require.NoError(t, err)
		assert.Equal(t, uint64(3), zs[0].WP-zs[0].Start, "seed %d: flushed writes of the new generation survive", seed)
		require.NoError(t, crashed.Close())
	}
	require.ErrorIs(t, d.SyncZone(uint64(len(d.zones))), zerr.ErrOutOfRange)
	require.NoError(t, d.Close())
}

// TestBeforeDataSync: every fdatasync of the data file runs the hook first
// (Flush, the sync before a reset), and a failing hook fails the sync like
// an I/O error: the caller gets it, never a success.
func TestBeforeDataSync(t *testing.T) {
	d, err := Create("/dev/zns0", plCfg(), clock.Off(), WithFS(vfs.NewCrashableMem()), WithLogger(quiet))
	require.NoError(t, err)
	defer d.Close()
	ctx := context.Background()
	blk := make([]byte, d.g.BlockSize)
	var calls atomic.Int32
	var fail atomic.Bool
	boom := errors.New("owner file fdatasync: EIO")
	d.SetBeforeDataSync(func() error {
		calls.Add(1)
		if fail.Load() {
			return boom
		}
		return nil
	})
	_, err = d.Write(ctx, 0, blk, Flags{})
	require.NoError(t, err)
	_, err = d.Flush(ctx)
	require.NoError(t, err)
	assert.Equal(t, int32(1), calls.Load(), "Flush")
	_, err = d.Write(ctx, 1, blk, Flags{})
	require.NoError(t, err)
	_, err = d.ZoneMgmt(ctx, 0, ActionReset, false)
	require.NoError(t, err)
	assert.Equal(t, int32(2), calls.Load(), "the sync before a reset")
	_, err = d.Write(ctx, d.g.ZoneSize, blk, Flags{})
	require.NoError(t, err)
	fail.Store(true)
	_, err = d.Flush(ctx)
	require.ErrorIs(t, err, boom)
	require.ErrorIs(t, err, zerr.ErrUnavailable)
	assert.True(t, d.Log().ReadOnly, "a failed sync leaves the device read-only")
}

// TestFlushSkipsACleanJournal: a Flush or FUA write after writes that
// changed no zone state syncs the data file only (the journal has nothing
// new since its last sync); one after a state change (a reset) syncs the
// journal too, and that reset survives a power loss after the Flush.
func TestFlushSkipsACleanJournal(t *testing.T) {
	mem := vfs.NewCrashableMem()
	d, err := Create("/dev/zns0", plCfg(), clock.Off(), WithFS(mem), WithLogger(quiet))
	require.NoError(t, err)
	ctx := context.Background()
	g := d.g
	blk := make([]byte, g.BlockSize)
	_, err = d.Write(ctx, 0, blk, Flags{}) // opens zone 0: a journal record
	require.NoError(t, err)
	_, err = d.Flush(ctx)
	require.NoError(t, err)
	for i, tc := range []struct {
		name         string
		op           func() error
		journalSyncs uint64
		dataSynced   bool
	}{
		{"write then Flush", func() error {
			if _, err := d.Write(ctx, 1, blk, Flags{}); err != nil {
				return err
			}
			_, err := d.Flush(ctx)
			return err
		}, 0, true},
		{"FUA write", func() error { _, err := d.Write(ctx, 2, blk, Flags{FUA: true}); return err }, 0, true},
		{"Flush with nothing written", func() error { _, err := d.Flush(ctx); return err }, 0, false},
		{"write to zone 1 (a new zone), reset it, Flush", func() error {
			if _, err := d.Write(ctx, g.ZoneSize, blk, Flags{}); err != nil {
				return err
			}
			if _, err := d.ZoneMgmt(ctx, 1, ActionReset, false); err != nil {
				return err
			}
			_, err := d.Flush(ctx)
			return err
		}, 1, true},
	} {
		js, ds := d.Log().JournalSyncs, d.Log().DataSyncs
		require.NoError(t, tc.op(), tc.name)
		assert.Equal(t, js+tc.journalSyncs, d.Log().JournalSyncs, "case %d %s: journal syncs", i, tc.name)
		if tc.dataSynced {
			assert.Greater(t, d.Log().DataSyncs, ds, "case %d %s: the data file is synced", i, tc.name)
		} else {
			assert.Equal(t, ds, d.Log().DataSyncs, "case %d %s: nothing to sync", i, tc.name)
		}
	}
	for seed := uint64(1); seed <= 8; seed++ {
		crashed, err := Open("/dev/zns0", plCfg(), clock.Off(), WithFS(mem.CrashClone(seed)), WithLogger(quiet))
		require.NoError(t, err, "seed %d", seed)
		zs, err := crashed.ReportZones(StateAny, 0, 2)
		require.NoError(t, err)
		assert.Equal(t, uint64(3), zs[0].WP-zs[0].Start, "seed %d: the flushed writes of zone 0 survive", seed)
		assert.Equal(t, StateEmpty, zs[1].State, "seed %d: the flushed reset of zone 1 survives", seed)
		require.NoError(t, crashed.Close())
	}
	require.NoError(t, d.Close())
}

// TestStaleSlotAfterLostOpen: a first write whose zone-open record a power
// loss takes while its write-pointer slot survives is dropped at the next
// open, and stays dropped: a later write of the zone, lost in a second power
// loss with its slot while its open record survives, must not bring the old
// slot's write pointer back over blocks the new incarnation never wrote.
func TestStaleSlotAfterLostOpen(t *testing.T) {
	ctx := context.Background()
	found := 0
	for seed := uint64(1); seed <= 64; seed++ {
		mem := vfs.NewCrashableMem()
		d, err := Create("/dev/zns0", plCfg(), clock.Off(), WithFS(mem), WithLogger(quiet))
		require.NoError(t, err)
		g := d.g
		_, err = d.Write(ctx, g.ZoneSize, make([]byte, 4*g.BlockSize), Flags{}) // opens zone 1: record not synced
		require.NoError(t, err)
		require.NoError(t, d.f.Datasync()) // the slot (wp 4) is durable, the open record is not
		c1 := mem.CrashClone(seed)
		require.NoError(t, d.Close())
		d1, err := Open("/dev/zns0", plCfg(), clock.Off(), WithFS(c1), WithLogger(quiet))
		require.NoError(t, err)
		zs, err := d1.ReportZones(StateAny, 1, 1)
		require.NoError(t, err)
		if zs[0].WP != zs[0].Start { // the open record survived this time
			require.NoError(t, d1.Close())
			continue
		}
		// the slot was dropped; write one block, make its open record (only)
		// durable, lose the rest
		_, err = d1.Write(ctx, g.ZoneSize, bytes.Repeat([]byte{0x5A}, g.BlockSize), Flags{})
		require.NoError(t, err)
		require.NoError(t, d1.SyncZone(1))
		for seed2 := uint64(1); seed2 <= 8; seed2++ {
			d2, err := Open("/dev/zns0", plCfg(), clock.Off(), WithFS(c1.CrashClone(seed2)), WithLogger(quiet))
			require.NoError(t, err)
			zs, err := d2.ReportZones(StateAny, 1, 1)
			require.NoError(t, err)
			assert.LessOrEqual(t, zs[0].WP-zs[0].Start, uint64(1), "seed %d/%d: the dropped slot's write pointer came back", seed, seed2)
			require.NoError(t, d2.Close())
			found++
		}
		require.NoError(t, d1.Close())
	}
	require.Positive(t, found, "no seed lost the open record")
}
