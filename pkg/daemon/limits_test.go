package daemon

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// tlsDaemon runs a TLS daemon (certificates from auth.InitDir, the
// authenticator in front) with the given limits and clock; it returns the
// daemon and a client TLS configuration that verifies it.
func tlsDaemon(t *testing.T, lim Limits, clk clock.Clock) (*Daemon, *tls.Config) {
	t.Helper()
	t.Setenv(AdminTokenEnv, "")
	dir := t.TempDir()
	_, err := auth.InitDir(auth.InitOptions{Dir: dir, Nodes: []string{"n1"}, Hosts: []string{"127.0.0.1"}})
	require.NoError(t, err)
	log, _ := NewLogger(io.Discard, "text", "error")
	role := pki.Role{Kind: pki.RoleNode, Name: "n1"}
	sec, err := LoadSecurity(SecurityFlags{PKIDir: dir}, role, false, nil, log)
	require.NoError(t, err)
	d, err := New(Config{Name: "test", GRPCListen: "127.0.0.1:0", Security: sec, Limits: lim, Clock: clk}, log)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	tc, err := sec.Bundle.ClientTLS(&role, "")
	require.NoError(t, err)
	return d, tc
}

// serving: a fresh gRPC connection gets an answer from the health service.
func serving(t *testing.T, addr string, tc *tls.Config) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	require.NoError(t, err)
	defer conn.Close()
	checkHealth(t, conn)
}

func checkHealth(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	require.NoError(t, err)
}

// refusedConns is the refusal counter of a listener for a reason.
func refusedConns(d *Daemon, listener, reason string) int {
	return int(testutil.ToFloat64(d.guards[listener].refused.WithLabelValues(reason)))
}

