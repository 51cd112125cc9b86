package wire

import (
	"context"
	"hash/crc32"
	"net"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// countConn counts the Read and Write calls that reach a connection (each
// one a read(2) or write(2) of the socket).
type countConn struct {
	net.Conn
	reads, writes *atomic.Int64
}

func (c *countConn) Read(p []byte) (int, error)  { c.reads.Add(1); return c.Conn.Read(p) }
func (c *countConn) Write(p []byte) (int, error) { c.writes.Add(1); return c.Conn.Write(p) }

type countListener struct {
	net.Listener
	reads, writes *atomic.Int64
}

func (l *countListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countConn{Conn: c, reads: l.reads, writes: l.writes}, nil
}

// streamCalls streams msgs messages of 1 MiB through a WriteStream and
// returns the client's socket writes and the server's socket reads.
func streamCalls(t *testing.T, srvOpts []grpc.ServerOption, dialOpts []grpc.DialOption, msgs int) (writes, reads int64) {
	t.Helper()
	var sr, sw, cr, cw atomic.Int64
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := grpc.NewServer(append(append(srvOpts, ServerOptions()...), grpc.MaxRecvMsgSize(8<<20))...)
	v1.RegisterZonedDeviceServer(s, &echoDevice{})
	go func() { _ = s.Serve(&countListener{Listener: l, reads: &sr, writes: &sw}) }()
	defer s.Stop()
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &countConn{Conn: c, reads: &cr, writes: &cw}, nil
	}
	cc, err := grpc.NewClient("passthrough:///"+l.Addr().String(), append(dialOpts, grpc.WithContextDialer(dialer),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(CallOptions()...))...)
	require.NoError(t, err)
	defer cc.Close()
	ws, err := v1.NewZonedDeviceClient(cc).WriteStream(context.Background())
	require.NoError(t, err)
	data := payload(1<<20, 5)
	h := crc32.NewIEEE()
	w0, r0 := cw.Load(), sr.Load()
	for i := 0; i < msgs; i++ {
		require.NoError(t, ws.Send(&v1.WriteRequest{Data: data}))
		h.Write(data)
	}
	resp, err := ws.CloseAndRecv()
	require.NoError(t, err)
	require.Equal(t, uint64(msgs<<20), resp.GetBlocks(), "bytes received")
	require.Equal(t, uint64(h.Sum32()), resp.GetWritePointer(), "checksum of what arrived")
	return cw.Load() - w0, sr.Load() - r0
}

// TestTransportBuffersBatchSocketCalls: with the transport options a 1 MiB
// message costs the sender and the receiver a few socket calls each, not
// one per 32 KiB (gRPC's default buffers, measured in the same run).
func TestTransportBuffersBatchSocketCalls(t *testing.T) {
	const msgs = 16
	defW, defR := streamCalls(t, nil, nil, msgs)
	w, r := streamCalls(t, TransportServerOptions(false), TransportDialOptions(false), msgs)
	t.Logf("per MiB: gRPC defaults %.1f writes, %.1f reads; transport options %.1f writes, %.1f reads",
		float64(defW)/msgs, float64(defR)/msgs, float64(w)/msgs, float64(r)/msgs)
	assert.LessOrEqual(t, w*4, defW, "client socket writes")
	assert.LessOrEqual(t, r*4, defR, "server socket reads")
	assert.LessOrEqual(t, w, int64(4*msgs), "client socket writes per MiB")
	// over TLS the server keeps gRPC's default read buffer (held for the
	// connection's life there); the write buffer is shared either way
	assert.Len(t, TransportServerOptions(true), len(TransportServerOptions(false))-1)
	assert.Len(t, TransportDialOptions(true), len(TransportDialOptions(false))-1)
}
