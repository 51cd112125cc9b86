package daemon

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/etcdclient"
	"github.com/zonefleet/zonefleet/pkg/etcdlocal"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// TestEtcdOverTLS: etcd with client-certificate authentication (what
// compose runs): a node and the arbiter connect with their own certificates
// (EtcdClientTLS, https:// endpoints); a plaintext client, a client without
// a certificate and an https:// endpoint without credentials do not.
func TestEtcdOverTLS(t *testing.T) {
	dir := t.TempDir()
	_, err := auth.InitDir(auth.InitOptions{Dir: dir, Nodes: []string{"n1"}, Hosts: []string{"127.0.0.1", "localhost"}})
	require.NoError(t, err)
	srv, err := etcdlocal.StartWith(filepath.Join(t.TempDir(), "etcd"), "", etcdlocal.Options{TLS: &etcdlocal.TLSFiles{
		CertFile: filepath.Join(dir, "etcd.crt"), KeyFile: filepath.Join(dir, "etcd.key"), CAFile: filepath.Join(dir, auth.FileCA)}})
	require.NoError(t, err)
	defer srv.Close()
	ep := srv.Endpoints()[0]
	require.True(t, etcdclient.UsesTLS(ep), ep)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()

	for _, role := range []pki.Role{{Kind: pki.RoleNode, Name: "n1"}, {Kind: pki.RoleArbiter}} {
		sec, err := LoadSecurity(SecurityFlags{PKIDir: dir}, role, role.Kind == pki.RoleArbiter, nil, log)
		require.NoError(t, err)
		tc, err := sec.EtcdClientTLS()
		require.NoError(t, err)
		require.NotNil(t, tc)
		cli, err := etcdclient.ConnectWith(ctx, ep, tc, 10*time.Second)
		require.NoError(t, err, role.String())
		_, err = cli.Put(ctx, "/zonefleet/probe", role.String())
		assert.NoError(t, err)
		_ = cli.Close()
	}

	_, err = etcdclient.ConnectWith(ctx, ep, nil, time.Second)
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument, "https:// without credentials is refused up front")
	_, err = etcdclient.Connect(ctx, ep[len("https://"):], 2*time.Second)
	assert.Error(t, err, "a plaintext client against the TLS port")
	tenant, err := auth.Load(auth.Files{CA: filepath.Join(dir, auth.FileCA)})
	require.NoError(t, err)
	tc, err := tenant.ClientTLS(&pki.Role{Kind: pki.RoleEtcd}, "")
	require.NoError(t, err)
	_, err = etcdclient.ConnectWith(ctx, ep, tc, 2*time.Second)
	assert.Error(t, err, "no client certificate: refused")

	insecureSec := &Security{Insecure: true}
	tc, err = insecureSec.EtcdClientTLS()
	assert.NoError(t, err)
	assert.Nil(t, tc, "--insecure: no etcd TLS")
}

// TestEtcdPlaintextDataDirMovesToTLS: a local cluster created before etcd
// had TLS restarts with TLS over the same data directory and keeps its keys.
func TestEtcdPlaintextDataDirMovesToTLS(t *testing.T) {
	dir := t.TempDir()
	_, err := auth.InitDir(auth.InitOptions{Dir: dir, Hosts: []string{"127.0.0.1"}})
	require.NoError(t, err)
	data := filepath.Join(t.TempDir(), "etcd")
	srv, err := etcdlocal.Start(data, "")
	require.NoError(t, err)
	cli, err := srv.Client()
	require.NoError(t, err)
	_, err = cli.Put(context.Background(), "/zonefleet/kept", "yes")
	require.NoError(t, err)
	_ = cli.Close()
	srv.Close()

	srv, err = etcdlocal.StartWith(data, "", etcdlocal.Options{TLS: &etcdlocal.TLSFiles{
		CertFile: filepath.Join(dir, "etcd.crt"), KeyFile: filepath.Join(dir, "etcd.key"), CAFile: filepath.Join(dir, auth.FileCA)}})
	require.NoError(t, err)
	defer srv.Close()
	cli, err = srv.Client()
	require.NoError(t, err)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/zonefleet/kept")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	assert.Equal(t, "yes", string(resp.Kvs[0].Value))
}
