package vfs

import (
	"sync"
	"sync/atomic"
)

// SyncGroup shares fdatasyncs of one file among concurrent callers (group
// commit). The owner counts every completed modification with Modified; a
// caller that needs the first w of them durable calls Sync(w, fsync):
//
//   - it returns at once when a completed sync already covers w;
//   - while a sync is in flight, later callers wait for it and then one of
//     them runs the next round for all of them, so N concurrent callers cost
//     at most two fdatasyncs, not N;
//   - a round covers the modifications completed when it started, and its
//     error goes to every caller it would have covered (never a success that
//     did not sync).
//
// The zero SyncGroup is ready. It is safe for concurrent use.
type SyncGroup struct {
	seq    atomic.Uint64 // completed modifications
	synced atomic.Uint64 // seq covered by the last successful sync
	rounds atomic.Uint64 // fsyncs run
	parked atomic.Int64  // callers waiting for the round in flight

	mu      sync.Mutex
	running *syncRound // the round in flight, if any
}

type syncRound struct {
	w    uint64
	err  error
	done chan struct{}
}

// Modified counts one completed modification (call after it completed).
func (g *SyncGroup) Modified() { g.seq.Add(1) }

// Seq is the number of modifications completed so far.
func (g *SyncGroup) Seq() uint64 { return g.seq.Load() }

// Synced is the number of modifications a completed sync covers.
func (g *SyncGroup) Synced() uint64 { return g.synced.Load() }

// Rounds is the number of fsyncs run so far.
func (g *SyncGroup) Rounds() uint64 { return g.rounds.Load() }

// Waiting is the number of callers waiting for the round in flight (they
// share the next round, or return with this one). Tests use it to reach the
// point where callers share a sync instead of hoping a sleep got them there.
func (g *SyncGroup) Waiting() int { return int(g.parked.Load()) }

// SyncAll makes every modification completed before the call durable.
func (g *SyncGroup) SyncAll(fsync func() error) error { return g.Sync(g.seq.Load(), fsync) }

// Sync makes the first w modifications durable with fsync, run by at most
// one caller at a time.
func (g *SyncGroup) Sync(w uint64, fsync func() error) error {
	for {
		if g.synced.Load() >= w {
			return nil
		}
		g.mu.Lock()
		if r := g.running; r != nil {
			g.parked.Add(1)
			g.mu.Unlock()
			<-r.done
			g.parked.Add(-1)
			if r.err != nil && r.w >= w {
				return r.err
			}
			continue // covered now, or the next round covers it
		}
		if g.synced.Load() >= w { // a round ended since the check above
			g.mu.Unlock()
			return nil
		}
		r := &syncRound{w: g.seq.Load(), done: make(chan struct{})}
		g.running = r
		g.mu.Unlock()
		r.err = fsync()
		g.rounds.Add(1)
		if r.err == nil {
			for {
				s := g.synced.Load()
				if s >= r.w || g.synced.CompareAndSwap(s, r.w) {
					break
				}
			}
		}
		g.mu.Lock()
		g.running = nil
		g.mu.Unlock()
		close(r.done)
		return r.err
	}
}
