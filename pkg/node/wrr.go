package node

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
)

// WRR shares a device's request slots among namespaces by weighted round
// robin (eZNS §4.5.1: per-namespace queues, round-robin across namespaces).
// At most Slots requests run at once; when a slot frees, the next namespace
// in turn with a waiting request gets it, and a namespace of weight w may
// take w slots in a row before the turn moves on. A namespace alone on the
// device is never held back.
//
// Concurrency: every request of a device takes a slot and gives it back,
// so the common case takes no lock: while nobody waits, Acquire takes a
// free slot and Release returns it with a compare-and-swap on running.
// The queues, the turn order and the weights are under mu; waiting (the
// queued requests) is changed only under mu and read without it. A
// request queues under mu and then dispatches; Release decrements running
// and then dispatches under mu if waiting is non-zero. Both orders are
// sequentially consistent atomics, so either the queued request's
// dispatch sees the freed slot or the Release sees the queued request: no
// slot stays free while a request waits. The lock-free path is taken only
// when nobody is queued, so it never overtakes a queued request.
type WRR struct {
	mu      sync.Mutex
	slots   int64
	running atomic.Int64
	waiting atomic.Int64 // queued requests (changed under mu)
	queues  map[string]*nsQueue
	order   []string // namespaces with waiters, in turn order
	cursor  int
	credit  int // grants left for order[cursor] in this turn
	weights map[string]int
}

type nsQueue struct {
	waiters []chan struct{}
}

// NewWRR makes a scheduler with slots concurrent requests (at least 1).
func NewWRR(slots int) *WRR {
	if slots < 1 {
		slots = 1
	}
	return &WRR{slots: int64(slots), queues: map[string]*nsQueue{}, weights: map[string]int{}}
}

// SetWeight sets a namespace's weight (values below 1 mean 1).
func (w *WRR) SetWeight(ns string, weight int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if weight < 1 {
		weight = 1
	}
	w.weights[ns] = weight
}

// Weight returns a namespace's weight.
func (w *WRR) Weight(ns string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.weight(ns)
}

func (w *WRR) weight(ns string) int {
	if v, ok := w.weights[ns]; ok {
		return v
	}
	return 1
}

// Acquire waits for a slot for namespace ns. Release must follow a nil return.
func (w *WRR) Acquire(ctx context.Context, ns string) error {
	if w.takeIdle() {
		return nil
	}
	w.mu.Lock()
	if w.takeIdle() {
		w.mu.Unlock()
		return nil
	}
	ch := w.enqueue(ns)
	w.mu.Unlock()

	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		w.mu.Lock()
		defer w.mu.Unlock()
		select {
		case <-ch: // granted meanwhile: hand the slot on
			w.running.Add(-1)
			w.dispatch()
		default:
			w.remove(ns, ch)
		}
		return ctx.Err()
	}
}

// takeIdle takes a free slot if no request is queued.
func (w *WRR) takeIdle() bool {
	for w.waiting.Load() == 0 {
		r := w.running.Load()
		if r >= w.slots {
			return false
		}
		if w.running.CompareAndSwap(r, r+1) {
			return true
		}
	}
	return false
}

// enqueue queues a request of ns and dispatches. Called with w.mu held.
func (w *WRR) enqueue(ns string) chan struct{} {
	ch := make(chan struct{})
	q, ok := w.queues[ns]
	if !ok {
		q = &nsQueue{}
		w.queues[ns] = q
	}
	if len(q.waiters) == 0 {
		w.order = append(w.order, ns)
	}
	q.waiters = append(q.waiters, ch)
	w.waiting.Add(1)
	w.dispatch()
	return ch
}

// Release frees a slot.
func (w *WRR) Release() {
	w.running.Add(-1)
	if w.waiting.Load() == 0 {
		return
	}
	w.mu.Lock()
	w.dispatch()
	w.mu.Unlock()
}

// dispatch grants free slots in turn order. Called with w.mu held.
func (w *WRR) dispatch() {
	for len(w.order) > 0 {
		r := w.running.Load()
		if r >= w.slots {
			return
		}
		if !w.running.CompareAndSwap(r, r+1) {
			continue // an idle-path Acquire or a Release moved it
		}
		if w.cursor >= len(w.order) {
			w.cursor = 0
		}
		ns := w.order[w.cursor]
		if w.credit <= 0 {
			w.credit = w.weight(ns)
		}
		q := w.queues[ns]
		ch := q.waiters[0]
		q.waiters = q.waiters[1:]
		w.waiting.Add(-1)
		w.credit--
		close(ch)
		if len(q.waiters) == 0 {
			w.order = append(w.order[:w.cursor], w.order[w.cursor+1:]...)
			delete(w.queues, ns) // an idle namespace keeps no queue: the map stays bounded by the waiters
			w.credit = 0
			continue // cursor now points at the next namespace
		}
		if w.credit == 0 {
			w.cursor++
		}
	}
}

func (w *WRR) remove(ns string, ch chan struct{}) {
	q := w.queues[ns]
	for i, c := range q.waiters {
		if c == ch {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			w.waiting.Add(-1)
			break
		}
	}
	if len(q.waiters) == 0 {
		delete(w.queues, ns)
		for i, n := range w.order {
			if n == ns {
				w.order = append(w.order[:i], w.order[i+1:]...)
				if w.cursor > i {
					w.cursor--
				}
				w.credit = 0
				break
			}
		}
	}
}

// Waiting returns the number of queued requests per namespace (for metrics).
func (w *WRR) Waiting() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.order))
	names := append([]string(nil), w.order...)
	sort.Strings(names)
	for _, ns := range names {
		out[ns] = len(w.queues[ns].waiters)
	}
	return out
}
