package peerdial

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

type peerSrv struct {
	v1.UnimplementedZonedDeviceServer
	calls atomic.Int64
	mu    sync.Mutex
	who   auth.Identity
	authz []string
}

func (s *peerSrv) PeerWrite(st grpc.ClientStreamingServer[v1.PeerWriteRequest, v1.PeerWriteResponse]) error {
	id, _ := auth.FromContext(st.Context())
	md, _ := metadata.FromIncomingContext(st.Context())
	s.mu.Lock()
	s.who, s.authz = id, md.Get(auth.AuthorizationKey)
	s.mu.Unlock()
	s.calls.Add(1)
	n := uint64(0)
	for {
		if _, err := st.Recv(); err != nil {
			return st.SendAndClose(&v1.PeerWriteResponse{Blocks: n})
		}
		n++
	}
}

func serveNode(t *testing.T, ca *pki.CA, kp *pki.KeyPair) (string, *peerSrv) {
	t.Helper()
	a, err := auth.New(auth.Config{Roots: ca.Pool()})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(append(a.ServerOptions(), grpc.Creds(credentials.NewTLS(pki.ServerConfig(kp.TLSCertificate(), ca.Pool(), pki.ClientCertRequest))))...)
	ps := &peerSrv{}
	v1.RegisterZonedDeviceServer(srv, ps)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String(), ps
}

func push(cc *grpc.ClientConn) error {
	ctx := metadata.AppendToOutgoingContext(context.Background(), auth.NamespaceKey, "tenant-a")
	st, err := v1.NewZonedDeviceClient(cc).PeerWrite(ctx)
	if err != nil {
		return err
	}
	_ = st.Send(&v1.PeerWriteRequest{Namespace: "tenant-a", Extents: []*v1.PeerExtent{{Data: make([]byte, 4096)}}})
	_, err = st.CloseAndRecv()
	return err
}

func TestPoolDialsRegisteredPinnedPeers(t *testing.T) {
	ca, err := pki.NewCA(pki.CAOptions{})
	require.NoError(t, err)
	issue := func(r pki.Role) *pki.KeyPair {
		kp, err := ca.Issue(pki.LeafOptions{Role: r, DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
		require.NoError(t, err)
		return kp
	}
	n1 := issue(pki.Role{Kind: pki.RoleNode, Name: "n1"}).TLSCertificate()
	addr2, srv2 := serveNode(t, ca, issue(pki.Role{Kind: pki.RoleNode, Name: "n2"}))
	addr3, srv3 := serveNode(t, ca, issue(pki.Role{Kind: pki.RoleNode, Name: "n3"}))
	rogue, rogueSrv := serveNode(t, ca, issue(pki.Role{Kind: pki.RoleArbiter})) // valid cluster cert, not a node

	var mu sync.Mutex
	records := map[string]string{"n2": addr2, "n3": addr3}
	var resolves atomic.Int64
	p, err := New(Config{Roots: ca.Pool(), Cert: &n1, Max: 1, Resolve: func(_ context.Context, id string) (string, error) {
		resolves.Add(1)
		mu.Lock()
		defer mu.Unlock()
		a, ok := records[id]
		if !ok {
			return "", &zerr.NotFoundError{Kind: "node", Name: id}
		}
		return a, nil
	}})
	require.NoError(t, err)
	defer p.Close()

	cc, err := p.Get(context.Background(), "n2")
	require.NoError(t, err)
	require.NoError(t, push(cc))
	assert.Equal(t, int64(1), srv2.calls.Load())
	srv2.mu.Lock()
	assert.Equal(t, auth.Identity{Kind: auth.KindNode, Name: "n1", Namespace: "tenant-a", Via: "cert"}, srv2.who, "the peer sees the dialling node's certificate identity")
	assert.Empty(t, srv2.authz, "no bearer token travels between nodes")
	srv2.mu.Unlock()
	cc2, err := p.Get(context.Background(), "n2")
	require.NoError(t, err)
	assert.Same(t, cc, cc2, "connection reused")

	// A record that points at something that is not node n2 (a stolen or
	// confused address): the handshake fails, the impostor sees no call.
	mu.Lock()
	records["n2"] = rogue
	mu.Unlock()
	cc, err = p.Get(context.Background(), "n2")
	require.NoError(t, err)
	assert.Error(t, push(cc))
	assert.Equal(t, int64(0), rogueSrv.calls.Load())
	mu.Lock()
	records["n2"] = addr3 // n3's server claiming to be n2
	mu.Unlock()
	cc, err = p.Get(context.Background(), "n2")
	require.NoError(t, err)
	assert.Error(t, push(cc))
	assert.Equal(t, int64(0), srv3.calls.Load())

	// Bounded: Max 1 keeps one connection.
	cc, err = p.Get(context.Background(), "n3")
	require.NoError(t, err)
	require.NoError(t, push(cc))
	assert.Equal(t, 1, p.Len())

	_, err = p.Get(context.Background(), "n9")
	assert.ErrorIs(t, err, zerr.ErrNotFound, "unregistered nodes are not dialled")
	_, err = p.Get(context.Background(), "127.0.0.1:1234")
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument, "an address is not a node id")

	p.Close()
	_, err = p.Get(context.Background(), "n3")
	assert.ErrorIs(t, err, zerr.ErrClosed)
	assert.Equal(t, 0, p.Len())

	_, err = New(Config{Resolve: p.cfg.Resolve})
	assert.Error(t, err, "TLS material required without --insecure")
	_, err = New(Config{Roots: ca.Pool(), Cert: &n1})
	assert.Error(t, err, "resolver required")
}
