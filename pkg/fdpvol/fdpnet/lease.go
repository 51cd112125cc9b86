package fdpnet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Lease is the mount lease of the client's namespace (the arbiter's
// AcquireMount), with fsvol's rules for a zoned namespace: one mount
// writes a namespace at a time. AcquireLease waits up to a TTL and a
// third for another holder's lease to end (a mount that died stops
// renewing), then fails with its *zerr.AlreadyExistsError, unless forced;
// a goroutine renews every third of the TTL. Fence (fdpvol.Options.Fence)
// then refuses writes with a *fsvol.FencedError once the arbiter answers
// that another holder has the lease (final: a forced takeover, or it
// expired while this process was stopped) or while no renewal succeeded
// for two thirds of the TTL (lifted by the next successful one); the file
// system turns read-only on it. Methods are safe for concurrent use.
type Lease struct {
	c      *client.Client
	ns     string
	holder string
	ttl    time.Duration
	log    *slog.Logger

	ok       atomic.Int64 // clock time the last successful renewal was sent
	fenced   atomic.Pointer[fsvol.FencedError]
	lost     chan struct{} // closed once fenced for good
	lostOnce sync.Once
	renewals *prometheus.CounterVec
	stop     context.CancelFunc
	done     chan struct{}
}

// LeaseOptions configure AcquireLease.
type LeaseOptions struct {
	Holder string        // who holds the lease (host and process); required
	TTL    time.Duration // 0: 15 s
	Force  bool          // take the lease from a live holder
	// Registerer gets zonefleet_fs_mount_lease_renewals_total and
	// zonefleet_fs_mount_fenced, as a zoned namespace's mount exports
	// them (nil: none).
	Registerer prometheus.Registerer
	Logger     *slog.Logger // nil: slog.Default()
}

// AcquireLease takes the mount lease of c's namespace and keeps renewing
// it until Release.
func AcquireLease(ctx context.Context, c *client.Client, o LeaseOptions) (*Lease, error) {
	if o.Holder == "" {
		return nil, &zerr.InvalidArgumentError{Field: "holder", Reason: "a mount lease needs a holder"}
	}
	l := &Lease{c: c, ns: c.Namespace(), holder: o.Holder, ttl: o.TTL, log: o.Logger, lost: make(chan struct{})}
	if l.ttl <= 0 {
		l.ttl = 15 * time.Second
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	l.metrics(o.Registerer)
	clk := c.Clock()
	deadline := clk.Now() + l.ttl + l.ttl/3 + time.Second
	sent := clk.Now()
	_, err := c.AcquireMount(ctx, l.holder, l.ttl, o.Force)
	for waited := false; err != nil; waited = true {
		var ae *zerr.AlreadyExistsError
		if !errors.As(err, &ae) || clk.Now() >= deadline {
			return nil, err
		}
		if !waited {
			l.log.Warn("the namespace is mounted elsewhere, or its last mount died: waiting for that mount's lease to end",
				"namespace", l.ns, "up_to", (deadline - clk.Now()).Round(time.Second), "holder", ae.Name)
		}
		if serr := clock.Sleep(ctx, clk, min(time.Second, l.ttl/4)); serr != nil {
			return nil, errors.Join(err, serr)
		}
		sent = clk.Now()
		_, err = c.AcquireMount(ctx, l.holder, l.ttl, o.Force)
	}
	l.ok.Store(int64(sent))
	l.log.Info("mount lease taken", "namespace", l.ns, "holder", l.holder, "ttl", l.ttl, "forced", o.Force)
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.stop, l.done = cancel, make(chan struct{})
	go l.renew(rctx)
	return l, nil
}

func (l *Lease) metrics(reg prometheus.Registerer) {
	l.renewals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_fs_mount_lease_renewals_total",
		Help: "Renewals of the mount's namespace lease by result: ok, failed (the arbiter unreachable; writes stop after two thirds of the TTL without one), lost (another mount holds the lease: this mount stopped writing)."},
		[]string{"result"})
	for _, r := range []string{"ok", "failed", "lost"} {
		l.renewals.WithLabelValues(r)
	}
	fenced := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "zonefleet_fs_mount_fenced",
		Help: "1 while this mount does not write because it lost, or could not renew, the namespace's mount lease."},
		func() float64 {
			if l.Fence() != nil {
				return 1
			}
			return 0
		})
	if reg != nil {
		reg.MustRegister(l.renewals, fenced)
	}
}

// Fence is nil while the holder may write, else the *fsvol.FencedError
// that says why not. Besides what the renewals found it checks the
// lease's age on the clock: a process stopped past its TTL wakes with its
// writers running before the renewal goroutine notices.
func (l *Lease) Fence() error {
	if e := l.fenced.Load(); e != nil {
		return e
	}
	if since := l.c.Clock().Now() - time.Duration(l.ok.Load()); since >= l.ttl*2/3 {
		return &fsvol.FencedError{Namespace: l.ns, Reason: fmt.Sprintf("the mount lease was last renewed %v ago (TTL %v); writing waits for a renewal", since.Round(time.Millisecond), l.ttl)}
	}
	return nil
}

// Lost is closed once another mount holds the lease (Fence then fails
// for good).
func (l *Lease) Lost() <-chan struct{} { return l.lost }

func (l *Lease) renew(ctx context.Context) {
	defer close(l.done)
	clk := l.c.Clock()
	for {
		if clock.Sleep(ctx, clk, l.ttl/3) != nil {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, l.ttl/3)
		sent := clk.Now()
		_, err := l.c.AcquireMount(rctx, l.holder, l.ttl, false)
		cancel()
		var ae *zerr.AlreadyExistsError
		switch {
		case err == nil:
			l.renewals.WithLabelValues("ok").Inc()
			l.ok.Store(int64(sent))
			if e := l.fenced.Load(); e != nil && !e.Final {
				l.fenced.Store(nil)
				l.log.Warn("mount lease renewed again: writing resumes", "namespace", l.ns)
			}
		case errors.As(err, &ae):
			l.renewals.WithLabelValues("lost").Inc()
			l.fenced.Store(&fsvol.FencedError{Namespace: l.ns, Reason: "another mount holds the namespace's lease: " + err.Error(), Final: true})
			l.lostOnce.Do(func() { close(l.lost) })
			l.log.Error("mount lease lost to another mount: this mount stopped writing (unmount it)", "namespace", l.ns, "err", err)
			return
		case ctx.Err() != nil:
			return
		default:
			l.renewals.WithLabelValues("failed").Inc()
			if since := clk.Now() - time.Duration(l.ok.Load()); since >= l.ttl*2/3 && l.fenced.Load() == nil {
				l.fenced.Store(&fsvol.FencedError{Namespace: l.ns, Reason: fmt.Sprintf("the mount lease was not renewed for %v of its %v (the arbiter: %v); another mount could take it", since.Round(time.Second), l.ttl, err)})
				l.log.Error("mount lease not renewed in time: this mount stopped writing until a renewal succeeds", "namespace", l.ns, "err", err)
			} else {
				l.log.Warn("mount lease renewal failed (retried)", "namespace", l.ns, "err", err)
			}
		}
	}
}

// Release stops the renewals and gives the lease back (not when another
// mount took it). Call it once everything is written.
func (l *Lease) Release(ctx context.Context) error {
	l.stop()
	<-l.done
	if e := l.fenced.Load(); e != nil && e.Final {
		return nil
	}
	return l.c.ReleaseMount(ctx, l.holder)
}
