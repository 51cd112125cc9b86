// Package rpcerr is the one table that maps the typed errors of pkg/zerr to gRPC
// status codes at the server edge, and gRPC statuses back to the same typed
// errors in clients.
//
// A typed error travels as a status with the table's code, the error's message,
// and a google.rpc.ErrorInfo detail (domain "zonefleet.io", reason such as
// "WRITE_POINTER_MISMATCH") whose metadata holds the error's fields by their Go
// names. Servers install the interceptors from ServerOptions; clients install
// DialOptions, so handlers and callers only ever see zerr types.
package rpcerr

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"

	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the ErrorInfo domain of ZoneFleet errors.
const Domain = "zonefleet.io"

type entry struct {
	reason string
	code   codes.Code
	typ    reflect.Type // the struct type; errors are *typ
}

func e(reason string, code codes.Code, proto error) entry {
	return entry{reason: reason, code: code, typ: reflect.TypeOf(proto).Elem()}
}

// table is THE mapping. Order matters only for errors that wrap several typed
// errors: the first match wins.
var table = []entry{
	e("WRITE_POINTER_MISMATCH", codes.FailedPrecondition, (*zerr.WritePointerError)(nil)),
	e("ZONE_FULL", codes.FailedPrecondition, (*zerr.ZoneFullError)(nil)),
	e("ZONE_STATE", codes.FailedPrecondition, (*zerr.ZoneStateError)(nil)),
	e("TOO_MANY_OPEN_ZONES", codes.ResourceExhausted, (*zerr.TooManyOpenError)(nil)),
	e("TOO_MANY_ACTIVE_ZONES", codes.ResourceExhausted, (*zerr.TooManyActiveError)(nil)),
	e("LBA_OUT_OF_RANGE", codes.OutOfRange, (*zerr.OutOfRangeError)(nil)),
	e("INVALID_ARGUMENT", codes.InvalidArgument, (*zerr.InvalidArgumentError)(nil)),
	e("INVALID_BITMAP", codes.InvalidArgument, (*zerr.InvalidBitmapError)(nil)),
	e("NOT_OWNER", codes.PermissionDenied, (*zerr.NotOwnerError)(nil)),
	e("IPU_BUDGET_EXCEEDED", codes.ResourceExhausted, (*zerr.IPUBudgetError)(nil)),
	e("NOT_LEADER", codes.FailedPrecondition, (*zerr.NotLeaderError)(nil)),
	e("NOT_FOUND", codes.NotFound, (*zerr.NotFoundError)(nil)),
	e("ALREADY_EXISTS", codes.AlreadyExists, (*zerr.AlreadyExistsError)(nil)),
	e("NO_RESOURCES", codes.ResourceExhausted, (*zerr.NoResourcesError)(nil)),
	e("UNAVAILABLE", codes.Unavailable, (*zerr.UnavailableError)(nil)),
	e("CORRUPT", codes.DataLoss, (*zerr.CorruptError)(nil)),
	e("UNAUTHENTICATED", codes.Unauthenticated, (*zerr.UnauthenticatedError)(nil)),
	e("STALE_LAYOUT", codes.Aborted, (*zerr.StaleLayoutError)(nil)),
	e("TL_VIOLATION", codes.FailedPrecondition, (*zerr.TLViolationError)(nil)),
	e("GEOMETRY_MISMATCH", codes.FailedPrecondition, (*zerr.GeometryMismatchError)(nil)),
	e("CLOSED", codes.Unavailable, (*zerr.ClosedError)(nil)),
	e("LIMIT_EXCEEDED", codes.ResourceExhausted, (*zerr.LimitError)(nil)),
	e("PERMISSION_DENIED", codes.PermissionDenied, (*zerr.PermissionDeniedError)(nil)),
	e("PEER_IDENTITY", codes.Unauthenticated, (*zerr.PeerIdentityError)(nil)),
}

var byReason = func() map[string]entry {
	m := make(map[string]entry, len(table))
	for _, en := range table {
		if _, dup := m[en.reason]; dup {
			panic("rpcerr: duplicate reason " + en.reason) // programming error, caught by tests
		}
		m[en.reason] = en
	}
	return m
}()

// Code returns the gRPC code that err travels with.
func Code(err error) codes.Code { return ToStatus(err).Code() }

// ToStatus converts an error returned by domain code into a gRPC status.
// nil gives an OK status. A status error passes through unchanged; context
// errors keep their meaning; an untyped error becomes Internal.
func ToStatus(err error) *status.Status {
	if err == nil {
		return status.New(codes.OK, "")
	}
	for _, en := range table {
		target := reflect.New(reflect.PointerTo(en.typ))
		if errors.As(err, target.Interface()) {
			typed := target.Elem()
			st := status.New(en.code, err.Error())
			info := &errdetails.ErrorInfo{Reason: en.reason, Domain: Domain, Metadata: fields(typed.Elem())}
			if withInfo, derr := st.WithDetails(info); derr == nil {
				return withInfo
			}
			return st
		}
	}
	if st, ok := status.FromError(err); ok {
		return st
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.New(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.New(codes.DeadlineExceeded, err.Error())
	}
	return status.New(codes.Internal, err.Error())
}

// ToError converts err for returning from a gRPC handler.
func ToError(err error) error {
	if err == nil {
		return nil
	}
	return ToStatus(err).Err()
}

// FromError converts an error returned by a gRPC call back into the typed
// error the server sent. Statuses without a ZoneFleet ErrorInfo keep their
// meaning where a typed error exists (Unavailable, Canceled, DeadlineExceeded)
// and are returned as they are otherwise.
func FromError(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != Domain {
			continue
		}
		if en, ok := byReason[info.GetReason()]; ok {
			v := reflect.New(en.typ)
			setFields(v.Elem(), info.GetMetadata())
			return v.Interface().(error)
		}
	}
	switch st.Code() {
	case codes.Unavailable:
		return &zerr.UnavailableError{What: "server", Reason: st.Message()}
	case codes.Canceled:
		return fmt.Errorf("%s: %w", st.Message(), context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: %w", st.Message(), context.DeadlineExceeded)
	}
	return err
}

func fields(v reflect.Value) map[string]string {
	md := make(map[string]string, v.NumField())
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		name := v.Type().Field(i).Name
		switch f.Kind() {
		case reflect.String:
			md[name] = f.String()
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			md[name] = strconv.FormatUint(f.Uint(), 10)
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			md[name] = strconv.FormatInt(f.Int(), 10)
		case reflect.Bool:
			md[name] = strconv.FormatBool(f.Bool())
		}
	}
	return md
}

// setFields fills what it can parse; a malformed or missing field stays zero
// (a client never fails on a server's odd metadata).
func setFields(v reflect.Value, md map[string]string) {
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		s, ok := md[v.Type().Field(i).Name]
		if !ok || !f.CanSet() {
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString(s)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			if n, err := strconv.ParseUint(s, 10, f.Type().Bits()); err == nil {
				f.SetUint(n)
			}
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if n, err := strconv.ParseInt(s, 10, f.Type().Bits()); err == nil {
				f.SetInt(n)
			}
		case reflect.Bool:
			if b, err := strconv.ParseBool(s); err == nil {
				f.SetBool(b)
			}
		}
	}
}

// ServerOptions installs interceptors that convert every handler error with ToError.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			return resp, ToError(err)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return ToError(h(srv, ss))
		}),
	}
}

// DialOptions installs interceptors that convert every call error with FromError.
// Stream errors surface from RecvMsg/SendMsg; wrap them with FromError at the call site.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return FromError(inv(ctx, method, req, reply, cc, opts...))
		}),
	}
}
