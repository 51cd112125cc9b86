package node

import (
	"context"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"google.golang.org/grpc"
)

// RegisterGRPC registers svc on s as the ZonedDevice service. It is
// v1.RegisterZonedDeviceServer with two differences: the unary Write decodes
// into a wire.WriteChunk, so with the wire codec on the server
// (wire.ServerOptions) the data stays in the receive buffers until the drive
// write (see writeChunk); and Read and ReadV answer with a wire.ReadChunk
// over a pooled buffer that gRPC frees once sent (no copy into a message).
// Service name, methods and messages are unchanged, so reflection and every
// protobuf client see the same API; with the standard codec the chunks
// simply hold the data.
func RegisterGRPC(s grpc.ServiceRegistrar, svc *Service) {
	desc := v1.ZonedDevice_ServiceDesc
	desc.Methods = append([]grpc.MethodDesc(nil), desc.Methods...)
	for i := range desc.Methods {
		switch desc.Methods[i].MethodName {
		case "Write":
			desc.Methods[i].Handler = writeHandler
		case "Read":
			desc.Methods[i].Handler = readHandler
		case "ReadV":
			desc.Methods[i].Handler = readVHandler
		}
	}
	s.RegisterService(&desc, svc)
}

func writeHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(wire.WriteChunk)
	if err := dec(in); err != nil {
		return nil, err
	}
	defer in.Free()
	h := func(ctx context.Context, req any) (any, error) {
		return srv.(*Service).writeChunk(ctx, req.(*wire.WriteChunk))
	}
	if interceptor == nil {
		return h(ctx, in)
	}
	return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: v1.ZonedDevice_Write_FullMethodName}, h)
}

func readHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(v1.ReadRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	h := func(ctx context.Context, req any) (any, error) {
		return srv.(*Service).readChunk(ctx, req.(*v1.ReadRequest))
	}
	if interceptor == nil {
		return h(ctx, in)
	}
	return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: v1.ZonedDevice_Read_FullMethodName}, h)
}

func readVHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(v1.ReadVRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	h := func(ctx context.Context, req any) (any, error) {
		return srv.(*Service).readVChunk(ctx, req.(*v1.ReadVRequest))
	}
	if interceptor == nil {
		return h(ctx, in)
	}
	return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: v1.ZonedDevice_ReadV_FullMethodName}, h)
}
