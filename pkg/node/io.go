package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
)

// StreamChunkBytes is the largest piece a stream carries in one message and
// the node hands to the device in one call.
const StreamChunkBytes = 1 << 20

func (d *device) blocksOf(field string, data []byte) (uint64, error) {
	return d.blocksOfLen(field, len(data))
}

func (d *device) blocksOfLen(field string, size int) (uint64, error) {
	if size == 0 {
		return 0, &zerr.InvalidArgumentError{Field: field, Reason: "is empty"}
	}
	if size%d.geo.bs != 0 {
		return 0, &zerr.InvalidArgumentError{Field: field, Reason: fmt.Sprintf("%d bytes is not a multiple of the %d-byte block", size, d.geo.bs)}
	}
	return uint64(size / d.geo.bs), nil
}

// io runs one device operation for namespace ns in a WRR slot and records it.
// A read's result counts from the slot request (FromSlotRequest): its
// latency, which the client's read congestion control receives, includes
// the wait for the slot.
func (s *Service) io(ctx context.Context, d *device, op string, bytes int, fn func() (zns.IOResult, error)) (zns.IOResult, error) {
	ns := s.namespace(ctx)
	asked := d.dev.Clock().Now()
	if err := d.wrr.Acquire(ctx, ns); err != nil {
		return zns.IOResult{}, err
	}
	res, err := fn()
	d.wrr.Release()
	if op == "read" && err == nil {
		res = FromSlotRequest(asked, res)
	}
	s.m.observe(d.idx, ns, op, bytes, res.Latency(), err)
	return res, err
}

// FromSlotRequest is the drive's result res of a read whose device slot
// (WRR) was requested at asked, submitted from the request instead: its
// Latency is the wait for the slot plus the drive's latency. That is the
// read latency the node reports (ReadResponse.latency_ns) and the delay of
// eZNS's read congestion control (§4.5.1: the NVMe command latency, whose
// submission queue and arbitration — here the WRR — precede the drive).
// Exported so that the paper harness (zctl bench paper) reports reads as
// the node does. With the off clock both times are 0.
func FromSlotRequest(asked time.Duration, res zns.IOResult) zns.IOResult {
	res.Submitted = min(res.Submitted, asked)
	return res
}

// write admits, writes and feeds the admission monitor.
func (s *Service) write(ctx context.Context, d *device, op string, lba uint64, data []byte, fl zns.Flags) (zns.IOResult, error) {
	return s.writeV(ctx, d, op, lba, [][]byte{data}, len(data), fl)
}

// writeV writes the buffers of data (size bytes in all) back to back.
func (s *Service) writeV(ctx context.Context, d *device, op string, lba uint64, data [][]byte, size int, fl zns.Flags) (zns.IOResult, error) {
	n := size / d.geo.bs
	if _, err := d.adm.Admit(ctx, d.idx, lba/d.geo.zoneSize, n); err != nil {
		return zns.IOResult{}, err
	}
	res, err := s.io(ctx, d, op, size, func() (zns.IOResult, error) { return d.dev.WriteV(ctx, lba, data, fl) })
	if err == nil {
		d.adm.Complete(n, res.Latency())
	}
	return res, err
}

func (s *Service) zoneWP(d *device, lba uint64) uint64 {
	zones, err := d.dev.ReportZones(zns.StateAny, lba/d.geo.zoneSize, 1)
	if err != nil || len(zones) == 0 {
		return 0
	}
	return zones[0].WP
}

// readBuf reads n blocks at lba into a pooled buffer (wire.Pool), in a WRR
// slot. The buffer goes back to the pool when its last reference is freed:
// after gRPC sent it (wire.ReadChunk).
func (s *Service) readBuf(ctx context.Context, d *device, lba, n uint64) (mem.Buffer, zns.IOResult, error) {
	bp := wire.Pool.Get(int(n) * d.geo.bs)
	res, err := s.io(ctx, d, "read", len(*bp), func() (zns.IOResult, error) { return d.dev.ReadInto(ctx, lba, *bp) })
	if err != nil {
		wire.Pool.Put(bp)
		return nil, res, err
	}
	return mem.NewBuffer(bp, wire.Pool), res, nil
}

