package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// seen is what the handlers observed: the number of calls that reached a
// handler (a refused call must not change it) and what the last one saw.
type seen struct {
	mu     sync.Mutex
	calls  atomic.Int64
	id     Identity
	ns     string
	legacy bool
}

func (s *seen) record(ctx context.Context) {
	id, _ := FromContext(ctx)
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	s.id = id
	s.ns = strings.Join(md.Get(NamespaceKey), ",")
	s.legacy = len(md.Get(legacyTokenKey)) > 0 || len(md.Get(AuthorizationKey)) > 0
	s.mu.Unlock()
	s.calls.Add(1)
}

func (s *seen) last() (Identity, string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, s.ns, s.legacy
}

type devSrv struct {
	v1.UnimplementedZonedDeviceServer
	s *seen
}

func (d *devSrv) Read(ctx context.Context, _ *v1.ReadRequest) (*v1.ReadResponse, error) {
	d.s.record(ctx)
	return &v1.ReadResponse{Data: []byte("secret blocks")}, nil
}

func (d *devSrv) GetLog(ctx context.Context, _ *v1.GetLogRequest) (*v1.GetLogResponse, error) {
	d.s.record(ctx)
	return &v1.GetLogResponse{HostBlocksWritten: 1}, nil
}

func (d *devSrv) ReportZones(ctx context.Context, _ *v1.ReportZonesRequest) (*v1.ReportZonesResponse, error) {
	d.s.record(ctx)
	return &v1.ReportZonesResponse{}, nil
}

func (d *devSrv) PeerWrite(st grpc.ClientStreamingServer[v1.PeerWriteRequest, v1.PeerWriteResponse]) error {
	d.s.record(st.Context())
	n := uint64(0)
	for {
		m, err := st.Recv()
		if err != nil {
			return st.SendAndClose(&v1.PeerWriteResponse{Blocks: n})
		}
		n += uint64(len(m.GetExtents()))
	}
}

func (d *devSrv) PeerRead(_ *v1.PeerReadRequest, st grpc.ServerStreamingServer[v1.ReadResponse]) error {
	d.s.record(st.Context())
	return st.Send(&v1.ReadResponse{Data: []byte("peer blocks")})
}

func (d *devSrv) RebuildParityLeg(ctx context.Context, _ *v1.RebuildParityLegRequest) (*v1.RebuildParityLegResponse, error) {
	d.s.record(ctx)
	return &v1.RebuildParityLegResponse{}, nil
}

type arbSrv struct {
	v1.UnimplementedArbiterServer
	s *seen
}

func (a *arbSrv) CreateNamespace(ctx context.Context, r *v1.CreateNamespaceRequest) (*v1.Namespace, error) {
	a.s.record(ctx)
	return &v1.Namespace{Name: r.GetName()}, nil
}

func (a *arbSrv) DeleteNamespace(ctx context.Context, _ *v1.DeleteNamespaceRequest) (*v1.DeleteNamespaceResponse, error) {
	a.s.record(ctx)
	return &v1.DeleteNamespaceResponse{}, nil
}

func (a *arbSrv) ListVZones(ctx context.Context, _ *v1.ListVZonesRequest) (*v1.ListVZonesResponse, error) {
	a.s.record(ctx)
	return &v1.ListVZonesResponse{}, nil
}

func (a *arbSrv) GetNamespace(ctx context.Context, r *v1.GetNamespaceRequest) (*v1.Namespace, error) {
	a.s.record(ctx)
	return &v1.Namespace{Name: r.GetName()}, nil
}

// cluster is the PKI and keys of one test cluster plus a running server.
type cluster struct {
	ca, otherCA                  *pki.CA
	server, admin, node2, arbCrt *pki.KeyPair
	etcd, foreign, expired       *pki.KeyPair
	issuer, otherIssuer, oldIss  *Issuer
	adminToken                   string
	addr, plainAddr              string
	seen                         *seen
	revokedGen                   atomic.Uint64
	auth                         *Authenticator
}

