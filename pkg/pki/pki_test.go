package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA(CAOptions{})
	require.NoError(t, err)
	return ca
}

func mustIssue(t *testing.T, ca *CA, o LeafOptions) *KeyPair {
	t.Helper()
	if o.IPs == nil && o.DNSNames == nil {
		o.IPs = []net.IP{net.IPv4(127, 0, 0, 1)}
		o.DNSNames = []string{"localhost"}
	}
	kp, err := ca.Issue(o)
	require.NoError(t, err)
	return kp
}

// handshake runs one real TLS connection over a loopback socket. The server
// writes one byte after its handshake; the client reads it, so failures the
// server reports after the client's part of a TLS 1.3 handshake (a rejected
// client certificate) surface on the client too.
func handshake(t *testing.T, srv *tls.Config, cli *tls.Config, plaintextClient bool) (serverErr, clientErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Server(c, srv)
		if err := tc.HandshakeContext(context.Background()); err != nil {
			done <- err
			return
		}
		_, err = tc.Write([]byte("x"))
		done <- err
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	if plaintextClient {
		_, _ = raw.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
		buf := make([]byte, 1)
		_, clientErr = io.ReadFull(raw, buf)
		return <-done, clientErr
	}
	tc := tls.Client(raw, cli)
	clientErr = tc.Handshake()
	if clientErr == nil {
		buf := make([]byte, 1)
		_, clientErr = io.ReadFull(tc, buf)
	}
	return <-done, clientErr
}

func TestHandshakes(t *testing.T) {
	ca := mustCA(t)
	other := mustCA(t)
	now := time.Now()
	node1 := mustIssue(t, ca, LeafOptions{Role: Role{Kind: RoleNode, Name: "n1"}})
	node2 := mustIssue(t, ca, LeafOptions{Role: Role{Kind: RoleNode, Name: "n2"}})
	admin := mustIssue(t, ca, LeafOptions{Role: Role{Kind: RoleAdmin}})
	foreign := mustIssue(t, other, LeafOptions{Role: Role{Kind: RoleAdmin}})
	foreignSrv := mustIssue(t, other, LeafOptions{Role: Role{Kind: RoleNode, Name: "n1"}})
	expired := mustIssue(t, ca, LeafOptions{Role: Role{Kind: RoleAdmin}, Now: now.Add(-48 * time.Hour), Validity: time.Hour})
	expiredSrv := mustIssue(t, ca, LeafOptions{Role: Role{Kind: RoleNode, Name: "n1"}, Now: now.Add(-48 * time.Hour), Validity: time.Hour})
	wrongHost := mustIssue(t, ca, LeafOptions{Role: Role{Kind: RoleNode, Name: "n1"}, DNSNames: []string{"elsewhere.example"}})

	pc := func(kp *KeyPair) *tls.Certificate { c := kp.TLSCertificate(); return &c }
	want := func(r Role) *Role { return &r }
	n1 := Role{Kind: RoleNode, Name: "n1"}

	cases := []struct {
		name      string
		server    *KeyPair
		mode      ClientAuth
		client    ClientOptions
		plaintext bool
		ok        bool
	}{
		{name: "good cert, client cert required", server: node1, mode: ClientCertRequire,
			client: ClientOptions{Roots: ca.Pool(), Cert: pc(admin), ServerName: "localhost", WantRole: want(n1)}, ok: true},
		{name: "tenant without cert, cert requested only", server: node1, mode: ClientCertRequest,
			client: ClientOptions{Roots: ca.Pool(), ServerName: "127.0.0.1"}, ok: true},
		{name: "no client cert when required", server: node1, mode: ClientCertRequire,
			client: ClientOptions{Roots: ca.Pool(), ServerName: "localhost"}},
		{name: "client cert from another CA", server: node1, mode: ClientCertRequire,
			client: ClientOptions{Roots: ca.Pool(), Cert: pc(foreign), ServerName: "localhost"}},
		{name: "expired client cert", server: node1, mode: ClientCertRequire,
			client: ClientOptions{Roots: ca.Pool(), Cert: pc(expired), ServerName: "localhost"}},
		{name: "server cert from another CA", server: foreignSrv, mode: ClientCertRequest,
			client: ClientOptions{Roots: ca.Pool(), ServerName: "localhost"}},
		{name: "expired server cert", server: expiredSrv, mode: ClientCertRequest,
			client: ClientOptions{Roots: ca.Pool(), ServerName: "localhost"}},
		{name: "server name not in SANs", server: wrongHost, mode: ClientCertRequest,
			client: ClientOptions{Roots: ca.Pool(), ServerName: "localhost"}},
		{name: "server is another node than the registered one", server: node2, mode: ClientCertRequest,
			client: ClientOptions{Roots: ca.Pool(), ServerName: "localhost", WantRole: want(n1)}},
		{name: "plaintext client against TLS server", server: node1, mode: ClientCertRequest, plaintext: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := ServerConfig(tc.server.TLSCertificate(), ca.Pool(), tc.mode)
			sErr, cErr := handshake(t, srv, ClientConfig(tc.client), tc.plaintext)
			if tc.ok {
				assert.NoError(t, sErr)
				assert.NoError(t, cErr)
				return
			}
			assert.Error(t, cErr, "the client must not get a working connection")
			assert.Error(t, sErr, "the server must not complete the connection")
		})
	}
}

