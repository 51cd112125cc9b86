package wire

import "time"

// Limits of the protocol and of every server, each with its reason. Clients
// and servers agree on the message and header sizes; the other limits bound
// what one caller can make a server hold, so that a hostile or broken peer
// costs a bounded share of memory, file descriptors and CPU and the server
// never stops serving the others. A refused call ends with
// RESOURCE_EXHAUSTED (zerr.LimitError through pkg/rpcerr) and says which
// limit it hit.
const (
	// MaxMessageBytes bounds one gRPC message, both ways. A message is
	// held whole before its handler runs, so it is memory a single call
	// takes; larger transfers use the streaming calls.
	MaxMessageBytes = 8 << 20
	// MaxUnaryData bounds the data of one unary Read, Write or Append
	// (half a message, leaving room for the framing and the other fields).
	MaxUnaryData = 4 << 20

	// MaxHeaderListBytes bounds the decoded header (and trailer) block of
	// one call, on servers and clients. gRPC's default is 16 MiB, which
	// lets one stream make a server decode and hold 16 MiB of HPACK
	// strings; ZoneFleet's metadata is a namespace, a token of a few
	// hundred bytes and a revision, and an error status with its details
	// is a few KiB. A header block past the limit resets that stream only.
	MaxHeaderListBytes = 32 << 10

	// MaxConcurrentStreams bounds the calls in progress on one connection
	// (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS; gRPC's default is
	// unlimited). A gRPC client queues calls past it instead of failing
	// them. With StreamWindow this bounds what one connection can make the
	// server buffer: MaxConcurrentStreams × StreamWindow.
	MaxConcurrentStreams = 128

	// HandshakeTimeout bounds the TLS and HTTP/2 handshakes of a new
	// connection (gRPC's default: 120 s), so that a connection that never
	// completes them gives its slot back quickly.
	HandshakeTimeout = 10 * time.Second
	// MaxConnectionIdle closes a connection that has carried no call for
	// this long (GOAWAY; a gRPC client reconnects on its next call), so
	// idle connections do not pile up against the connection limits.
	MaxConnectionIdle = 5 * time.Minute
	// RequestTimeout bounds how long the request of a unary or
	// server-streaming call may take to arrive once its headers did. gRPC
	// reads such a request whole before any handler runs, with no deadline
	// of its own: a request sent in part, then held, would keep its
	// buffered bytes for ever. A connection with such a call is closed.
	// (Client streams are the handlers' to bound: StreamIdleTimeout.)
	RequestTimeout = 30 * time.Second
	// StreamIdleTimeout bounds the wait for the next message of a tenant's
	// client stream (WriteStream): a stream that sends part of a message
	// and goes silent is ended with DEADLINE_EXCEEDED and its buffers
	// freed. The sending side's counterpart is the node's SendTimeout.
	StreamIdleTimeout = 30 * time.Second

	// MaxConnsPerListener bounds the open connections of one listener,
	// and MaxConnsPerSource those from one source IP address on it. A
	// connection past either is closed as soon as it is accepted, before
	// any TLS work. Established connections are unaffected: a flood of
	// new connections takes the free slots, not the callers already
	// served. Each connection costs a file descriptor: the limits, summed
	// over a process's listeners, are also kept below the process's
	// RLIMIT_NOFILE (see daemon.ConnBudget).
	MaxConnsPerListener = 4096
	MaxConnsPerSource   = 512

	// MaxNamespaceStreams bounds the streaming calls (ReadStream,
	// WriteStream) one namespace has open on one node at once, so that one
	// tenant's streams cannot take the node's memory or threads from the
	// others. The (N+1)th is refused at once.
	MaxNamespaceStreams = 32
	// MaxNamespaceInflightBytes bounds the stream data a node holds for
	// one namespace at once: received and not yet written, or read and not
	// yet sent. A stream moving 1 MiB messages holds about 2 MiB, so the
	// limit binds only on messages larger than the data path sends.
	MaxNamespaceInflightBytes = 128 << 20

	// MaxRevisionLead bounds how far past the node's view of etcd a
	// call's minimum revision (MinRevisionKey) may be. A client learns a
	// revision from the arbiter's answers, a few revisions ahead of a node
	// at most; one far ahead cannot be reached and is refused at once
	// instead of waited for.
	MaxRevisionLead = 1 << 20
	// RevisionWaitTimeout bounds the wait for a reachable minimum revision.
	RevisionWaitTimeout = 3 * time.Second
	// MaxRevisionWaiters bounds the calls one node lets wait for a minimum
	// revision at once; the next one is refused. The waiters share one
	// etcd progress request per RevisionProgressInterval, so the etcd load
	// of revision waits is bounded whatever the number of calls.
	MaxRevisionWaiters       = 256
	RevisionProgressInterval = 100 * time.Millisecond
)