func issue(t *testing.T, ca *pki.CA, role pki.Role, o ...func(*pki.LeafOptions)) *pki.KeyPair {
	t.Helper()
	lo := pki.LeafOptions{Role: role, DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	for _, f := range o {
		f(&lo)
	}
	kp, err := ca.Issue(lo)
	require.NoError(t, err)
	return kp
}

func newIssuer(t *testing.T, now func() time.Time) (*Issuer, ed25519.PublicKey) {
	t.Helper()
	k, err := GenerateSigningKey()
	require.NoError(t, err)
	iss, err := NewIssuer(k, now)
	require.NoError(t, err)
	return iss, k.Public().(ed25519.PublicKey)
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{seen: &seen{}}
	var err error
	c.ca, err = pki.NewCA(pki.CAOptions{})
	require.NoError(t, err)
	c.otherCA, err = pki.NewCA(pki.CAOptions{CommonName: "attacker CA"})
	require.NoError(t, err)
	c.server = issue(t, c.ca, pki.Role{Kind: pki.RoleNode, Name: "n1"})
	c.admin = issue(t, c.ca, pki.Role{Kind: pki.RoleAdmin})
	c.node2 = issue(t, c.ca, pki.Role{Kind: pki.RoleNode, Name: "n2"})
	c.arbCrt = issue(t, c.ca, pki.Role{Kind: pki.RoleArbiter})
	c.etcd = issue(t, c.ca, pki.Role{Kind: pki.RoleEtcd})
	c.foreign = issue(t, c.otherCA, pki.Role{Kind: pki.RoleAdmin})
	c.expired = issue(t, c.ca, pki.Role{Kind: pki.RoleAdmin}, func(o *pki.LeafOptions) {
		o.Now, o.Validity = time.Now().Add(-72*time.Hour), time.Hour
	})
	var pub, oldPub ed25519.PublicKey
	c.issuer, pub = newIssuer(t, nil)
	c.otherIssuer, _ = newIssuer(t, nil)
	c.oldIss, oldPub = newIssuer(t, func() time.Time { return time.Now().Add(-2 * time.Hour) })
	c.adminToken, err = GenerateSecret(AdminTokenPrefix)
	require.NoError(t, err)
	ver, err := NewVerifier(VerifierConfig{Keys: []ed25519.PublicKey{pub, oldPub}})
	require.NoError(t, err)

	cfg := Config{Roots: c.ca.Pool(), AdminToken: c.adminToken, Verifier: ver,
		Revoked: func(ns string, gen uint64) error {
			if r := c.revokedGen.Load(); r != 0 && gen < r {
				return fmt.Errorf("namespace %s: generation %d was revoked (current %d)", ns, gen, r)
			}
			return nil
		}}
	a, err := New(cfg)
	require.NoError(t, err)
	c.auth = a

	serve := func(creds credentials.TransportCredentials) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		opts := append(a.ServerOptions(), rpcerr.ServerOptions()...)
		opts = append(opts, grpc.Creds(creds))
		srv := grpc.NewServer(opts...)
		v1.RegisterZonedDeviceServer(srv, &devSrv{s: c.seen})
		v1.RegisterArbiterServer(srv, &arbSrv{s: c.seen})
		healthpb.RegisterHealthServer(srv, health.NewServer())
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(srv.Stop)
		return ln.Addr().String()
	}
	c.addr = serve(credentials.NewTLS(pki.ServerConfig(c.server.TLSCertificate(), c.ca.Pool(), pki.ClientCertRequest)))
	// A misconfigured server: no TLS, but not --insecure either.
	c.plainAddr = serve(insecure.NewCredentials())
	return c
}

type dialOpt struct {
	cert      *pki.KeyPair
	force     bool // present cert even if the server's acceptable CAs do not list its issuer (an attacker would)
	plaintext bool
	addr      string
}

func (c *cluster) dial(t *testing.T, o dialOpt) *grpc.ClientConn {
	t.Helper()
	addr := c.addr
	if o.addr != "" {
		addr = o.addr
	}
	var creds credentials.TransportCredentials
	if o.plaintext {
		creds = insecure.NewCredentials()
	} else {
		co := pki.ClientOptions{Roots: c.ca.Pool(), ServerName: "localhost"}
		if o.cert != nil {
			cert := o.cert.TLSCertificate()
			co.Cert = &cert
		}
		conf := pki.ClientConfig(co)
		if o.force && co.Cert != nil {
			cert := *co.Cert
			conf.Certificates = nil
			conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
		}
		creds = credentials.NewTLS(conf)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return cc
}

func (c *cluster) token(t *testing.T, iss *Issuer, ns string, gen uint64, ttl time.Duration) string {
	t.Helper()
	tok, _, err := iss.Issue(TokenRoleNamespace, ns, gen, ttl)
	require.NoError(t, err)
	return tok
}

func withMD(kv ...string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), kv...)
}

func bearer(tok string) []string { return []string{AuthorizationKey, "Bearer " + tok} }

func cat(a ...[]string) []string {
	var out []string
	for _, s := range a {
		out = append(out, s...)
	}
	return out
}

func read(cc *grpc.ClientConn, md []string) error {
	_, err := v1.NewZonedDeviceClient(cc).Read(withMD(md...), &v1.ReadRequest{})
	return err
}

