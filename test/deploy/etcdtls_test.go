//go:build deploy

package deploy

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/auth/tokengen"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestEtcdRequiresClusterCertificate: the compose etcd serves TLS only and
// authenticates clients by certificate: a plaintext client and
// a TLS client without a certificate are refused, the operator's cluster
// certificate gets in.
func TestEtcdRequiresClusterCertificate(t *testing.T) {
	get := func(eps []string, tc func() *clientv3.Config) error {
		cfg := clientv3.Config{Endpoints: eps, DialTimeout: 3 * time.Second, Logger: zap.NewNop()}
		if tc != nil {
			cfg = *tc()
		}
		cli, err := clientv3.New(cfg)
		if err != nil {
			return err
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = cli.Get(ctx, "/zonefleet/v1/nodes/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err
	}
	var plain []string
	for _, ep := range etcd {
		plain = append(plain, strings.TrimPrefix(ep, "https://"))
	}
	assert.Error(t, get(plain, nil), "plaintext client")

	tenant, err := auth.Load(auth.Files{CA: filepath.Join(pkiDir, auth.FileCA)})
	require.NoError(t, err)
	noCert, err := tenant.ClientTLS(&pki.Role{Kind: pki.RoleEtcd}, "")
	require.NoError(t, err)
	assert.Error(t, get(nil, func() *clientv3.Config {
		return &clientv3.Config{Endpoints: etcd, TLS: noCert, DialTimeout: 3 * time.Second, Logger: zap.NewNop()}
	}), "TLS without a client certificate")

	admin, err := auth.Load(auth.Files{CA: filepath.Join(pkiDir, auth.FileCA), Cert: filepath.Join(pkiDir, "admin.crt"), Key: filepath.Join(pkiDir, "admin.key")})
	require.NoError(t, err)
	withCert, err := admin.ClientTLS(&pki.Role{Kind: pki.RoleEtcd}, "")
	require.NoError(t, err)
	assert.NoError(t, get(nil, func() *clientv3.Config {
		return &clientv3.Config{Endpoints: etcd, TLS: withCert, DialTimeout: 3 * time.Second, Logger: zap.NewNop()}
	}), "the operator's cluster certificate")
}

// TestEtcdLeastPrivilege: the compose etcd runs with authentication and a
// role per certificate (the one-shot etcd-roles): node-1's certificate
// reads the registrations but cannot rewrite node-2's record, write a
// grant or lower a token generation; the operator's certificate reads and
// writes nothing of the cluster's state; the arbiter's writes.
func TestEtcdLeastPrivilege(t *testing.T) {
	connect := func(r pki.Role) *clientv3.Client {
		b, err := auth.Load(auth.Files{CA: filepath.Join(pkiDir, auth.FileCA),
			Cert: filepath.Join(pkiDir, auth.ComponentFileName(r)+".crt"), Key: filepath.Join(pkiDir, auth.ComponentFileName(r)+".key")})
		require.NoError(t, err)
		tc, err := b.ClientTLS(&pki.Role{Kind: pki.RoleEtcd}, "")
		require.NoError(t, err)
		cli, err := clientv3.New(clientv3.Config{Endpoints: etcd, TLS: tc, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
		require.NoError(t, err)
		t.Cleanup(func() { _ = cli.Close() })
		return cli
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	denied := func(what string, err error) {
		t.Helper()
		assert.ErrorIs(t, err, rpctypes.ErrPermissionDenied, what)
	}
	node := connect(pki.Role{Kind: pki.RoleNode, Name: "node-1"})
	regs, err := node.Get(ctx, cluster.NodesPrefix(), clientv3.WithPrefix())
	require.NoError(t, err, "a node reads the registrations (peer resolution)")
	assert.GreaterOrEqual(t, len(regs.Kvs), 4)
	_, err = node.Put(ctx, cluster.NodeKey("node-2"), `{"id":"node-2","addr":"127.0.0.1:1"}`)
	denied("node-1 rewrites node-2's record", err)
	_, err = node.Put(ctx, cluster.GrantKey("node-1", 0, 0), "x")
	denied("node-1 writes a grant for itself", err)
	_, err = node.Put(ctx, tokengen.Key("any"), "0")
	denied("node-1 writes a token generation", err)
	_, err = node.Get(ctx, cluster.GrantsPrefix("node-2"), clientv3.WithPrefix())
	denied("node-1 reads node-2's grants", err)

	admin := connect(pki.Role{Kind: pki.RoleAdmin})
	_, err = admin.Get(ctx, cluster.NodesPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err, "the operator reads")
	_, err = admin.Put(ctx, cluster.NamespaceKey("forged"), "{}")
	denied("the operator's certificate writes etcd", err)

	arb := connect(pki.Role{Kind: pki.RoleArbiter})
	key := cluster.Prefix + "rbac-probe"
	_, err = arb.Put(ctx, key, "1")
	require.NoError(t, err, "the arbiter writes the cluster's keys")
	_, err = arb.Delete(ctx, key)
	require.NoError(t, err)
}
