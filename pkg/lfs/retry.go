package lfs

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// retrying wraps a Volume: a call failing with zerr.ErrUnavailable (a node
// down, restarting, partitioned) is retried with a capped exponential backoff
// on the clock until the per-call retry deadline; then it fails with a
// *StalledError, which the file system turns into EIO (Errno). Writes are
// retried only when nothing was written (a partial write is never retried
// blindly).
//
// Failure behaviour: the caller's ctx is honoured at every wait (an
// interrupted FUSE request returns at once). With a realtime clock the whole
// call, including the client's own retries inside one attempt, is bounded by
// the deadline through a ctx deadline, so no Volume call outlives it. With a
// virtual clock the deadline is measured in modelled time (deterministic);
// with the off clock, which has no time, the call is tried retries+1 times.
// While a call retries it counts in zonefleet_fs_stalled_operations and the
// mount logs, rate-limited, what it waits for (see stall.go).
type retrying struct {
	Volume
	n        int           // attempts after the first, off clock only
	deadline time.Duration // per call, clock time
	clk      clock.Clock
	scale    float64 // wall time per clock time (realtime clock), 0 otherwise
	st       *stallMetrics
}

// maxBackoff caps the wait between two attempts (clock time).
const maxBackoff = 250 * time.Millisecond

func withRetries(v Volume, opts Options) Volume {
	if r, ok := v.(*retrying); ok {
		return r
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.Off()
	}
	r := &retrying{Volume: v, n: opts.Retries, deadline: opts.RetryDeadline, clk: clk, st: newStallMetrics(opts.Registry)}
	if r.n <= 0 {
		r.n = 3
	}
	if r.deadline <= 0 {
		r.deadline = DefaultRetryDeadline
	}
	if clk.Kind() == clock.KindRealtime {
		r.scale = 1
		if s, ok := clk.(interface{ Scale() float64 }); ok && s.Scale() > 0 {
			r.scale = s.Scale()
		}
	}
	return r
}

