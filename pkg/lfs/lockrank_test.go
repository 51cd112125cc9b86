package lfs

import (
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// ZONEFLEET_LFS_LOCKRANK=1 runs every test of the package with the
// lock-order checker on.
func init() {
	if os.Getenv("ZONEFLEET_LFS_LOCKRANK") == "1" {
		setLockRankChecks(true)
	}
}

// CheckLockOrder turns the lock-order checker on for the rest of t.
func CheckLockOrder(t testing.TB) {
	was := lockRankChecks.Load()
	setLockRankChecks(true)
	t.Cleanup(func() { setLockRankChecks(was) })
}

// TestLockRankOrder: taking the locks in their order passes; blocking on a
// lock ranked at or above one held panics; TryLock is exempt; log locks may
// be held together.
func TestLockRankOrder(t *testing.T) {
	CheckLockOrder(t)
	fs := &FS{}
	fs.setRanks()

	fs.gc.mu.Lock()
	fs.cp.mu.RLock()
	fs.renameMu.Lock()
	fs.lg.mu[0].Lock()
	fs.lg.mu[1].Lock()
	fs.mu.Lock()
	fs.mu.Unlock()
	fs.lg.mu[1].Unlock()
	fs.lg.mu[0].Unlock()
	fs.renameMu.Unlock()
	fs.cp.mu.RUnlock()
	fs.gc.mu.Unlock()

	for _, tc := range []struct {
		name         string
		first, later func()
		unlock       func()
	}{
		{"log under tables", fs.mu.Lock, fs.lg.mu[0].Lock, fs.mu.Unlock},
		{"checkpoint under log", fs.lg.mu[2].Lock, fs.cp.mu.RLock, fs.lg.mu[2].Unlock},
		{"gc under checkpoint", fs.cp.mu.Lock, fs.gc.mu.Lock, fs.cp.mu.Unlock},
		{"tables twice", fs.mu.Lock, fs.mu.Lock, fs.mu.Unlock},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.first()
			require.Contains(t, panicMessage(tc.later), "lfs: lock order")
			tc.unlock()
		})
	}

	// TryLock may go against the order (it never waits)
	fs.mu.Lock()
	require.True(t, fs.lg.mu[3].TryLock())
	fs.lg.mu[3].Unlock()
	fs.mu.Unlock()

	// a lock released on another goroutine is forgotten for its taker
	fs.lg.mu[4].Lock()
	var wg sync.WaitGroup
	wg.Go(fs.lg.mu[4].Unlock)
	wg.Wait()
	fs.cp.mu.RLock() // would panic if log 4 were still recorded as held
	fs.cp.mu.RUnlock()
}

// panicMessage runs f and returns what it panicked with ("" if nothing).
func panicMessage(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg, _ = r.(string)
		}
	}()
	f()
	return ""
}
