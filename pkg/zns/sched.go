package zns

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
)

// Long operations (zone_compaction, the plugging that ends threaded logging)
// are not booked on the flash model all at once: that would reserve their
// chips up to the operation's end and every user request on those chips
// would queue behind it (the convoy ZNS+ §3.2.1 avoids by scheduling normal
// requests between the pieces of a compaction). Instead the data moves at
// submission (the bytes are where they belong at once) and a job replays the
// operation's flash work on the clock, one destination chunk (a piece) at a
// time per destination chip:
//
//   - The pieces of one destination chip form a lane, in destination order
//     (a flash block is programmed in page order). All lanes start at the
//     submission time and run in parallel, like the per-chip queues of the
//     SSD's firmware.
//   - A step of a lane at time t books, in this order: the DMA into the chip
//     of the previous piece's data (read in the previous step), the reads of
//     the next piece (array read + DMA out, on the source chips), the program
//     of the previous piece; or, for a copyback piece, the copyback. The next
//     step is at the end of everything booked. Reading the next chunk before
//     programming the previous one keeps a chip doing read-and-program
//     copies busy t_read + t_prog per chunk (the DMAs overlap), so a
//     chip-bound compaction costs exactly the chip time of the model.
//   - A step is booked when the clock reaches its time (clock.AfterFunc), so
//     a user request submitted during the compaction is booked between two
//     steps and waits at most for the step in progress (one chunk), not for
//     the whole compaction. On the virtual clock callbacks run in time order,
//     so the interleaving is deterministic.
//
// A job ends when its last step is booked; its end is the latest booking.
// WaitCompaction drives the virtual clock to it; under NoWait (nobody drives
// the clock) and on Close the remaining steps are booked at once, in the
// order the clock would have run them.

// pread is one flash page read of a copy: nblocks of a page on chip.
type pread struct{ chip, n int }

// piece is the flash work of one destination chunk: a copyback on chip dst,
// or reads (from any chips) and a program on chip dst.
type piece struct {
	cb    bool
	dst   int
	reads []pread
}

// bookPiece books p at once from t (short copies inside a host request:
// on-demand plugging). Returns its end.
func (d *Device) bookPiece(t time.Duration, p piece) time.Duration {
	if p.cb {
		return d.model.Copyback(t, p.dst)
	}
	x := t
	for _, r := range p.reads {
		x = max(x, d.model.Read(t, r.chip, r.n))
	}
	return d.model.Program(x, p.dst)
}

type lane struct {
	chip   int
	pieces []piece
	next   int           // next piece to start
	pend   bool          // a piece read in the previous step waits for its program
	pendX  time.Duration // when its data is at the controller
	at     time.Duration // time of the next step
	seq    uint64        // invalidates a scheduled callback
	fin    bool
}

type job struct {
	d      *Device
	mu     sync.Mutex
	lanes  []*lane
	left   int
	end    time.Duration
	done   chan struct{}
	kick   chan struct{} // cap 1: a step ran
	finish func(end time.Duration)
}

// startJob replays pieces on the clock from t0; finish (may be nil) runs
// once with the end of the last booking, without the job's lock. With no
// model the job is done at once.
func (d *Device) startJob(t0 time.Duration, pieces []piece, finish func(time.Duration)) *job {
	j := &job{d: d, done: make(chan struct{}), kick: make(chan struct{}, 1), finish: finish, end: t0}
	byChip := map[int]*lane{}
	for _, p := range pieces {
		l := byChip[p.dst]
		if l == nil {
			l = &lane{chip: p.dst, at: t0}
			byChip[p.dst] = l
			j.lanes = append(j.lanes, l)
		}
		l.pieces = append(l.pieces, p)
	}
	sort.Slice(j.lanes, func(a, b int) bool { return j.lanes[a].chip < j.lanes[b].chip })
	j.left = len(j.lanes)
	if d.model == nil || j.left == 0 {
		j.complete()
		return j
	}
	d.cmu.Lock()
	d.jobs[j] = struct{}{}
	d.cmu.Unlock()
	// The first steps are due now: book them here (deterministic on the
	// virtual clock, and no callback runs while the caller holds locks).
	j.mu.Lock()
	var sched []*lane
	for _, l := range j.lanes {
		if j.stepLocked(l) {
			sched = append(sched, l)
		}
	}
	last := j.left == 0
	j.mu.Unlock()
	if last {
		j.complete()
		return j
	}
	for _, l := range sched {
		j.schedule(l)
	}
	return j
}

