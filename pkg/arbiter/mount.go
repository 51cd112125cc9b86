package arbiter

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Mount leases. A namespace's file system is written by one mount at a
// time: two mounts each believe they own the segments, and the second's
// mount resets zones the first still writes (without the lease a namespace
// mounted twice comes up read-write twice). zctl mount takes the lease before it
// writes anything and renews it every third of its TTL; the lease lives in
// the namespace's record (one etcd transaction per renewal), on the
// arbiter's clock. A lease that is not renewed expires and the next mount
// takes it; force takes it from a live holder, whose next renewal then
// fails and whose volume stops writing (pkg/fsvol).

// DefaultMountTTL is a mount lease's TTL when the request gives none.
const DefaultMountTTL = 15 * time.Second

// MaxMountTTL bounds a requested TTL.
const MaxMountTTL = time.Hour

// MountLease is the holder of a namespace's mount lease and its end.
type MountLease struct {
	Namespace, Holder string
	Expires           time.Time
}

// AcquireMount takes or renews namespace's mount lease for holder. It fails
// with *zerr.AlreadyExistsError while another holder's lease runs (unless
// force).
func (a *Arbiter) AcquireMount(ctx context.Context, namespace, holder string, ttl time.Duration, force bool) (MountLease, error) {
	if holder == "" || len(holder) > 256 {
		return MountLease{}, &zerr.InvalidArgumentError{Field: "holder", Reason: "must be 1 to 256 bytes"}
	}
	if ttl == 0 {
		ttl = DefaultMountTTL
	}
	if ttl < time.Second || ttl > MaxMountTTL {
		return MountLease{}, &zerr.InvalidArgumentError{Field: "ttl_seconds", Reason: fmt.Sprintf("must be in [1, %d]", int(MaxMountTTL/time.Second))}
	}
	var out MountLease
	err := a.mutate(ctx, func(st *State, _ *index) ([]clientv3.Op, error) {
		ns, err := getNS(st, namespace)
		if err != nil {
			return nil, err
		}
		now := a.cfg.Now()
		if ns.MountHolder != "" && ns.MountHolder != holder && now.UnixNano() < ns.MountExpires && !force {
			left := time.Duration(ns.MountExpires - now.UnixNano()).Round(time.Second)
			return nil, &zerr.AlreadyExistsError{Kind: "mount of namespace " + namespace,
				Name: fmt.Sprintf("%s (its lease ends in %v unless renewed; force takes it over)", ns.MountHolder, left)}
		}
		ns.MountHolder, ns.MountExpires = holder, now.Add(ttl).UnixNano()
		out = MountLease{Namespace: namespace, Holder: holder, Expires: time.Unix(0, ns.MountExpires)}
		return nil, nil
	})
	if err != nil {
		return MountLease{}, err
	}
	return out, nil
}

// ReleaseMount ends holder's lease on namespace; a no-op when holder does
// not hold it.
func (a *Arbiter) ReleaseMount(ctx context.Context, namespace, holder string) error {
	return a.mutate(ctx, func(st *State, _ *index) ([]clientv3.Op, error) {
		ns, err := getNS(st, namespace)
		if err != nil {
			return nil, err
		}
		if ns.MountHolder == holder {
			ns.MountHolder, ns.MountExpires = "", 0
		}
		return nil, nil
	})
}
