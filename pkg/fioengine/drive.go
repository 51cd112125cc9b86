package fioengine

import (
	"context"
	"fmt"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/daemon"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc/metadata"
)

// drive is one drive of a node, reached with the admin credential like
// `zctl zone`: its zones are the target's zones, one to one.
type drive struct {
	c      *client.Client
	dev    v1.ZonedDeviceClient
	md     metadata.MD // the admin token (and namespace) every call carries
	index  uint32
	geo    Geometry
	bs     uint64
	bg     context.Context
	cancel context.CancelFunc
}

func openDrive(ctx context.Context, cfg client.Config, o Options) (Target, error) {
	var (
		c   *client.Client
		err error
	)
	addr := o.Addr
	if addr == "" {
		if c, err = client.New(ctx, cfg); err != nil {
			return nil, err
		}
		n, err := c.GetNode(ctx, o.Node)
		if err != nil {
			c.Close()
			return nil, err
		}
		addr = n.GetAddr()
	} else {
		c = client.NewDirect(cfg)
	}
	dev, dctx, err := c.Device(o.Node, addr)
	if err != nil {
		c.Close()
		return nil, err
	}
	md, _ := metadata.FromOutgoingContext(dctx)
	d := &drive{c: c, dev: dev, md: md, index: o.Device}
	d.bg, d.cancel = context.WithCancel(context.Background())
	id, err := dev.Identify(d.ctx(ctx), &v1.IdentifyRequest{Device: o.Device})
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("node %s (%s) device %d: %w", o.Node, addr, o.Device, err)
	}
	d.bs = uint64(id.GetBlockSize())
	d.geo = Geometry{BlockSize: d.bs, ZoneSize: id.GetZoneSize() * d.bs, ZoneCap: id.GetZoneCapacity() * d.bs,
		Zones: uint64(id.GetNumZones()), MaxOpen: id.GetMaxOpenZones()}
	if d.bs == 0 || d.geo.ZoneSize == 0 || d.geo.Zones == 0 {
		d.Close()
		return nil, &zerr.InvalidArgumentError{Field: "device", Reason: fmt.Sprintf("node %s device %d reports no zones", o.Node, o.Device)}
	}
	return d, nil
}

// ctx carries the credential metadata on ctx.
func (d *drive) ctx(ctx context.Context) context.Context {
	return metadata.NewOutgoingContext(ctx, d.md)
}

func (d *drive) Geometry() Geometry { return d.geo }

func (d *drive) Close() {
	d.cancel()
	d.c.Close()
}

func (d *drive) Report(ctx context.Context, first uint64, n int) ([]Zone, error) {
	var out []Zone
	for n > 0 && first < d.geo.Zones {
		r, err := d.dev.ReportZones(d.ctx(ctx), &v1.ReportZonesRequest{Device: d.index, StartZone: uint32(first), MaxZones: uint32(min(n, 4096))})
		if err != nil {
			return nil, err
		}
		for _, z := range r.GetZones() {
			if n == 0 {
				break
			}
			out = append(out, d.zone(z))
			n--
		}
		if !r.GetMore() || len(r.GetZones()) == 0 {
			break
		}
		first = uint64(r.GetNextStartZone())
	}
	return out, nil
}

func (d *drive) zone(z *v1.ZoneDescriptor) Zone {
	start := z.GetStartLba() * d.bs
	return Zone{Start: start, WP: z.GetWritePointer() * d.bs, Len: d.geo.ZoneSize, Cap: z.GetCapacity() * d.bs, Cond: condOf(z.GetState())}
}

func condOf(s v1.ZoneState) Cond {
	switch s {
	case v1.ZoneState_ZONE_STATE_IMPLICIT_OPEN:
		return CondImpOpen
	case v1.ZoneState_ZONE_STATE_EXPLICIT_OPEN:
		return CondExpOpen
	case v1.ZoneState_ZONE_STATE_CLOSED:
		return CondClosed
	case v1.ZoneState_ZONE_STATE_FULL:
		return CondFull
	case v1.ZoneState_ZONE_STATE_READ_ONLY:
		return CondReadOnly
	case v1.ZoneState_ZONE_STATE_OFFLINE:
		return CondOffline
	}
	return CondEmpty
}

// piece is the most one unary call carries (the node's limit).
const piece = daemon.MaxUnaryData

func (d *drive) Read(ctx context.Context, off uint64, buf []byte) error {
	if err := checkRange(d.geo, off, len(buf)); err != nil {
		return err
	}
	ctx = d.ctx(ctx)
	for done := 0; done < len(buf); {
		n := min(len(buf)-done, piece)
		r, err := d.dev.Read(ctx, &v1.ReadRequest{Device: d.index, Lba: (off + uint64(done)) / d.bs, Blocks: uint32(uint64(n) / d.bs)})
		if err != nil {
			return err
		}
		if len(r.GetData()) != n {
			return &zerr.CorruptError{Path: "read", Reason: fmt.Sprintf("asked %d bytes at %d, got %d", n, off+uint64(done), len(r.GetData()))}
		}
		copy(buf[done:], r.GetData())
		done += n
	}
	return nil
}

func (d *drive) Write(ctx context.Context, off uint64, buf []byte) error {
	if err := checkRange(d.geo, off, len(buf)); err != nil {
		return err
	}
	ctx = d.ctx(ctx)
	for done := 0; done < len(buf); {
		n := min(len(buf)-done, piece)
		if _, err := d.dev.Write(ctx, &v1.WriteRequest{Device: d.index, Lba: (off + uint64(done)) / d.bs, Data: buf[done : done+n]}); err != nil {
			return err
		}
		done += n
	}
	return nil
}

func (d *drive) Append(ctx context.Context, off uint64, buf []byte) error {
	if err := checkRange(d.geo, off, len(buf)); err != nil {
		return err
	}
	ctx = d.ctx(ctx)
	zone := off / d.geo.ZoneSize
	for done := 0; done < len(buf); {
		n := min(len(buf)-done, piece)
		r, err := d.dev.Append(ctx, &v1.AppendRequest{Device: d.index, Zone: uint32(zone), Data: buf[done : done+n]})
		if err != nil {
			return err
		}
		if want := (off + uint64(done)) / d.bs; r.GetLba() != want {
			return &zerr.WritePointerError{Zone: zone, Expected: r.GetLba(), Got: want}
		}
		done += n
	}
	return nil
}

func (d *drive) Reset(ctx context.Context, z uint64) error {
	if z >= d.geo.Zones {
		return &zerr.OutOfRangeError{LBA: z * d.geo.ZoneSize / d.bs, Count: d.geo.ZoneSize / d.bs, Limit: d.geo.Size() / d.bs}
	}
	_, err := d.dev.ZoneManagement(d.ctx(ctx), &v1.ZoneManagementRequest{Device: d.index, Zone: uint32(z), Action: v1.ZoneAction_ZONE_ACTION_RESET})
	return err
}

func (d *drive) Flush(ctx context.Context) error {
	_, err := d.dev.Flush(d.ctx(ctx), &v1.FlushRequest{Device: d.index})
	return err
}