func peerWrite(cc *grpc.ClientConn, md []string) error {
	st, err := v1.NewZonedDeviceClient(cc).PeerWrite(withMD(md...))
	if err != nil {
		return err
	}
	if err := st.Send(&v1.PeerWriteRequest{Namespace: "tenant-a", Extents: []*v1.PeerExtent{{DstLba: 0, Data: make([]byte, 4096)}}}); err != nil {
		_, err = st.CloseAndRecv()
		return err
	}
	_, err = st.CloseAndRecv()
	return err
}

func peerRead(cc *grpc.ClientConn, md []string) error {
	st, err := v1.NewZonedDeviceClient(cc).PeerRead(withMD(md...), &v1.PeerReadRequest{Namespace: "tenant-a", Blocks: 1})
	if err != nil {
		return err
	}
	_, err = st.Recv()
	return err
}

func rebuildLeg(cc *grpc.ClientConn, md []string) error {
	_, err := v1.NewZonedDeviceClient(cc).RebuildParityLeg(withMD(md...), &v1.RebuildParityLegRequest{Width: 2, StripeBlocks: 1})
	return err
}

func TestAttacks(t *testing.T) {
	c := startCluster(t)
	tokA := c.token(t, c.issuer, "tenant-a", 0, 0)
	tokB := c.token(t, c.issuer, "tenant-b", 0, 0)
	parts := strings.Split(tokA, ".")
	forgedPayload := strings.Split(tokB, ".")[2]
	tamperedPayload := strings.Join([]string{parts[0], parts[1], forgedPayload, parts[3]}, ".")
	sig := []byte(parts[3])
	if sig[0] == 'A' {
		sig[0] = 'B'
	} else {
		sig[0] = 'A'
	}
	tamperedSig := strings.Join([]string{parts[0], parts[1], parts[2], string(sig)}, ".")
	foreignTok := c.token(t, c.otherIssuer, "tenant-a", 0, 0)
	fp := strings.Split(foreignTok, ".")
	foreignWithOurKid := strings.Join([]string{fp[0], parts[1], fp[2], fp[3]}, ".")
	expiredTok := c.token(t, c.oldIss, "tenant-a", 0, 15*time.Minute)
	nodeTok, _, err := c.issuer.Issue(TokenRoleNode, "n2", 0, time.Minute)
	require.NoError(t, err)

	tenant := func() *grpc.ClientConn { return c.dial(t, dialOpt{}) }
	cases := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"no credentials", func() error { return read(tenant(), nil) }, codes.Unauthenticated},
		{"forged namespace metadata without a token", func() error {
			return read(tenant(), []string{NamespaceKey, "tenant-a"})
		}, codes.Unauthenticated},
		{"forged namespace metadata with another tenant's token", func() error {
			return read(tenant(), cat(bearer(tokB), []string{NamespaceKey, "tenant-a"}))
		}, codes.PermissionDenied},
		{"two namespace values", func() error {
			return read(tenant(), cat(bearer(tokA), []string{NamespaceKey, "tenant-a", NamespaceKey, "tenant-b"}))
		}, codes.PermissionDenied},
		{"another tenant's token lists the victim's v-zones", func() error {
			_, err := v1.NewArbiterClient(tenant()).ListVZones(withMD(bearer(tokB)...), &v1.ListVZonesRequest{Namespace: "tenant-a"})
			return err
		}, codes.PermissionDenied},
		{"another tenant's token reads the victim's namespace", func() error {
			_, err := v1.NewArbiterClient(tenant()).GetNamespace(withMD(bearer(tokB)...), &v1.GetNamespaceRequest{Name: "tenant-a"})
			return err
		}, codes.PermissionDenied},
		{"expired token", func() error { return read(tenant(), bearer(expiredTok)) }, codes.Unauthenticated},
		{"tampered payload", func() error { return read(tenant(), bearer(tamperedPayload)) }, codes.Unauthenticated},
		{"tampered signature", func() error { return read(tenant(), bearer(tamperedSig)) }, codes.Unauthenticated},
		{"token from an untrusted key", func() error { return read(tenant(), bearer(foreignTok)) }, codes.Unauthenticated},
		{"untrusted key claiming a trusted kid", func() error { return read(tenant(), bearer(foreignWithOurKid)) }, codes.Unauthenticated},
		{"revoked generation", func() error {
			c.revokedGen.Store(5)
			defer c.revokedGen.Store(0)
			return read(tenant(), bearer(c.token(t, c.issuer, "tenant-a", 4, 0)))
		}, codes.Unauthenticated},
		{"wrong admin token", func() error {
			s, _ := GenerateSecret(AdminTokenPrefix)
			return read(tenant(), bearer(s))
		}, codes.Unauthenticated},
		{"old well-known token", func() error { return read(tenant(), bearer("zonefleet")) }, codes.Unauthenticated},
		{"legacy admin metadata", func() error {
			return read(tenant(), []string{"zonefleet-token", c.adminToken})
		}, codes.Unauthenticated},
		{"bearer without scheme", func() error {
			return read(tenant(), []string{AuthorizationKey, c.adminToken})
		}, codes.Unauthenticated},
		{"two authorization values", func() error {
			return read(tenant(), cat(bearer(tokA), bearer(c.adminToken)))
		}, codes.Unauthenticated},
		{"tenant creates a namespace", func() error {
			_, err := v1.NewArbiterClient(tenant()).CreateNamespace(withMD(bearer(tokA)...), &v1.CreateNamespaceRequest{Name: "x"})
			return err
		}, codes.PermissionDenied},
		{"tenant force-deletes a namespace", func() error {
			_, err := v1.NewArbiterClient(tenant()).DeleteNamespace(withMD(bearer(tokA)...), &v1.DeleteNamespaceRequest{Name: "tenant-b"})
			return err
		}, codes.PermissionDenied},
		{"tenant reads the device log", func() error {
			_, err := v1.NewZonedDeviceClient(tenant()).GetLog(withMD(bearer(tokA)...), &v1.GetLogRequest{})
			return err
		}, codes.PermissionDenied},
		{"tenant pushes peer data", func() error { return peerWrite(tenant(), bearer(tokA)) }, codes.PermissionDenied},
		{"admin token pushes peer data", func() error { return peerWrite(tenant(), bearer(c.adminToken)) }, codes.PermissionDenied},
		{"node token on a TLS cluster", func() error { return peerWrite(tenant(), bearer(nodeTok)) }, codes.Unauthenticated},
		{"tenant reads a peer's zone for a rebuild", func() error { return peerRead(tenant(), bearer(tokA)) }, codes.PermissionDenied},
		{"admin token reads a peer's zone for a rebuild", func() error { return peerRead(tenant(), bearer(c.adminToken)) }, codes.PermissionDenied},
		{"arbiter certificate reads a peer's zone", func() error {
			return peerRead(c.dial(t, dialOpt{cert: c.arbCrt}), []string{NamespaceKey, "tenant-a"})
		}, codes.PermissionDenied},
		{"tenant starts a raid5 leg rebuild", func() error { return rebuildLeg(tenant(), bearer(tokA)) }, codes.PermissionDenied},
		{"node certificate starts a raid5 leg rebuild", func() error {
			return rebuildLeg(c.dial(t, dialOpt{cert: c.node2}), []string{NamespaceKey, "tenant-a"})
		}, codes.PermissionDenied},
		{"client certificate from another CA", func() error {
			return read(c.dial(t, dialOpt{cert: c.foreign, force: true}), nil)
		}, codes.Unauthenticated},
		{"another CA's certificate with a valid tenant token", func() error {
			return read(c.dial(t, dialOpt{cert: c.foreign, force: true}), bearer(tokA))
		}, codes.Unauthenticated},
		{"expired client certificate", func() error {
			return read(c.dial(t, dialOpt{cert: c.expired}), nil)
		}, codes.Unauthenticated},
		{"etcd certificate calls the API", func() error {
			_, err := v1.NewArbiterClient(c.dial(t, dialOpt{cert: c.etcd})).DeleteNamespace(withMD(), &v1.DeleteNamespaceRequest{Name: "tenant-a"})
			return err
		}, codes.PermissionDenied},
		{"node certificate calls an admin method", func() error {
			_, err := v1.NewArbiterClient(c.dial(t, dialOpt{cert: c.node2})).DeleteNamespace(withMD(), &v1.DeleteNamespaceRequest{Name: "tenant-a"})
			return err
		}, codes.PermissionDenied},
		{"arbiter certificate reads tenant data", func() error {
			return read(c.dial(t, dialOpt{cert: c.arbCrt}), []string{NamespaceKey, "tenant-a"})
		}, codes.PermissionDenied},
		{"admin token over plaintext to a server without TLS", func() error {
			return read(c.dial(t, dialOpt{plaintext: true, addr: c.plainAddr}), bearer(c.adminToken))
		}, codes.Unauthenticated},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := c.seen.calls.Load()
			err := tc.call()
			require.Error(t, err)
			t.Logf("%v", err)
			assert.Equal(t, tc.want, status.Code(err), "%v", err)
			assert.Equal(t, before, c.seen.calls.Load(), "a refused call must not reach a handler")
			assert.NotContains(t, err.Error(), c.adminToken, "errors never echo secrets")
			assert.NotContains(t, err.Error(), tokA)
		})
	}

	t.Run("plaintext client against the TLS server", func(t *testing.T) {
		before := c.seen.calls.Load()
		err := read(c.dial(t, dialOpt{plaintext: true}), bearer(c.adminToken))
		require.Error(t, err)
		// No gRPC exchange happens at all: the TLS server never parses the
		// plaintext HTTP/2 preface, so the client sees a transport failure.
		assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		assert.Equal(t, before, c.seen.calls.Load())
	})
}

