package lfs

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/zonefleet/zonefleet/internal/goid"
)

// The lock order (doc.go, Concurrency) is checked at run time when
// lockRankChecks is on (tests: the concurrent stress test runs under it,
// and ZONEFLEET_LFS_LOCKRANK=1 turns it on for every test of the package):
// a goroutine that blocks on a ranked lock while holding one of the same
// or a higher rank panics, naming both. A check identifies the goroutine
// from its stack trace's header, which costs microseconds per lock: too
// slow to be on for every test by default. TryLock never blocks, so it is exempt
// from the order but recorded as held. Logs share a rank: a goroutine may
// hold several log locks (lane 0 of one log and a lane of another), so the
// order among them is not checked; inode locks are not ranked (parents
// before children, by inode number, is checked by their callers' order).
type lockRank int

const (
	rankNone   lockRank = iota
	rankGC              // FS.gc.mu
	rankCP              // FS.cp.mu
	rankRename          // FS.renameMu
	rankLog             // FS.lg.mu[i]
	rankTables          // FS.mu (the leaf)
)

var rankNames = [...]string{"none", "gc", "checkpoint", "rename", "log", "tables"}

func (r lockRank) String() string { return rankNames[r] }

// lockRankChecks turns the checker on (tests).
var lockRankChecks atomic.Bool

// setLockRankChecks turns the checker on or off and forgets every hold
// recorded (a lock taken with the checker off and released with it on, or
// the reverse, must not be remembered).
func setLockRankChecks(on bool) {
	held.Lock()
	held.by = nil
	lockRankChecks.Store(on)
	held.Unlock()
}

// rankedMutex is a sync.Mutex with a rank.
type rankedMutex struct {
	mu   sync.Mutex
	rank lockRank
}

func (m *rankedMutex) Lock() {
	acquire(m, m.rank, true)
	m.mu.Lock()
}

func (m *rankedMutex) TryLock() bool {
	if !m.mu.TryLock() {
		return false
	}
	acquire(m, m.rank, false)
	return true
}

func (m *rankedMutex) Unlock() {
	release(m)
	m.mu.Unlock()
}

// rankedRWMutex is a sync.RWMutex with a rank.
type rankedRWMutex struct {
	mu   sync.RWMutex
	rank lockRank
}

func (m *rankedRWMutex) Lock() {
	acquire(m, m.rank, true)
	m.mu.Lock()
}

func (m *rankedRWMutex) TryLock() bool {
	if !m.mu.TryLock() {
		return false
	}
	acquire(m, m.rank, false)
	return true
}

func (m *rankedRWMutex) Unlock() {
	release(m)
	m.mu.Unlock()
}

func (m *rankedRWMutex) RLock() {
	acquire(m, m.rank, true)
	m.mu.RLock()
}

func (m *rankedRWMutex) RUnlock() {
	release(m)
	m.mu.RUnlock()
}

type heldLock struct {
	lock any
	rank lockRank
}

// held is every goroutine's ranked locks, by goroutine id (checks on).
var held struct {
	sync.Mutex
	by map[uint64][]heldLock
}

// acquire records that the calling goroutine takes lock; blocking, it
// first checks the order.
func acquire(lock any, r lockRank, blocking bool) {
	if r == rankNone || !lockRankChecks.Load() {
		return
	}
	g := goid.Get()
	held.Lock()
	defer held.Unlock()
	if held.by == nil {
		held.by = map[uint64][]heldLock{}
	}
	hs := held.by[g]
	if blocking {
		for _, h := range hs {
			if h.rank > r || h.rank == r && r != rankLog {
				panic(fmt.Sprintf("lfs: lock order: goroutine %d takes the %s lock holding the %s lock", g, r, h.rank))
			}
		}
	}
	held.by[g] = append(hs, heldLock{lock, r})
}

// release forgets the calling goroutine's latest hold of lock (one taken
// on another goroutine is forgotten there).
func release(lock any) {
	if !lockRankChecks.Load() {
		return
	}
	g := goid.Get()
	held.Lock()
	defer held.Unlock()
	if forget(g, lock) {
		return
	}
	for o := range held.by {
		if forget(o, lock) {
			return
		}
	}
}

func forget(g uint64, lock any) bool {
	hs := held.by[g]
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].lock == lock {
			hs = append(hs[:i], hs[i+1:]...)
			if len(hs) == 0 {
				delete(held.by, g)
			} else {
				held.by[g] = hs
			}
			return true
		}
	}
	return false
}

// setRanks ranks the FS's ordered locks.
func (fs *FS) setRanks() {
	fs.gc.mu.rank = rankGC
	fs.cp.mu.rank = rankCP
	fs.renameMu.rank = rankRename
	for i := range fs.lg.mu {
		fs.lg.mu[i].rank = rankLog
	}
	fs.mu.rank = rankTables
}
