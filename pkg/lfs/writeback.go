package lfs

import (
	"context"
	"sync"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
)

// wbScheduler is the write-back and admission component: it decides when
// dirty pages go to the drives and when a writer may add more.
//
//   - the budget (wbBudget): past it the write-back goroutines write back,
//     past twice it writers wait;
//   - admission tickets (admit, admitted): writers are let in, in arrival
//     order, while the dirty pages plus those of admitted writes stay within
//     twice the budget;
//   - flights: write-backs copied and not yet committed (prepareFlush,
//     commitFlush in file.go), their pages counted apart from the dirty
//     pages that are still to send;
//   - the flusher: one goroutine per write lane running wbOne while a batch
//     is waiting (none on the virtual clock, where writers write back
//     themselves, reproducibly).
//
// Its counters are guarded by FS.mu (they are compared with the dirty-page
// count, which is too), and flight is a condition on FS.mu; it adds no lock
// of its own. The flusher's goroutines take the checkpoint lock shared, then
// FS.mu, as every writer does (doc.go).
type wbScheduler struct {
	flight     *sync.Cond      // on FS.mu: a write-back in flight committed, an admission, an admitted write done
	pages      int             // dirty pages in flight (a write-back copied them and has not committed)
	flights    int             // write-backs in flight (all inodes)
	admitting  int             // writes admitted to the dirty budget and not yet done (admit)
	admitPages int             // pages of the admitted writes
	admitHead  uint64          // the admission ticket whose turn it is
	admitTail  uint64          // the next ticket handed out
	admitGone  map[uint64]bool // tickets of writers that failed before their turn
	kick       chan struct{}   // wakes the write-back goroutines (nil: none, writers flush)
	stop       chan struct{}
	stopOnce   sync.Once
}

// ticket hands out the next admission ticket.
func (w *wbScheduler) ticket() uint64 {
	t := w.admitTail
	w.admitTail++
	return t
}

// leave ends ticket t: the queue moves past it (and the tickets of writers
// that gave up) when it is the head, else it is marked gone. It reports
// whether the head moved (the waiting writers must be woken).
func (w *wbScheduler) leave(t uint64) bool {
	if t != w.admitHead {
		w.admitGone[t] = true // (an error before its turn)
		return false
	}
	w.admitHead++
	for w.admitGone[w.admitHead] {
		delete(w.admitGone, w.admitHead)
		w.admitHead++
	}
	return true
}

// fits reports whether the head writer's pages fit: the dirty pages, the
// admitted writes' pages and its own (at most the budget) within twice the
// budget, or nothing admitted and the dirty pages within twice the budget.
func (w *wbScheduler) fits(dirty, pages, soft int) bool {
	return dirty+w.admitPages+min(pages, soft) <= 2*soft || w.admitting == 0 && dirty <= 2*soft
}

// startFlusher starts the write-back goroutines, one per write lane: kicked
// when a batch of dirty pages is not yet in flight (or the dirty pages pass
// the budget), each writes back one batch at a time (wbOne) while there is
// one, so up to one write-back per lane is in flight while writers go on
// copying (lanes.go). Writers do not wait for the drives unless the dirty
// pages pass twice the budget.
//
// Not on the virtual clock: there a run must be reproducible, so writers
// write back themselves, in the operation that crosses the budget.
func (fs *FS) startFlusher() {
	if fs.clk.Kind() == clock.KindVirtual {
		return
	}
	fs.wb.kick = make(chan struct{}, fs.lg.lanes)
	fs.wb.stop = make(chan struct{})
	for range fs.lg.lanes {
		fs.bg.wg.Add(1)
		go func() {
			defer fs.bg.wg.Done()
			for {
				select {
				case <-fs.wb.stop:
					return
				case <-fs.wb.kick:
				}
				for fs.wbOne(context.Background()) {
				}
			}
		}()
	}
}

// wbBudget is the dirty-page budget in blocks (past twice it writers are
// throttled) and the write-back batch: a quarter of the page cache, at most
// one zone per write lane; a batch is at most one zone and at most
// maxBatchBytes.
//
// Twice the budget stays two segments below the GC reserve, so that the
// dirty pages always fit in the reserved segments: fsync and the checkpoint
// write them back under the checkpoint lock, where no GC can run.
func (fs *FS) wbBudget() (soft, batch int) {
	zb := int(fs.geo.ZoneBlocks)
	soft = max(1, min(fs.opts.CacheBlocks/4, fs.lg.lanes*zb, max(1, fs.gcReserve()-2)*zb/2))
	return soft, min(soft, zb, max(1, maxBatchBytes/fs.bs))
}

// maxBatchBytes bounds one write-back batch, written as one Volume.Write
// (its pages as they are, VectorWriter). When batches were gathered into
// one buffer, whole 32 MiB v-zones as batches left the copy unpipelined and
// every buffer fresh from the kernel (8192 page faults each, which cost
// more than the copy), so 4 MiB was chosen; without the copy
// 16 MiB measures the same (BenchmarkSeqWriteCluster, 3 runs
// each: 315–324 against 292–333 MiB/s) and 1 MiB worse (231–242: fsync
// waits 1.6–1.8 s instead of 0.6 for many small writes).
const maxBatchBytes = 4 << 20