func TestAllowedCalls(t *testing.T) {
	c := startCluster(t)
	tokA := c.token(t, c.issuer, "tenant-a", 0, 0)
	oldKeyTok := c.token(t, c.oldIss, "tenant-a", 0, 4*time.Hour) // issued 2h ago, rotated-out key still trusted

	cases := []struct {
		name    string
		call    func() error
		wantID  Identity
		wantNS  string
		handled bool
	}{
		{"tenant reads", func() error { return read(c.dial(t, dialOpt{}), bearer(tokA)) },
			Identity{Kind: KindNamespace, Name: "tenant-a", Namespace: "tenant-a", Via: "token"}, "tenant-a", true},
		{"tenant with matching namespace metadata", func() error {
			return read(c.dial(t, dialOpt{}), cat(bearer(tokA), []string{NamespaceKey, "tenant-a"}))
		}, Identity{Kind: KindNamespace, Name: "tenant-a", Namespace: "tenant-a", Via: "token"}, "tenant-a", true},
		{"token of the previous key (rotation)", func() error { return read(c.dial(t, dialOpt{}), bearer(oldKeyTok)) },
			Identity{Kind: KindNamespace, Name: "tenant-a", Namespace: "tenant-a", Via: "token"}, "tenant-a", true},
		{"tenant lists its own v-zones", func() error {
			_, err := v1.NewArbiterClient(c.dial(t, dialOpt{})).ListVZones(withMD(bearer(tokA)...), &v1.ListVZonesRequest{Namespace: "tenant-a"})
			return err
		}, Identity{Kind: KindNamespace, Name: "tenant-a", Namespace: "tenant-a", Via: "token"}, "tenant-a", true},
		{"admin certificate creates a namespace", func() error {
			_, err := v1.NewArbiterClient(c.dial(t, dialOpt{cert: c.admin})).CreateNamespace(withMD(), &v1.CreateNamespaceRequest{Name: "x"})
			return err
		}, Identity{Kind: KindAdmin, Via: "cert"}, "", true},
		{"admin token deletes a namespace; legacy token metadata stripped", func() error {
			_, err := v1.NewArbiterClient(c.dial(t, dialOpt{})).DeleteNamespace(withMD(cat(bearer(c.adminToken), []string{"zonefleet-token", "x"})...), &v1.DeleteNamespaceRequest{Name: "x"})
			return err
		}, Identity{Kind: KindAdmin, Via: "token"}, "", true},
		{"admin acts for a namespace", func() error {
			return read(c.dial(t, dialOpt{cert: c.admin}), []string{NamespaceKey, "tenant-b"})
		}, Identity{Kind: KindAdmin, Namespace: "tenant-b", Via: "cert"}, "tenant-b", true},
		{"admin reads the device log", func() error {
			_, err := v1.NewZonedDeviceClient(c.dial(t, dialOpt{cert: c.admin})).GetLog(withMD(), &v1.GetLogRequest{})
			return err
		}, Identity{Kind: KindAdmin, Via: "cert"}, "", true},
		{"arbiter reports zones for a namespace", func() error {
			_, err := v1.NewZonedDeviceClient(c.dial(t, dialOpt{cert: c.arbCrt})).ReportZones(withMD(NamespaceKey, "tenant-a"), &v1.ReportZonesRequest{})
			return err
		}, Identity{Kind: KindArbiter, Namespace: "tenant-a", Via: "cert"}, "tenant-a", true},
		{"registered node pushes peer data", func() error {
			return peerWrite(c.dial(t, dialOpt{cert: c.node2}), []string{NamespaceKey, "tenant-a"})
		}, Identity{Kind: KindNode, Name: "n2", Namespace: "tenant-a", Via: "cert"}, "tenant-a", true},
		{"registered node reads a peer's zone for a rebuild", func() error {
			return peerRead(c.dial(t, dialOpt{cert: c.node2}), []string{NamespaceKey, "tenant-a"})
		}, Identity{Kind: KindNode, Name: "n2", Namespace: "tenant-a", Via: "cert"}, "tenant-a", true},
		{"arbiter starts a raid5 leg rebuild for a namespace", func() error {
			return rebuildLeg(c.dial(t, dialOpt{cert: c.arbCrt}), []string{NamespaceKey, "tenant-a"})
		}, Identity{Kind: KindArbiter, Namespace: "tenant-a", Via: "cert"}, "tenant-a", true},
		{"health check needs nothing", func() error {
			_, err := healthpb.NewHealthClient(c.dial(t, dialOpt{})).Check(withMD(), &healthpb.HealthCheckRequest{})
			return err
		}, Identity{}, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := c.seen.calls.Load()
			require.NoError(t, tc.call())
			if !tc.handled {
				return
			}
			require.Equal(t, before+1, c.seen.calls.Load())
			id, ns, leaked := c.seen.last()
			assert.Equal(t, tc.wantID, id)
			assert.Equal(t, tc.wantNS, ns, "handlers see the verified namespace")
			assert.False(t, leaked, "credentials are stripped before the handler")
		})
	}
	t.Run("allowed but unimplemented passes auth", func(t *testing.T) {
		_, err := v1.NewZonedDeviceClient(c.dial(t, dialOpt{})).Flush(withMD(bearer(tokA)...), &v1.FlushRequest{})
		assert.Equal(t, codes.Unimplemented, status.Code(err))
	})
}

