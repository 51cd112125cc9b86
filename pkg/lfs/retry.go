package lfs

import (
	"context"
	"errors"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// retrying wraps a Volume: a call failing with zerr.ErrUnavailable is retried
// (backing off 1, 2, 4... ms of the clock) before the error is returned; the
// file system then turns it into EIO (Errno). Writes are retried only when
// nothing was written (a partial write is never retried blindly).
type retrying struct {
	Volume
	n   int
	clk clock.Clock
}

func withRetries(v Volume, n int, clk clock.Clock) Volume {
	if r, ok := v.(*retrying); ok {
		return r
	}
	if n <= 0 {
		n = 3
	}
	return &retrying{Volume: v, n: n, clk: clk}
}

func (r *retrying) do(ctx context.Context, f func() error) error {
	var err error
	for i := 0; ; i++ {
		err = f()
		if err == nil || !errors.Is(err, zerr.ErrUnavailable) || i >= r.n || ctx.Err() != nil {
			return err
		}
		var pw *PartialWriteError
		if errors.As(err, &pw) && pw.Written > 0 {
			return err
		}
		_ = clock.Sleep(ctx, r.clk, time.Duration(1<<i)*time.Millisecond)
	}
}

func (r *retrying) OpenZone(ctx context.Context) (z ZoneID, err error) {
	err = r.do(ctx, func() error { z, err = r.Volume.OpenZone(ctx); return err })
	return z, err
}
func (r *retrying) Zones(ctx context.Context) (zs []ZoneInfo, err error) {
	err = r.do(ctx, func() error { zs, err = r.Volume.Zones(ctx); return err })
	return zs, err
}
func (r *retrying) Write(ctx context.Context, z ZoneID, off uint64, data []byte, fua bool) error {
	return r.do(ctx, func() error { return r.Volume.Write(ctx, z, off, data, fua) })
}
func (r *retrying) Read(ctx context.Context, z ZoneID, off uint64, buf []byte) error {
	return r.do(ctx, func() error { return r.Volume.Read(ctx, z, off, buf) })
}
func (r *retrying) Finish(ctx context.Context, z ZoneID) error {
	return r.do(ctx, func() error { return r.Volume.Finish(ctx, z) })
}
func (r *retrying) Reset(ctx context.Context, z ZoneID) error {
	return r.do(ctx, func() error { return r.Volume.Reset(ctx, z) })
}
func (r *retrying) Compact(ctx context.Context, cs []Copy) (st CompactStats, err error) {
	err = r.do(ctx, func() error { st, err = r.Volume.Compact(ctx, cs); return err })
	return st, err
}
func (r *retrying) Locate(ctx context.Context, z ZoneID, off uint64) (l Location, err error) {
	err = r.do(ctx, func() error { l, err = r.Volume.Locate(ctx, z, off); return err })
	return l, err
}
func (r *retrying) Flush(ctx context.Context) error {
	return r.do(ctx, func() error { return r.Volume.Flush(ctx) })
}