func TestTLS13Only(t *testing.T) {
	ca := mustCA(t)
	srvKP := mustIssue(t, ca, LeafOptions{Role: Role{Kind: RoleArbiter}})
	cli := ClientConfig(ClientOptions{Roots: ca.Pool(), ServerName: "localhost"})
	cli.MinVersion, cli.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	sErr, cErr := handshake(t, ServerConfig(srvKP.TLSCertificate(), ca.Pool(), ClientCertRequest), cli, false)
	assert.Error(t, sErr)
	assert.Error(t, cErr)
}

func TestVerifyClientAndRoles(t *testing.T) {
	ca := mustCA(t)
	other := mustCA(t)
	now := time.Now()
	n := mustIssue(t, ca, LeafOptions{Role: Role{Kind: RoleNode, Name: "node-7"}})
	r, err := VerifyClient(chain(n), ca.Pool(), now)
	require.NoError(t, err)
	assert.Equal(t, Role{Kind: RoleNode, Name: "node-7"}, r)
	assert.Equal(t, "node:node-7", r.String())

	f := mustIssue(t, other, LeafOptions{Role: Role{Kind: RoleAdmin}})
	_, err = VerifyClient(chain(f), ca.Pool(), now)
	assert.Error(t, err, "another CA")
	_, err = VerifyClient(chain(n), ca.Pool(), n.Cert.NotAfter.Add(time.Second))
	assert.Error(t, err, "expired")
	_, err = VerifyClient(nil, ca.Pool(), now)
	assert.Error(t, err)
	_, err = VerifyClient(chain(n), nil, now)
	assert.Error(t, err)
}

func chain(kp *KeyPair) []*x509.Certificate { return []*x509.Certificate{kp.Cert} }

func TestParseRole(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"admin", true}, {"arbiter", true}, {"etcd", true}, {"node:n1", true}, {"node:a.b-c_d", true},
		{"node:", false}, {"node:-x", false}, {"node:a/b", false}, {"root", false}, {"", false}, {"admin:x", false},
	} {
		r, err := ParseRole(tc.in)
		if tc.ok {
			require.NoError(t, err, tc.in)
			assert.Equal(t, tc.in, r.String())
		} else {
			assert.Error(t, err, tc.in)
		}
	}
	_, err := mustCA(t).Issue(LeafOptions{Role: Role{Kind: "tenant"}})
	assert.Error(t, err, "unknown roles are not issued")
}

