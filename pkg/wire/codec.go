package wire

// The bulk codec: see the package documentation for its design.

import (
	"errors"
	"fmt"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Codec is the bulk-data gRPC codec (see the package comment).
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// standard is gRPC's protobuf codec, which Codec defers to.
var standard = encoding.GetCodecV2(protoenc.Name)

// ServerOptions makes a gRPC server use Codec for every call, Pool for its
// receive buffers, and flow-control windows of StreamWindow per stream and
// ConnWindow per connection, so that a client streaming writes keeps
// sending while the server writes the drive. With gRPC's adaptive default
// (BDP estimation from 64 KiB) a 1 MiB write stream measured about half as
// fast on the 2-core test machine: it stalls on window updates.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ForceServerCodecV2(Codec{}), experimental.BufferPool(Pool),
		grpc.InitialWindowSize(StreamWindow), grpc.InitialConnWindowSize(ConnWindow)}
}

// Flow-control windows of ServerOptions: what a server buffers at most per
// stream and per connection.
const (
	StreamWindow = 4 << 20
	ConnWindow   = 16 << 20
)

// CallOptions makes a client's calls use Codec (pass to grpc.WithDefaultCallOptions).
func CallOptions() []grpc.CallOption {
	return []grpc.CallOption{grpc.ForceCodecV2(Codec{})}
}

// Name is the content subtype: the wire format is protobuf's.
func (Codec) Name() string { return protoenc.Name }

// WriteChunk is a WriteRequest whose data stays in the buffers gRPC received
// it in. Receive one with ServerStream.RecvMsg; with Codec, Payload holds
// views of the receive buffers and Req.Data is nil; with the standard codec
// (WriteChunk is also a proto.Message: it reflects Req) Req.Data holds the
// data. Data returns the payload either way; Free releases it.
type WriteChunk struct {
	Req     *v1.WriteRequest
	Payload mem.BufferSlice
}

// ProtoReflect makes WriteChunk a proto.Message that reads and writes Req.
func (c *WriteChunk) ProtoReflect() protoreflect.Message {
	if c.Req == nil {
		c.Req = new(v1.WriteRequest)
	}
	return c.Req.ProtoReflect()
}

// Data is the chunk's payload, whichever codec decoded it.
func (c *WriteChunk) Data() mem.BufferSlice {
	if c.Payload == nil && c.Req != nil && len(c.Req.GetData()) > 0 {
		return mem.BufferSlice{mem.SliceBuffer(c.Req.GetData())}
	}
	return c.Payload
}

// Len is the payload length in bytes.
func (c *WriteChunk) Len() int { return c.Data().Len() }

// Free releases the payload's receive buffers; the chunk is empty afterwards.
func (c *WriteChunk) Free() {
	c.Payload.Free()
	c.Payload = nil
	if c.Req != nil {
		c.Req.Data = nil
	}
}

// ReadChunk is a ReadResponse whose data is a reference-counted buffer: a
// pooled read buffer on the node (mem.NewBuffer over wire.Pool), views of
// the receive buffers on a client that receives with RecvMsg/Invoke into a
// ReadChunk. Marshal with Codec hands the payload's references to gRPC,
// which frees them once the bytes are on the wire (the pooled buffer goes
// back to the pool then, never earlier); the chunk is empty afterwards, so
// a handler may return it or Send it and forget it. With the standard
// codec (ReadChunk is a proto.Message reflecting Resp) the payload is
// copied into Resp.Data.
type ReadChunk struct {
	Resp    *v1.ReadResponse
	Payload mem.BufferSlice
}

// ProtoReflect makes ReadChunk a proto.Message that reads and writes Resp.
func (c *ReadChunk) ProtoReflect() protoreflect.Message {
	if c.Resp == nil {
		c.Resp = new(v1.ReadResponse)
	}
	if c.Payload.Len() > 0 && len(c.Resp.Data) == 0 {
		c.Resp.Data = c.Payload.Materialize() // the standard codec's path
		c.Payload.Free()
		c.Payload = nil
	}
	return c.Resp.ProtoReflect()
}

// Data is the chunk's payload, whichever codec decoded it.
func (c *ReadChunk) Data() mem.BufferSlice {
	if c.Payload == nil && c.Resp != nil && len(c.Resp.GetData()) > 0 {
		return mem.BufferSlice{mem.SliceBuffer(c.Resp.GetData())}
	}
	return c.Payload
}

// Free releases the payload; the chunk is empty afterwards.
func (c *ReadChunk) Free() {
	c.Payload.Free()
	c.Payload = nil
	if c.Resp != nil {
		c.Resp.Data = nil
	}
}

type kind uint8

const (
	kU32 kind = iota
	kU64
	kBool
	kBytes
)

type fieldSpec struct {
	num  protowire.Number
	kind kind
}

