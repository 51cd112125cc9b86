package zctl

import (
	"context"
	"fmt"

	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/fdpvol"
	"github.com/zonefleet/zonefleet/pkg/fdpvol/fdpnet"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// fsVolume is the volume a file system command runs on: fsvol over the
// v-zones of a zoned namespace, fdpvol over the LBAs of an fdp namespace.
type fsVolume interface {
	lfs.Volume
	Close(ctx context.Context) error
}

// fdpFSVolume is an fdpvol.Volume with fsVolume's Close, which gives the
// mount lease back (when it holds one). Embedding keeps the volume's
// optional interfaces (lfs.ClassOpener) visible to lfs.
type fdpFSVolume struct {
	*fdpvol.Volume
	lease *fdpnet.Lease
}

func (v fdpFSVolume) Close(ctx context.Context) error {
	if v.lease == nil {
		return nil
	}
	return v.lease.Release(ctx)
}

// fdpOption is a file-system option of a zoned namespace that an fdp
// namespace does not have: set is whether the user gave it.
type fdpOption struct {
	flag, why string
	set       bool
}

// openFSVolume opens the client's namespace as a file system volume: an
// fdp namespace through fdpvol (zones of one reclaim unit, each log on a
// placement handle of its own), refusing with a usage error an option in
// notFDP the user gave, and with zoned.MountHolder under the namespace's
// mount lease (fdpnet.Lease, taken before the volume changes anything, with
// zoned's TTL, ForceMount and Registerer); any other namespace through
// fsvol with zoned.
func openFSVolume(ctx context.Context, c *client.Client, zoned fsvol.Options, notFDP []fdpOption) (fsVolume, bool, error) {
	ns, err := c.GetNamespace(ctx)
	if err != nil {
		return nil, false, err
	}
	if ns.GetKind() != "fdp" {
		v, err := fsvol.New(ctx, c, zoned)
		if err != nil {
			return nil, false, err
		}
		return v, false, nil
	}
	for _, o := range notFDP {
		if o.set {
			return nil, true, usageErr(fmt.Errorf("--%s does not apply to fdp namespace %s: %s", o.flag, ns.GetName(), o.why))
		}
	}
	f, err := c.OpenFDP(ctx)
	if err != nil {
		return nil, true, err
	}
	var lease *fdpnet.Lease
	var o fdpvol.Options
	if zoned.MountHolder != "" {
		lease, err = fdpnet.AcquireLease(ctx, c, fdpnet.LeaseOptions{Holder: zoned.MountHolder, TTL: zoned.MountTTL,
			Force: zoned.ForceMount, Registerer: zoned.Registerer})
		if err != nil {
			return nil, true, err
		}
		o.Fence = lease.Fence
	}
	v, err := fdpvol.Open(ctx, fdpnet.Drive(f), o)
	if err != nil {
		if lease != nil {
			_ = lease.Release(context.WithoutCancel(ctx))
		}
		return nil, true, fmt.Errorf("fdp namespace %s: %w", ns.GetName(), err)
	}
	return fdpFSVolume{v, lease}, true, nil
}

// maxZonesNotFDP is --max-zones on an fdp namespace.
func maxZonesNotFDP(n int) fdpOption {
	return fdpOption{"max-zones", "its zones are its capacity in reclaim units", n != 0}
}