// Read serves up to the unary limit. Registered with RegisterGRPC, the
// server answers with readChunk instead (no copy of the pooled buffer).
func (s *Service) Read(ctx context.Context, req *v1.ReadRequest) (*v1.ReadResponse, error) {
	c, err := s.readChunk(ctx, req)
	if err != nil {
		return nil, err
	}
	c.Resp.Data = c.Payload.Materialize()
	c.Payload.Free()
	return c.Resp, nil
}

// readChunk reads the unary request req into a pooled buffer. The zone
// locks are held only for the drive read, never while the answer is sent.
func (s *Service) readChunk(ctx context.Context, req *v1.ReadRequest) (*wire.ReadChunk, error) {
	d, err := s.device(req.GetDevice())
	if err != nil {
		return nil, err
	}
	n := uint64(req.GetBlocks())
	if n*uint64(d.geo.bs) > wire.MaxUnaryData {
		return nil, &zerr.InvalidArgumentError{Field: "blocks", Reason: fmt.Sprintf("%d blocks exceed the %d-byte unary limit; use ReadStream", n, wire.MaxUnaryData)}
	}
	if err := s.authorizeRange(ctx, d, req.GetLba(), n); err != nil {
		return nil, err
	}
	unlock, err := s.hold(ctx, d, req.GetLba(), n)
	if err != nil {
		return nil, err
	}
	buf, res, err := s.readBuf(ctx, d, req.GetLba(), n)
	unlock()
	if err != nil {
		return nil, err
	}
	return &wire.ReadChunk{Resp: &v1.ReadResponse{Lba: req.GetLba(), LatencyNs: uint64(res.Latency())}, Payload: mem.BufferSlice{buf}}, nil
}

// MaxReadRanges bounds the ranges of one ReadV.
const MaxReadRanges = 256

// ReadV serves several ranges of this node's devices in one call (a
// client's stripe legs on this node): per device, one drive command with a
// scatter list into one pooled buffer (zns.Device.ReadV: one modelled wait
// for the slowest range), the devices in parallel; the answer is their data
// in request order. Registered with RegisterGRPC the server answers with
// readVChunk (no copy of the buffer).
func (s *Service) ReadV(ctx context.Context, req *v1.ReadVRequest) (*v1.ReadResponse, error) {
	c, err := s.readVChunk(ctx, req)
	if err != nil {
		return nil, err
	}
	c.Resp.Data = c.Payload.Materialize()
	c.Payload.Free()
	return c.Resp, nil
}

// devRanges is one device's part of a ReadV: its ranges and where each
// goes in the answer.
type devRanges struct {
	d      *device
	rs     []zns.Range
	at     []uint64 // byte offset of each range in the answer
	blocks uint64
}