// stepLocked runs one step of l at l.at and reports whether l has more.
func (j *job) stepLocked(l *lane) bool {
	m := j.d.model
	t := l.at
	next := t
	progAt := time.Duration(-1)
	if l.pend {
		progAt = m.Transfer(l.pendX, l.chip, j.d.g.ChunkBlocks) // DMA in
		next = max(next, progAt)
	}
	var p *piece
	if l.next < len(l.pieces) {
		p = &l.pieces[l.next]
		l.next++
	}
	newPend, newX := false, t
	if p != nil && !p.cb {
		for _, r := range p.reads {
			newX = max(newX, m.Read(t, r.chip, r.n))
		}
		newPend = true
		next = max(next, newX)
	}
	if l.pend {
		next = max(next, m.ProgramArray(progAt, l.chip))
		l.pend = false
	}
	if p != nil && p.cb {
		next = max(next, m.Copyback(t, l.chip))
	}
	if newPend {
		l.pend, l.pendX = true, newX
	}
	j.end = max(j.end, next)
	l.at = next
	l.seq++
	if !l.pend && l.next == len(l.pieces) {
		l.fin = true
		j.left--
		return false
	}
	return true
}

// schedule arranges l's next step at l.at on the clock. Called without j.mu.
func (j *job) schedule(l *lane) {
	j.mu.Lock()
	at, seq := l.at, l.seq
	j.mu.Unlock()
	j.d.clk.AfterFunc(at, func() {
		j.mu.Lock()
		if l.fin || l.seq != seq {
			j.mu.Unlock()
			return
		}
		more := j.stepLocked(l)
		last := j.left == 0
		j.mu.Unlock()
		select {
		case j.kick <- struct{}{}:
		default:
		}
		if last {
			j.complete()
		} else if more {
			j.schedule(l)
		}
	})
}

// complete runs finish and closes done (once: only the step that took left
// to zero, or startJob, calls it).
func (j *job) complete() {
	if j.d.model != nil {
		j.d.cmu.Lock()
		delete(j.d.jobs, j)
		j.d.cmu.Unlock()
	}
	if j.finish != nil {
		j.finish(j.end)
	}
	close(j.done)
}

// flush books every remaining step at once, earliest first (the order the
// clock would run them), and completes the job.
func (j *job) flush() {
	j.mu.Lock()
	if j.left == 0 {
		j.mu.Unlock()
		<-j.done
		return
	}
	for j.left > 0 {
		var best *lane
		for _, l := range j.lanes {
			if !l.fin && (best == nil || l.at < best.at) {
				best = l
			}
		}
		j.stepLocked(best)
	}
	j.mu.Unlock()
	j.complete()
}

// nextAt is the time of the earliest pending step.
func (j *job) nextAt() (time.Duration, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var t time.Duration
	ok := false
	for _, l := range j.lanes {
		if !l.fin && (!ok || l.at < t) {
			t, ok = l.at, true
		}
	}
	return t, ok
}

// wait waits until the job is done: on the virtual clock it drives the clock
// from step to step; under NoWait it books the rest at once.
func (j *job) wait(ctx context.Context) error {
	d := j.d
	if d.model != nil && ctx.Value(noWaitKey{}) != nil {
		j.flush()
		return nil
	}
	if d.model != nil && d.clk.Kind() == clock.KindVirtual {
		for {
			select {
			case <-j.done:
				return nil
			default:
			}
			t, ok := j.nextAt()
			if ok && t > d.clk.Now() {
				if err := d.clk.WaitUntil(ctx, t); err != nil {
					return err
				}
				continue
			}
			// a step is due and being run by the clock's driver
			select {
			case <-j.done:
				return nil
			case <-j.kick:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	select {
	case <-j.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flushJobs books what every running job has left (Close).
func (d *Device) flushJobs() {
	d.cmu.Lock()
	js := make([]*job, 0, len(d.jobs))
	for j := range d.jobs {
		js = append(js, j)
	}
	d.cmu.Unlock()
	for _, j := range js {
		j.flush()
	}
}