// The ZoneCompaction token theft: a tenant names its own server as the
// compaction peer. Nodes dial peers only from registered records, pin the
// peer's role, and authenticate with their certificate, so the rogue server
// gets no handshake and no credential.
func TestPeerDialNeverLeaksCredentials(t *testing.T) {
	c := startCluster(t)
	var got atomic.Int64
	var gotAuth atomic.Value
	rogueSrv := func(kp *pki.KeyPair, ca *pki.CA) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(pki.ServerConfig(kp.TLSCertificate(), ca.Pool(), pki.ClientCertRequest))),
			grpc.UnknownServiceHandler(func(_ any, st grpc.ServerStream) error {
				md, _ := metadata.FromIncomingContext(st.Context())
				gotAuth.Store(strings.Join(md.Get(AuthorizationKey), ","))
				got.Add(1)
				return status.Error(codes.OK, "")
			}))
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(srv.Stop)
		return ln.Addr().String()
	}
	// The tenant's server: a certificate from its own CA, or (worse) a
	// stolen valid cluster certificate of another role.
	rogueOwnCA := rogueSrv(issue(t, c.otherCA, pki.Role{Kind: pki.RoleNode, Name: "n2"}), c.otherCA)
	rogueArbiterCert := rogueSrv(c.arbCrt, c.ca)

	n1 := c.server.TLSCertificate()
	want := pki.Role{Kind: pki.RoleNode, Name: "n2"}
	for name, addr := range map[string]string{"own CA": rogueOwnCA, "another role's certificate": rogueArbiterCert} {
		t.Run(name, func(t *testing.T) {
			conf := pki.ClientConfig(pki.ClientOptions{Roots: c.ca.Pool(), Cert: &n1, ServerName: "localhost", WantRole: &want})
			cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
			require.NoError(t, err)
			defer cc.Close()
			err = peerWrite(cc, []string{NamespaceKey, "tenant-a"})
			require.Error(t, err)
			assert.Equal(t, int64(0), got.Load(), "the rogue server must not receive a call")
		})
	}
	// Control: the same dial reaches a genuine node n2.
	srvN2 := rogueSrv(c.node2, c.ca)
	conf := pki.ClientConfig(pki.ClientOptions{Roots: c.ca.Pool(), Cert: &n1, ServerName: "localhost", WantRole: &want})
	cc, err := grpc.NewClient(srvN2, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
	require.NoError(t, err)
	defer cc.Close()
	_ = peerWrite(cc, []string{NamespaceKey, "tenant-a"})
	assert.Equal(t, int64(1), got.Load(), "the genuine peer is reached")
	assert.Equal(t, "", gotAuth.Load(), "node-to-node calls carry no bearer token at all")
}