// spec lists a bulk message's fields in number order; exactly one is kBytes.
// maxField bounds the field numbers (vals is indexed by number).
type spec struct {
	name   string
	fields []fieldSpec
}

const maxField = 7

type vals [maxField]uint64

var (
	writeSpec  = spec{"WriteRequest", []fieldSpec{{1, kU32}, {2, kU64}, {3, kBytes}, {4, kBool}, {5, kBool}, {6, kU32}}}
	appendSpec = spec{"AppendRequest", []fieldSpec{{1, kU32}, {2, kU32}, {3, kBytes}, {4, kBool}}}
	readSpec   = spec{"ReadResponse", []fieldSpec{{1, kBytes}, {2, kU64}, {3, kU64}}}
)

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// zeroCopyMin: smaller payloads go through the standard codec (one small
// buffer is cheaper than three).
const zeroCopyMin = 1024

// Marshal returns the protobuf encoding of v, the data of bulk messages as
// its own buffer.
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *v1.WriteRequest:
		if len(m.GetData()) >= zeroCopyMin && len(m.ProtoReflect().GetUnknown()) == 0 {
			return writeSpec.marshal(vals{1: uint64(m.Device), 2: m.Lba, 4: b2u(m.Fua), 5: b2u(m.Overwrite), 6: uint64(m.TotalBlocks)}, mem.BufferSlice{mem.SliceBuffer(m.Data)}), nil
		}
	case *v1.AppendRequest:
		if len(m.GetData()) >= zeroCopyMin && len(m.ProtoReflect().GetUnknown()) == 0 {
			return appendSpec.marshal(vals{1: uint64(m.Device), 2: uint64(m.Zone), 4: b2u(m.Fua)}, mem.BufferSlice{mem.SliceBuffer(m.Data)}), nil
		}
	case *v1.ReadResponse:
		if len(m.GetData()) >= zeroCopyMin && len(m.ProtoReflect().GetUnknown()) == 0 {
			return readSpec.marshal(vals{2: m.Lba, 3: m.LatencyNs}, mem.BufferSlice{mem.SliceBuffer(m.Data)}), nil
		}
	case *ReadChunk:
		r := m.Resp
		if r == nil {
			r = &v1.ReadResponse{}
		}
		if p := m.Payload; p.Len() >= zeroCopyMin && len(r.GetData()) == 0 && len(r.ProtoReflect().GetUnknown()) == 0 {
			m.Payload = nil // gRPC owns the references now and frees them once sent
			return readSpec.marshal(vals{2: r.Lba, 3: r.LatencyNs}, p), nil
		}
		out, err := standard.Marshal(m) // ProtoReflect copies the payload in
		m.Free()
		return out, err
	case *WriteChunk:
		if m.Payload.Len() > 0 && (m.Req == nil || len(m.Req.GetData()) == 0) {
			r := m.Req
			if r == nil {
				r = &v1.WriteRequest{}
			}
			if len(r.ProtoReflect().GetUnknown()) == 0 {
				// gRPC frees what Marshal returns; the chunk keeps its own references.
				m.Payload.Ref()
				return writeSpec.marshal(vals{1: uint64(r.Device), 2: r.Lba, 4: b2u(r.Fua), 5: b2u(r.Overwrite), 6: uint64(r.TotalBlocks)}, m.Payload), nil
			}
		}
	}
	return standard.Marshal(v)
}

func (s spec) marshal(v vals, data mem.BufferSlice) mem.BufferSlice {
	var pre, post []byte
	cur := &pre
	for _, f := range s.fields {
		if f.kind == kBytes {
			pre = protowire.AppendTag(pre, f.num, protowire.BytesType)
			pre = protowire.AppendVarint(pre, uint64(data.Len()))
			cur = &post
			continue
		}
		if x := v[f.num]; x != 0 {
			*cur = protowire.AppendTag(*cur, f.num, protowire.VarintType)
			*cur = protowire.AppendVarint(*cur, x)
		}
	}
	out := make(mem.BufferSlice, 0, len(data)+2)
	out = append(out, mem.SliceBuffer(pre))
	out = append(out, data...)
	if len(post) > 0 {
		out = append(out, mem.SliceBuffer(post))
	}
	return out
}

// errFallback: the message is valid protobuf the fast path does not handle.
var errFallback = errors.New("fallback")

