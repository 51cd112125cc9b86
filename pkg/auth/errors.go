package auth

import (
	"errors"
	"fmt"

	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Token error kinds. A *TokenError matches its kind and zerr.ErrUnauthenticated
// with errors.Is.
var (
	ErrTokenMalformed   = errors.New("malformed token")
	ErrTokenUnknownKey  = errors.New("token signed by an unknown key")
	ErrTokenSignature   = errors.New("bad token signature")
	ErrTokenExpired     = errors.New("token expired")
	ErrTokenNotYetValid = errors.New("token not yet valid")
	ErrTokenRevoked     = errors.New("token revoked")
)

// TokenError says why a token was refused. Reason never contains the token.
type TokenError struct {
	Kind   error // one of the ErrToken* sentinels
	Reason string
}

func (e *TokenError) Error() string {
	if e.Reason == "" {
		return e.Kind.Error()
	}
	return e.Kind.Error() + ": " + e.Reason
}

// Is matches the kind and zerr.ErrUnauthenticated.
func (e *TokenError) Is(t error) bool { return t == e.Kind || t == zerr.ErrUnauthenticated }

func tokErr(kind error, format string, a ...any) error {
	return &TokenError{Kind: kind, Reason: fmt.Sprintf(format, a...)}
}

// ErrPermissionDenied is matched by *PermissionDeniedError. pkg/zerr has no
// permission-denied kind, so this type is the one error mapped outside
// pkg/rpcerr's table: statusOf below sends it as PERMISSION_DENIED with
// ErrorInfo reason PERMISSION_DENIED, the shape rpcerr gives its own errors.
var ErrPermissionDenied = errors.New("permission denied")

// PermissionDeniedError: an authenticated caller may not do this.
type PermissionDeniedError struct {
	Identity string // who asked, e.g. "namespace:tenant-a"
	Method   string // full gRPC method
	Reason   string
}

func (e *PermissionDeniedError) Error() string {
	return fmt.Sprintf("permission denied: %s may not call %s: %s", e.Identity, e.Method, e.Reason)
}

// Is matches ErrPermissionDenied.
func (e *PermissionDeniedError) Is(t error) bool { return t == ErrPermissionDenied }

// ErrorInfo reasons used on the wire (domain zonefleet.io, like pkg/rpcerr).
const (
	ReasonUnauthenticated  = "UNAUTHENTICATED"
	ReasonPermissionDenied = "PERMISSION_DENIED"
	errorDomain            = "zonefleet.io"
)

// statusOf converts an authentication or authorization failure into the
// gRPC status the interceptors return. Anything that is not a permission
// denial is UNAUTHENTICATED: an interceptor failure never reaches a handler.
func statusOf(err error) error {
	var pd *PermissionDeniedError
	if errors.As(err, &pd) {
		st := status.New(codes.PermissionDenied, pd.Error())
		if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonPermissionDenied, Domain: errorDomain,
			Metadata: map[string]string{"Identity": pd.Identity, "Method": pd.Method, "Reason": pd.Reason}}); derr == nil {
			st = d
		}
		return st.Err()
	}
	reason := err.Error()
	var ue *zerr.UnauthenticatedError
	if errors.As(err, &ue) {
		reason = ue.Reason
	}
	// Same shape as pkg/rpcerr gives zerr.UnauthenticatedError.
	st := status.New(codes.Unauthenticated, (&zerr.UnauthenticatedError{Reason: reason}).Error())
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonUnauthenticated, Domain: errorDomain,
		Metadata: map[string]string{"Reason": reason}}); derr == nil {
		st = d
	}
	return st.Err()
}

// Status converts a refusal (PermissionDeniedError, an unauthenticated
// error) into the gRPC status the interceptor sends, for handlers that refuse
// a call themselves (a node's admin-only options, PeerWrite).
func Status(err error) error { return statusOf(err) }