func TestPerRPCCredentials(t *testing.T) {
	c := startCluster(t)
	tokA := c.token(t, c.issuer, "tenant-a", 0, 0)
	_, err := DialOptions(nil, StaticToken(tokA), false)
	assert.Error(t, err, "no TLS and no --insecure")

	// A secure-only token refuses a plaintext connection before sending.
	_, err = grpc.NewClient(c.plainAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(PerRPC(StaticToken(tokA), false)))
	assert.Error(t, err, "grpc refuses call credentials that need TLS on a plaintext channel")

	opts, err := DialOptions(pki.ClientConfig(pki.ClientOptions{Roots: c.ca.Pool(), ServerName: "localhost"}), StaticToken(tokA), false)
	require.NoError(t, err)
	cc, err := grpc.NewClient(c.addr, opts...)
	require.NoError(t, err)
	defer cc.Close()
	require.NoError(t, read(cc, nil))
	id, ns, _ := c.seen.last()
	assert.Equal(t, KindNamespace, id.Kind)
	assert.Equal(t, "tenant-a", ns)

	// Refreshing source against the real server.
	var fetches atomic.Int64
	src := NewRefreshingSource(func(context.Context) (string, time.Time, error) {
		fetches.Add(1)
		tok, cl, err := c.issuer.Issue(TokenRoleNamespace, "tenant-a", 0, time.Minute)
		return tok, cl.ExpiresAt, err
	}, nil)
	opts, err = DialOptions(pki.ClientConfig(pki.ClientOptions{Roots: c.ca.Pool(), ServerName: "localhost"}), src, false)
	require.NoError(t, err)
	cc2, err := grpc.NewClient(c.addr, opts...)
	require.NoError(t, err)
	defer cc2.Close()
	for i := 0; i < 5; i++ {
		require.NoError(t, read(cc2, nil))
	}
	assert.Equal(t, int64(1), fetches.Load(), "one fetch serves calls until the refresh point")
}

