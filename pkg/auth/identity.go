package auth

import (
	"context"
)

// Kind is what an authenticated caller is.
type Kind string

// Identity kinds.
const (
	KindAdmin     Kind = "admin"     // the operator: admin certificate or admin token
	KindArbiter   Kind = "arbiter"   // an arbiter replica (certificate)
	KindNode      Kind = "node"      // a registered node (certificate; node token with --insecure)
	KindNamespace Kind = "namespace" // a tenant (namespace token)
)

// Identity is a verified caller. The interceptors put one in the context of
// every call they let through; handlers read it with FromContext and never
// look at raw metadata for who the caller is.
type Identity struct {
	Kind Kind
	// Name is the node id (KindNode) or the namespace (KindNamespace).
	Name string
	// Namespace is the namespace the call acts for: the token's namespace
	// for a tenant; for admin, arbiter and node callers the value of the
	// zonefleet-namespace metadata (they act on a tenant's behalf), "" if none.
	Namespace string
	// Generation is the namespace token's generation (KindNamespace).
	Generation uint64
	// Via says how the caller proved itself: "cert" or "token".
	Via string
}

// String renders kind[:name].
func (id Identity) String() string {
	if id.Name == "" {
		return string(id.Kind)
	}
	return string(id.Kind) + ":" + id.Name
}

// IsAdmin reports whether the caller is the cluster operator.
func (id Identity) IsAdmin() bool { return id.Kind == KindAdmin }

type ctxKey struct{}

// NewContext returns ctx carrying id (interceptors; tests of handlers).
func NewContext(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// FromContext returns the verified identity of the call.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(ctxKey{}).(Identity)
	return id, ok
}
