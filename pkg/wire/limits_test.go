package wire

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// bigTrailer answers health checks with a trailer of n bytes.
type bigTrailer struct {
	grpc_health_v1.UnimplementedHealthServer
	n int
}

func (b bigTrailer) Check(ctx context.Context, _ *grpc_health_v1.HealthCheckRequest) (*grpc_health_v1.HealthCheckResponse, error) {
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-pad", strings.Repeat("a", b.n)))
	return &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING}, nil
}

// A client with the transport options refuses a header or trailer block
// past MaxHeaderListBytes from a server (gRPC's default takes 16 MiB), and
// takes one within it.
func TestClientHeaderListLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		pad  int
		ok   bool
	}{
		{"within the limit", MaxHeaderListBytes / 2, true},
		{"past the limit", 4 * MaxHeaderListBytes, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			srv := grpc.NewServer()
			grpc_health_v1.RegisterHealthServer(srv, bigTrailer{n: tc.pad})
			go func() { _ = srv.Serve(l) }()
			defer srv.Stop()
			cc, err := grpc.NewClient(l.Addr().String(), append(TransportDialOptions(false), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			require.NoError(t, err)
			defer cc.Close()
			_, err = grpc_health_v1.NewHealthClient(cc).Check(context.Background(), &grpc_health_v1.HealthCheckRequest{})
			if tc.ok {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
		})
	}
}
