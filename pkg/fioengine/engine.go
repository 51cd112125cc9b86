package fioengine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Kind is an I/O's direction, as fio's enum fio_ddir numbers them.
type Kind int

// I/O kinds.
const (
	KindRead  Kind = 0
	KindWrite Kind = 1
	KindTrim  Kind = 2 // a zone reset of every zone the range covers
	KindSync  Kind = 3 // fsync and fdatasync
	KindDSync Kind = 4
)

// Op is one I/O of fio: Tag names it to the caller (fio's io_u).
type Op struct {
	Tag  uintptr
	Kind Kind
	Off  uint64
	Buf  []byte // reads fill it, writes send it; C memory of fio's, never kept after completion
	Len  uint64 // trims
}

// Completion is the outcome of an Op: Errno 0 or a positive errno.
type Completion struct {
	Tag   uintptr
	Errno int
	Err   error // the cause, for messages
	Op    Op    // the Op it completes (Buf nil)
}

// Queue runs one fio thread's I/O against a target. Submit starts an Op
// and returns at once; its completion is collected with Wait. Reads,
// trims and syncs run concurrently on worker goroutines; the writes
// of one zone run one at a time in submission order (a zoned drive takes a
// zone's writes only at its write pointer, so they must reach it in the
// order fio issued them: what mq-deadline's zone write locking does for a
// kernel ZNS device), on one goroutine per zone with writes queued. Do runs
// an Op on the caller's goroutine (fio's synchronous path, iodepth=1).
type Queue struct {
	t      Target
	geo    Geometry
	append bool
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	ready  []Completion
	notify chan struct{} // a completion was added (capacity 1)
	zones  map[uint64]*zoneWrites
	busy   int // submitted, not yet completed
	done   func(Completion)

	// The workers that run reads, trims and syncs: started on demand, one
	// for each such Op in flight at the deepest point so far (so at most
	// fio's iodepth), and kept until Close. A worker's stack has grown to
	// what a gRPC call needs by its second Op: a goroutine per Op would
	// grow (copy) a fresh stack on every one.
	work    chan Op
	workers int // started
	running int // reads, trims and syncs submitted and not completed
}

type zoneWrites struct{ ops []Op }

// NewQueue returns a queue on t; with zoneAppend, writes go as zone
// appends (Options.ZoneAppend).
func NewQueue(t Target, zoneAppend bool) *Queue {
	return NewQueueFunc(t, zoneAppend, nil)
}

// NewQueueFunc is NewQueue whose completions go to done, called on the
// goroutine that ran the Op, instead of to Wait. The engine hands them to
// fio's thread this way (a C completion queue it sleeps on) when several
// I/Os are in flight: a goroutine that a C thread runs is locked to it,
// so waking it inside Go for each completion takes a scheduler hand-off
// more than waking the thread itself. A synchronous I/O, whose caller
// would wait for its completion anyway, runs with Do on the caller's
// thread instead: one hand-off (the reply's) instead of two (starting a
// goroutine, handing back its completion).
func NewQueueFunc(t Target, zoneAppend bool, done func(Completion)) *Queue {
	q := &Queue{t: t, geo: t.Geometry(), append: zoneAppend, notify: make(chan struct{}, 1), zones: map[uint64]*zoneWrites{}, done: done,
		work: make(chan Op, workBuffer)}
	q.ctx, q.cancel = context.WithCancel(context.Background())
	return q
}

// Close cancels what is in flight and waits for nothing: the completions of
// cancelled Ops are dropped with the queue.
func (q *Queue) Close() { q.cancel() }

// Do runs op on the caller's goroutine.
func (q *Queue) Do(op Op) Completion {
	return q.completion(op, q.run(op))
}

// Submit starts op.
func (q *Queue) Submit(op Op) {
	q.mu.Lock()
	if q.done == nil {
		q.busy++
	}
	if op.Kind != KindWrite {
		q.running++
		start := q.running > q.workers
		if start {
			q.workers++
		}
		q.mu.Unlock()
		if start {
			go q.worker()
		}
		q.work <- op // (blocks only beyond workBuffer Ops waiting: a worker is free soon)
		return
	}
	z := op.Off / q.geo.ZoneSize
	zw := q.zones[z]
	if zw != nil { // the zone's writer is running: it takes this one after the others
		zw.ops = append(zw.ops, op)
		q.mu.Unlock()
		return
	}
	zw = &zoneWrites{}
	q.zones[z] = zw
	q.mu.Unlock()
	go q.writeZone(z, zw, op)
}

// workBuffer is how many Ops the work channel holds for the workers
// before Submit waits for one to take them.
const workBuffer = 256

// worker runs reads, trims and syncs until the queue closes.
func (q *Queue) worker() {
	for {
		select {
		case op := <-q.work:
			q.complete(op)
		case <-q.ctx.Done():
			return
		}
	}
}

// writeZone runs the writes of zone z in order, first op, until none is left.
func (q *Queue) writeZone(z uint64, zw *zoneWrites, op Op) {
	for {
		q.complete(op)
		q.mu.Lock()
		if len(zw.ops) == 0 {
			delete(q.zones, z)
			q.mu.Unlock()
			return
		}
		op = zw.ops[0]
		zw.ops = zw.ops[1:]
		q.mu.Unlock()
	}
}

