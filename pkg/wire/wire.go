// Package wire holds what callers and servers agree on beside the protobuf
// API: the gRPC metadata keys that carry the caller's namespace and the admin
// token, and helpers to set and read them.
package wire

import (
	"context"
	"strconv"

	"google.golang.org/grpc/metadata"
)

// Metadata keys.
const (
	NamespaceKey   = "zonefleet-namespace"
	TokenKey       = "zonefleet-token"
	MinRevisionKey = "zonefleet-min-revision"
)

// WithMinRevision asks the node to serve the call only once its view of the
// arbiter's grants reflects etcd revision rev (read-your-writes after a
// layout change).
func WithMinRevision(ctx context.Context, rev int64) context.Context {
	if rev <= 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, MinRevisionKey, strconv.FormatInt(rev, 10))
}

// MinRevision returns the revision an incoming call asks for (0 if none or malformed).
func MinRevision(ctx context.Context) int64 {
	r, err := strconv.ParseInt(first(ctx, MinRevisionKey), 10, 64)
	if err != nil || r < 0 {
		return 0
	}
	return r
}

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
