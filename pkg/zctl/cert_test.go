package zctl

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/daemon"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// runCert runs `cert args...` under a minimal root that has the -o flag,
// the way the root command wires it: root.AddCommand(NewCertCmd()).
func runCert(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := &cobra.Command{Use: "zctl", SilenceUsage: true, SilenceErrors: true}
	root.PersistentFlags().StringP("output", "o", "table", "")
	root.AddCommand(NewCertCmd())
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"cert"}, args...))
	err := root.Execute()
	return out.String(), err
}

func TestCertInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	out, err := runCert(t, "init", "--dir", dir, "--nodes", "n1,n2", "-o", "json")
	require.NoError(t, err, out)
	var files []CertFile
	require.NoError(t, json.Unmarshal([]byte(out), &files))
	names := map[string]CertFile{}
	for _, f := range files {
		names[filepath.Base(f.Path)] = f
	}
	for _, n := range []string{"ca.crt", "ca.key", "admin.crt", "admin.key", "arbiter.crt", "arbiter.key", "etcd.crt", "etcd.key",
		"node-n1.crt", "node-n1.key", "node-n2.crt", "node-n2.key", CertSigningKeyFile, CertVerifyKeysFile, CertAdminToken} {
		require.Contains(t, names, n)
		st, err := os.Stat(filepath.Join(dir, n))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), n)
	}
	st, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())
	assert.Equal(t, "node:n2", names["node-n2.crt"].Role)
	assert.WithinDuration(t, time.Now().Add(pki.DefaultLeafValidity), names["node-n1.crt"].NotAfter, time.Hour)

	pool, err := pki.LoadCertPool(filepath.Join(dir, "ca.crt"))
	require.NoError(t, err)
	for file, want := range map[string]string{"admin": "admin", "arbiter": "arbiter", "etcd": "etcd", "node-n1": "node:n1"} {
		pair, err := pki.LoadKeyPair(filepath.Join(dir, file+".crt"), filepath.Join(dir, file+".key"))
		require.NoError(t, err, file)
		leaf, err := pki.LeafOf(&pair)
		require.NoError(t, err)
		r, err := pki.VerifyClient([]*x509.Certificate{leaf}, pool, time.Now())
		require.NoError(t, err, file)
		assert.Equal(t, want, r.String())
		if file == "node-n1" {
			assert.Contains(t, leaf.DNSNames, "n1", "a node is reachable by its id (compose service name)")
			assert.Contains(t, leaf.DNSNames, "localhost")
		}
		if file == "admin" {
			assert.Empty(t, leaf.DNSNames)
		}
	}
	tok, err := auth.LoadSecret(filepath.Join(dir, CertAdminToken), "")
	require.NoError(t, err, "the generated admin token passes the server's checks")
	assert.True(t, strings.HasPrefix(tok, auth.AdminTokenPrefix))

	// A second init must not silently replace the CA.
	_, err = runCert(t, "init", "--dir", dir)
	require.Error(t, err)
	assert.Equal(t, ExitConflict, ExitCode(err))
	after, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	before := names["ca.crt"].Fingerprint
	certs, err := pki.ParseCertificates(after)
	require.NoError(t, err)
	sum := sha256.Sum256(certs[0].Raw)
	assert.Equal(t, before, hex.EncodeToString(sum[:]), "the CA is unchanged")

	out, err = runCert(t, "init", "--dir", dir, "--force", "--nodes", "n1")
	require.NoError(t, err, out)
	assert.Contains(t, out, "FILE", "table output by default")

	_, err = runCert(t, "init")
	assert.Equal(t, ExitUsage, ExitCode(err))
	_, err = runCert(t, "init", "--dir", t.TempDir(), "--nodes", "bad/id")
	assert.Equal(t, ExitUsage, ExitCode(err))
}

