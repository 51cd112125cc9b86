package localcluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/auth/tokengen"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdAs is an etcd client presenting role's certificate from the
// cluster's PKI directory (what a thief of that component's files holds).
func etcdAs(t *testing.T, cl *Cluster, role pki.Role) *clientv3.Client {
	t.Helper()
	b, err := auth.Load(auth.DirFiles(cl.PKIDir(), role, false, true))
	require.NoError(t, err)
	conf, err := b.ClientTLS(&pki.Role{Kind: pki.RoleEtcd}, "")
	require.NoError(t, err)
	cli, err := clientv3.New(clientv3.Config{Endpoints: cl.Etcd.Endpoints(), TLS: conf, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// etcd runs with authentication and a role per component: a node's
// certificate writes its own registration and reads what a node needs, and
// nothing else — not another node's record, not a grant, not a namespace,
// not the arbiter's state, not a token generation (no un-revoking). The
// arbiter's certificate writes them; the operator's reads.
func TestEtcdLeastPrivilege(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := Start(ctx, Config{Dir: t.TempDir(), Nodes: 2, Clock: "off", Device: TinyDevice()})
	require.NoError(t, err)
	defer cl.Close()
	admin, err := client.New(ctx, cl.AdminClientConfig())
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "t", MaxActiveVzones: 2, ZonesPerVzone: 2})
	require.NoError(t, err)
	gen, err := admin.RevokeTokens(ctx, "t")
	require.NoError(t, err)
	require.Equal(t, uint64(1), gen)

	node1 := etcdAs(t, cl, pki.Role{Kind: pki.RoleNode, Name: "node-1"})
	denied := func(what string, err error) {
		t.Helper()
		require.Error(t, err, what)
		assert.ErrorIs(t, err, rpctypes.ErrPermissionDenied, what)
	}
	own, err := node1.Get(ctx, cluster.NodeKey("node-1"))
	require.NoError(t, err)
	require.Len(t, own.Kvs, 1)
	other, err := node1.Get(ctx, cluster.NodeKey("node-2"))
	require.NoError(t, err, "a node reads the other registrations (peer resolution)")
	require.Len(t, other.Kvs, 1)

	_, err = node1.Put(ctx, cluster.NodeKey("node-2"), string(own.Kvs[0].Value))
	denied("another node's record", err)
	_, err = node1.Delete(ctx, cluster.NodeKey("node-2"))
	denied("deleting another node's record", err)
	g, err := cluster.EncodeGrant(cluster.Grant{Namespace: "t", VZone: 9})
	require.NoError(t, err)
	_, err = node1.Put(ctx, cluster.GrantKey("node-1", 0, 5), string(g))
	denied("a grant on its own drives", err)
	_, err = node1.Put(ctx, cluster.GrantKey("node-2", 0, 5), string(g))
	denied("a grant on another node", err)
	_, err = node1.Put(ctx, tokengen.Key("t"), string(tokengen.Encode(0)))
	denied("un-revoking a token generation", err)
	_, err = node1.Delete(ctx, tokengen.Key("t"))
	denied("deleting a token generation", err)
	_, err = node1.Put(ctx, cluster.NamespaceKey("evil"), "{}")
	denied("a namespace", err)
	_, err = node1.Get(ctx, cluster.ArbiterPrefix, clientv3.WithPrefix())
	denied("reading the arbiter's state", err)
	_, err = node1.Get(ctx, cluster.GrantsPrefix("node-2"), clientv3.WithPrefix())
	denied("reading another node's grants", err)
	_, err = node1.Txn(ctx).Then(clientv3.OpPut(cluster.NodeKey("node-1"), string(own.Kvs[0].Value)),
		clientv3.OpPut(tokengen.Key("t"), string(tokengen.Encode(0)))).Commit()
	denied("a transaction that smuggles a forbidden write", err)
	cur, _, err := tokengen.Current(ctx, node1, "t")
	require.NoError(t, err, "nodes read token generations")
	assert.Equal(t, uint64(1), cur, "the revocation stands")

	// Its own registration, under its own lease, is its to write.
	_, err = node1.Put(ctx, cluster.NodeKey("node-1"), string(own.Kvs[0].Value), clientv3.WithLease(clientv3.LeaseID(own.Kvs[0].Lease)))
	require.NoError(t, err)

	// The operator reads, does not write; no certificate at all gets nothing.
	adm := etcdAs(t, cl, pki.Role{Kind: pki.RoleAdmin})
	_, err = adm.Get(ctx, cluster.ElectionPrefix, clientv3.WithPrefix())
	require.NoError(t, err)
	_, err = adm.Put(ctx, tokengen.Key("t"), string(tokengen.Encode(0)))
	denied("the operator writing etcd directly", err)

	// The arbiter still works: namespaces, grants, revocations.
	_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "u", MaxActiveVzones: 2, ZonesPerVzone: 2})
	require.NoError(t, err)
	tenant, err := client.New(ctx, cl.ClientConfig("u"))
	require.NoError(t, err)
	defer tenant.Close()
	vz, err := tenant.OpenVZone(ctx)
	require.NoError(t, err)
	require.NoError(t, vz.Write(ctx, 0, make([]byte, 4096)))
}