func (s *Service) readVChunk(ctx context.Context, req *v1.ReadVRequest) (*wire.ReadChunk, error) {
	if len(req.GetRanges()) == 0 {
		return nil, &zerr.InvalidArgumentError{Field: "ranges", Reason: "is empty"}
	}
	if len(req.GetRanges()) > MaxReadRanges {
		return nil, &zerr.InvalidArgumentError{Field: "ranges", Reason: fmt.Sprintf("%d ranges, at most %d", len(req.GetRanges()), MaxReadRanges)}
	}
	var parts []*devRanges
	var total uint64 // bytes
	for i, r := range req.GetRanges() {
		d, err := s.device(r.GetDevice())
		if err != nil {
			return nil, fmt.Errorf("range %d: %w", i, err)
		}
		n := uint64(r.GetBlocks())
		if err := s.authorizeRange(ctx, d, r.GetLba(), n); err != nil {
			return nil, fmt.Errorf("range %d: %w", i, err)
		}
		if total+n*uint64(d.geo.bs) > wire.MaxUnaryData {
			return nil, &zerr.InvalidArgumentError{Field: "ranges", Reason: fmt.Sprintf("more than the %d-byte unary limit in total; use ReadStream", wire.MaxUnaryData)}
		}
		var p *devRanges
		for _, x := range parts {
			if x.d == d {
				p = x
			}
		}
		if p == nil {
			p = &devRanges{d: d}
			parts = append(parts, p)
		}
		p.rs = append(p.rs, zns.Range{LBA: r.GetLba(), Count: n})
		p.at = append(p.at, total)
		p.blocks += n
		total += n * uint64(d.geo.bs)
	}
	bp := wire.Pool.Get(int(total))
	out := *bp
	lats := make([]time.Duration, len(parts))
	one := func(i int) error {
		p := parts[i]
		held := make([][2]uint64, len(p.rs))
		for j, r := range p.rs {
			held[j] = [2]uint64{r.LBA, r.Count}
		}
		unlock, err := s.holdRanges(ctx, p.d, held, nil)
		if err != nil {
			return err
		}
		defer unlock()
		// One contiguous buffer per device: the answer's order interleaves
		// devices only when the request does; then the device reads into a
		// buffer of its own and the pieces are copied to their places.
		dst, contiguous := out[p.at[0]:p.at[0]+p.blocks*uint64(p.d.geo.bs)], true
		for j := range p.rs {
			if j > 0 && p.at[j] != p.at[j-1]+p.rs[j-1].Count*uint64(p.d.geo.bs) {
				contiguous = false
			}
		}
		var tmp *[]byte
		if !contiguous {
			tmp = wire.Pool.Get(int(p.blocks) * p.d.geo.bs)
			defer wire.Pool.Put(tmp)
			dst = *tmp
		}
		res, err := s.io(ctx, p.d, "read", len(dst), func() (zns.IOResult, error) { return p.d.dev.ReadV(ctx, p.rs, dst) })
		if err != nil {
			return err
		}
		if !contiguous {
			off := uint64(0)
			for j, r := range p.rs {
				k := r.Count * uint64(p.d.geo.bs)
				copy(out[p.at[j]:p.at[j]+k], dst[off:off+k])
				off += k
			}
		}
		lats[i] = res.Latency()
		return nil
	}
	var err error
	if len(parts) == 1 {
		err = one(0)
	} else {
		errs := make([]error, len(parts))
		var wg sync.WaitGroup
		for i := range parts[:len(parts)-1] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = one(i)
			}()
		}
		errs[len(parts)-1] = one(len(parts) - 1)
		wg.Wait()
		err = errors.Join(errs...)
	}
	if err != nil {
		wire.Pool.Put(bp)
		return nil, err
	}
	first := req.GetRanges()[0]
	return &wire.ReadChunk{Resp: &v1.ReadResponse{Lba: first.GetLba(), LatencyNs: uint64(slices.Max(lats))},
		Payload: mem.BufferSlice{mem.NewBuffer(bp, wire.Pool)}}, nil
}

// ReadStream serves reads of any size in pieces of StreamChunkBytes. Each
// piece is read under its zones' locks (and grant check) and sent after
// they are released, on a sender goroutine while the next piece is read:
// a client that stops reading holds no lock (a revocation reset or any
// other I/O on those zones goes on), and a piece it does not take within
// Config.SendTimeout ends the call.
func (s *Service) ReadStream(req *v1.ReadRequest, stream v1.ZonedDevice_ReadStreamServer) error {
	ctx := stream.Context()
	d, err := s.device(req.GetDevice())
	if err != nil {
		return err
	}
	total := uint64(req.GetBlocks())
	if err := s.authorizeRange(ctx, d, req.GetLba(), total); err != nil {
		return err
	}
	lim, err := s.openStream(ctx)
	if err != nil {
		return err
	}
	defer lim.close()
	per := uint64(StreamChunkBytes / d.geo.bs)
	snd := asyncSender{s: s, op: "read_stream"}
	var lat time.Duration
	for done := uint64(0); done < total; {
		n := min(per, total-done)
		lba := req.GetLba() + done
		size := int(n * uint64(d.geo.bs))
		if err := lim.take(size); err != nil {
			_ = snd.wait(ctx)
			return fmt.Errorf("read stream stopped at LBA %d after %d of %d blocks: %w", lba, done, total, err)
		}
		unlock, err := s.hold(ctx, d, lba, n)
		if err != nil {
			lim.give(size)
			_ = snd.wait(ctx) // the handler returns only once the send in flight ended (or timed out)
			return fmt.Errorf("read stream stopped at LBA %d after %d of %d blocks: %w", lba, done, total, err)
		}
		buf, res, err := s.readBuf(ctx, d, lba, n)
		unlock()
		if err != nil {
			lim.give(size)
			_ = snd.wait(ctx)
			return fmt.Errorf("read stream stopped at LBA %d after %d of %d blocks: %w", lba, done, total, err)
		}
		lat += res.Latency()
		done += n
		msg := &wire.ReadChunk{Resp: &v1.ReadResponse{Lba: lba}, Payload: mem.BufferSlice{buf}}
		if done == total {
			msg.Resp.LatencyNs = uint64(lat)
		}
		if err := snd.send(ctx, func() error { defer lim.give(size); return stream.SendMsg(msg) }); err != nil {
			lim.give(size)
			msg.Free()
			return err
		}
	}
	return snd.wait(ctx)
}

