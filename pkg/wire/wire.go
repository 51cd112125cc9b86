// Package wire holds what callers and servers agree on beside the protobuf
// API: the gRPC metadata keys that carry the caller's namespace and the admin
// token, and helpers to set and read them; the limits of the protocol and of
// every server, each with its reason (limits.go: message and header sizes,
// connections, streams, deadlines, per-namespace shares), with the gRPC
// options that apply them; and the bulk codec and buffer pool of the data
// path. It links no server code: clients take their limits from here.
//
// # The bulk codec
//
// gRPC's protobuf codec costs three full copies of every data payload: on
// send, proto.Marshal copies the bytes field into one contiguous message
// buffer; on receive, the transport's frame buffers are first concatenated
// into one buffer (MaterializeToBuffer) and proto.Unmarshal then copies the
// bytes field out of it into a freshly allocated slice, which for a 1 MiB
// write is 1 MiB of garbage per message on top of the pooled buffer.
//
// Codec is an encoding.CodecV2 that treats the few messages that carry bulk
// data specially (WriteRequest, AppendRequest, ReadResponse, WriteChunk and
// ReadChunk)
// and hands every other message to the standard protobuf codec unchanged:
//
//   - Marshal encodes the small scalar fields by hand with protowire and
//     returns the data bytes as their own buffer, referencing the caller's
//     slice: [fields before data + tag + length] [data] [fields after data].
//     The concatenation is byte for byte what proto.Marshal produces (fields
//     in number order, proto3 zero values omitted; a test compares them and
//     pins the messages' field lists so a .proto change cannot slip by), so
//     any protobuf peer reads it. The caller must not modify the data until
//     the call has sent it (the usual gRPC SendMsg rule).
//   - Unmarshal walks the received buffers in place. Scalars are decoded as
//     protobuf does (last occurrence wins, uint32 fields truncate); the data
//     field becomes views of the receive buffers (WriteChunk, ReadChunk:
//     zero copies, the receiver frees them) or one exactly sized copy for the generated
//     types (one copy instead of two). A field it does not know, or a known
//     field with an unexpected wire type (both legal protobuf), sends the
//     whole message to the standard codec, so the result always equals
//     proto.Unmarshal's; malformed input is an error, never a panic (fuzzed).
//
// Name is "proto": a client that forces this codec sends
// application/grpc+proto, which every gRPC server accepts, and a server
// using it (ForceServerCodecV2) answers standard clients and tools such as
// grpcurl, whose messages simply take the generic paths. Nothing is
// registered globally: servers opt in with ServerOptions, clients with
// CallOptions.
//
// Concurrency: Codec is stateless and safe for concurrent use.
//
// # Buffers
//
// Pool is the data path's buffer pool: power-of-two classes, not zeroed on
// Get (gRPC's default pool clears every buffer). ServerOptions makes the
// server's transport read frames into it (the node writes a payload to the
// drive from those frames, vectored) and the node reads the drive into it. A ReadChunk carries such a read buffer as a
// reference-counted mem.Buffer: Marshal hands the reference to gRPC, which
// frees it (back to Pool) once the frames are written, never earlier.
//
// Failure behaviour: a malformed message is a typed InvalidArgument error
// from Unmarshal (gRPC then fails the call); nothing is retained from it.
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
