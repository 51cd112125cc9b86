package node

// WRRTicket is a request queued by AcquireAsync.
type WRRTicket struct {
	ch chan struct{}
}

// Granted reports whether the scheduler has granted the ticket's slot (a
// Release's dispatch hands slots out in the WRR's turn order). Release must
// follow a grant, as after Acquire.
func (t *WRRTicket) Granted() bool {
	select {
	case <-t.ch:
		return true
	default:
		return false
	}
}

// AcquireAsync is Acquire without waiting, for callers that cannot block on
// a channel: a deterministic simulation (zctl bench paper) whose actors may
// only wait on its own clock. It returns nil when the slot is granted at
// once; otherwise the request is queued exactly as Acquire queues it and the
// ticket reports the grant. The scheduling is the same code: queues, turn
// order and weights are the WRR's. A queued ticket cannot be withdrawn.
func (w *WRR) AcquireAsync(ns string) *WRRTicket {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.takeIdle() {
		return nil
	}
	return &WRRTicket{ch: w.enqueue(ns)}
}
