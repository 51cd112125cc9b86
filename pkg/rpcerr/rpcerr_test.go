package rpcerr

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// sentinelOf finds the one zerr sentinel the typed error matches.
func sentinelOf(t *testing.T, err error) error {
	t.Helper()
	sentinels := []error{zerr.ErrWritePointer, zerr.ErrZoneFull, zerr.ErrZoneState, zerr.ErrTooManyOpen,
		zerr.ErrTooManyActive, zerr.ErrOutOfRange, zerr.ErrInvalidArgument, zerr.ErrInvalidBitmap, zerr.ErrNotOwner,
		zerr.ErrIPUBudget, zerr.ErrNotLeader, zerr.ErrNotFound, zerr.ErrAlreadyExists, zerr.ErrNoResources,
		zerr.ErrUnavailable, zerr.ErrCorrupt, zerr.ErrUnauthenticated, zerr.ErrStaleLayout, zerr.ErrTLViolation,
		zerr.ErrGeometryMismatch, zerr.ErrClosed, zerr.ErrLimit, zerr.ErrPermissionDenied, zerr.ErrPeerIdentity}
	var found []error
	for _, s := range sentinels {
		if errors.Is(err, s) {
			found = append(found, s)
		}
	}
	require.Len(t, found, 1, "%T must match exactly one sentinel", err)
	return found[0]
}

func TestTableCoversEveryTypedError(t *testing.T) {
	typed := map[reflect.Type]bool{}
	for _, err := range zerr.Typed() {
		typed[reflect.TypeOf(err).Elem()] = true
	}
	inTable := map[reflect.Type]bool{}
	for _, en := range table {
		inTable[en.typ] = true
		assert.True(t, typed[en.typ], "table entry %s has no example in zerr.Typed()", en.typ)
		assert.NotEqual(t, codes.OK, en.code)
		assert.NotEqual(t, codes.Unknown, en.code)
	}
	for ty := range typed {
		assert.True(t, inTable[ty], "typed error %s has no entry in the rpcerr table", ty)
	}
}

func TestRoundTripEveryEntry(t *testing.T) {
	for _, orig := range zerr.Typed() {
		t.Run(fmt.Sprintf("%T", orig), func(t *testing.T) {
			wire := ToError(orig)
			st, ok := status.FromError(wire)
			require.True(t, ok)
			assert.Equal(t, orig.Error(), st.Message())
			back := FromError(wire)
			assert.Equal(t, orig, back, "fields survive the round trip")
			assert.ErrorIs(t, back, sentinelOf(t, orig))

			// A wrapped typed error maps the same way; the message keeps the context.
			wrapped := fmt.Errorf("device 0: %w", orig)
			assert.Equal(t, st.Code(), Code(wrapped))
			assert.Equal(t, orig, FromError(ToError(wrapped)))
		})
	}
}

func TestUntypedErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		code codes.Code
		is   error
	}{
		{"plain", errors.New("boom"), codes.Internal, nil},
		{"canceled", context.Canceled, codes.Canceled, context.Canceled},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), codes.DeadlineExceeded, context.DeadlineExceeded},
		{"status passes through", status.Error(codes.Unavailable, "down"), codes.Unavailable, zerr.ErrUnavailable},
		{"foreign status", status.Error(codes.Aborted, "x"), codes.Aborted, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.code, Code(tc.err))
			back := FromError(ToError(tc.err))
			require.Error(t, back)
			if tc.is != nil {
				assert.ErrorIs(t, back, tc.is)
			}
		})
	}
	assert.Nil(t, ToError(nil))
	assert.Nil(t, FromError(nil))
	assert.Equal(t, codes.OK, Code(nil))
}

func TestMalformedMetadataDoesNotFail(t *testing.T) {
	md := fields(reflect.ValueOf(zerr.WritePointerError{}))
	md["Expected"] = "not-a-number"
	v := reflect.New(reflect.TypeOf(zerr.WritePointerError{}))
	setFields(v.Elem(), md)
	assert.Equal(t, uint64(0), v.Interface().(*zerr.WritePointerError).Expected)
}

// errDevice answers Identify with the typed error selected by the request's device number.
type errDevice struct {
	v1.UnimplementedZonedDeviceServer
}

func (errDevice) Identify(_ context.Context, req *v1.IdentifyRequest) (*v1.IdentifyResponse, error) {
	all := zerr.Typed()
	if int(req.GetDevice()) >= len(all) {
		return &v1.IdentifyResponse{Device: req.GetDevice()}, nil
	}
	return nil, fmt.Errorf("wrapped by handler: %w", all[req.GetDevice()])
}

// Over a real gRPC connection on a loopback socket, with the interceptors of
// both edges, every typed error arrives as itself.
func TestOverRealGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(ServerOptions()...)
	v1.RegisterZonedDeviceServer(srv, errDevice{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	conn, err := grpc.NewClient(lis.Addr().String(), append(DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	c := v1.NewZonedDeviceClient(conn)

	for i, orig := range zerr.Typed() {
		_, err := c.Identify(context.Background(), &v1.IdentifyRequest{Device: uint32(i)})
		assert.Equal(t, orig, err, "entry %d", i)
	}
	resp, err := c.Identify(context.Background(), &v1.IdentifyRequest{Device: 999})
	require.NoError(t, err)
	assert.Equal(t, uint32(999), resp.GetDevice())

	_, err = c.Read(context.Background(), &v1.ReadRequest{})
	assert.Equal(t, codes.Unimplemented, status.Code(err))
}
