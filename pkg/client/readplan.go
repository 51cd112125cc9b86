package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxReadRanges mirrors node.MaxReadRanges (the client does not import the
// node package).
const maxReadRanges = 256

// readLegRef is one leg of a read with where it lives.
type readLegRef struct {
	g   *group
	l   *leg
	z   pzone
	lba uint64 // first LBA on the device
	bs  uint64 // the device's block size
}

func (r readLegRef) bytes() uint64 { return r.l.blocks * r.bs }

// readCall is one RPC of a read: the legs of one node that fit in one
// unary answer (ReadV; Read for a single leg), or one leg too large for it
// (ReadStream).
type readCall struct {
	node, addr string
	legs       []readLegRef
	bytes      uint64
	stream     bool
}

// planRead groups the legs of a read into calls: one per node as far as
// the unary limit allows, in the order of the groups (the congestion
// windows are taken in that order, so concurrent reads cannot wait on each
// other in a cycle).
func planRead(refs []readLegRef) []*readCall {
	var calls []*readCall
	for _, r := range refs {
		n := r.bytes()
		if n > wire.MaxUnaryData {
			calls = append(calls, &readCall{node: r.z.node, addr: r.z.addr, legs: []readLegRef{r}, bytes: n, stream: true})
			continue
		}
		var c *readCall
		for _, x := range calls {
			if !x.stream && x.node == r.z.node && x.addr == r.z.addr && x.bytes+n <= wire.MaxUnaryData && len(x.legs) < maxReadRanges {
				c = x
				break
			}
		}
		if c == nil {
			c = &readCall{node: r.z.node, addr: r.z.addr}
			calls = append(calls, c)
		}
		c.legs = append(c.legs, r)
		c.bytes += n
	}
	return calls
}

// readAdmission is one group's part of a read I/O in its congestion window.
type readAdmission struct {
	index uint32
	cc    *congestion
	units float64
}

// admitRead takes the congestion windows a read I/O needs: once per stripe
// group for the whole I/O (eZNS Algorithm 1 admits an I/O, not each of its
// legs or node calls), in group-index order so that concurrent reads never
// wait on each other in a cycle. An I/O costs a group ReadUnits of the legs
// it has there: one unit per device command (physical zone touched), not per
// stripe. On error nothing is held.
func admitRead(ctx context.Context, calls []*readCall) ([]readAdmission, error) {
	var adms []readAdmission
	legs := map[*congestion]int{}
	for _, c := range calls {
		for _, r := range c.legs {
			if legs[r.g.cc] == 0 {
				adms = append(adms, readAdmission{index: r.g.index, cc: r.g.cc})
			}
			legs[r.g.cc]++
		}
	}
	for i := range adms {
		adms[i].units = ReadUnits(legs[adms[i].cc])
	}
	slices.SortFunc(adms, func(a, b readAdmission) int { return cmp.Compare(a.index, b.index) })
	for i, a := range adms {
		if err := a.cc.acquire(ctx, a.units); err != nil {
			for _, b := range adms[:i] {
				b.cc.release(b.units, 0, false)
			}
			return nil, err
		}
	}
	return adms, nil
}

// runCalls admits the read I/O by its groups' congestion windows, runs its
// calls in parallel (the last on the caller's goroutine: a read of one call
// starts no goroutine) and gives the windows back with the I/O's latency
// (its slowest call).
func (v *VZone) runCalls(ctx context.Context, calls []*readCall, out []byte, base uint64) error {
	adms, err := admitRead(ctx, calls)
	if err != nil {
		return err
	}
	lats := make([]time.Duration, len(calls))
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls[:len(calls)-1] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lats[i], errs[i] = v.runCall(ctx, c, out, base)
		}()
	}
	last := len(calls) - 1
	lats[last], errs[last] = v.runCall(ctx, calls[last], out, base)
	wg.Wait()
	err = errors.Join(errs...)
	lat := slices.Max(lats)
	for _, a := range adms {
		a.cc.release(a.units, lat, err == nil)
	}
	return err
}

// runCall runs one node call of a read and returns its latency.
func (v *VZone) runCall(ctx context.Context, c *readCall, out []byte, base uint64) (time.Duration, error) {
	if len(c.legs) == 1 {
		r := c.legs[0]
		return v.readLeg(ctx, r.z, r.l, base, out, r.bs)
	}
	return v.readV(ctx, c, out, base)
}

