// Package wire holds what callers and servers agree on beside the protobuf
// API: the gRPC metadata keys that carry the caller's namespace and the admin
// token, and helpers to set and read them.
package wire

import (
	"context"

	"google.golang.org/grpc/metadata"
)

// Metadata keys.
const (
	NamespaceKey = "zonefleet-namespace"
	TokenKey     = "zonefleet-token"
)

// WithNamespace returns ctx whose outgoing calls carry namespace ns.
func WithNamespace(ctx context.Context, ns string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, NamespaceKey, ns)
}

// WithToken returns ctx whose outgoing calls carry the admin token.
func WithToken(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, TokenKey, token)
}

// Namespace returns the namespace of an incoming call ("" if none).
func Namespace(ctx context.Context) string { return first(ctx, NamespaceKey) }

// Token returns the admin token of an incoming call ("" if none).
func Token(ctx context.Context) string { return first(ctx, TokenKey) }

func first(ctx context.Context, key string) string {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ""
	}
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