// A flood of idle connections past the listener's limit is closed as it is
// accepted; the caller connected before it keeps being served, and once the
// flood goes away new callers are served again.
func TestConnectionFloodKeepsServing(t *testing.T) {
	const limit, flood = 64, 100
	d, tc := tlsDaemon(t, Limits{MaxConns: limit, MaxConnsPerSource: limit}, nil)
	victim, err := grpc.NewClient(d.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	require.NoError(t, err)
	defer victim.Close()
	checkHealth(t, victim)

	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	dialFailed := 0
	for range flood {
		c, err := net.Dial("tcp", d.GRPCAddr())
		if err != nil { // reset by the server before the dial returned
			dialFailed++
			continue
		}
		conns = append(conns, c)
	}
	refused := flood - (limit - 1) // the victim holds one slot
	require.Eventually(t, func() bool { return refusedConns(d, "grpc", "listener") == refused }, 30*time.Second, 5*time.Millisecond)
	checkHealth(t, victim)
	// The refused ones are closed by the server (it counts a refusal just
	// before the close): poll every connection not seen closed yet, with
	// a read that returns at once, until the closes all arrived. A
	// connection closed by mistake shows as one too many.
	closed := make([]bool, len(conns))
	nClosed := func() int {
		n := 0
		for i, c := range conns {
			if !closed[i] {
				_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
				_, err := c.Read(make([]byte, 1))
				closed[i] = err != nil && !isTimeout(err)
			}
			if closed[i] {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return nClosed()+dialFailed >= refused }, 30*time.Second, 10*time.Millisecond,
		"connections past the limit are closed")
	assert.Equal(t, refused, nClosed()+dialFailed, "only the connections past the limit are closed")

	for _, c := range conns {
		_ = c.Close()
	}
	conns = nil
	// The flood is gone once the server has seen every close and given
	// the slots back (its open-connections gauge is down to the victim's).
	require.Eventually(t, func() bool { return testutil.ToFloat64(d.guards["grpc"].open) == 1 }, 30*time.Second, 5*time.Millisecond,
		"the server releases the flood's connections")
	serving(t, d.GRPCAddr(), tc)
	assert.Equal(t, refused, refusedConns(d, "grpc", "listener"), "no refusal once the flood is gone")
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// The per-source limit refuses a source's connections past it.
func TestConnectionLimitPerSource(t *testing.T) {
	d, tc := tlsDaemon(t, Limits{MaxConns: 1000, MaxConnsPerSource: 8}, nil)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range 12 {
		c, err := net.Dial("tcp", d.GRPCAddr())
		if err != nil { // reset by the server before the dial returned
			continue
		}
		conns = append(conns, c)
	}
	require.Eventually(t, func() bool { return refusedConns(d, "grpc", "source") == 4 }, 30*time.Second, 5*time.Millisecond)
	for _, c := range conns {
		_ = c.Close()
	}
	serving(t, d.GRPCAddr(), tc)
}

// rawH2 is an HTTP/2 connection to a gRPC server over TLS, written frame by
// frame (what a hostile peer can send, not what a gRPC client would).
type rawH2 struct {
	c  net.Conn
	fr *http2.Framer
}

// dialH2 connects over TLS, or plaintext TCP without tc.
func dialH2(t *testing.T, addr string, tc *tls.Config) *rawH2 {
	t.Helper()
	var c net.Conn
	var err error
	if tc != nil {
		tc = tc.Clone()
		tc.NextProtos = []string{"h2"}
		c, err = tls.Dial("tcp", addr, tc)
	} else {
		c, err = net.Dial("tcp", addr)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = io.WriteString(c, http2.ClientPreface)
	require.NoError(t, err)
	fr := http2.NewFramer(c, c)
	fr.SetMaxReadFrameSize(1 << 20)
	require.NoError(t, fr.WriteSettings())
	return &rawH2{c: c, fr: fr}
}

// headers sends the request headers of a health check on stream id, with
// extra metadata of pad bytes in fields of at most field bytes; the block
// goes in 16 KiB frames.
func (h *rawH2) headers(t *testing.T, id uint32, pad, field int, endStream bool) {
	t.Helper()
	h.headersFor(t, "/grpc.health.v1.Health/Check", id, pad, field, endStream)
}

func (h *rawH2) headersFor(t *testing.T, path string, id uint32, pad, field int, endStream bool) {
	t.Helper()
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "https"}, {":path", path},
		{":authority", "n1"}, {"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		require.NoError(t, enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}))
	}
	for i := 0; pad > 0; i++ {
		n := min(pad, field)
		pad -= n
		// distinct values: no HPACK indexing shrinks the block
		v := fmt.Sprintf("%08d", i) + strings.Repeat("a", max(n-8, 0))
		require.NoError(t, enc.WriteField(hpack.HeaderField{Name: "x-pad", Value: v, Sensitive: true}))
	}
	block := buf.Bytes()
	const frame = 16 << 10
	first := block[:min(frame, len(block))]
	block = block[len(first):]
	// A write may fail once the server has closed the connection on what
	// it read so far: answer then reports it.
	if h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: endStream, EndHeaders: len(block) == 0}) != nil {
		return
	}
	for len(block) > 0 {
		n := min(frame, len(block))
		if h.fr.WriteContinuation(id, n == len(block), block[:n]) != nil {
			return
		}
		block = block[n:]
	}
}

// answer reads frames until stream id is answered: "headers" (the server
// took the call) or "reset" (it refused the stream).
func (h *rawH2) answer(t *testing.T, id uint32) string {
	t.Helper()
	require.NoError(t, h.c.SetReadDeadline(time.Now().Add(30*time.Second)))
	for {
		f, err := h.fr.ReadFrame()
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return "closed"
		}
		require.NoError(t, err)
		if f.Header().StreamID != id {
			if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
				_ = h.fr.WriteSettingsAck() // the server may have closed the connection already
			}
			continue
		}
		switch f.(type) {
		case *http2.HeadersFrame:
			return "headers"
		case *http2.RSTStreamFrame:
			return "reset"
		}
	}
}