func (r *retrying) do(ctx context.Context, op string, f func(ctx context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cctx := ctx
	start := r.clk.Now()
	var st *stall // made at the first failure, or at once with a realtime clock (slow-call warning)
	if r.scale > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, time.Duration(float64(r.deadline)*r.scale))
		defer cancel()
		st = &stall{m: r.st, op: op, start: start}
		// An attempt may wait long inside the volume (pkg/client retries an
		// unavailable node itself): say so while it waits, not only after.
		stopSlow := r.clk.AfterFunc(start+slowCall, func() { st.slow(r.clk.Now() - start) })
		defer stopSlow()
	}
	backoff := time.Millisecond
	for attempt := 0; ; attempt++ {
		err := f(cctx)
		waited := r.clk.Now() - start
		if err == nil {
			st.end(resumed, waited, nil)
			return nil
		}
		giveUp := func(last error) error {
			if st == nil {
				st = &stall{m: r.st, op: op, start: start}
			}
			st.failed(last, waited)
			node, tries := st.end(gaveUp, waited, last)
			return &StalledError{Op: op, Node: node, Waited: waited, Attempts: tries, Err: last}
		}
		switch {
		case ctx.Err() != nil: // the caller gave up (interrupted request, unmount)
			st.end(abandoned, waited, err)
			if !errors.Is(err, ctx.Err()) {
				err = &canceledError{ctx: ctx.Err(), last: err}
			}
			return err
		case cctx.Err() != nil: // our deadline cut the attempt
			return giveUp(err)
		case !errors.Is(err, zerr.ErrUnavailable):
			st.end(answered, waited, err)
			return err
		}
		var pw *PartialWriteError
		if errors.As(err, &pw) && pw.Written > 0 {
			st.end(answered, waited, err)
			return err
		}
		if r.clk.Kind() == clock.KindOff && attempt >= r.n || r.clk.Kind() != clock.KindOff && waited >= r.deadline {
			return giveUp(err)
		}
		if st == nil {
			st = &stall{m: r.st, op: op, start: start}
		}
		st.failed(err, waited)
		wait := backoff
		if left := r.deadline - waited; r.clk.Kind() != clock.KindOff && wait > left {
			wait = left
		}
		if serr := clock.Sleep(cctx, r.clk, wait); serr != nil {
			if ctx.Err() != nil {
				st.end(abandoned, r.clk.Now()-start, err)
				return &canceledError{ctx: ctx.Err(), last: err}
			}
			waited = r.clk.Now() - start
			return giveUp(err)
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// canceledError is a call abandoned because its ctx ended: it unwraps to the
// ctx error (Errno: EINTR or ETIMEDOUT) and keeps the last volume error.
type canceledError struct {
	ctx, last error
}

func (e *canceledError) Error() string {
	return e.ctx.Error() + " (last error: " + e.last.Error() + ")"
}
func (e *canceledError) Unwrap() error { return e.ctx }

// OpenZoneLike retries the inner volume's OpenZoneLike, or is OpenZone when
// the inner volume has no layout hint (LikeOpener).
func (r *retrying) OpenZoneLike(ctx context.Context, like ZoneID) (z ZoneID, err error) {
	lo, ok := r.Volume.(LikeOpener)
	if !ok {
		return r.OpenZone(ctx)
	}
	err = r.do(ctx, "open_zone", func(ctx context.Context) error { z, err = lo.OpenZoneLike(ctx, like); return err })
	return z, err
}

// OpenZoneFor retries the inner volume's OpenZoneFor, or is OpenZone when
// the inner volume does not place by class (ClassOpener).
func (r *retrying) OpenZoneFor(ctx context.Context, class ZoneClass) (z ZoneID, err error) {
	co, ok := r.Volume.(ClassOpener)
	if !ok {
		return r.OpenZone(ctx)
	}
	err = r.do(ctx, "open_zone", func(ctx context.Context) error { z, err = co.OpenZoneFor(ctx, class); return err })
	return z, err
}

func (r *retrying) OpenZone(ctx context.Context) (z ZoneID, err error) {
	err = r.do(ctx, "open_zone", func(ctx context.Context) error { z, err = r.Volume.OpenZone(ctx); return err })
	return z, err
}
func (r *retrying) Zones(ctx context.Context) (zs []ZoneInfo, err error) {
	err = r.do(ctx, "zones", func(ctx context.Context) error { zs, err = r.Volume.Zones(ctx); return err })
	return zs, err
}
func (r *retrying) Write(ctx context.Context, z ZoneID, off uint64, data []byte, fua bool) error {
	return r.do(ctx, "write", func(ctx context.Context) error { return r.Volume.Write(ctx, z, off, data, fua) })
}

// WriteV passes a vectored write on (retried as Write is) when the inner
// volume has it, else gathers the buffers for its Write.
func (r *retrying) WriteV(ctx context.Context, z ZoneID, off uint64, bufs [][]byte, fua bool) error {
	vw, ok := r.Volume.(VectorWriter)
	if !ok {
		return r.Write(ctx, z, off, bytes.Join(bufs, nil), fua)
	}
	return r.do(ctx, "write", func(ctx context.Context) error { return vw.WriteV(ctx, z, off, bufs, fua) })
}
func (r *retrying) Read(ctx context.Context, z ZoneID, off uint64, buf []byte) error {
	return r.do(ctx, "read", func(ctx context.Context) error { return r.Volume.Read(ctx, z, off, buf) })
}
func (r *retrying) Finish(ctx context.Context, z ZoneID) error {
	return r.do(ctx, "finish", func(ctx context.Context) error { return r.Volume.Finish(ctx, z) })
}
func (r *retrying) Reset(ctx context.Context, z ZoneID) error {
	return r.do(ctx, "reset", func(ctx context.Context) error { return r.Volume.Reset(ctx, z) })
}

// ResetZones resets zs with the inner volume's ResetZones when it has one,
// retrying the zones whose reset found a node or the arbiter unavailable
// (together) until the deadline; else one Reset each.
func (r *retrying) ResetZones(ctx context.Context, zs []ZoneID) []error {
	errs := make([]error, len(zs))
	inner, ok := r.Volume.(ZonesResetter)
	if !ok {
		for i, z := range zs {
			errs[i] = r.Reset(ctx, z)
		}
		return errs
	}
	pending := make([]int, len(zs))
	for i := range pending {
		pending[i] = i
	}
	err := r.do(ctx, "reset", func(ctx context.Context) error {
		batch := make([]ZoneID, len(pending))
		for k, i := range pending {
			batch[k] = zs[i]
		}
		es := inner.ResetZones(ctx, batch)
		var again []int
		var first error
		for k, i := range pending {
			errs[i] = es[k]
			if es[k] != nil && errors.Is(es[k], zerr.ErrUnavailable) {
				again = append(again, i)
				first = cmp.Or(first, es[k])
			}
		}
		pending = again
		return first
	})
	if err != nil {
		for _, i := range pending {
			errs[i] = err
		}
	}
	return errs
}

func (r *retrying) Compact(ctx context.Context, cs []Copy) (st CompactStats, err error) {
	err = r.do(ctx, "compact", func(ctx context.Context) error { st, err = r.Volume.Compact(ctx, cs); return err })
	return st, err
}
func (r *retrying) Locate(ctx context.Context, z ZoneID, off uint64) (l Location, err error) {
	err = r.do(ctx, "locate", func(ctx context.Context) error { l, err = r.Volume.Locate(ctx, z, off); return err })
	return l, err
}
func (r *retrying) Flush(ctx context.Context) error {
	return r.do(ctx, "flush", func(ctx context.Context) error { return r.Volume.Flush(ctx) })
}
