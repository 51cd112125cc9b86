package wire

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

func payload(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// bulkMessages: every bulk type, with every field set, none set, and data
// below and above the zero-copy threshold.
func bulkMessages() []proto.Message {
	big := payload(1<<20+4096, 1)
	return []proto.Message{
		&v1.WriteRequest{Device: 3, Lba: 1 << 40, Data: big, Fua: true, Overwrite: true, TotalBlocks: 1 << 31},
		&v1.WriteRequest{Data: big[:4096]},
		&v1.WriteRequest{Lba: 7, Data: big[:100], TotalBlocks: 9},
		&v1.WriteRequest{Device: 1},
		&v1.AppendRequest{Device: 2, Zone: 9, Data: big[:8192], Fua: true},
		&v1.AppendRequest{Zone: 1, Data: big[:512]},
		&v1.ReadResponse{Data: big, Lba: 12345, LatencyNs: 1e9},
		&v1.ReadResponse{Data: big[:4096]},
		&v1.ReadResponse{Lba: 5},
	}
}

// split cuts b into buffers of random sizes (1 byte up to 64 KiB), as the
// transport's frames would, some of them pooled reference-counted buffers.
func split(b []byte, seed uint64) mem.BufferSlice {
	r := rand.New(rand.NewPCG(seed, 1))
	var out mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 1+r.IntN([]int{1, 7, 100, 16 << 10, 64 << 10}[r.IntN(5)]))
		if r.IntN(2) == 0 {
			out = append(out, mem.Copy(b[:n], mem.DefaultBufferPool()))
		} else {
			out = append(out, mem.SliceBuffer(bytes.Clone(b[:n])))
		}
		b = b[n:]
	}
	return out
}

func TestMarshalIsByteIdenticalToProto(t *testing.T) {
	for i, m := range bulkMessages() {
		want, err := proto.Marshal(m)
		require.NoError(t, err)
		got, err := Codec{}.Marshal(m)
		require.NoError(t, err)
		assert.Equal(t, want, got.Materialize(), "message %d (%T)", i, m)
		if d := m.ProtoReflect().Get(m.ProtoReflect().Descriptor().Fields().ByName("data")).Bytes(); len(d) >= zeroCopyMin {
			// The data is the caller's slice, not a copy.
			found := false
			for _, b := range got {
				if len(b.ReadOnlyData()) == len(d) && &b.ReadOnlyData()[0] == &d[0] {
					found = true
				}
			}
			assert.True(t, found, "message %d: data was copied", i)
		}
		got.Free()
	}
}

func TestUnmarshalMatchesProto(t *testing.T) {
	for i, m := range bulkMessages() {
		enc, err := proto.Marshal(m)
		require.NoError(t, err)
		for seed := uint64(0); seed < 5; seed++ {
			in := split(enc, seed)
			got := m.ProtoReflect().New().Interface()
			require.NoError(t, Codec{}.Unmarshal(in, got))
			in.Free()
			assert.True(t, proto.Equal(m, got), "message %d (%T), split %d", i, m, seed)
		}
	}
}

func TestWriteChunkKeepsTheReceiveBuffers(t *testing.T) {
	want := &v1.WriteRequest{Device: 1, Lba: 99, Data: payload(300<<10, 2), Fua: true, TotalBlocks: 75}
	enc, err := proto.Marshal(want)
	require.NoError(t, err)
	in := split(enc, 3)
	var c WriteChunk
	require.NoError(t, Codec{}.Unmarshal(in, &c))
	in.Free() // gRPC frees its references once Unmarshal returns; the chunk holds its own
	assert.Nil(t, c.Req.Data)
	assert.Greater(t, len(c.Payload), 1, "the payload stays in the received pieces")
	assert.Equal(t, want.Data, c.Data().Materialize())
	assert.Equal(t, uint64(99), c.Req.GetLba())
	assert.True(t, c.Req.GetFua())
	assert.Equal(t, uint32(75), c.Req.GetTotalBlocks())

	// Sent on as a WriteChunk it encodes as the original request.
	out, err := Codec{}.Marshal(&c)
	require.NoError(t, err)
	assert.Equal(t, enc, out.Materialize())
	out.Free()
	c.Free()
	assert.Zero(t, c.Len())

	// The standard codec decodes a WriteChunk too (it is a proto.Message).
	var s WriteChunk
	require.NoError(t, standard.Unmarshal(mem.BufferSlice{mem.SliceBuffer(enc)}, &s))
	assert.Equal(t, want.Data, s.Data().Materialize())
	assert.Equal(t, uint64(99), s.Req.GetLba())
}