// A header block past wire.MaxHeaderListBytes (gRPC's default would take
// 16 MiB) is refused: the server closes that connection without decoding
// the rest, whether the block is many small fields or one large one, and
// goes on serving the others.
func TestHeaderListOverLimitRefused(t *testing.T) {
	d, tc := tlsDaemon(t, Limits{}, nil)
	victim, err := grpc.NewClient(d.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	require.NoError(t, err)
	defer victim.Close()
	checkHealth(t, victim)
	for _, tc2 := range []struct {
		name       string
		pad, field int
		want       string
	}{
		{"small block", wire.MaxHeaderListBytes / 2, 1024, "headers"},
		{"small fields past the limit", 2 * wire.MaxHeaderListBytes, 1024, "closed"},
		{"one 1 MiB field", 1 << 20, 1 << 20, "closed"},
	} {
		h := dialH2(t, d.GRPCAddr(), tc)
		h.headers(t, 1, tc2.pad, tc2.field, true)
		assert.Equal(t, tc2.want, h.answer(t, 1), tc2.name)
		checkHealth(t, victim)
	}
	serving(t, d.GRPCAddr(), tc)
}

// A call whose request message is sent in part and then held is ended with
// its connection after the request deadline (virtual time); calls whose
// request arrived are not affected, and the server keeps serving.
func TestPartialRequestClosesConnection(t *testing.T) {
	clk := clock.NewVirtual()
	d, tc := tlsDaemon(t, Limits{RequestTimeout: time.Minute}, clk)
	victim, err := grpc.NewClient(d.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	require.NoError(t, err)
	defer victim.Close()
	checkHealth(t, victim)

	h := dialH2(t, d.GRPCAddr(), tc)
	h.headers(t, 1, 0, 0, false)
	var prefix [5]byte
	binary.BigEndian.PutUint32(prefix[1:], 1000) // a 1000-byte message, of which 10 bytes come
	require.NoError(t, h.fr.WriteData(1, false, append(prefix[:], make([]byte, 10)...)))

	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = h.c.SetReadDeadline(time.Now().Add(time.Hour))
		for {
			if _, err := h.fr.ReadFrame(); err != nil {
				return
			}
		}
	}()
	// Time passes (the stalled call's deadline is registered once its
	// stream reached the server; each step advances past it).
	require.Eventually(t, func() bool {
		clk.Advance(time.Minute)
		select {
		case <-closed:
			return true
		default:
			return false
		}
	}, 30*time.Second, 10*time.Millisecond, "the connection with the stalled request is closed")
	assert.Equal(t, 1, refusedConns(d, "grpc", "request_timeout"))
	checkHealth(t, victim)
	serving(t, d.GRPCAddr(), tc)
	assert.Equal(t, 1, refusedConns(d, "grpc", "request_timeout"), "answered calls are never cut")
}

// The connection budget stays below the process's file descriptor limit.
func TestConnBudgetBelowFileLimit(t *testing.T) {
	limit := RaiseFileLimit()
	b := ConnBudget()
	assert.Positive(t, b)
	assert.Less(t, uint64(b), limit)
}

// A client stream paces its own messages (a node's rebuild push waits for
// its rate limit): the request deadline leaves it alone, and its
// connection is served on. (Plaintext and no authenticator: the test's
// service is not in the authenticator's policy.)
func TestClientStreamNotCutByRequestDeadline(t *testing.T) {
	clk := clock.NewVirtual()
	started := make(chan struct{}, 1)
	desc := &grpc.ServiceDesc{
		ServiceName: "test.Streams",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Up", ClientStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
			started <- struct{}{}
			<-ss.Context().Done()
			return nil
		}}},
	}
	log, _ := NewLogger(io.Discard, "text", "error")
	d, err := New(Config{Name: "test", GRPCListen: "127.0.0.1:0", Limits: Limits{RequestTimeout: time.Minute}, Clock: clk}, log)
	require.NoError(t, err)
	d.GRPC.RegisterService(desc, struct{}{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()

	h := dialH2(t, d.GRPCAddr(), nil)
	h.headersFor(t, "/test.Streams/Up", 1, 0, 0, false)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the client stream's handler did not start")
	}
	clk.Advance(10 * time.Minute)
	h.headers(t, 3, 0, 0, true)
	assert.Equal(t, "headers", h.answer(t, 3), "the connection is still served")
	assert.Zero(t, refusedConns(d, "grpc", "request_timeout"))
}