func TestFilesRoundTripAndModes(t *testing.T) {
	dir := t.TempDir()
	ca := mustCA(t)
	kp := mustIssue(t, ca, LeafOptions{Role: Role{Kind: RoleArbiter}})
	for name, data := range map[string][]byte{"ca.crt": ca.CertPEM, "ca.key": ca.KeyPEM, "a.crt": kp.CertPEM, "a.key": kp.KeyPEM} {
		require.NoError(t, WriteFile(filepath.Join(dir, name), data, false))
		st, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), name)
	}
	err := WriteFile(filepath.Join(dir, "ca.key"), []byte("x"), false)
	assert.ErrorIs(t, err, ErrExists, "no silent overwrite")
	require.NoError(t, WriteFile(filepath.Join(dir, "ca.crt"), ca.CertPEM, true))

	ca2, err := LoadCA(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"))
	require.NoError(t, err)
	assert.True(t, ca2.Cert.Equal(ca.Cert))
	kp2, err := ca2.Issue(LeafOptions{Role: Role{Kind: RoleEtcd}, DNSNames: []string{"etcd"}})
	require.NoError(t, err, "a loaded CA signs")
	pool, err := LoadCertPool(filepath.Join(dir, "ca.crt"))
	require.NoError(t, err)
	_, err = VerifyClient(chain(kp2), pool, time.Now())
	require.NoError(t, err)

	pair, err := LoadKeyPair(filepath.Join(dir, "a.crt"), filepath.Join(dir, "a.key"))
	require.NoError(t, err)
	leaf, err := LeafOf(&pair)
	require.NoError(t, err)
	r, err := RoleOf(leaf)
	require.NoError(t, err)
	assert.Equal(t, RoleArbiter, r.Kind)

	require.NoError(t, os.Chmod(filepath.Join(dir, "a.key"), 0o644))
	_, err = LoadKeyPair(filepath.Join(dir, "a.crt"), filepath.Join(dir, "a.key"))
	assert.ErrorContains(t, err, "group or others", "world-readable keys are refused")
	_, err = LoadCA(filepath.Join(dir, "a.crt"), filepath.Join(dir, "ca.key"))
	assert.Error(t, err, "a leaf is not a CA")
	_, err = LoadCertPool(filepath.Join(dir, "ca.key"))
	assert.Error(t, err, "no certificate in a key file")
}

func TestExpiry(t *testing.T) {
	ca := mustCA(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	kp := mustIssue(t, ca, LeafOptions{Role: Role{Kind: RoleAdmin}, Now: now, Validity: 24 * time.Hour})
	assert.InDelta(t, 86400, SecondsUntilExpiry(kp.Cert, now), 1)
	assert.InDelta(t, -3600, SecondsUntilExpiry(kp.Cert, now.Add(25*time.Hour)), 1)
	long := mustIssue(t, ca, LeafOptions{Role: Role{Kind: RoleAdmin}, Validity: 100 * 365 * 24 * time.Hour})
	assert.False(t, long.Cert.NotAfter.After(ca.Cert.NotAfter), "a leaf never outlives its CA")
}

func TestReloaderPicksUpRotatedFiles(t *testing.T) {
	dir := t.TempDir()
	ca := mustCA(t)
	a := mustIssue(t, ca, LeafOptions{Role: Role{Kind: RoleNode, Name: "a"}})
	b := mustIssue(t, ca, LeafOptions{Role: Role{Kind: RoleNode, Name: "b"}})
	cf, kf := filepath.Join(dir, "n.crt"), filepath.Join(dir, "n.key")
	require.NoError(t, WriteFile(cf, a.CertPEM, false))
	require.NoError(t, WriteFile(kf, a.KeyPEM, false))
	now := time.Now()
	clock := func() time.Time { return now }
	r, err := NewReloader(cf, kf, time.Second, clock)
	require.NoError(t, err)
	assert.True(t, r.Current().Leaf.Equal(a.Cert))

	require.NoError(t, WriteFile(cf, b.CertPEM, true))
	require.NoError(t, WriteFile(kf, b.KeyPEM, true))
	future := time.Now().Add(time.Minute)
	require.NoError(t, os.Chtimes(cf, future, future))
	assert.True(t, r.Current().Leaf.Equal(a.Cert), "not re-checked within the interval")
	now = now.Add(2 * time.Second)
	got, err := r.GetCertificate(nil)
	require.NoError(t, err)
	assert.True(t, got.Leaf.Equal(b.Cert), "rotated certificate served after the interval")
	assert.NoError(t, r.Err())

	require.NoError(t, os.WriteFile(cf, []byte("garbage"), 0o600))
	past := future.Add(time.Minute)
	require.NoError(t, os.Chtimes(cf, past, past))
	now = now.Add(2 * time.Second)
	assert.True(t, r.Current().Leaf.Equal(b.Cert), "a broken file keeps the previous certificate")
	assert.Error(t, r.Err())

	// The reloader serves real handshakes.
	srv := ServerConfigFrom(r.GetCertificate, ca.Pool(), ClientCertRequest)
	sErr, cErr := handshake(t, srv, ClientConfig(ClientOptions{Roots: ca.Pool(), ServerName: "localhost", WantRole: &Role{Kind: RoleNode, Name: "b"}}), false)
	assert.NoError(t, sErr)
	assert.NoError(t, cErr)
}