// kickWriteBack wakes a write-back goroutine when a batch of dirty pages is
// not yet in flight or the dirty pages pass the budget (fs.mu held).
func (fs *FS) kickWriteBack() {
	soft, batch := fs.wbBudget()
	if fs.wb.kick != nil && (fs.ic.dirtyPages-fs.wb.pages >= batch || fs.ic.dirtyPages > soft) {
		select {
		case fs.wb.kick <- struct{}{}:
		default:
		}
	}
}

// admit waits, with nothing held, until a write of pages pages fits in the
// dirty budget: the dirty pages plus those of writes admitted and still
// copying stay within twice the budget (a write larger than the budget
// counts as the budget, and one goes on when no other is admitted, so that
// large writes are never refused). Writers are admitted in arrival order
// (tickets), so a large write is not starved by a stream of small ones. The
// writer at the head waits for a write-back in flight to commit or an
// admitted write to end, and writes one batch back itself when neither is
// running (and goes on when it finds nothing it can write back). Counting
// admitted writes bounds the dirty pages however many writers run at once
// (the kernel's write-back cache sends up to 64 WRITEs concurrently); the
// writer calls admitted when its pages are dirty. On the virtual clock (no
// write-back goroutines) writers write back in begin.
func (fs *FS) admit(ctx context.Context, pages int) (err error) {
	if fs.wb.kick == nil {
		return nil
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	t := fs.wb.ticket()
	var t0 time.Duration
	waited := false
	defer func() {
		if waited {
			d := fs.since(t0)
			fs.stats.WriteThrottled += d
			fs.m.throttled.Add(d.Seconds())
		}
		if err == nil {
			fs.wb.admitting++
			fs.wb.admitPages += pages
		}
		if fs.wb.leave(t) {
			fs.wb.flight.Broadcast()
		}
	}()
	for {
		if fs.closed || fs.failed != nil {
			return fs.refuse()
		}
		soft, _ := fs.wbBudget()
		if t == fs.wb.admitHead && fs.wb.fits(fs.ic.dirtyPages, pages, soft) {
			return nil
		}
		if !waited {
			t0, waited = fs.now(), true
		}
		if t != fs.wb.admitHead {
			fs.wb.flight.Wait() // an admission, a commit or an admitted write done
			continue
		}
		fs.kickWriteBack()
		if fs.wb.flights > 0 || fs.wb.admitPages > 0 && fs.ic.dirtyPages <= 2*soft {
			fs.wb.flight.Wait()
			continue
		}
		fs.mu.Unlock()
		if err := ctx.Err(); err != nil {
			fs.mu.Lock()
			return err
		}
		wrote := fs.wbOne(ctx)
		fs.mu.Lock()
		if !wrote && fs.wb.flights == 0 && !fs.closed && fs.failed == nil {
			// nothing this writer could write back (the dirty inodes
			// are busy: their operations end by themselves): go on
			return nil
		}
	}
}

// admitted ends what admit let in: the write's pages are dirty (counted in
// fs.dirtyPages) or the write failed.
func (fs *FS) admitted(pages int) {
	if fs.wb.kick == nil {
		return
	}
	fs.mu.Lock()
	fs.wb.admitting--
	fs.wb.admitPages -= pages
	fs.wb.flight.Broadcast()
	fs.mu.Unlock()
}

// wbOne is one background write-back: the first batch of dirty pages not in
// flight of the lowest-numbered inode that has any, copied under its lock,
// written with no inode lock (a lane of the log, the checkpoint lock shared:
// checkpoints get in between two batches), committed under its lock again.
// It reports whether it wrote one and another may follow (a batch is
// waiting, or the dirty pages are past the budget).
//
// Like a writer's operation it first keeps the free segments at the GC
// reserve (housekeep: foreground GC, or the checkpoint that frees emptied
// segments): the batch may open a segment, and the write-backs, not the
// writers, are what consume segments during a long sequential write. A
// write-back that found no free segment would otherwise fail with ENOSPC
// while the segments of an overwritten file wait for a checkpoint.
func (fs *FS) wbOne(ctx context.Context) bool {
	if err := fs.housekeep(ctx); err != nil {
		return false
	}
	fs.cp.mu.RLock()
	defer fs.cp.mu.RUnlock()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed || fs.failed != nil {
		return false
	}
	soft, batch := fs.wbBudget()
	if fs.ic.dirtyPages-fs.wb.pages < batch && fs.ic.dirtyPages <= soft {
		return false
	}
	for ino, ok := fs.ic.dirty.next(0); ok; ino, ok = fs.ic.dirty.next(ino + 1) {
		in := fs.ic.inodes[ino]
		if in == nil || !fs.lockIn(in) {
			continue
		}
		wrote, err := fs.writeBackLocked(ctx, in, batch)
		if !wrote {
			continue
		}
		if err != nil {
			return false
		}
		fs.stats.WriteBacks++
		return true
	}
	return false
}
