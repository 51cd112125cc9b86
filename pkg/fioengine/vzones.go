package fioengine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// vzones is a tenant's namespace as a zoned device: zone i is v-zone i,
// every zone as large as a v-zone's capacity. A write at the start of an
// empty zone opens that v-zone (client.OpenVZoneID); a write that fills a
// zone finishes its v-zone, as a ZNS drive makes a zone full when its write
// pointer reaches the capacity, so the namespace's active v-zones are those
// fio has open; a reset gives the v-zone back to the arbiter. The open
// limit is the namespace's grant (max active v-zones).
type vzones struct {
	c   *client.Client
	geo Geometry
	bs  uint64

	mu   sync.Mutex
	open map[uint64]bool // v-zones this target opened or found open, not reset or full since
}

func openVZones(ctx context.Context, cfg client.Config, o Options) (Target, error) {
	c, err := client.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	ns, err := c.GetNamespace(ctx)
	if err != nil {
		c.Close()
		return nil, err
	}
	zones := o.Zones
	if zones == 0 {
		zones = ns.GetVzones()
	}
	if ns.GetVzones() > 0 && zones > ns.GetVzones() {
		c.Close()
		return nil, &zerr.InvalidArgumentError{Field: "zones", Reason: fmt.Sprintf("%d: namespace %s holds v-zones 0..%d", zones, o.Namespace, ns.GetVzones()-1)}
	}
	if zones == 0 {
		c.Close()
		return nil, &zerr.InvalidArgumentError{Field: "zones", Reason: fmt.Sprintf("namespace %s has no v-zone quota: give zones=N (the v-zones 0..N-1 the job may use)", o.Namespace)}
	}
	info, err := c.VZone(0).ReportZone(ctx)
	if err != nil {
		c.Close()
		return nil, err
	}
	if info.Capacity == 0 || info.BlockSize == 0 {
		c.Close()
		return nil, &zerr.InvalidArgumentError{Field: "namespace", Reason: fmt.Sprintf("namespace %s: v-zone 0 reports no capacity", o.Namespace)}
	}
	v := &vzones{c: c, bs: info.BlockSize, open: map[uint64]bool{}}
	v.geo = Geometry{BlockSize: info.BlockSize, ZoneSize: info.Capacity * info.BlockSize, ZoneCap: info.Capacity * info.BlockSize,
		Zones: zones, MaxOpen: ns.GetMaxActiveVzones()}
	return v, nil
}

func (v *vzones) Geometry() Geometry { return v.geo }

func (v *vzones) Close() { v.c.Close() }

func (v *vzones) Report(ctx context.Context, first uint64, n int) ([]Zone, error) {
	listed, err := v.c.ListVZones(ctx)
	if err != nil {
		return nil, err
	}
	nonEmpty := map[uint64]bool{}
	for _, l := range listed {
		nonEmpty[l.GetId()] = true
	}
	var out []Zone
	for z := first; z < v.geo.Zones && len(out) < n; z++ {
		start := z * v.geo.ZoneSize
		zone := Zone{Start: start, WP: start, Len: v.geo.ZoneSize, Cap: v.geo.ZoneCap, Cond: CondEmpty}
		if nonEmpty[z] {
			info, err := v.c.VZone(z).ReportZone(ctx)
			if err != nil {
				return nil, err
			}
			zone.WP = start + info.WritePointer*v.bs
			zone.Cap = min(info.Capacity*v.bs, v.geo.ZoneSize)
			switch info.State {
			case "full":
				zone.Cond, zone.WP = CondFull, start+zone.Cap
			case "open":
				zone.Cond = CondImpOpen
				if zone.WP >= start+zone.Cap {
					zone.Cond = CondFull
				}
				v.mu.Lock()
				v.open[z] = true
				v.mu.Unlock()
			}
		}
		out = append(out, zone)
	}
	return out, nil
}

// locate splits a byte range into its v-zone, block offset and block count.
func (v *vzones) locate(off uint64, n int) (z, boff uint64, err error) {
	if err := checkRange(v.geo, off, n); err != nil {
		return 0, 0, err
	}
	z = off / v.geo.ZoneSize
	if (off+uint64(n)-1)/v.geo.ZoneSize != z {
		return 0, 0, &zerr.InvalidArgumentError{Field: "io", Reason: fmt.Sprintf("offset %d length %d crosses a zone boundary", off, n)}
	}
	return z, (off - z*v.geo.ZoneSize) / v.bs, nil
}

func (v *vzones) Read(ctx context.Context, off uint64, buf []byte) error {
	z, boff, err := v.locate(off, len(buf))
	if err != nil {
		return err
	}
	return v.c.VZone(z).ReadInto(ctx, boff, buf)
}

// opened makes sure v-zone z is open before a write at its start.
func (v *vzones) opened(ctx context.Context, z, boff uint64) error {
	v.mu.Lock()
	known := v.open[z]
	v.mu.Unlock()
	if known || boff != 0 {
		return nil
	}
	if _, _, err := v.c.OpenVZoneID(ctx, z); err != nil && !errors.Is(err, zerr.ErrZoneState) {
		return err // (ZoneState: open already, another job's or an earlier run's)
	}
	v.mu.Lock()
	v.open[z] = true
	v.mu.Unlock()
	return nil
}

// filled finishes v-zone z when a write ended at its capacity.
func (v *vzones) filled(ctx context.Context, z, end uint64) error {
	if end*v.bs < v.geo.ZoneCap {
		return nil
	}
	v.mu.Lock()
	delete(v.open, z)
	v.mu.Unlock()
	return v.c.VZone(z).Finish(ctx)
}

func (v *vzones) Write(ctx context.Context, off uint64, buf []byte) error {
	z, boff, err := v.locate(off, len(buf))
	if err != nil {
		return err
	}
	if err := v.opened(ctx, z, boff); err != nil {
		return err
	}
	if err := v.c.VZone(z).Write(ctx, boff, buf); err != nil {
		return err
	}
	return v.filled(ctx, z, boff+uint64(len(buf))/v.bs)
}

func (v *vzones) Append(ctx context.Context, off uint64, buf []byte) error {
	z, boff, err := v.locate(off, len(buf))
	if err != nil {
		return err
	}
	if err := v.opened(ctx, z, boff); err != nil {
		return err
	}
	at, err := v.c.VZone(z).Append(ctx, buf)
	if err != nil {
		return err
	}
	if at != boff {
		return &zerr.WritePointerError{Zone: z, Expected: at, Got: boff}
	}
	return v.filled(ctx, z, boff+uint64(len(buf))/v.bs)
}

func (v *vzones) Reset(ctx context.Context, z uint64) error {
	if z >= v.geo.Zones {
		return &zerr.OutOfRangeError{LBA: z * v.geo.ZoneSize / v.bs, Count: v.geo.ZoneSize / v.bs, Limit: v.geo.Size() / v.bs}
	}
	v.mu.Lock()
	delete(v.open, z)
	v.mu.Unlock()
	return v.c.VZone(z).Reset(ctx)
}

func (v *vzones) Flush(ctx context.Context) error {
	v.mu.Lock()
	var zones []uint64
	for z := range v.open {
		zones = append(zones, z)
	}
	v.mu.Unlock()
	var errs []error
	for _, z := range zones {
		errs = append(errs, v.c.VZone(z).Flush(ctx))
	}
	return errors.Join(errs...)
}
