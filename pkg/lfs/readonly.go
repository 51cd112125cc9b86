package lfs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"syscall"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Read-only fallback. When a write or metadata call fails in a way that would
// let the in-memory tables run ahead of (or away from) what the drives hold —
// a checkpoint or snapshot record that cannot be written, the reset of the
// metadata zone a rotation leaves behind, the Finish of a segment the file
// system leaves (or of a threaded-logging zone), a roll-forward that finds the
// drives disagreeing with the checkpoint — the file system stops mutating:
// every mutating operation returns a *ReadOnlyError (EROFS through Errno),
// background work stops, reads keep working from the tables and the drives,
// the gauge zonefleet_fs_read_only is 1 and one ERROR line says why. Nothing
// acknowledged is lost: an fsync returned only after its blocks and, for
// checkpoints, its record were on the drives, and a later mount rebuilds the
// state from the drives (the newest complete checkpoint plus roll-forward).
// The state clears only by unmounting and mounting again.

// ReadOnlyError is returned by every mutating operation of a file system that
// went read-only; Cause is the failure that made it so.
type ReadOnlyError struct {
	Where string // what failed (checkpoint record, metadata reset, finish, roll-forward, ...)
	Cause error
}

func (e *ReadOnlyError) Error() string {
	return fmt.Sprintf("file system is read-only after a failed %s: %v", e.Where, e.Cause)
}

// Unwrap returns the cause.
func (e *ReadOnlyError) Unwrap() error { return e.Cause }

// goReadOnly makes the file system read-only because err of where (fs.mu
// held). Cancellation and a closed volume (the process is going away) are
// not reasons: the operation simply fails. It returns the error the caller
// should return (a *ReadOnlyError when the file system is read-only).
func (fs *FS) goReadOnly(where string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, zerr.ErrClosed) {
		return err
	}
	if fs.failed != nil {
		var ro *ReadOnlyError
		if errors.As(fs.failed, &ro) {
			return fs.failed
		}
		return err
	}
	ro := &ReadOnlyError{Where: where, Cause: err}
	fs.failed = ro
	fs.stats.ReadOnly = true
	fs.stats.ReadOnlyReason = ro.Error()
	slog.Error("file system went read-only: memory and drives could diverge; reads still work, unmount and mount again once the fault is fixed",
		"where", where, "err", err)
	return ro
}

// ReadOnly reports whether the file system went read-only, and why.
func (fs *FS) ReadOnly() (bool, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var ro *ReadOnlyError
	if errors.As(fs.failed, &ro) {
		return true, ro
	}
	return false, nil
}

// refuse is the error a mutating operation gets on a failed file system (fs.mu held).
func (fs *FS) refuse() error {
	var ro *ReadOnlyError
	if !fs.closed && errors.As(fs.failed, &ro) {
		return ro
	}
	return syscall.EIO
}

// deferredOp is a Finish or Reset of a zone that failed because a node was
// unavailable. It is retried at the next checkpoint (and every one after)
// instead of making the file system read-only: the tables are right, only
// the volume's count of open or held zones lags until the call succeeds.
// A zone waiting for its reset is counted as used (freeSegments).
type deferredOp struct {
	reset bool
	zone  ZoneID
	where string
}

// transient reports whether err is a node or the network being unavailable
// past the retry deadline (the call may be retried later), as opposed to a
// failing drive or a refusal.
func transient(err error) bool {
	return errors.Is(err, zerr.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || zerr.IsDegraded(err)
}

// noResources tells an open refused for want of active or open zones or of
// free zones: the call changed nothing (lfs.Volume.OpenZone's contract).
func noResources(err error) bool {
	return errors.Is(err, zerr.ErrTooManyOpen) || errors.Is(err, zerr.ErrTooManyActive) || errors.Is(err, zerr.ErrNoResources)
}

// zoneOp finishes (reset=false) or resets zone z (fs.mu held; released
// across the call). A transient failure defers the call; any other makes the
// file system read-only (where says what failed).
func (fs *FS) zoneOp(ctx context.Context, reset bool, z ZoneID, where string) {
	err := fs.unlocked(func() error {
		if reset {
			return fs.vol.Reset(ctx, z)
		}
		return fs.vol.Finish(ctx, z)
	})
	fs.zoneOpFailed(ctx, reset, z, where, err)
}

// resetZones resets zones zs as zoneOp does each (fs.mu held; released
// during the calls): with one call when the volume resets several at once
// (ZonesResetter).
func (fs *FS) resetZones(ctx context.Context, zs []ZoneID, where string) {
	zr, ok := fs.vol.(ZonesResetter)
	if !ok || len(zs) < 2 {
		for _, z := range zs {
			fs.zoneOp(ctx, true, z, where)
		}
		return
	}
	var errs []error
	_ = fs.unlocked(func() error {
		errs = zr.ResetZones(ctx, zs)
		return nil
	})
	for i, z := range zs {
		fs.zoneOpFailed(ctx, true, z, where, errs[i])
	}
}

// zoneOpFailed handles the outcome of a finish or reset of zone z (fs.mu
// held): a transient failure is deferred (retried later), any other one
// makes the file system read-only.
func (fs *FS) zoneOpFailed(ctx context.Context, reset bool, z ZoneID, where string, err error) {
	if err == nil {
		return
	}
	if transient(err) {
		if reset { // a reset supersedes a finish still waiting
			fs.deferred = slices.DeleteFunc(fs.deferred, func(o deferredOp) bool { return o.zone == z && !o.reset })
		}
		fs.deferred = append(fs.deferred, deferredOp{reset: reset, zone: z, where: where})
		task := bgFinish
		if reset {
			task = bgReset
		}
		fs.noteBackground(task, err)
		return
	}
	_ = fs.goReadOnly(where, err)
}

// retryDeferred runs the deferred calls again (fs.mu held). A finish of a
// zone the file system no longer holds (reset since) is dropped.
func (fs *FS) retryDeferred(ctx context.Context) {
	ops := fs.deferred
	fs.deferred = nil
	for _, o := range ops {
		if !o.reset && fs.segs[o.zone] == nil {
			continue
		}
		fs.zoneOp(ctx, o.reset, o.zone, o.where)
	}
}

// deferredResets is the number of zones waiting for a deferred reset (fs.mu held).
func (fs *FS) deferredResets() int {
	n := 0
	for _, o := range fs.deferred {
		if o.reset {
			n++
		}
	}
	return n
}