// Unmarshal parses the protobuf encoding in data into v.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	var err error
	switch m := v.(type) {
	case *v1.WriteRequest:
		var x vals
		var d []byte
		if x, d, err = writeSpec.decodeCopy(data); err == nil {
			m.Reset()
			m.Device, m.Lba, m.Data, m.Fua, m.Overwrite, m.TotalBlocks = uint32(x[1]), x[2], d, x[4] != 0, x[5] != 0, uint32(x[6])
		}
	case *v1.AppendRequest:
		var x vals
		var d []byte
		if x, d, err = appendSpec.decodeCopy(data); err == nil {
			m.Reset()
			m.Device, m.Zone, m.Data, m.Fua = uint32(x[1]), uint32(x[2]), d, x[4] != 0
		}
	case *v1.ReadResponse:
		var x vals
		var d []byte
		if x, d, err = readSpec.decodeCopy(data); err == nil {
			m.Reset()
			m.Data, m.Lba, m.LatencyNs = d, x[2], x[3]
		}
	case *ReadChunk:
		var x vals
		var p mem.BufferSlice
		if x, p, err = readSpec.decode(data); err == nil {
			m.Free()
			m.Resp = &v1.ReadResponse{Lba: x[2], LatencyNs: x[3]}
			m.Payload = p
		}
	case *WriteChunk:
		var x vals
		var p mem.BufferSlice
		if x, p, err = writeSpec.decode(data); err == nil {
			m.Free()
			m.Req = &v1.WriteRequest{Device: uint32(x[1]), Lba: x[2], Fua: x[4] != 0, Overwrite: x[5] != 0, TotalBlocks: uint32(x[6])}
			m.Payload = p
		}
	default:
		return standard.Unmarshal(data, v)
	}
	if errors.Is(err, errFallback) {
		return standard.Unmarshal(data, v)
	}
	return err
}

func (s spec) decodeCopy(data mem.BufferSlice) (vals, []byte, error) {
	x, p, err := s.decode(data)
	if err != nil {
		return x, nil, err
	}
	var d []byte
	if n := p.Len(); n > 0 {
		d = make([]byte, n)
		p.CopyTo(d)
	}
	p.Free()
	return x, d, nil
}

// decode parses data as message s: scalars into vals, the bytes field as
// views of data (the caller frees them).
func (s spec) decode(data mem.BufferSlice) (x vals, payload mem.BufferSlice, err error) {
	c := cursor{s: data, rem: data.Len()}
	defer func() {
		if err != nil {
			payload.Free()
			payload = nil
		}
	}()
	for c.rem > 0 {
		tag, err := c.varint()
		if err != nil {
			return x, payload, s.bad(err)
		}
		num, typ := protowire.DecodeTag(tag)
		if num < protowire.MinValidNumber || num > protowire.MaxValidNumber {
			return x, payload, s.bad(fmt.Errorf("invalid field number %d", num))
		}
		var f *fieldSpec
		for i := range s.fields {
			if s.fields[i].num == num {
				f = &s.fields[i]
			}
		}
		want := protowire.VarintType
		if f != nil && f.kind == kBytes {
			want = protowire.BytesType
		}
		if f == nil || typ != want {
			return x, payload, errFallback
		}
		v, err := c.varint()
		if err != nil {
			return x, payload, s.bad(err)
		}
		if f.kind != kBytes {
			if f.kind == kU32 {
				v = uint64(uint32(v))
			}
			x[num] = v
			continue
		}
		if v > uint64(c.rem) {
			return x, payload, s.bad(fmt.Errorf("field %d: %d bytes of data, %d left", num, v, c.rem))
		}
		payload.Free() // a repeated occurrence replaces the earlier one
		payload = c.views(int(v))
	}
	return x, payload, nil
}

func (s spec) bad(err error) error {
	return &zerr.InvalidArgumentError{Field: "message", Reason: fmt.Sprintf("malformed %s: %v", s.name, err)}
}

// cursor reads a BufferSlice in place.
type cursor struct {
	s   mem.BufferSlice
	i   int // current buffer
	off int // offset in it
	rem int // bytes left in all buffers
}

// varint decodes a protobuf varint, which may straddle buffers.
func (c *cursor) varint() (uint64, error) {
	var tmp [11]byte // one more than the longest valid varint
	n := 0
	for i, off := c.i, c.off; n < len(tmp) && i < len(c.s); i, off = i+1, 0 {
		n += copy(tmp[n:], c.s[i].ReadOnlyData()[off:])
	}
	v, k := protowire.ConsumeVarint(tmp[:n])
	if k < 0 {
		return 0, protowire.ParseError(k)
	}
	c.skip(k)
	return v, nil
}

func (c *cursor) skip(n int) {
	c.rem -= n
	for n > 0 {
		left := c.s[c.i].Len() - c.off
		if n < left {
			c.off += n
			return
		}
		n -= left
		c.i, c.off = c.i+1, 0
	}
	for c.i < len(c.s) && c.off == c.s[c.i].Len() {
		c.i, c.off = c.i+1, 0
	}
}

// views returns new references to the next n bytes and moves past them.
func (c *cursor) views(n int) mem.BufferSlice {
	var out mem.BufferSlice
	for need, i, off := n, c.i, c.off; need > 0; i, off = i+1, 0 {
		b := c.s[i]
		k := min(need, b.Len()-off)
		if k > 0 {
			out = append(out, b.Slice(off, off+k))
		}
		need -= k
	}
	c.skip(n)
	return out
}