// A registered method the policy does not list is denied to everyone, even
// the admin; grpc itself answers UNIMPLEMENTED for unregistered methods.
func TestPolicyDeniesUnlistedMethods(t *testing.T) {
	c := startCluster(t)
	cc := c.dial(t, dialOpt{})
	err := cc.Invoke(withMD(bearer(c.adminToken)...), "/zonefleet.v1.ZonedDevice/Backdoor", &v1.ReadRequest{}, &v1.ReadResponse{})
	assert.Equal(t, codes.Unimplemented, status.Code(err))

	s, err := GenerateSecret(AdminTokenPrefix)
	require.NoError(t, err)
	pol := DefaultPolicy()
	delete(pol, "/zonefleet.v1.ZonedDevice/Read")
	a, err := New(Config{AdminToken: s, Policy: pol, Insecure: true})
	require.NoError(t, err)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(AuthorizationKey, "Bearer "+s))
	_, err = a.Authenticate(ctx, "/zonefleet.v1.ZonedDevice/Read", &v1.ReadRequest{})
	assert.ErrorIs(t, err, ErrPermissionDenied)
	_, err = a.Authenticate(ctx, "/zonefleet.v1.ZonedDevice/GetLog", &v1.GetLogRequest{})
	assert.NoError(t, err, "control: a listed admin method passes")
}

// A client chain verified once is remembered only until it expires.
func TestCertVerificationCacheHonoursExpiry(t *testing.T) {
	ca, err := pki.NewCA(pki.CAOptions{})
	require.NoError(t, err)
	now := time.Now()
	kp, err := ca.Issue(pki.LeafOptions{Role: pki.Role{Kind: pki.RoleAdmin}, Now: now, Validity: time.Hour})
	require.NoError(t, err)
	c := &clk{t: now}
	a, err := New(Config{Roots: ca.Pool(), Now: c.now})
	require.NoError(t, err)
	ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{
		State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{kp.Cert}}}})
	for i := 0; i < 3; i++ {
		got, err := a.Authenticate(ctx, "/zonefleet.v1.ZonedDevice/GetLog", &v1.GetLogRequest{})
		require.NoError(t, err)
		id, _ := FromContext(got)
		assert.True(t, id.IsAdmin())
	}
	c.add(time.Hour + time.Second)
	_, err = a.Authenticate(ctx, "/zonefleet.v1.ZonedDevice/GetLog", &v1.GetLogRequest{})
	assert.ErrorIs(t, err, zerr.ErrUnauthenticated, "the cached verification ends with the certificate")
}

func TestObserveHasBoundedLabels(t *testing.T) {
	s, _ := GenerateSecret(AdminTokenPrefix)
	got := map[string]int{}
	a, err := New(Config{AdminToken: s, Insecure: true, Observe: func(m string, c codes.Code) { got[m+" "+c.String()]++ }})
	require.NoError(t, err)
	in := a.UnaryServerInterceptor()
	h := func(context.Context, any) (any, error) { return "ok", nil }
	call := func(method, tok string) error {
		md := metadata.MD{}
		if tok != "" {
			md.Set(AuthorizationKey, "Bearer "+tok)
		}
		_, err := in(metadata.NewIncomingContext(context.Background(), md), &v1.GetLogRequest{}, &grpc.UnaryServerInfo{FullMethod: method}, h)
		return err
	}
	require.NoError(t, call("/zonefleet.v1.ZonedDevice/GetLog", s))
	assert.Equal(t, codes.Unauthenticated, status.Code(call("/zonefleet.v1.ZonedDevice/GetLog", "")))
	for i := 0; i < 3; i++ {
		assert.Equal(t, codes.PermissionDenied, status.Code(call("/random/method-"+fmt.Sprint(i), s)))
	}
	assert.Equal(t, map[string]int{
		"/zonefleet.v1.ZonedDevice/GetLog OK":              1,
		"/zonefleet.v1.ZonedDevice/GetLog Unauthenticated": 1,
		"unknown PermissionDenied":                         3,
	}, got, "client-chosen method names collapse into one label value")
}