func (q *Queue) completion(op Op, err error) Completion {
	op.Len, op.Buf = max(op.Len, uint64(len(op.Buf))), nil
	return Completion{Tag: op.Tag, Errno: Errno(err), Err: err, Op: op}
}

func (q *Queue) complete(op Op) {
	c := q.completion(op, q.run(op))
	if op.Kind != KindWrite { // (before the completion: fio may submit the next Op at once)
		q.mu.Lock()
		q.running--
		q.mu.Unlock()
	}
	if q.done != nil {
		q.done(c)
		return
	}
	q.mu.Lock()
	q.ready = append(q.ready, c)
	q.busy--
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// Wait returns between min and max completions: it waits until min are
// there (or timeout passes; timeout < 0 waits as long as it takes), then
// takes what is ready, up to max.
func (q *Queue) Wait(min, max int, timeout time.Duration) []Completion {
	var deadline <-chan time.Time
	if timeout >= 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	for {
		q.mu.Lock()
		n := len(q.ready)
		if n >= min || n > 0 && q.busy == 0 {
			n = minInt(n, max)
			out := append([]Completion(nil), q.ready[:n]...)
			q.ready = append(q.ready[:0], q.ready[n:]...)
			q.mu.Unlock()
			return out
		}
		idle := q.busy == 0
		q.mu.Unlock()
		if idle { // nothing in flight: nothing will come
			return nil
		}
		select {
		case <-q.notify:
		case <-deadline:
			q.mu.Lock()
			n := minInt(len(q.ready), max)
			out := append([]Completion(nil), q.ready[:n]...)
			q.ready = append(q.ready[:0], q.ready[n:]...)
			q.mu.Unlock()
			return out
		}
	}
}

func minInt(a, b int) int {
	if a < b {
		return a
	}
	return b
}

func (q *Queue) run(op Op) error {
	ctx := q.ctx
	switch op.Kind {
	case KindRead:
		return q.t.Read(ctx, op.Off, op.Buf)
	case KindWrite:
		if q.append {
			return q.t.Append(ctx, op.Off, op.Buf)
		}
		return q.t.Write(ctx, op.Off, op.Buf)
	case KindTrim:
		return q.trim(ctx, op.Off, op.Len)
	case KindSync, KindDSync:
		return q.t.Flush(ctx)
	}
	return &zerr.InvalidArgumentError{Field: "ddir", Reason: fmt.Sprintf("%d: not an I/O direction the engine serves", op.Kind)}
}

// trim resets the zones of [off, off+n): fio's trims of a zoned target
// and its reset_wp.
func (q *Queue) trim(ctx context.Context, off, n uint64) error {
	return ResetRange(ctx, q.t, off, n)
}

// ResetRange resets every zone of [off, off+n), which must be whole zones.
func ResetRange(ctx context.Context, t Target, off, n uint64) error {
	g := t.Geometry()
	if off%g.ZoneSize != 0 || n%g.ZoneSize != 0 || n == 0 {
		return &zerr.InvalidArgumentError{Field: "trim", Reason: fmt.Sprintf("offset %d length %d: a trim resets whole zones of %d bytes", off, n, g.ZoneSize)}
	}
	if off+n > g.Size() {
		return &zerr.OutOfRangeError{LBA: off / g.BlockSize, Count: n / g.BlockSize, Limit: g.Size() / g.BlockSize}
	}
	for z := off / g.ZoneSize; z < (off+n)/g.ZoneSize; z++ {
		if err := t.Reset(ctx, z); err != nil {
			return err
		}
	}
	return nil
}

// Errno is the errno fio reports for err, the one a Linux zoned block
// device gives for the same condition: EIO for a write off the write
// pointer or into a full zone (as the kernel's BLK_STS_IOERR), ETOOMANYREFS
// and EOVERFLOW for the open and active zone limits (BLK_STS_ZONE_OPEN_RESOURCE,
// BLK_STS_ZONE_ACTIVE_RESOURCE), EINVAL for a bad request, EACCES for a
// zone of someone else, EAGAIN for a cluster that does not answer.
func Errno(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, zerr.ErrWritePointer), errors.Is(err, zerr.ErrZoneFull), errors.Is(err, zerr.ErrZoneState),
		errors.Is(err, zerr.ErrCorrupt):
		return int(syscall.EIO)
	case errors.Is(err, zerr.ErrTooManyOpen):
		return int(syscall.ETOOMANYREFS)
	case errors.Is(err, zerr.ErrTooManyActive), errors.Is(err, zerr.ErrNoResources):
		return int(syscall.EOVERFLOW)
	case errors.Is(err, zerr.ErrInvalidArgument), errors.Is(err, zerr.ErrOutOfRange):
		return int(syscall.EINVAL)
	case errors.Is(err, zerr.ErrNotOwner), errors.Is(err, zerr.ErrUnauthenticated):
		return int(syscall.EACCES)
	case errors.Is(err, zerr.ErrNotFound):
		return int(syscall.ENOENT)
	case errors.Is(err, zerr.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return int(syscall.EAGAIN)
	case errors.Is(err, context.Canceled), errors.Is(err, zerr.ErrClosed):
		return int(syscall.ECANCELED)
	}
	return int(syscall.EIO)
}
