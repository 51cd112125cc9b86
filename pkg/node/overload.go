package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc"
)

// Per-namespace stream limits. One tenant's streams must not take the
// node's memory or goroutines from the others: a namespace may have
// wire.MaxNamespaceStreams streaming calls (ReadStream, WriteStream) open on
// this node, holding wire.MaxNamespaceInflightBytes of stream data (received
// and not yet written, or read and not yet sent). A stream past either is
// refused with zerr.LimitError (RESOURCE_EXHAUSTED). The operator, the
// arbiter and peer nodes are not limited here (their calls are the
// cluster's own work); their connections are bounded by the daemon's
// limits.
//
// Concurrency: streamLimits has its own mutex, held only to update the
// counts (never across I/O).
type streamLimits struct {
	mu      sync.Mutex
	streams map[string]int
	bytes   map[string]int64
}

func (s *Service) maxNamespaceStreams() int {
	if s.cfg.MaxNamespaceStreams > 0 {
		return s.cfg.MaxNamespaceStreams
	}
	return wire.MaxNamespaceStreams
}

func (s *Service) maxNamespaceInflight() int64 {
	if s.cfg.MaxNamespaceInflightBytes > 0 {
		return s.cfg.MaxNamespaceInflightBytes
	}
	return wire.MaxNamespaceInflightBytes
}

func (s *Service) streamIdleTimeout() time.Duration {
	if s.cfg.StreamIdleTimeout > 0 {
		return s.cfg.StreamIdleTimeout
	}
	return wire.StreamIdleTimeout
}

// limitKey is the namespace whose limits a call counts against; "" for the
// cluster's own callers (operator, arbiter, peer nodes).
func (s *Service) limitKey(ctx context.Context) string {
	if id, ok := auth.FromContext(ctx); ok {
		if id.Kind != auth.KindNamespace {
			return ""
		}
		return id.Namespace
	}
	if s.cfg.AdminToken != "" && s.isAdmin(ctx) {
		return ""
	}
	return wire.Namespace(ctx)
}

// nsStream is one open stream's share of its namespace's limits.
type nsStream struct {
	s      *Service
	ns     string // "" = not limited
	held   int64  // in-flight bytes this stream counts (under limits.mu)
	closed bool   // close gave everything back: a late give is a no-op (under limits.mu)
}

// openStream counts a new stream of the caller's namespace, or refuses it.
// The stream's close gives back its slot and its bytes.
func (s *Service) openStream(ctx context.Context) (*nsStream, error) {
	ns := s.limitKey(ctx)
	st := &nsStream{s: s, ns: ns}
	if ns == "" {
		return st, nil
	}
	l := &s.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.streams == nil {
		l.streams, l.bytes = map[string]int{}, map[string]int64{}
	}
	if max := s.maxNamespaceStreams(); l.streams[ns] >= max {
		s.m.limitRefusals.WithLabelValues("streams").Inc()
		return nil, &zerr.LimitError{What: fmt.Sprintf("concurrent streams of namespace %s on node %s", ns, s.cfg.ID), Limit: uint64(max)}
	}
	l.streams[ns]++
	return st, nil
}

// take counts n more bytes of stream data held for the namespace, or
// refuses them (the stream then ends).
func (st *nsStream) take(n int) error {
	if st.ns == "" || n <= 0 {
		return nil
	}
	l := &st.s.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	if max := st.s.maxNamespaceInflight(); l.bytes[st.ns]+int64(n) > max {
		st.s.m.limitRefusals.WithLabelValues("inflight_bytes").Inc()
		return &zerr.LimitError{What: fmt.Sprintf("in-flight stream bytes of namespace %s on node %s (%d held, %d more asked)", st.ns, st.s.cfg.ID, l.bytes[st.ns], n), Limit: uint64(max)}
	}
	l.bytes[st.ns] += int64(n)
	st.held += int64(n)
	return nil
}

// give returns n bytes taken before.
func (st *nsStream) give(n int) {
	if st.ns == "" || n <= 0 {
		return
	}
	l := &st.s.limits
	l.mu.Lock()
	if !st.closed {
		l.bytes[st.ns] -= int64(n)
		st.held -= int64(n)
	}
	l.mu.Unlock()
}

// close gives back the stream's slot and whatever bytes it still holds.
func (st *nsStream) close() {
	if st.ns == "" {
		return
	}
	l := &st.s.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bytes[st.ns] -= st.held
	st.held, st.closed = 0, true
	if l.bytes[st.ns] <= 0 {
		delete(l.bytes, st.ns)
	}
	if l.streams[st.ns]--; l.streams[st.ns] <= 0 {
		delete(l.streams, st.ns)
	}
}

// nsUsage is a namespace's open streams and in-flight bytes (tests).
func (s *Service) nsUsage(ns string) (int, int64) {
	s.limits.mu.Lock()
	defer s.limits.mu.Unlock()
	return s.limits.streams[ns], s.limits.bytes[ns]
}

// idleReceiver receives a client stream's messages (WriteStream) on a
// goroutine of its own, in lockstep with the handler (one message asked, one received: it
// never runs ahead), so that the handler can stop waiting: a server stream
// has no receive deadline, and a client that sends part of a message and
// goes silent would hold the handler and the buffered bytes for ever.
// After StreamIdleTimeout without a message the handler returns
// DEADLINE_EXCEEDED; gRPC then ends the stream and the blocked receive
// returns on its own.
type idleReceiver[T any] struct {
	s    *Service
	op   string
	req  chan struct{}
	res  chan recvResult[T]
	recv func() (T, error)
}

type recvResult[T any] struct {
	v   T
	err error
}

func newIdleReceiver[T any](s *Service, op string, recv func() (T, error)) *idleReceiver[T] {
	r := &idleReceiver[T]{s: s, op: op, req: make(chan struct{}), res: make(chan recvResult[T], 1), recv: recv}
	go func() {
		for range r.req {
			v, err := r.recv()
			r.res <- recvResult[T]{v, err}
		}
	}()
	return r
}

// next receives the next message, waiting at most the idle timeout.
func (r *idleReceiver[T]) next(ctx context.Context) (T, error) {
	r.req <- struct{}{}
	select {
	case x := <-r.res: // the common case: a message was there, no timer
		return x.v, x.err
	default:
	}
	c := r.s.clk()
	d := r.s.streamIdleTimeout()
	expired := make(chan struct{})
	stop := c.AfterFunc(c.Now()+d, func() { close(expired) })
	defer stop()
	r.s.receiving.Add(1)
	defer r.s.receiving.Add(-1)
	select {
	case x := <-r.res:
		return x.v, x.err
	case <-expired:
		r.s.m.recvTimeouts.WithLabelValues(r.op).Inc()
		var zero T
		return zero, fmt.Errorf("%s: no message from the client for %v: %w", r.op, d, context.DeadlineExceeded)
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// close ends the receiving goroutine once its receive in flight returns
// (at the latest when the handler has returned and gRPC ended the stream).
func (r *idleReceiver[T]) close() { close(r.req) }

// receiveFrom adapts a gRPC stream to an idleReceiver of write chunks.
func receiveFrom(stream grpc.ServerStream) func() (*received, error) {
	return func() (*received, error) {
		r := receive(stream)
		return &r, nil
	}
}
