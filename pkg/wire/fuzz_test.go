package wire

import (
	"bytes"
	"testing"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"google.golang.org/protobuf/proto"
)

// FuzzUnmarshal feeds arbitrary bytes, cut into arbitrary buffers, to the
// codec for every bulk type: it never panics, and it accepts exactly what
// proto.Unmarshal accepts, with the same result.
//
//	go test -run '^$' -fuzz FuzzUnmarshal -fuzztime 60s -fuzzminimizetime 50x ./pkg/wire/
//
// (minimizing a large interesting input takes the default minutes.)
func FuzzUnmarshal(f *testing.F) {
	for _, m := range bulkMessages() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		if len(b) > 64<<10 {
			b = b[:64<<10] // truncated seeds: malformed on purpose
		}
		f.Add(b, uint64(1))
	}
	f.Add([]byte{0x1a, 0x02, 'h', 'i', 0x78, 0x01}, uint64(2))                                 // data, then unknown field 15
	f.Add([]byte{0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, uint64(3)) // 10-byte varint
	f.Add([]byte{0x1a, 0x80, 0x80, 0x80, 0x80, 0x10}, uint64(4))                               // huge length
	f.Add([]byte{0x0b, 0x0c}, uint64(5))                                                       // group
	f.Fuzz(func(t *testing.T, b []byte, seed uint64) {
		for _, mk := range []func() proto.Message{
			func() proto.Message { return &v1.WriteRequest{} },
			func() proto.Message { return &v1.AppendRequest{} },
			func() proto.Message { return &v1.ReadResponse{} },
		} {
			want, got := mk(), mk()
			werr := proto.Unmarshal(b, want)
			in := split(b, seed)
			gerr := Codec{}.Unmarshal(in, got)
			in.Free()
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("%T: proto error %v, codec error %v", want, werr, gerr)
			}
			if werr == nil && !proto.Equal(want, got) {
				t.Fatalf("%T: proto %v, codec %v", want, want, got)
			}
		}
		var c WriteChunk
		in := split(b, seed)
		err := Codec{}.Unmarshal(in, &c)
		in.Free()
		want := &v1.WriteRequest{}
		if werr := proto.Unmarshal(b, want); (werr == nil) != (err == nil) {
			t.Fatalf("WriteChunk: proto error %v, codec error %v", werr, err)
		}
		if err == nil {
			if !bytes.Equal(want.GetData(), c.Data().Materialize()) || want.GetLba() != c.Req.GetLba() || want.GetDevice() != c.Req.GetDevice() ||
				want.GetFua() != c.Req.GetFua() || want.GetOverwrite() != c.Req.GetOverwrite() || want.GetTotalBlocks() != c.Req.GetTotalBlocks() {
				t.Fatalf("WriteChunk differs from proto: %v", want)
			}
		}
		c.Free()
	})
}
