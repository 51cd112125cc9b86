package lfs

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// DefaultRetryDeadline bounds, when Options.RetryDeadline is 0, how long one
// Volume call is retried while the volume answers zerr.ErrUnavailable.
const DefaultRetryDeadline = 20 * time.Second

// stallLogEvery rate-limits the warnings of stalled operations (wall time):
// one line per interval for the whole mount, not one per attempt.
const stallLogEvery = 5 * time.Second

// StalledError is returned by a Volume call that kept failing with
// zerr.ErrUnavailable (a node down, restarting, partitioned) until the mount's
// retry deadline passed. It unwraps to the last error, so Errno maps it to
// EIO, and errors.Is(err, zerr.ErrUnavailable) holds when the last attempt
// failed with it.
type StalledError struct {
	Op       string        // the Volume call: write, read, open_zone...
	Node     string        // the node named by the error, if any
	Waited   time.Duration // clock time since the first failure
	Attempts int
	Err      error // the last error
}

func (e *StalledError) Error() string {
	n := ""
	if e.Node != "" {
		n = " on node " + e.Node
	}
	return fmt.Sprintf("%s%s: still unavailable after %s (%d attempts): %v", e.Op, n, e.Waited, e.Attempts, e.Err)
}
func (e *StalledError) Unwrap() error { return e.Err }

// As makes errors.As(err, *syscall.Errno) find EIO first, so Errno maps a
// stalled call to EIO even when the last attempt was cut by the deadline
// (context.DeadlineExceeded would otherwise read as ETIMEDOUT).
func (e *StalledError) As(target any) bool {
	if p, ok := target.(*syscall.Errno); ok {
		*p = syscall.EIO
		return true
	}
	return false
}

// NodeNamer is implemented by a Volume error that names the node it came from
// (pkg/client's NodeError). The stall warnings use it.
type NodeNamer interface{ NodeName() string }

// failedNode is the node an error names, or "".
func failedNode(err error) string {
	var nn NodeNamer
	if errors.As(err, &nn) {
		return nn.NodeName()
	}
	var ue *zerr.UnavailableError
	if errors.As(err, &ue) && ue.What != "server" {
		return ue.What
	}
	return ""
}

// stallMetrics are zonefleet_fs_stalled_operations (gauge: Volume calls
// retrying right now) and zonefleet_fs_stalled_operation_failures_total
// (counter: calls that failed after the retry deadline).
type stallMetrics struct {
	stalled prometheus.Gauge
	failed  prometheus.Counter
	// the same figures, kept by this mount whatever the registry
	nStalled   atomic.Int64
	nFailed    atomic.Uint64
	logLimit   rateLimit
	failLog    rateLimit
	resumedLog rateLimit
}

func newStallMetrics(reg prometheus.Registerer) *stallMetrics {
	m := &stallMetrics{
		stalled: prometheus.NewGauge(prometheus.GaugeOpts{Name: "zonefleet_fs_stalled_operations",
			Help: "Volume operations of the file system retrying right now because a node is unavailable."}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "zonefleet_fs_stalled_operation_failures_total",
			Help: "Volume operations that failed (EIO) because a node stayed unavailable past the retry deadline."}),
		logLimit: rateLimit{every: stallLogEvery},
		failLog:  rateLimit{every: stallLogEvery},
		// a node's return resumes many calls at once: one line per interval
		resumedLog: rateLimit{every: stallLogEvery},
	}
	if reg != nil {
		m.stalled = register(reg, m.stalled)
		m.failed = register(reg, m.failed)
	}
	return m
}

// slowCall is how long (clock time, realtime clock only) a Volume call may
// go without an answer before it counts as stalled and is warned about.
const slowCall = 2 * time.Second

// outcome is how a tracked Volume call ended.
type outcome int

const (
	resumed   outcome = iota // succeeded
	gaveUp                   // failed after the retry deadline
	answered                 // failed with an error that is not retried
	abandoned                // its ctx ended
)

