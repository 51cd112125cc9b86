package wire

import (
	"context"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/reflection"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

// echoDevice answers writes with the length and CRC of what arrived and
// reads with a known payload.
type echoDevice struct {
	v1.UnimplementedZonedDeviceServer
	data []byte
}

func (e *echoDevice) Write(_ context.Context, r *v1.WriteRequest) (*v1.WriteResponse, error) {
	return &v1.WriteResponse{Blocks: uint64(len(r.GetData())), WritePointer: uint64(crc32.ChecksumIEEE(r.GetData())), LatencyNs: r.GetLba()}, nil
}

func (e *echoDevice) Read(_ context.Context, r *v1.ReadRequest) (*v1.ReadResponse, error) {
	return &v1.ReadResponse{Data: e.data[:r.GetBlocks()], Lba: r.GetLba(), LatencyNs: 42}, nil
}

// WriteStream receives WriteChunks, as the node does.
func (e *echoDevice) WriteStream(s v1.ZonedDevice_WriteStreamServer) error {
	h := crc32.NewIEEE()
	n := 0
	var lba uint64
	for i := 0; ; i++ {
		var c WriteChunk
		err := s.RecvMsg(&c)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if i == 0 {
			lba = c.Req.GetLba()
		}
		for _, b := range c.Data() {
			h.Write(b.ReadOnlyData())
		}
		n += c.Len()
		c.Free()
	}
	return s.SendAndClose(&v1.WriteResponse{Blocks: uint64(n), WritePointer: uint64(h.Sum32()), LatencyNs: lba})
}

func serve(t *testing.T, opts ...grpc.ServerOption) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := grpc.NewServer(append(opts, grpc.MaxRecvMsgSize(8<<20), grpc.MaxSendMsgSize(8<<20))...)
	v1.RegisterZonedDeviceServer(s, &echoDevice{data: payload(4<<20, 9)})
	reflection.Register(s)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

func dial(t *testing.T, addr string, opts ...grpc.CallOption) *grpc.ClientConn {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(append(opts, grpc.MaxCallRecvMsgSize(8<<20), grpc.MaxCallSendMsgSize(8<<20))...))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Every pairing of the standard codec and Codec on either end carries the
// bulk calls intact, and reflection (what grpcurl uses) works against a
// server running Codec.
func TestInteropWithTheStandardCodec(t *testing.T) {
	tests := []struct {
		name   string
		server []grpc.ServerOption
		client []grpc.CallOption
	}{
		{"standard client, codec server", ServerOptions(), nil},
		{"codec client, standard server", nil, CallOptions()},
		{"codec both ends", ServerOptions(), CallOptions()},
		{"standard both ends", nil, nil},
	}
	want := payload(4<<20, 9)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cc := dial(t, serve(t, tt.server...), tt.client...)
			c := v1.NewZonedDeviceClient(cc)
			ctx := context.Background()
			for _, n := range []int{0, 4096, 1 << 20, 3<<20 + 4096} {
				data := want[:n]
				r, err := c.Write(ctx, &v1.WriteRequest{Lba: 77, Data: data, Fua: true})
				require.NoError(t, err)
				assert.Equal(t, uint64(n), r.GetBlocks())
				assert.Equal(t, uint64(crc32.ChecksumIEEE(data)), r.GetWritePointer())
				assert.Equal(t, uint64(77), r.GetLatencyNs())

				rr, err := c.Read(ctx, &v1.ReadRequest{Lba: 5, Blocks: uint32(n)})
				require.NoError(t, err)
				assert.Equal(t, data, append([]byte{}, rr.GetData()...))
				assert.Equal(t, uint64(5), rr.GetLba())
			}

			ws, err := c.WriteStream(ctx)
			require.NoError(t, err)
			for off := 0; off < len(want); off += 1 << 20 {
				require.NoError(t, ws.Send(&v1.WriteRequest{Lba: 9, Data: want[off : off+1<<20]}))
			}
			r, err := ws.CloseAndRecv()
			require.NoError(t, err)
			assert.Equal(t, uint64(len(want)), r.GetBlocks())
			assert.Equal(t, uint64(crc32.ChecksumIEEE(want)), r.GetWritePointer())
			assert.Equal(t, uint64(9), r.GetLatencyNs())

			rs, err := rpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
			require.NoError(t, err)
			require.NoError(t, rs.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "zonefleet.v1.ZonedDevice"}}))
			resp, err := rs.Recv()
			require.NoError(t, err)
			assert.NotEmpty(t, resp.GetFileDescriptorResponse().GetFileDescriptorProto())
			require.NoError(t, rs.CloseSend())
		})
	}
}