func flagsOf(req *v1.WriteRequest) zns.Flags {
	return zns.Flags{FUA: req.GetFua(), Overwrite: req.GetOverwrite()}
}

// Write serves writes up to the unary limit. Registered with Register, the
// server decodes writes into wire.WriteChunks instead (writeChunk): the data
// stays in the receive buffers, which the drive writes from (WriteV).
func (s *Service) Write(ctx context.Context, req *v1.WriteRequest) (*v1.WriteResponse, error) {
	return s.writeUnary(ctx, req, [][]byte{req.GetData()}, len(req.GetData()))
}

func (s *Service) writeChunk(ctx context.Context, c *wire.WriteChunk) (*v1.WriteResponse, error) {
	p := c.Data()
	return s.writeUnary(ctx, c.Req, views(p), p.Len())
}

// views returns the bytes of p's buffers, in order, without copying. They
// stay valid while p's references are held.
func views(p mem.BufferSlice) [][]byte {
	out := make([][]byte, 0, len(p))
	for _, b := range p {
		if b.Len() > 0 {
			out = append(out, b.ReadOnlyData())
		}
	}
	return out
}

// writeUnary writes data (size bytes in all) with the header fields of req
// (whose Data is ignored).
func (s *Service) writeUnary(ctx context.Context, req *v1.WriteRequest, data [][]byte, size int) (*v1.WriteResponse, error) {
	d, err := s.device(req.GetDevice())
	if err != nil {
		return nil, err
	}
	n, err := d.blocksOfLen("data", size)
	if err != nil {
		return nil, err
	}
	if size > wire.MaxUnaryData {
		return nil, &zerr.InvalidArgumentError{Field: "data", Reason: fmt.Sprintf("%d bytes exceed the %d-byte unary limit; use WriteStream", size, wire.MaxUnaryData)}
	}
	if err := s.authorizeRange(ctx, d, req.GetLba(), n); err != nil {
		return nil, err
	}
	unlock, err := s.holdWrite(ctx, d, req.GetLba(), n)
	if err != nil {
		return nil, err
	}
	res, err := s.writeV(ctx, d, "write", req.GetLba(), data, size, flagsOf(req))
	unlock()
	if err != nil {
		return nil, err
	}
	return &v1.WriteResponse{Blocks: n, WritePointer: s.zoneWP(d, req.GetLba()), LatencyNs: uint64(res.Latency())}, nil
}

type received struct {
	c   *wire.WriteChunk
	err error
}

func receive(stream grpc.ServerStream) received {
	c := new(wire.WriteChunk)
	err := stream.RecvMsg(c)
	return received{c, err}
}

