package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
)

// Default deadlines of the data path (Config.SendTimeout, Config.CompactionTTL).
const (
	// DefaultSendTimeout bounds one stream message to a client (ReadStream)
	// or a peer (PeerWrite push): a receiver that stops reading fills the
	// flow-control window, and the send would block for ever.
	DefaultSendTimeout = 30 * time.Second
	// DefaultCompactionTTL is how long a compaction's result waits for its
	// WaitCompaction; after it the operation is dropped (once it ended).
	DefaultCompactionTTL = 10 * time.Minute
)

var (
	wallOnce sync.Once
	wall     clock.Clock
)

// wallClock is the process's wall clock for network deadlines (a device's
// clock models the drive and may be virtual or off).
func wallClock() clock.Clock {
	wallOnce.Do(func() { wall = clock.Realtime(1) })
	return wall
}

func (s *Service) clk() clock.Clock {
	if s.cfg.Clock != nil {
		return s.cfg.Clock
	}
	return wallClock()
}

func (s *Service) sendTimeout() time.Duration {
	if s.cfg.SendTimeout > 0 {
		return s.cfg.SendTimeout
	}
	return DefaultSendTimeout
}

func (s *Service) compactionTTL() time.Duration {
	if s.cfg.CompactionTTL > 0 {
		return s.cfg.CompactionTTL
	}
	return DefaultCompactionTTL
}

// sendTimeoutError is what a send that missed its deadline ends the call with.
func sendTimeoutError(what string, d time.Duration) error {
	return fmt.Errorf("%s: the receiver took no message for %v: %w", what, d, context.DeadlineExceeded)
}

// asyncSender sends one stream message at a time on its own goroutine, so
// that the caller can prepare the next message meanwhile and never waits
// longer than the send deadline for the previous one. A server stream has
// no deadline of its own: a send blocks while the client's flow-control
// window is full. On a timeout the handler returns, gRPC ends the stream,
// and the blocked send returns on its own.
type asyncSender struct {
	s       *Service
	op      string
	pending chan error // nil: no send in flight
}

// wait waits for the send in flight (if any) for at most the send timeout.
func (a *asyncSender) wait(ctx context.Context) error {
	if a.pending == nil {
		return nil
	}
	ch := a.pending
	a.pending = nil
	return a.s.waitDeadline(ctx, a.op, ch)
}

// send waits for the previous send, then starts fn.
func (a *asyncSender) send(ctx context.Context, fn func() error) error {
	if err := a.wait(ctx); err != nil {
		return err
	}
	ch := make(chan error, 1)
	a.s.sending.Add(1)
	go func() {
		defer a.s.sending.Add(-1)
		ch <- fn()
	}()
	a.pending = ch
	return nil
}

// waitDeadline waits for ch for at most the send timeout.
func (s *Service) waitDeadline(ctx context.Context, op string, ch <-chan error) error {
	select {
	case err := <-ch: // the common case: no timer
		return err
	default:
	}
	c := s.clk()
	d := s.sendTimeout()
	expired := make(chan struct{})
	stop := c.AfterFunc(c.Now()+d, func() { close(expired) })
	defer stop()
	select {
	case err := <-ch:
		return err
	case <-expired:
		s.m.sendTimeouts.WithLabelValues(op).Inc()
		return sendTimeoutError(op, d)
	case <-ctx.Done():
		return ctx.Err()
	}
}
