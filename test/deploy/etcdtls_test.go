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
	"github.com/zonefleet/zonefleet/pkg/pki"
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