// WriteStream serves writes of any size. The first message names device,
// LBA and flags; every message carries data, written in order as it arrives
// in pieces of StreamChunkBytes. The data stays in the receive buffers and
// the drive writes each piece from them (WriteV). While a piece is
// written, the transport keeps receiving the next messages into the stream's
// flow-control window (4 MiB with wire.ServerOptions), so the transfer
// overlaps the drive. (A receiving goroutine running ahead measured slower
// on the 2-core machine than this: one more hand-off per message.) An error
// says how many blocks were written before it.
func (s *Service) WriteStream(stream v1.ZonedDevice_WriteStreamServer) error {
	ctx := stream.Context()
	lim, err := s.openStream(ctx)
	if err != nil {
		return err
	}
	defer lim.close()
	rcv := newIdleReceiver(s, "write_stream", receiveFrom(stream))
	defer rcv.close()
	var pending mem.BufferSlice // received, not yet written
	defer func() { pending.Free() }()

	r, err := rcv.next(ctx)
	if err != nil {
		return err
	}
	if err := lim.take(r.c.Data().Len()); err != nil {
		r.c.Free()
		return err
	}
	if r.err != nil {
		r.c.Free()
		if errors.Is(r.err, io.EOF) {
			return &zerr.InvalidArgumentError{Field: "stream", Reason: "no message"}
		}
		return r.err
	}
	first := r.c.Req
	d, err := s.device(first.GetDevice())
	if err != nil {
		r.c.Free()
		return err
	}
	fl := flagsOf(first)
	start := first.GetLba()
	if total := uint64(first.GetTotalBlocks()); total > 0 {
		if err := s.authorizeRange(ctx, d, start, total); err != nil {
			r.c.Free()
			return err
		}
	}
	per := StreamChunkBytes
	written := uint64(0)
	var lat time.Duration
	writePiece := func(piece mem.BufferSlice) error {
		size := piece.Len()
		n, err := d.blocksOfLen("data", size)
		if err != nil {
			return err
		}
		lba := start + written
		if err := s.authorizeRange(ctx, d, lba, n); err != nil {
			return err
		}
		unlock, err := s.holdWrite(ctx, d, lba, n)
		if err != nil {
			return err
		}
		res, err := s.writeV(ctx, d, "write", lba, views(piece), size, fl)
		unlock()
		if err != nil {
			return err
		}
		lat += res.Latency()
		written += n
		return nil
	}
	flush := func(all bool) error {
		for pending.Len() >= per || (all && pending.Len() > 0) {
			piece, rest := splitAt(pending, min(per, pending.Len()))
			pending = rest
			err := writePiece(piece)
			lim.give(piece.Len())
			piece.Free()
			if err != nil {
				return err
			}
		}
		return nil
	}
	for {
		pending = append(pending, r.c.Data()...)
		r.c.Payload = nil // pending owns the buffers now
		if err := flush(false); err != nil {
			return fmt.Errorf("write stream stopped at LBA %d after %d blocks: %w", start+written, written, err)
		}
		if r, err = rcv.next(ctx); err != nil {
			return fmt.Errorf("write stream stopped at LBA %d after %d blocks: %w", start+written, written, err)
		}
		if err := lim.take(r.c.Data().Len()); err != nil {
			r.c.Free()
			return fmt.Errorf("write stream stopped at LBA %d after %d blocks: %w", start+written, written, err)
		}
		if errors.Is(r.err, io.EOF) {
			r.c.Free()
			break
		}
		if r.err != nil {
			r.c.Free()
			return r.err
		}
	}
	if err := flush(true); err != nil {
		return fmt.Errorf("write stream stopped at LBA %d after %d blocks: %w", start+written, written, err)
	}
	if written == 0 {
		return &zerr.InvalidArgumentError{Field: "data", Reason: "is empty"}
	}
	return stream.SendAndClose(&v1.WriteResponse{Blocks: written, WritePointer: s.zoneWP(d, start), LatencyNs: uint64(lat)})
}

// splitAt cuts s after n bytes; both halves own their references (s's are
// handed over).
func splitAt(s mem.BufferSlice, n int) (head, tail mem.BufferSlice) {
	for i, b := range s {
		if n == 0 {
			return head, append(tail, s[i:]...)
		}
		if b.Len() <= n {
			head = append(head, b)
			n -= b.Len()
			continue
		}
		head = append(head, b.Slice(0, n))
		tail = append(tail, b.Slice(n, b.Len()))
		b.Free()
		return head, append(tail, s[i+1:]...)
	}
	return head, nil
}

