package auth

import (
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/pki"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc/connectivity"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// The material of InitDir runs a real etcd with TLS and client-certificate
// authentication on both its client and peer ports (what compose and
// localcluster will do): cluster components get in, everyone else does not.
func TestEtcdWithClusterCertificates(t *testing.T) {
	dir := writeDir(t, "n1")
	etcdFiles := DirFiles(dir, pki.Role{Kind: pki.RoleEtcd}, false, false)

	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(t.TempDir(), "etcd")
	cfg.Name = "zf"
	cu, _ := url.Parse("https://" + freeAddr(t))
	pu, _ := url.Parse("https://" + freeAddr(t))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	cfg.ClientTLSInfo.CertFile, cfg.ClientTLSInfo.KeyFile, cfg.ClientTLSInfo.TrustedCAFile = etcdFiles.Cert, etcdFiles.Key, etcdFiles.CA
	cfg.ClientTLSInfo.ClientCertAuth = true
	cfg.PeerTLSInfo = cfg.ClientTLSInfo
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	require.NoError(t, err)
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute): // a hang guard: etcd is ready within a second
		t.Fatal("etcd not ready")
	}
	endpoint := cu.Host

	// put writes a key with a client of TLS configuration tc; the bound
	// only turns a hang into a failure (a put takes milliseconds).
	const hangGuard = time.Minute
	put := func(tc *tls.Config, ep string) error {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, TLS: tc, DialTimeout: hangGuard, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		_, err = cli.Put(ctx, "/zonefleet/probe", "x")
		return err
	}
	// connects tells whether a client of tc gets a connection to etcd:
	// it waits until the client's connection is ready, or has failed (the
	// server refused the handshake), whatever either takes (hangGuard
	// only turns a hang into a failure).
	connects := func(tc *tls.Config, ep string) bool {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, TLS: tc, DialTimeout: hangGuard, Logger: zap.NewNop()})
		require.NoError(t, err)
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		conn := cli.ActiveConnection()
		conn.Connect()
		for {
			switch st := conn.GetState(); st {
			case connectivity.Ready:
				return true
			case connectivity.TransientFailure:
				return false
			default:
				require.True(t, conn.WaitForStateChange(ctx, st), "the connection to etcd neither ready nor failed after %v", hangGuard)
			}
		}
	}
	etcdRole := pki.Role{Kind: pki.RoleEtcd}

	node, err := Load(DirFiles(dir, pki.Role{Kind: pki.RoleNode, Name: "n1"}, false, false))
	require.NoError(t, err)
	nodeTLS, err := node.ClientTLS(&etcdRole, "")
	require.NoError(t, err)
	require.True(t, connects(nodeTLS, endpoint), "a node with its cluster certificate connects")
	require.NoError(t, put(nodeTLS, endpoint), "a node with its cluster certificate uses etcd")

	tenant, err := Load(Files{CA: filepath.Join(dir, FileCA)})
	require.NoError(t, err)
	tenantTLS, err := tenant.ClientTLS(&etcdRole, "")
	require.NoError(t, err)
	assert.False(t, connects(tenantTLS, endpoint), "no client certificate: refused in the handshake")

	other := writeDir(t, "n1")
	foreign, err := Load(DirFiles(other, pki.Role{Kind: pki.RoleNode, Name: "n1"}, false, false))
	require.NoError(t, err)
	foreignTLS, err := foreign.ClientTLS(nil, "")
	require.NoError(t, err)
	foreignTLS.RootCAs = node.Roots // trusts the server, presents another CA's certificate
	foreignTLS.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return foreign.Cert.Current(), nil }
	assert.False(t, connects(foreignTLS, endpoint), "another CA's certificate: refused")

	assert.False(t, connects(nil, endpoint), "plaintext client against the TLS port: refused")
}