// A caller is screened when its headers arrive, before the server reads
// its request: the call below opens a unary method and sends nothing, so a
// server that read the request first (the interceptor alone) would wait for
// it until the deadline. Without valid credentials, or with a role that may
// not call the method, the answer comes at once; a caller with the right
// credentials gets through the screen (the server then waits for its
// request, as before).
func TestCallersScreenedBeforeTheRequestIsRead(t *testing.T) {
	c := startCluster(t)
	tokA := c.token(t, c.issuer, "tenant-a", 0, 0)
	cases := []struct {
		name   string
		md     []string
		method string
		want   codes.Code
	}{
		{"no credentials", nil, v1.ZonedDevice_Write_FullMethodName, codes.Unauthenticated},
		{"bad token", bearer("zf1.nonsense.x.y"), v1.ZonedDevice_Write_FullMethodName, codes.Unauthenticated},
		{"tenant calls an admin method", bearer(tokA), v1.Arbiter_CreateNamespace_FullMethodName, codes.PermissionDenied},
		{"unknown method without credentials", nil, "/zonefleet.v1.ZonedDevice/NoSuchMethod", codes.Unauthenticated},
		{"unknown method", bearer(tokA), "/zonefleet.v1.ZonedDevice/NoSuchMethod", codes.Unimplemented},
		{"tenant writes: passes the screen", bearer(tokA), v1.ZonedDevice_Write_FullMethodName, codes.DeadlineExceeded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cc := c.dial(t, dialOpt{})
			// No request byte is ever sent: the stream ends with the
			// screen's answer or, for a call that passed the screen (the
			// handler waits for its request), with the deadline. A refused
			// call gets a minute (a guard, thousands of times the normal)
			// so that its code, not the time it took, shows that it was
			// answered before any request byte.
			d := time.Minute
			if tc.want == codes.DeadlineExceeded {
				d = 2 * time.Second
			}
			ctx, cancel := context.WithTimeout(withMD(tc.md...), d)
			defer cancel()
			st, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, tc.method)
			require.NoError(t, err)
			err = st.RecvMsg(new(v1.WriteResponse))
			assert.Equal(t, tc.want, status.Code(err), "answered before any request byte was sent: %v", err)
		})
	}
}

// localAuth is what gRPC's local credentials report for a connection.
type localAuth struct{ credentials.CommonAuthInfo }

func (localAuth) AuthType() string { return "local" }

// A unix socket served with local credentials (daemon.Config.UnixSocket) is
// a secure transport without certificates: a token is still needed. Local
// credentials over TCP, or a plaintext unix socket, are refused as
// plaintext.
func TestLocalUnixSocketNeedsAToken(t *testing.T) {
	s, _ := GenerateSecret(AdminTokenPrefix)
	a, err := New(Config{AdminToken: s})
	require.NoError(t, err)
	unix := &net.UnixAddr{Name: "/run/zf/grpc.sock", Net: "unix"}
	tcp := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7800}
	for _, tc := range []struct {
		name  string
		addr  net.Addr
		info  credentials.AuthInfo
		token string
		ok    bool
	}{
		{"local unix, admin token", unix, localAuth{}, s, true},
		{"local unix, no token", unix, localAuth{}, "", false},
		{"local unix, wrong token", unix, localAuth{}, s + "x", false},
		{"plaintext unix, admin token", unix, nil, s, false},
		{"local credentials over tcp, admin token", tcp, localAuth{}, s, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: tc.addr, AuthInfo: tc.info})
			if tc.token != "" {
				ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(AuthorizationKey, bearerPrefix+tc.token))
			}
			got, err := a.Authenticate(ctx, "/zonefleet.v1.ZonedDevice/GetLog", &v1.GetLogRequest{})
			if !tc.ok {
				assert.ErrorIs(t, err, zerr.ErrUnauthenticated)
				return
			}
			require.NoError(t, err)
			id, _ := FromContext(got)
			assert.True(t, id.IsAdmin())
		})
	}
}
