package vfs

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSyncGroupSkipsWhenNothingChanged(t *testing.T) {
	var g SyncGroup
	var n atomic.Int32
	fsync := func() error { n.Add(1); return nil }
	require.NoError(t, g.SyncAll(fsync))
	assert.Equal(t, int32(0), n.Load(), "nothing modified: no fsync")
	g.Modified()
	require.NoError(t, g.SyncAll(fsync))
	require.NoError(t, g.SyncAll(fsync))
	assert.Equal(t, int32(1), n.Load(), "the second sync is covered by the first")
	assert.Equal(t, uint64(1), g.Synced())
}

// Callers arriving while a round is in flight share the next one: 8
// concurrent callers cost 2 fsyncs, and each returns only after a round that
// started after its modification.
func TestSyncGroupSharesRounds(t *testing.T) {
	var g SyncGroup
	release := make(chan struct{})
	started := make(chan struct{}, 16)
	var n atomic.Int32
	var coveredAtStart []uint64
	var mu sync.Mutex
	fsync := func() error {
		mu.Lock()
		coveredAtStart = append(coveredAtStart, g.Seq())
		mu.Unlock()
		n.Add(1)
		started <- struct{}{}
		<-release
		return nil
	}
	g.Modified()
	first := make(chan error, 1)
	go func() { first <- g.SyncAll(fsync) }()
	<-started // round 1 in flight, covering modification 1
	const callers = 8
	errs := make(chan error, callers)
	for i := 0; i < callers; i++ {
		g.Modified() // completed after round 1 started: round 1 does not cover it
		w := g.Seq()
		go func() { errs <- g.Sync(w, fsync) }()
	}
	close(release)
	require.NoError(t, <-first)
	for i := 0; i < callers; i++ {
		require.NoError(t, <-errs)
	}
	assert.Equal(t, int32(2), n.Load(), "one round in flight, then one for all the waiters")
	assert.Equal(t, uint64(1+callers), g.Synced())
	assert.Equal(t, []uint64{1, 1 + callers}, coveredAtStart)
}

// A failed round's error goes to every caller it covers; nobody gets
// success while the fsyncs fail, and a later caller runs a new round.
func TestSyncGroupErrorReachesEveryCoveredCaller(t *testing.T) {
	var g SyncGroup
	boom := errors.New("EIO")
	release := make(chan struct{})
	started := make(chan struct{}, 8)
	fail := func() error { started <- struct{}{}; <-release; return boom }
	g.Modified()
	g.Modified()
	res := make(chan error, 3)
	go func() { res <- g.SyncAll(fail) }()
	<-started
	for i := 0; i < 2; i++ {
		go func() { res <- g.Sync(2, fail) }()
	}
	close(release)
	for i := 0; i < 3; i++ {
		assert.ErrorIs(t, <-res, boom)
	}
	assert.Equal(t, uint64(0), g.Synced(), "a failed round covers nothing")
	var ran atomic.Bool
	require.NoError(t, g.SyncAll(func() error { ran.Store(true); return nil }))
	assert.True(t, ran.Load(), "after a failure the next caller syncs again")
	assert.Equal(t, uint64(2), g.Synced())
}
