package wire

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
)

// TransportBufferBytes is the gRPC transport's write buffer, and its read
// buffer where that costs no idle memory, on every connection of the data
// path (gRPC's default is 32 KiB each way).
//
// A 1 MiB write stream is 64 HTTP/2 DATA frames of 16 KiB. With 32 KiB
// buffers the sender makes a write(2) and the receiver a read(2) for every
// two frames (33 and 34 calls per MiB under strace on the node's data path
// benchmark); with 1 MiB buffers each side makes about one call per message.
// BenchmarkDataPathWriteStreamCodec (pkg/node; one client, 1 MiB messages,
// loopback TCP, 2 cores): 796–1163 MB/s with gRPC's defaults against
// 989–1380 with 1 MiB buffers, in alternating runs.
//
// Memory: the write buffer is taken from a shared pool for each flush and
// returned after it (SharedWriteBuffer), so an idle connection holds none.
// The read buffer is taken from a pool only once data is ready when the
// connection is plaintext TCP or a unix socket (gRPC's non-pinning reads);
// over TLS gRPC reads through a bufio.Reader that holds its buffer for the
// connection's life, and TLS hands over one 16 KiB record per read anyway,
// so TLS connections keep gRPC's default read buffer.
const TransportBufferBytes = 1 << 20

// TransportServerOptions are the transport buffer options of a gRPC server
// whose connections are TLS (tls) or plaintext TCP / unix sockets.
func TransportServerOptions(tls bool) []grpc.ServerOption {
	opts := []grpc.ServerOption{grpc.WriteBufferSize(TransportBufferBytes), grpc.SharedWriteBuffer(true)}
	if !tls {
		opts = append(opts, grpc.ReadBufferSize(TransportBufferBytes))
	}
	return opts
}

// TransportDialOptions are the transport options of a client connection
// that is TLS (tls) or plaintext TCP / a unix socket: the buffers, the
// header list limit (MaxHeaderListBytes) on what the server sends back, and
// Pool for the receive buffers, as the server has (ServerOptions): gRPC's
// default pool clears every buffer it hands out, and a client reading 1 MiB
// replies clears each of them before the transport overwrites it whole
// (memclr was 3.7 % of a FUSE mount's CPU on a sequential read, all of it
// under the client transport's reader).
func TransportDialOptions(tls bool) []grpc.DialOption {
	opts := []grpc.DialOption{grpc.WithWriteBufferSize(TransportBufferBytes), grpc.WithSharedWriteBuffer(true),
		grpc.WithMaxHeaderListSize(MaxHeaderListBytes), experimental.WithBufferPool(Pool)}
	if !tls {
		opts = append(opts, grpc.WithReadBufferSize(TransportBufferBytes))
	}
	return opts
}

// LimitServerOptions are the per-connection limits of every server (see
// the constants of limits.go): the message and header list sizes, the
// streams one connection may carry at once, the handshake deadline and the
// reaping of idle connections. Connection counts are the listener's
// (daemon), the request deadline the server's stats handler (daemon).
func LimitServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes), grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.MaxHeaderListSize(MaxHeaderListBytes),
		grpc.MaxConcurrentStreams(MaxConcurrentStreams),
		grpc.ConnectionTimeout(HandshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: MaxConnectionIdle}),
	}
}

// CallSizeOptions are the message size limits of a client's calls (pass
// to grpc.WithDefaultCallOptions).
func CallSizeOptions() []grpc.CallOption {
	return []grpc.CallOption{grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)}
}
