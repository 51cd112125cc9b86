package lfs

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// background is the periodic work's state: the timer (mu), the goroutines
// to wait for at unmount, and the errors they met (health.go).
type background struct {
	wg        sync.WaitGroup
	errs      *prometheus.CounterVec // background errors by task (health.go)
	log       bgLog
	stopTimer func() bool // guarded by mu
	mu        sync.Mutex
	down      atomic.Bool   // unmounted or abandoned: no more ticks
	lastOp    time.Duration // the clock at the last operation (idle recycling; FS.mu)
}

// Background work — recycling and checkpoints run by the timer, the finish
// of a segment the file system leaves, the reset of the previous metadata
// zone — has no caller to return an error to. Such errors are never dropped
// silently: each one counts in zonefleet_fs_background_errors_total{task}
// and logs a WARN line (at most one per task every bgLogEvery, with the
// number suppressed). The work is retried by the next tick or the next
// operation that needs it; nothing acknowledged depends on it (fsync and
// Sync run their own checkpoint and report its error to their caller).
const bgLogEvery = 10 * time.Second

// Background task labels (bounded).
const (
	bgGC         = "gc"
	bgCheckpoint = "checkpoint"
	bgFinish     = "finish"
	bgReset      = "reset"
)

type bgLog struct {
	mu         sync.Mutex
	last       map[string]time.Time
	suppressed map[string]int
}

func bgCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_fs_background_errors_total",
		Help: "Errors of background work no caller waits for, by task (gc, checkpoint, finish, reset)."}, []string{"task"})
	if reg != nil {
		c = register(reg, c)
	}
	for _, t := range []string{bgGC, bgCheckpoint, bgFinish, bgReset} {
		c.WithLabelValues(t)
	}
	return c
}

// noteBackground records err of background task; nil and cancellations at
// unmount are not errors.
func (fs *FS) noteBackground(task string, err error) {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, zerr.ErrClosed) {
		return
	}
	if fs.bg.errs != nil {
		fs.bg.errs.WithLabelValues(task).Inc()
	}
	l := &fs.bg.log
	l.mu.Lock()
	if l.last == nil {
		l.last, l.suppressed = map[string]time.Time{}, map[string]int{}
	}
	now := time.Now()
	if t, ok := l.last[task]; ok && now.Sub(t) < bgLogEvery {
		l.suppressed[task]++
		l.mu.Unlock()
		return
	}
	n := l.suppressed[task]
	l.last[task], l.suppressed[task] = now, 0
	l.mu.Unlock()
	slog.Warn("file system background work failed; it is retried later", "task", task, "err", err, "suppressed", n)
}
