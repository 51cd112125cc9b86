package client

import (
	"context"
	"fmt"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Overwrite updates blocks [off, off+len(data)/block size) of the v-zone,
// all below its write pointer, in place: the drives' budget-based in-place
// update (ZMS), one FUA request per physical zone it touches, durable when
// it returns. A drive whose budget is spent answers zerr.IPUBudgetError;
// legs already updated keep their new contents (each block is old or new).
// Only stripe groups without redundancy update in place: replicas or a
// parity leg updated one after the other could disagree after a crash, so a
// mirrored or parity group, or a v-zone in threaded logging, returns a
// zerr.InvalidArgumentError and changes nothing.
func (v *VZone) Overwrite(ctx context.Context, off uint64, data []byte) error {
	if err := v.ensureLayout(ctx); err != nil {
		return err
	}
	ctx = v.withRev(ctx)
	bs, err := v.blockSize(ctx)
	if err != nil {
		return err
	}
	if len(data) == 0 || uint64(len(data))%bs != 0 {
		return &zerr.InvalidArgumentError{Field: "data", Reason: fmt.Sprintf("%d bytes is not a positive multiple of the %d-byte block", len(data), bs)}
	}
	if len(data) > wire.MaxUnaryData {
		return &zerr.InvalidArgumentError{Field: "data", Reason: fmt.Sprintf("%d bytes exceed the %d-byte limit of an in-place update", len(data), wire.MaxUnaryData)}
	}
	n := uint64(len(data)) / bs
	wp, err := v.writePointer(ctx)
	if err != nil {
		return err
	}
	if off+n > wp {
		return &zerr.InvalidArgumentError{Field: "offset", Reason: fmt.Sprintf("in-place update of [%d, %d) reaches past the write pointer %d", off, off+n, wp)}
	}
	if v.isTL() {
		return &zerr.InvalidArgumentError{Field: "vzone", Reason: "in threaded logging: no in-place update"}
	}
	_, groups := v.snapshot()
	type part struct {
		g   *group
		off uint64
		n   uint64
	}
	var parts []part
	for cur := off; cur < off+n; {
		var g *group
		for _, x := range groups {
			if cur >= x.start && cur < x.start+x.capacity {
				g = x
			}
		}
		if g == nil {
			return &zerr.InvalidArgumentError{Field: "offset", Reason: fmt.Sprintf("no stripe group holds offset %d", cur)}
		}
		if g.parity || g.copies() > 1 {
			return &zerr.InvalidArgumentError{Field: "vzone", Reason: "a redundant stripe group is not updated in place"}
		}
		k := min(off+n-cur, g.start+g.capacity-cur)
		parts = append(parts, part{g, cur, k})
		cur += k
	}
	for _, p := range parts {
		for _, l := range p.g.legs(p.off, p.n) {
			var buf []byte
			for _, pc := range l.pieces {
				lo := (pc.voff - off) * bs
				buf = append(buf, data[lo:lo+pc.n*bs]...)
			}
			if err := v.overwriteLeg(ctx, p.g.zones[l.idx], l.zoff, buf); err != nil {
				return err
			}
		}
	}
	v.c.m.ops.WithLabelValues("write").Inc()
	v.c.m.bytes.WithLabelValues("write").Add(float64(len(data)))
	return nil
}

// overwriteLeg sends one in-place update to a physical zone (a retry
// rewrites the same contents: idempotent).
func (v *VZone) overwriteLeg(ctx context.Context, z pzone, zoff uint64, buf []byte) error {
	d, err := v.c.device(ctx, z)
	if err != nil {
		return err
	}
	lba := uint64(z.zone)*d.zoneSize + zoff
	_, err = nodeCall(ctx, v.c, z.node, z.addr, "write", func(ctx context.Context, n v1.ZonedDeviceClient) (struct{}, error) {
		_, err := n.Write(ctx, &v1.WriteRequest{Device: z.dev, Lba: lba, Data: buf, Fua: true, Overwrite: true})
		return struct{}{}, err
	})
	return err
}