// readV reads the legs of call c (one node) with one ReadV; a node that
// does not know ReadV yet (an older version) is read leg by leg.
func (v *VZone) readV(ctx context.Context, c *readCall, out []byte, base uint64) (time.Duration, error) {
	req := &v1.ReadVRequest{Ranges: make([]*v1.ReadRange, len(c.legs))}
	for i, r := range c.legs {
		req.Ranges[i] = &v1.ReadRange{Device: r.z.dev, Lba: r.lba, Blocks: uint32(r.l.blocks)}
	}
	lat, err := nodeConnCall(ctx, v.c, c.node, c.addr, "read", func(ctx context.Context, cc grpc.ClientConnInterface) (time.Duration, error) {
		var ch wire.ReadChunk
		if err := cc.Invoke(ctx, v1.ZonedDevice_ReadV_FullMethodName, req, &ch); err != nil {
			return 0, err
		}
		defer ch.Free()
		scs := make([]scatter, len(c.legs))
		for i, r := range c.legs {
			scs[i] = scatter{l: r.l, out: out, base: base, bs: r.bs}
		}
		i := 0
		for _, b := range ch.Data() {
			p := b.ReadOnlyData()
			for len(p) > 0 && i < len(scs) {
				want := c.legs[i].bytes() - scs[i].filled
				k := min(uint64(len(p)), want)
				scs[i].write(p[:k])
				p = p[k:]
				if scs[i].filled == c.legs[i].bytes() {
					i++
				}
			}
			if len(p) > 0 {
				return 0, fmt.Errorf("long read: %d bytes more than the %d asked", len(p), c.bytes)
			}
		}
		if i != len(scs) {
			return 0, fmt.Errorf("short read: %d of %d bytes", ch.Data().Len(), c.bytes)
		}
		return time.Duration(ch.Resp.GetLatencyNs()), nil
	})
	if status.Code(errors.Unwrap(err)) == codes.Unimplemented || status.Code(err) == codes.Unimplemented {
		var worst time.Duration
		for _, r := range c.legs {
			l, err := v.readLeg(ctx, r.z, r.l, base, out, r.bs)
			if err != nil {
				return 0, err
			}
			worst = max(worst, l)
		}
		return worst, nil
	}
	return lat, err
}

// nodeConnCall is nodeCall with the node's connection, for calls whose
// answer is received into a wire.ReadChunk (no copy of the data into a
// message: the client copies from the receive buffers to the caller's).
func nodeConnCall[T any](ctx context.Context, c *Client, node, addr, op string, fn func(context.Context, grpc.ClientConnInterface) (T, error)) (T, error) {
	return nodeCall(ctx, c, node, addr, op, func(ctx context.Context, _ v1.ZonedDeviceClient) (T, error) {
		e, err := c.nodeConnOf(node, addr)
		if err != nil {
			var zero T
			return zero, err
		}
		return fn(ctx, e.cc)
	})
}

var readStreamDesc = &grpc.StreamDesc{StreamName: "ReadStream", ServerStreams: true}

// readLeg reads leg l of zone z into its pieces of out; it returns the
// latency the node reports (its device-slot wait and the drive's modelled
// latency). The answer's bytes are copied straight from the
// receive buffers to their places.
func (v *VZone) readLeg(ctx context.Context, z pzone, l *leg, base uint64, out []byte, bs uint64) (time.Duration, error) {
	d, err := v.c.device(ctx, z)
	if err != nil {
		return 0, err
	}
	lba := uint64(z.zone)*d.zoneSize + l.zoff
	want := l.blocks * d.bs
	req := &v1.ReadRequest{Device: z.dev, Lba: lba, Blocks: uint32(l.blocks)}
	lat, err := nodeConnCall(ctx, v.c, z.node, z.addr, "read", func(ctx context.Context, cc grpc.ClientConnInterface) (time.Duration, error) {
		sc := scatter{l: l, out: out, base: base, bs: bs}
		var lat time.Duration
		if want <= wire.MaxUnaryData {
			var ch wire.ReadChunk
			if err := cc.Invoke(ctx, v1.ZonedDevice_Read_FullMethodName, req, &ch); err != nil {
				return 0, err
			}
			for _, b := range ch.Data() {
				sc.write(b.ReadOnlyData())
			}
			ch.Free()
			lat = time.Duration(ch.Resp.GetLatencyNs())
		} else {
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			s, err := cc.NewStream(sctx, readStreamDesc, v1.ZonedDevice_ReadStream_FullMethodName)
			if err != nil {
				return 0, err
			}
			if err := s.SendMsg(req); err != nil {
				return 0, err
			}
			if err := s.CloseSend(); err != nil {
				return 0, err
			}
			for {
				var ch wire.ReadChunk
				err := s.RecvMsg(&ch)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return 0, err
				}
				for _, b := range ch.Data() {
					sc.write(b.ReadOnlyData())
				}
				ch.Free()
				lat += time.Duration(ch.Resp.GetLatencyNs())
			}
		}
		if sc.filled != want {
			return 0, fmt.Errorf("short read: %d of %d bytes", sc.filled, want)
		}
		return lat, nil
	})
	return lat, err
}
