package auth

import (
	"context"
	"crypto/ed25519"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// writeDir lays out a PKI directory with InitDir (what `zctl cert init` runs).
func writeDir(t *testing.T, nodes ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pki")
	files, err := InitDir(InitOptions{Dir: dir, Nodes: nodes, Hosts: []string{"localhost", "127.0.0.1"}})
	require.NoError(t, err)
	assert.Len(t, files, 2+2*(3+len(nodes))+3)
	for _, f := range files {
		st, err := os.Stat(f.Path)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), f.Path)
	}
	_, err = InitDir(InitOptions{Dir: dir, Nodes: nodes})
	require.ErrorIs(t, err, zerr.ErrAlreadyExists, "no silent re-init")
	_, err = InitDir(InitOptions{Dir: dir, Nodes: []string{"a/b"}, Force: true})
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)
	_, err = InitDir(InitOptions{Dir: dir, Hosts: []string{"a b"}, Force: true})
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)
	return dir
}

func TestBundleWiresServerAndClients(t *testing.T) {
	n1, n2, arb := pki.Role{Kind: pki.RoleNode, Name: "n1"}, pki.Role{Kind: pki.RoleNode, Name: "n2"}, pki.Role{Kind: pki.RoleArbiter}
	dir := writeDir(t, "n1", "n2")

	node, err := Load(DirFiles(dir, n2, false, true))
	require.NoError(t, err)
	assert.Nil(t, node.Issuer, "nodes never hold the signing key")
	require.NotNil(t, node.Verifier)
	secs, err := node.CertExpirySeconds(time.Now())
	require.NoError(t, err)
	assert.InDelta(t, pki.DefaultLeafValidity.Seconds(), secs, 3600)

	a, err := node.Authenticator(Config{})
	require.NoError(t, err)
	stc, err := node.ServerTLS()
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &seen{}
	srv := grpc.NewServer(append(a.ServerOptions(), grpc.Creds(credentials.NewTLS(stc)))...)
	v1.RegisterZonedDeviceServer(srv, &devSrv{s: s})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	arbiter, err := Load(DirFiles(dir, arb, true, false))
	require.NoError(t, err)
	require.NotNil(t, arbiter.Issuer)
	tok, _, err := arbiter.Issuer.Issue(TokenRoleNamespace, "tenant-a", 0, 0)
	require.NoError(t, err)

	dial := func(b *Bundle, want *pki.Role, src TokenSource) codes.Code {
		conf, err := b.ClientTLS(want, "localhost")
		require.NoError(t, err)
		opts, err := DialOptions(conf, src, false)
		require.NoError(t, err)
		cc, err := grpc.NewClient(ln.Addr().String(), opts...)
		require.NoError(t, err)
		defer cc.Close()
		err = peerWriteCC(cc)
		return status.Code(err)
	}
	tenant, err := Load(Files{CA: filepath.Join(dir, FileCA)})
	require.NoError(t, err)
	peer, err := Load(DirFiles(dir, n1, false, false))
	require.NoError(t, err)

	assert.Equal(t, codes.OK, dial(peer, &n2, nil), "node n1 pushes to node n2 by certificate")
	id, _, _ := s.last()
	assert.Equal(t, "node:n1", id.String())
	assert.Equal(t, codes.Unavailable, dial(peer, &n1, nil), "server is n2, not the pinned n1")
	assert.Equal(t, codes.PermissionDenied, dial(tenant, nil, StaticToken(tok)), "tenant token may not PeerWrite")
	_, err = tenant.ServerTLS()
	assert.Error(t, err)

	// Rotation of the verification keys file.
	k2, _ := GenerateSigningKey()
	pub2, _ := MarshalVerifyKeys(k2.Public().(ed25519.PublicKey))
	require.NoError(t, pki.WriteFile(filepath.Join(dir, FileVerifyKeys), pub2, true))
	require.NoError(t, node.ReloadVerifyKeys())
	_, err = node.Verifier.Verify(tok)
	assert.ErrorIs(t, err, ErrTokenUnknownKey, "tokens of a retired key stop verifying after reload")

	require.NoError(t, os.Chmod(filepath.Join(dir, "node-n2.key"), 0o644))
	_, err = Load(DirFiles(dir, n2, false, false))
	assert.Error(t, err, "a readable key file is refused")
}

func peerWriteCC(cc *grpc.ClientConn) error {
	st, err := v1.NewZonedDeviceClient(cc).PeerWrite(context.Background())
	if err != nil {
		return err
	}
	_ = st.Send(&v1.PeerWriteRequest{Namespace: "tenant-a"})
	_, err = st.CloseAndRecv()
	return err
}

func TestIssueInDir(t *testing.T) {
	dir := writeDir(t)
	files, err := IssueInDir(dir, pki.Role{Kind: pki.RoleNode, Name: "n7"}, []string{"10.0.0.7"}, time.Hour, false)
	require.NoError(t, err)
	require.Len(t, files, 2)
	b, err := Load(DirFiles(dir, pki.Role{Kind: pki.RoleNode, Name: "n7"}, false, false))
	require.NoError(t, err)
	leaf, err := pki.LeafOf(b.Cert.Current())
	require.NoError(t, err)
	assert.Contains(t, leaf.DNSNames, "n7")
	assert.Equal(t, "10.0.0.7", leaf.IPAddresses[0].String())
	_, err = IssueInDir(dir, pki.Role{Kind: pki.RoleNode, Name: "n7"}, nil, time.Hour, false)
	assert.ErrorIs(t, err, zerr.ErrAlreadyExists)
	_, err = IssueInDir(dir, pki.Role{Kind: "root"}, nil, time.Hour, false)
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
	_, err = IssueInDir(t.TempDir(), pki.Role{Kind: pki.RoleAdmin}, nil, time.Hour, false)
	assert.Error(t, err, "no CA there")
}
