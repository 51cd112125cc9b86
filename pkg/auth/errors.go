package auth

import (
	"errors"
	"fmt"

	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/zerr"
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

// ErrPermissionDenied is zerr.ErrPermissionDenied, matched by
// *PermissionDeniedError.
var ErrPermissionDenied = zerr.ErrPermissionDenied

// PermissionDeniedError: an authenticated caller may not do this. It is the
// zerr type, mapped by pkg/rpcerr's table like every typed error.
type PermissionDeniedError = zerr.PermissionDeniedError

// ErrorInfo reasons the rpcerr table gives the refusals on the wire.
const (
	ReasonUnauthenticated  = "UNAUTHENTICATED"
	ReasonPermissionDenied = "PERMISSION_DENIED"
)

// statusOf converts an authentication or authorization failure into the
// gRPC status the interceptors return, through pkg/rpcerr's table: a
// permission denial stays a *zerr.PermissionDeniedError, anything else is a
// *zerr.UnauthenticatedError (an interceptor failure never reaches a
// handler). Clients get the same typed errors back from rpcerr.FromError.
func statusOf(err error) error {
	var pd *zerr.PermissionDeniedError
	if errors.As(err, &pd) {
		return rpcerr.ToError(pd)
	}
	reason := err.Error()
	var ue *zerr.UnauthenticatedError
	if errors.As(err, &ue) {
		reason = ue.Reason
	}
	return rpcerr.ToError(&zerr.UnauthenticatedError{Reason: reason})
}

// Status converts a refusal (PermissionDeniedError, an unauthenticated
// error) into the gRPC status the interceptor sends, for handlers that refuse
// a call themselves (a node's admin-only options, PeerWrite).
func Status(err error) error { return statusOf(err) }
