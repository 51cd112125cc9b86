package fsvol

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// The mount lease (Options.MountHolder). One mount writes a namespace at a
// time: New takes the namespace's lease from the arbiter before the file
// system writes anything (AcquireMount; while another mount's lease runs it
// waits up to a TTL and a third for it to end, then fails with a
// *zerr.AlreadyExistsError naming the holder, unless Options.ForceMount) and
// a goroutine renews it every third of its TTL. The volume stops writing — every Write, Finish, Reset, open,
// TL_open, Compact and Flush fails with a *FencedError, which makes lfs
// read-only — when the arbiter answers that another holder has the lease
// (a forced takeover, or it expired while this process was stopped), or when
// no renewal succeeded for two thirds of the TTL (two renewals in a row
// failed: the lease may expire before the next one, and another mount could
// then take it, so the volume stops before the lease can end). A later
// successful renewal of its own lease lifts the second kind; the first is
// final. Reads go on. Close releases the
// lease. Without a holder (mkfs, fsck, tests) nothing is taken.

// FencedError is what the data path returns once the volume lost (or may
// have lost) its mount lease.
type FencedError struct {
	Namespace string
	Reason    string
	Final     bool // another mount has the lease (else: renewals failed; a successful one lifts it)
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("namespace %s: this mount stopped writing: %s", e.Namespace, e.Reason)
}

// Is makes a FencedError a zone-state error: not transient, so the file
// system turns read-only rather than retrying.
func (e *FencedError) Is(t error) bool { return t == zerr.ErrZoneState }

// leaseMetrics registers the lease's metrics with reg (nil: kept unexported).
func (v *Volume) leaseMetrics(reg prometheus.Registerer) {
	v.renewals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_fs_mount_lease_renewals_total",
		Help: "Renewals of the mount's namespace lease by result: ok, failed (the arbiter unreachable; writes stop after two thirds of the TTL without one), lost (another mount holds the lease: this mount stopped writing)."},
		[]string{"result"})
	for _, r := range []string{"ok", "failed", "lost"} {
		v.renewals.WithLabelValues(r) // every series from 0, so rate() sees the first failure
	}
	fenced := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "zonefleet_fs_mount_fenced",
		Help: "1 while this mount does not write because it lost, or could not renew, the namespace's mount lease."},
		func() float64 {
			if v.fencedErr() != nil {
				return 1
			}
			return 0
		})
	if reg != nil {
		reg.MustRegister(v.renewals, fenced)
	}
}

// fencedErr is the error of a fenced volume, nil while it may write.
//
// A holder also checks the lease's age on the clock at every call, not only
// when the renewal goroutine runs: a process stopped past its TTL (SIGSTOP,
// a VM paused, a long GC) wakes with its writers running before that
// goroutine notices, and by then another mount may own the namespace. The
// age counts from when the last successful renewal was sent (the arbiter
// started its TTL no earlier).
func (v *Volume) fencedErr() error {
	if e := v.fenced.Load(); e != nil {
		return e
	}
	if v.holder == "" {
		return nil
	}
	if since := v.c.Clock().Now() - time.Duration(v.leaseOK.Load()); since >= v.ttl*2/3 {
		return &FencedError{Namespace: v.ns, Reason: fmt.Sprintf("the mount lease was last renewed %v ago (TTL %v); writing waits for a renewal", since.Round(time.Millisecond), v.ttl)}
	}
	return nil
}

// acquireLease takes the lease (New). Refused because another holder has
// it, it waits for that lease to end — a mount that died (kill -9, a lost
// host) stops renewing and its lease ends within a TTL — and gives up after
// a TTL and a third without success: a live mount renews every third of
// its TTL and keeps it (like ext4's multiple-mount protection).
func (v *Volume) acquireLease(ctx context.Context, force bool) error {
	clk := v.c.Clock()
	deadline := clk.Now() + v.ttl + v.ttl/3 + time.Second
	sent := clk.Now()
	l, err := v.c.AcquireMount(ctx, v.holder, v.ttl, force)
	for waited := false; err != nil; waited = true {
		var ae *zerr.AlreadyExistsError
		if !errors.As(err, &ae) || clk.Now() >= deadline {
			return err
		}
		if !waited {
			v.log.Warn("the namespace is mounted elsewhere, or its last mount died: waiting for that mount's lease to end",
				"namespace", v.ns, "up_to", (deadline - clk.Now()).Round(time.Second), "holder", ae.Name)
		}
		if serr := clock.Sleep(ctx, clk, min(time.Second, v.ttl/4)); serr != nil {
			return errors.Join(err, serr)
		}
		sent = clk.Now()
		l, err = v.c.AcquireMount(ctx, v.holder, v.ttl, force)
	}
	v.leaseOK.Store(int64(sent))
	v.log.Info("mount lease taken", "namespace", l.GetNamespace(), "holder", v.holder, "ttl", v.ttl, "forced", force)
	lctx, lcancel := context.WithCancel(v.bg)
	v.leaseStop, v.leaseDone = lcancel, make(chan struct{})
	go v.renewLoop(lctx)
	return nil
}

func (v *Volume) renewLoop(lctx context.Context) {
	defer close(v.leaseDone)
	clk := v.c.Clock()
	for {
		if clock.Sleep(lctx, clk, v.ttl/3) != nil {
			return
		}
		ctx, cancel := context.WithTimeout(lctx, v.ttl/3)
		sent := clk.Now()
		_, err := v.c.AcquireMount(ctx, v.holder, v.ttl, false)
		cancel()
		now := clk.Now()
		var ae *zerr.AlreadyExistsError
		switch {
		case err == nil:
			v.renewals.WithLabelValues("ok").Inc()
			v.leaseOK.Store(int64(sent))
			if e := v.fenced.Load(); e != nil && !e.Final {
				v.fenced.Store(nil)
				v.log.Warn("mount lease renewed again: writing resumes", "namespace", v.ns)
			}
		case errors.As(err, &ae):
			v.renewals.WithLabelValues("lost").Inc()
			v.fenced.Store(&FencedError{Namespace: v.ns, Reason: "another mount holds the namespace's lease: " + err.Error(), Final: true})
			v.log.Error("mount lease lost to another mount: this mount stopped writing (unmount it)", "namespace", v.ns, "err", err)
			return
		case lctx.Err() != nil:
			return
		default:
			v.renewals.WithLabelValues("failed").Inc()
			if since := now - time.Duration(v.leaseOK.Load()); since >= v.ttl*2/3 && v.fenced.Load() == nil {
				v.fenced.Store(&FencedError{Namespace: v.ns, Reason: fmt.Sprintf("the mount lease was not renewed for %v of its %v (the arbiter: %v); another mount could take it", since.Round(time.Second), v.ttl, err)})
				v.log.Error("mount lease not renewed in time: this mount stopped writing until a renewal succeeds", "namespace", v.ns, "err", err)
			} else {
				v.log.Warn("mount lease renewal failed (retried)", "namespace", v.ns, "err", err)
			}
		}
	}
}

// releaseLease stops the renewals and gives the lease back (Close, once
// everything else is done).
func (v *Volume) releaseLease(ctx context.Context) error {
	if v.leaseStop == nil {
		return nil
	}
	v.leaseStop()
	<-v.leaseDone
	if e := v.fenced.Load(); e != nil && e.Final {
		return nil
	}
	return v.c.ReleaseMount(ctx, v.holder)
}