// stall tracks one Volume call: it counts in zonefleet_fs_stalled_operations
// from its first ErrUnavailable (or from slowCall without an answer) to its
// end. A nil *stall is a call that never failed: every method is a no-op.
type stall struct {
	m     *stallMetrics
	op    string
	start time.Duration

	mu     sync.Mutex // the slow-call timer runs on another goroutine
	active bool       // counted in the gauge
	done   bool
	since  time.Time // wall time the stall began, for the log
	node   string
	tries  int
}

// begin counts the call as stalled. Called with s.mu held.
func (s *stall) begin() {
	if s.active || s.done {
		return
	}
	s.active = true
	s.since = time.Now()
	s.m.nStalled.Add(1)
	s.m.stalled.Inc()
}

// slow: the call has had no answer for slowCall.
func (s *stall) slow(waited time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return
	}
	s.begin()
	if ok, skipped := s.m.logLimit.allow(); ok {
		slog.Warn("file system operation stalled: no answer from the volume yet",
			"op", s.op, "node", s.node, "since", s.since.UTC().Format(time.RFC3339Nano), "waited", waited,
			"stalled_ops", s.m.nStalled.Load(), "suppressed_warnings", skipped)
	}
}

// failed records a failed attempt and warns, rate-limited, what is awaited.
func (s *stall) failed(err error, waited time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.begin()
	s.tries++
	if n := failedNode(err); n != "" {
		s.node = n
	}
	if ok, skipped := s.m.logLimit.allow(); ok {
		slog.Warn("file system operation stalled: waiting for an unavailable node",
			"op", s.op, "node", s.node, "since", s.since.UTC().Format(time.RFC3339Nano), "waited", waited,
			"attempts", s.tries, "stalled_ops", s.m.nStalled.Load(), "suppressed_warnings", skipped, "err", err)
	}
}

// end closes the call and returns the node it waited for and its attempts.
func (s *stall) end(o outcome, waited time.Duration, err error) (node string, tries int) {
	if s == nil {
		return "", 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	if !s.active {
		return s.node, s.tries
	}
	s.active = false
	s.m.nStalled.Add(-1)
	s.m.stalled.Dec()
	switch o {
	case resumed:
		if ok, skipped := s.m.resumedLog.allow(); ok {
			slog.Info("file system operation resumed", "op", s.op, "node", s.node, "waited", waited, "attempts", s.tries,
				"suppressed", skipped)
		}
	case gaveUp:
		s.m.nFailed.Add(1)
		s.m.failed.Inc()
		if ok, skipped := s.m.failLog.allow(); ok {
			slog.Warn("file system operation failed: node still unavailable after the retry deadline (EIO)",
				"op", s.op, "node", s.node, "since", s.since.UTC().Format(time.RFC3339Nano), "waited", waited,
				"attempts", s.tries, "suppressed_warnings", skipped, "err", err)
		}
	}
	return s.node, s.tries
}

// rateLimit lets one event through per interval (wall time) and counts the rest.
type rateLimit struct {
	every      time.Duration
	last       atomic.Int64 // unix nanoseconds of the last allowed event
	suppressed atomic.Int64
}

func (r *rateLimit) allow() (bool, int64) {
	now := time.Now().UnixNano()
	last := r.last.Load()
	if last != 0 && now-last < int64(r.every) || !r.last.CompareAndSwap(last, now) {
		r.suppressed.Add(1)
		return false, 0
	}
	return true, r.suppressed.Swap(0)
}

// Stalls reports the Volume calls retrying right now because a node is
// unavailable, and how many gave up after the retry deadline since the mount.
func (fs *FS) Stalls() (stalled int64, failed uint64) {
	if r, ok := fs.vol.(*retrying); ok {
		return r.st.nStalled.Load(), r.st.nFailed.Load()
	}
	return 0, 0
}
