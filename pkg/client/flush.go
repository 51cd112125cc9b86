package client

import (
	"context"
	"errors"
	"slices"
	"sync"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
)

// DeviceRef names one drive of the cluster: a device index on a node.
// Durability is per drive (a Flush RPC is an fdatasync of one device), so
// callers that track what to flush track DeviceRefs, not v-zones.
type DeviceRef struct {
	Node   string
	Addr   string
	Device uint32
}

// Devices lists the distinct drives the v-zone's allocated stripe groups
// span, in layout order (loading the layout on first use).
func (v *VZone) Devices(ctx context.Context) ([]DeviceRef, error) {
	if err := v.ensureLayout(ctx); err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.devs != nil && v.devsGroups == len(v.groups) {
		return v.devs, nil
	}
	var out []DeviceRef
	for _, g := range v.groups {
		for _, z := range g.zones {
			d := DeviceRef{Node: z.node, Addr: z.addr, Device: z.dev}
			dup := false
			for _, o := range out {
				if o == d {
					dup = true
					break
				}
			}
			if !dup {
				out = append(out, d)
			}
		}
	}
	v.devs, v.devsGroups = out, len(v.groups)
	return out, nil
}

// DevicesOf lists the drives that a write of blocks [off, off+n) of the
// v-zone reaches under the layout cached now: every copy of each leg the
// range touches, and every zone of a parity group it touches (its parity
// and partial-parity legs too). A range no stripe group covers gets
// Devices (all of them). A caller uses it after a write returned, to flush
// no more drives than the write dirtied, never fewer (a write that the
// arbiter's reclaim moved lands through the new layout, which this reads).
func (v *VZone) DevicesOf(ctx context.Context, off, n uint64) ([]DeviceRef, error) {
	if err := v.ensureLayout(ctx); err != nil {
		return nil, err
	}
	_, groups := v.snapshot()
	var out []DeviceRef
	add := func(z pzone) {
		d := DeviceRef{Node: z.node, Addr: z.addr, Device: z.dev}
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	end := off + max(n, 1)
	covered := uint64(0)
	for _, g := range groups {
		lo, hi := max(off, g.start), min(end, g.start+g.capacity)
		if lo >= hi {
			continue
		}
		covered += hi - lo
		if g.parity || g.width <= 0 {
			for _, z := range g.zones {
				add(z)
			}
			continue
		}
		for _, l := range g.legs(lo, hi-lo) {
			for c := 0; c < g.copies(); c++ {
				if k := c*g.width + l.idx; k < len(g.zones) {
					add(g.zones[k])
				}
			}
		}
	}
	if covered < end-off {
		return v.Devices(ctx)
	}
	return out, nil
}

// FlushDevices sends one Flush (fdatasync) to each drive, all in parallel,
// and returns one error per drive (nil where that drive's flush succeeded),
// so a caller can forget exactly the drives that are now durable. Each call
// retries a transient failure until the client's retry deadline.
func (c *Client) FlushDevices(ctx context.Context, devs []DeviceRef) []error {
	errs := make([]error, len(devs))
	flush := func(i int) {
		d := devs[i]
		_, errs[i] = nodeCall(ctx, c, d.Node, d.Addr, "flush", func(ctx context.Context, n v1.ZonedDeviceClient) (*v1.FlushResponse, error) {
			return n.Flush(ctx, &v1.FlushRequest{Device: d.Device})
		})
		if errs[i] == nil {
			c.m.ops.WithLabelValues("flush").Inc()
		}
	}
	if len(devs) == 1 {
		flush(0)
		return errs
	}
	var wg sync.WaitGroup
	for i := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			flush(i)
		}()
	}
	wg.Wait()
	return errs
}

// Flush makes every acknowledged write of the v-zone durable against power
// loss of its drives: one fdatasync per distinct drive it spans, in parallel.
func (v *VZone) Flush(ctx context.Context) error {
	devs, err := v.Devices(ctx)
	if err != nil {
		return err
	}
	return errors.Join(v.c.FlushDevices(v.withRev(ctx), devs)...)
}