// Append writes at the zone's write pointer and returns the LBA written.
func (s *Service) Append(ctx context.Context, req *v1.AppendRequest) (*v1.AppendResponse, error) {
	d, err := s.device(req.GetDevice())
	if err != nil {
		return nil, err
	}
	n, err := d.blocksOf("data", req.GetData())
	if err != nil {
		return nil, err
	}
	if len(req.GetData()) > wire.MaxUnaryData {
		return nil, &zerr.InvalidArgumentError{Field: "data", Reason: fmt.Sprintf("%d bytes exceed the %d-byte append limit", len(req.GetData()), wire.MaxUnaryData)}
	}
	if err := s.authorizeZone(ctx, d, req.GetZone()); err != nil {
		return nil, err
	}
	zone := uint64(req.GetZone())
	unlock, err := s.holdWrite(ctx, d, zone*d.geo.zoneSize, 1)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := d.adm.Admit(ctx, d.idx, zone, int(n)); err != nil {
		return nil, err
	}
	var lba uint64
	res, err := s.io(ctx, d, "append", len(req.GetData()), func() (zns.IOResult, error) {
		var r zns.IOResult
		var e error
		lba, r, e = d.dev.Append(ctx, zone*d.geo.zoneSize, req.GetData(), zns.Flags{FUA: req.GetFua()})
		return r, e
	})
	if err != nil {
		return nil, err
	}
	d.adm.Complete(int(n), res.Latency())
	return &v1.AppendResponse{Lba: lba, LatencyNs: uint64(res.Latency())}, nil
}

// SimpleCopy copies source ranges to one contiguous destination.
func (s *Service) SimpleCopy(ctx context.Context, req *v1.SimpleCopyRequest) (*v1.SimpleCopyResponse, error) {
	d, err := s.device(req.GetDevice())
	if err != nil {
		return nil, err
	}
	if len(req.GetSources()) == 0 {
		return nil, &zerr.InvalidArgumentError{Field: "sources", Reason: "is empty"}
	}
	var ranges []zns.Range
	var held [][2]uint64
	var total uint64
	for _, r := range req.GetSources() {
		if err := s.authorizeRange(ctx, d, r.GetLba(), uint64(r.GetBlocks())); err != nil {
			return nil, err
		}
		ranges = append(ranges, zns.Range{LBA: r.GetLba(), Count: uint64(r.GetBlocks())})
		held = append(held, [2]uint64{r.GetLba(), uint64(r.GetBlocks())})
		total += uint64(r.GetBlocks())
	}
	if err := s.authorizeRange(ctx, d, req.GetDestLba(), total); err != nil {
		return nil, err
	}
	unlock, err := s.holdRanges(ctx, d, held, [][2]uint64{{req.GetDestLba(), total}})
	if err != nil {
		return nil, err
	}
	defer unlock()
	res, err := s.io(ctx, d, "copy", int(total)*d.geo.bs, func() (zns.IOResult, error) {
		return d.dev.SimpleCopy(ctx, ranges, req.GetDestLba())
	})
	if err != nil {
		return nil, err
	}
	return &v1.SimpleCopyResponse{Blocks: total, LatencyNs: uint64(res.Latency())}, nil
}

// TLOpen opens a zone for threaded logging.
func (s *Service) TLOpen(ctx context.Context, req *v1.TLOpenRequest) (*v1.TLOpenResponse, error) {
	d, err := s.device(req.GetDevice())
	if err != nil {
		return nil, err
	}
	if err := s.authorizeZone(ctx, d, req.GetZone()); err != nil {
		return nil, err
	}
	unlock, err := s.holdWrite(ctx, d, uint64(req.GetZone())*d.geo.zoneSize, 1)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var mode zns.TLMode
	switch req.GetMode() {
	case v1.PlugMode_PLUG_MODE_LBA_ORDERED, v1.PlugMode_PLUG_MODE_UNSPECIFIED:
		mode = zns.LBAOrdered
	case v1.PlugMode_PLUG_MODE_PPA_ORDERED:
		mode = zns.PPAOrdered
	default:
		return nil, &zerr.InvalidArgumentError{Field: "mode", Reason: fmt.Sprintf("unknown plugging mode %d", req.GetMode())}
	}
	if _, err := d.dev.TLOpen(ctx, uint64(req.GetZone()), req.GetValidBitmap(), mode); err != nil {
		return nil, err
	}
	return &v1.TLOpenResponse{}, nil
}
