package node

import (
	"context"
	"sort"
	"sync"
)

// WRR shares a device's request slots among namespaces by weighted round
// robin (eZNS §4.5.1: per-namespace queues, round-robin across namespaces).
// At most Slots requests run at once; when a slot frees, the next namespace
// in turn with a waiting request gets it, and a namespace of weight w may
// take w slots in a row before the turn moves on. A namespace alone on the
// device is never held back.
type WRR struct {
	mu      sync.Mutex
	slots   int
	running int
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
	return &WRR{slots: slots, queues: map[string]*nsQueue{}, weights: map[string]int{}}
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
	w.mu.Lock()
	if w.running < w.slots && len(w.order) == 0 {
		w.running++
		w.mu.Unlock()
		return nil
	}
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
	w.dispatch()
	w.mu.Unlock()

	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		w.mu.Lock()
		defer w.mu.Unlock()
		select {
		case <-ch: // granted meanwhile: hand the slot on
			w.running--
			w.dispatch()
		default:
			w.remove(ns, ch)
		}
		return ctx.Err()
	}
}

// Release frees a slot.
func (w *WRR) Release() {
	w.mu.Lock()
	w.running--
	w.dispatch()
	w.mu.Unlock()
}

// dispatch grants free slots in turn order. Called with w.mu held.
func (w *WRR) dispatch() {
	for w.running < w.slots && len(w.order) > 0 {
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
		w.running++
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
