package node

import (
	"context"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"google.golang.org/grpc"
)

// RegisterGRPC registers svc on s as the ZonedDevice service. It is
// v1.RegisterZonedDeviceServer with one difference: the unary Write decodes
// into a wire.WriteChunk, so with the wire codec on the server
// (wire.ServerOptions) the data stays in the receive buffers until the drive
// write (see writeChunk). Service name, methods and messages are unchanged,
// so reflection and every protobuf client see the same API; with the
// standard codec the chunk simply holds the decoded data.
func RegisterGRPC(s grpc.ServiceRegistrar, svc *Service) {
	desc := v1.ZonedDevice_ServiceDesc
	desc.Methods = append([]grpc.MethodDesc(nil), desc.Methods...)
	for i := range desc.Methods {
		if desc.Methods[i].MethodName == "Write" {
			desc.Methods[i].Handler = writeHandler
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
