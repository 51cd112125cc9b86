package limit

import "sync"

// OtherLabel is the label value every value beyond a Labels' capacity maps to.
const OtherLabel = "other"

// Labels bounds the values a metric label can take when they come from
// callers (namespaces): the first Max distinct values map to themselves,
// every later one to OtherLabel, so a client inventing names cannot grow a
// metric's series without bound. Forget releases a value (a deleted
// namespace) so the slot can be reused; the caller should also delete the
// metric's series for it. Safe for concurrent use; the common case (a known
// value) takes a read lock only.
type Labels struct {
	mu    sync.RWMutex
	max   int
	known map[string]struct{}
}

// NewLabels returns a set admitting at most max (>= 1) distinct values.
func NewLabels(max int) *Labels {
	if max < 1 {
		max = 1
	}
	return &Labels{max: max, known: make(map[string]struct{})}
}

// Value returns v if it is (or can become) one of the admitted values, else OtherLabel.
func (l *Labels) Value(v string) string {
	l.mu.RLock()
	_, ok := l.known[v]
	l.mu.RUnlock()
	if ok {
		return v
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.known[v]; ok {
		return v
	}
	if len(l.known) >= l.max || v == OtherLabel {
		return OtherLabel
	}
	l.known[v] = struct{}{}
	return v
}

// Forget frees v's slot.
func (l *Labels) Forget(v string) {
	l.mu.Lock()
	delete(l.known, v)
	l.mu.Unlock()
}

// Len is the number of admitted values.
func (l *Labels) Len() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.known)
}