// Valid protobuf the fast path does not handle goes to the standard codec:
// unknown fields are kept, a known field with another wire type is unknown.
func TestUnmarshalFallsBackOnUnknownFields(t *testing.T) {
	base, err := proto.Marshal(&v1.WriteRequest{Lba: 5, Data: payload(4096, 4)})
	require.NoError(t, err)
	tests := []struct {
		name  string
		extra []byte
	}{
		{"unknown varint field", protowire.AppendVarint(protowire.AppendTag(nil, 15, protowire.VarintType), 77)},
		{"known number, fixed64 type", protowire.AppendFixed64(protowire.AppendTag(nil, 2, protowire.Fixed64Type), 1)},
		{"unknown bytes field", protowire.AppendBytes(protowire.AppendTag(nil, 100, protowire.BytesType), []byte("x"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			enc := append(bytes.Clone(base), tt.extra...)
			want := &v1.WriteRequest{}
			require.NoError(t, proto.Unmarshal(enc, want))
			got := &v1.WriteRequest{}
			require.NoError(t, Codec{}.Unmarshal(split(enc, 1), got))
			assert.True(t, proto.Equal(want, got))
			assert.Equal(t, want.ProtoReflect().GetUnknown(), got.ProtoReflect().GetUnknown())
			// And re-encoding keeps the unknown field (standard path).
			out, err := Codec{}.Marshal(got)
			require.NoError(t, err)
			assert.Equal(t, mustMarshal(t, want), out.Materialize())
		})
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	require.NoError(t, err)
	return b
}

func TestUnmarshalRejectsMalformedInput(t *testing.T) {
	good := mustMarshal(t, &v1.WriteRequest{Device: 1, Lba: 300, Data: payload(8192, 5)})
	tests := []struct {
		name string
		in   []byte
	}{
		{"truncated data", good[:len(good)-1]},
		{"truncated varint", []byte{0x10, 0x80}},
		{"overlong varint", append([]byte{0x10}, bytes.Repeat([]byte{0xff}, 10)...)},
		{"field number 0", []byte{0x00, 0x01}},
		{"length past the end", append(protowire.AppendTag(nil, 3, protowire.BytesType), 0xff, 0xff, 0x03, 1, 2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, m := range []any{&v1.WriteRequest{}, &v1.AppendRequest{}, &v1.ReadResponse{}, &WriteChunk{}} {
				err := Codec{}.Unmarshal(split(tt.in, 2), m)
				require.Error(t, err, "%T", m)
				assert.Error(t, proto.Unmarshal(tt.in, m.(proto.Message)), "proto agrees it is malformed")
			}
		})
	}
	// The fast path's own errors are typed.
	err := Codec{}.Unmarshal(mem.BufferSlice{mem.SliceBuffer(good[:len(good)-1])}, &v1.WriteRequest{})
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
}

// The hand-written encoders know every field of the bulk messages: a change
// to the .proto must show up here.
func TestSpecsMatchTheProtoDescriptors(t *testing.T) {
	tests := []struct {
		msg  proto.Message
		spec spec
	}{
		{&v1.WriteRequest{}, writeSpec},
		{&v1.AppendRequest{}, appendSpec},
		{&v1.ReadResponse{}, readSpec},
	}
	for _, tt := range tests {
		fds := tt.msg.ProtoReflect().Descriptor().Fields()
		require.Equal(t, fds.Len(), len(tt.spec.fields), tt.spec.name)
		for i, f := range tt.spec.fields {
			fd := fds.ByNumber(f.num)
			require.NotNil(t, fd, "%s field %d", tt.spec.name, f.num)
			want := map[kind]protoreflect.Kind{kU32: protoreflect.Uint32Kind, kU64: protoreflect.Uint64Kind, kBool: protoreflect.BoolKind, kBytes: protoreflect.BytesKind}[f.kind]
			assert.Equal(t, want, fd.Kind(), "%s field %d", tt.spec.name, f.num)
			assert.Equal(t, protoreflect.Optional, fd.Cardinality())
			assert.False(t, fd.HasPresence(), "%s field %d", tt.spec.name, f.num)
			if i > 0 {
				assert.Greater(t, f.num, tt.spec.fields[i-1].num, "fields in number order")
			}
			assert.Less(t, int(f.num), maxField)
		}
	}
}

// Other messages pass through the standard codec unchanged.
func TestOtherMessagesUseTheStandardCodec(t *testing.T) {
	m := &v1.IdentifyResponse{NodeId: "n1", ZoneSize: 4096}
	out, err := Codec{}.Marshal(m)
	require.NoError(t, err)
	assert.Equal(t, mustMarshal(t, m), out.Materialize())
	got := &v1.IdentifyResponse{}
	require.NoError(t, Codec{}.Unmarshal(out, got))
	assert.True(t, proto.Equal(m, got))
	_, err = Codec{}.Marshal(struct{}{})
	assert.Error(t, err)
	assert.Equal(t, "proto", Codec{}.Name())
}

func TestPoolClasses(t *testing.T) {
	tests := []struct{ n, wantCap int }{{1, 512}, {512, 512}, {513, 1024}, {16 << 10, 16 << 10}, {1<<20 + 1, 2 << 20}, {8 << 20, 8 << 20}, {8<<20 + 1, 8<<20 + 1}}
	for _, tt := range tests {
		b := Pool.Get(tt.n)
		assert.Len(t, *b, tt.n)
		assert.Equal(t, tt.wantCap, cap(*b), "n=%d", tt.n)
		Pool.Put(b)
	}
	// A returned buffer is handed out again for its class (sync.Pool may drop
	// it, so only check the length contract), and odd capacities are refused.
	b := Pool.Get(3000)
	Pool.Put(b)
	assert.Len(t, *Pool.Get(2500), 2500)
	odd := make([]byte, 1000)
	Pool.Put(&odd) // not a class size: ignored, no panic
}

// countingPool counts the buffers put back.
type countingPool struct{ puts int }

func (p *countingPool) Get(n int) *[]byte { b := make([]byte, n); return &b }
func (p *countingPool) Put(*[]byte)       { p.puts++ }

// A ReadChunk marshals to exactly proto.Marshal of its ReadResponse, hands
// its buffer to the caller of Marshal (returned to its pool only once that
// caller frees the result), and decodes into views of the receive buffers;
// with the standard codec's path it still carries the data.
func TestReadChunkRoundTrip(t *testing.T) {
	for _, n := range []int{100, 4096, 1<<20 + 4096} {
		data := payload(n, uint64(n))
		want, err := proto.Marshal(&v1.ReadResponse{Data: data, Lba: 77, LatencyNs: 5})
		require.NoError(t, err)

		pool := &countingPool{}
		bp := pool.Get(n)
		copy(*bp, data)
		c := &ReadChunk{Resp: &v1.ReadResponse{Lba: 77, LatencyNs: 5}, Payload: mem.BufferSlice{mem.NewBuffer(bp, pool)}}
		got, err := Codec{}.Marshal(c)
		require.NoError(t, err)
		assert.Equal(t, want, got.Materialize(), "%d bytes", n)
		assert.Zero(t, c.Payload.Len(), "the chunk handed its payload over")
		if n >= 1024 { // below that mem.NewBuffer does not pool
			assert.Zero(t, pool.puts, "not back in the pool before it was sent")
		}
		got.Free()
		if n >= 1024 {
			assert.Equal(t, 1, pool.puts, "back in the pool once sent")
		}

		var r ReadChunk
		require.NoError(t, Codec{}.Unmarshal(split(want, uint64(n)), &r))
		assert.Equal(t, data, r.Data().Materialize())
		assert.Equal(t, uint64(77), r.Resp.GetLba())
		assert.Equal(t, uint64(5), r.Resp.GetLatencyNs())
		r.Free()
		assert.Zero(t, r.Data().Len())

		// The standard codec sees a proto.Message holding the data.
		s := &ReadChunk{Resp: &v1.ReadResponse{Lba: 77, LatencyNs: 5}, Payload: mem.BufferSlice{mem.SliceBuffer(bytes.Clone(data))}}
		b, err := proto.Marshal(s)
		require.NoError(t, err)
		assert.Equal(t, want, b)
	}
}