// The files of `cert init`, `cert issue` and `cert token` run a real TLS
// gRPC server with the auth interceptor, and the right callers get in.
func TestCertFilesServeTLSAndTokens(t *testing.T) {
	dir := t.TempDir()
	_, err := runCert(t, "init", "--dir", dir, "--nodes", "n1")
	require.NoError(t, err)
	out, err := runCert(t, "issue", "--dir", dir, "--role", "node:n9", "-o", "yaml")
	require.NoError(t, err)
	assert.Contains(t, out, "node-n9.crt")
	tokFile := filepath.Join(dir, "tenant-a.token")
	out, err = runCert(t, "token", "--dir", dir, "--namespace", "tenant-a", "--ttl", "10m", "--file", tokFile, "-o", "json")
	require.NoError(t, err)
	var ct CertToken
	require.NoError(t, json.Unmarshal([]byte(out), &ct))
	assert.Empty(t, ct.Token, "a token written to a file is not printed")
	assert.Equal(t, "tenant-a", ct.Namespace)
	out, err = runCert(t, "token", "--dir", dir, "--namespace", "tenant-b")
	require.NoError(t, err)
	tokB := strings.TrimSpace(out)
	_, err = runCert(t, "token", "--dir", dir, "--namespace", "x", "--ttl", "48h")
	assert.Equal(t, ExitUsage, ExitCode(err))

	pool, err := pki.LoadCertPool(filepath.Join(dir, CertCAFile))
	require.NoError(t, err)
	keysPEM, err := os.ReadFile(filepath.Join(dir, CertVerifyKeysFile))
	require.NoError(t, err)
	keys, err := auth.ParseVerifyKeys(keysPEM)
	require.NoError(t, err)
	ver, err := auth.NewVerifier(auth.VerifierConfig{Keys: keys})
	require.NoError(t, err)
	admin, err := auth.LoadSecret(filepath.Join(dir, CertAdminToken), "")
	require.NoError(t, err)
	a, err := auth.New(auth.Config{Roots: pool, AdminToken: admin, Verifier: ver})
	require.NoError(t, err)
	srvCert, err := pki.LoadKeyPair(filepath.Join(dir, "node-n1.crt"), filepath.Join(dir, "node-n1.key"))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(append(a.ServerOptions(), grpc.Creds(credentials.NewTLS(pki.ServerConfig(srvCert, pool, pki.ClientCertRequest))))...)
	v1.RegisterArbiterServer(srv, v1.UnimplementedArbiterServer{})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	call := func(src auth.TokenSource, cert *string) codes.Code {
		co := pki.ClientOptions{Roots: pool}
		if cert != nil {
			c, err := pki.LoadKeyPair(filepath.Join(dir, *cert+".crt"), filepath.Join(dir, *cert+".key"))
			require.NoError(t, err)
			co.Cert = &c
		}
		opts, err := auth.DialOptions(pki.ClientConfig(co), src, false)
		require.NoError(t, err)
		cc, err := grpc.NewClient(ln.Addr().String(), opts...)
		require.NoError(t, err)
		defer cc.Close()
		_, err = v1.NewArbiterClient(cc).ListVZones(context.Background(), &v1.ListVZonesRequest{Namespace: "tenant-a"})
		return status.Code(err)
	}
	tokA, err := os.ReadFile(tokFile)
	require.NoError(t, err)
	adminCert, nodeCert := "admin", "node-n9"
	assert.Equal(t, codes.Unimplemented, call(auth.StaticToken(strings.TrimSpace(string(tokA))), nil), "tenant a passes auth")
	assert.Equal(t, codes.PermissionDenied, call(auth.StaticToken(tokB), nil), "tenant b may not list a's v-zones")
	assert.Equal(t, codes.Unimplemented, call(auth.StaticToken(admin), nil), "admin token")
	assert.Equal(t, codes.Unimplemented, call(nil, &adminCert), "admin certificate")
	assert.Equal(t, codes.PermissionDenied, call(nil, &nodeCert), "issued node certificate is a node, not a tenant")
	assert.Equal(t, codes.Unauthenticated, call(nil, nil), "no credentials")
}

// --keep-existing makes `cert init` an idempotent init step (compose): a
// second run leaves the CA and the admin token alone; without it a second
// run is refused.
func TestCertInitKeepExisting(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	out, err := runCert(t, "init", "--dir", dir, "--nodes", "n1", "--keep-existing")
	require.NoError(t, err, out)
	ca1, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	require.NoError(t, err)
	tok1, err := os.ReadFile(filepath.Join(dir, CertAdminToken))
	require.NoError(t, err)
	_, err = runCert(t, "init", "--dir", dir, "--nodes", "n1")
	require.Error(t, err, "without --keep-existing an existing CA is not replaced silently")
	out, err = runCert(t, "init", "--dir", dir, "--nodes", "n1", "--keep-existing")
	require.NoError(t, err, out)
	ca2, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	require.NoError(t, err)
	tok2, err := os.ReadFile(filepath.Join(dir, CertAdminToken))
	require.NoError(t, err)
	assert.Equal(t, ca1, ca2)
	assert.Equal(t, tok1, tok2)
}

func TestCertExport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	_, err := runCert(t, "init", "--dir", dir, "--nodes", "n1")
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "node")
	res, err := runCert(t, "export", "--dir", dir, "--component", "node-n1", "--out", out, "-o", "json")
	require.NoError(t, err, res)
	var files []CertFile
	require.NoError(t, json.Unmarshal([]byte(res), &files))
	assert.Len(t, files, 4)
	_, err = os.Stat(filepath.Join(out, CertCAKeyFile))
	assert.True(t, os.IsNotExist(err), "no CA key in a node's export")
	_, err = os.Stat(filepath.Join(out, CertSigningKeyFile))
	assert.True(t, os.IsNotExist(err), "no signing key in a node's export")

	// The export is what a node server starts from (--pki-dir): TLS with its
	// certificate, tokens verified, no issuer and no admin token.
	sec, err := daemon.LoadSecurity(daemon.SecurityFlags{PKIDir: out}, pki.Role{Kind: pki.RoleNode, Name: "n1"}, false, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	assert.NotNil(t, sec.TLS)
	assert.NotNil(t, sec.Bundle.Verifier)
	assert.Nil(t, sec.Bundle.Issuer)
	assert.Empty(t, sec.Bundle.AdminToken)

	// Again: idempotent; every component into subdirectories.
	res, err = runCert(t, "export", "--dir", dir, "--component", "node-n1", "--out", out, "-o", "json")
	require.NoError(t, err, res)
	assert.Equal(t, "null", strings.TrimSpace(res))
	all := filepath.Join(t.TempDir(), "all")
	_, err = runCert(t, "export", "--dir", dir, "--out", all)
	require.NoError(t, err)
	for _, c := range []string{"admin", "arbiter", "etcd", "node-n1"} {
		_, err := os.Stat(filepath.Join(all, c, "ca.crt"))
		assert.NoError(t, err, c)
	}
	_, err = runCert(t, "export", "--dir", dir, "--out", out, "--component", "node:n1")
	assert.Error(t, err)
	_, err = runCert(t, "export", "--dir", dir)
	assert.Error(t, err)
}
