package zctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// identityCluster is a secure local cluster (TLS everywhere, etcd over TLS
// with client certificates) with two nodes, a namespace "t" holding data,
// and zctl pointed at it as the operator (admin certificate and admin
// token, as `zctl local up` leaves it).
type identityCluster struct {
	cl     *localcluster.Cluster
	admin  *client.Client
	vz     *client.VZone
	data   []byte
	layout *v1.VZone
}

func startIdentityCluster(t *testing.T, ctx context.Context) *identityCluster {
	t.Helper()
	dir := t.TempDir()
	cl, err := localcluster.Start(ctx, localcluster.Config{Dir: dir, Nodes: 2, Clock: "off", Device: localcluster.TinyDevice()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	require.NoError(t, localcluster.WriteInfo(cl.Info()))
	t.Setenv("ZONEFLEET_CLUSTER", filepath.Join(dir, "cluster.json"))
	t.Setenv("ZONEFLEET_CONFIG", filepath.Join(dir, "config.yaml"))

	admin, err := client.New(ctx, cl.AdminClientConfig())
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "t", MaxActiveVzones: 2, ZonesPerVzone: 2})
	require.NoError(t, err)
	tenant, err := client.New(ctx, cl.ClientConfig("t"))
	require.NoError(t, err)
	t.Cleanup(tenant.Close)
	vz, err := tenant.OpenVZone(ctx)
	require.NoError(t, err)
	data := bytes.Repeat([]byte("tenant-data-"), 4096*4/12+1)[:4096*4]
	require.NoError(t, vz.Write(ctx, 0, data))
	l, err := vz.Layout(ctx)
	require.NoError(t, err)
	return &identityCluster{cl: cl, admin: admin, vz: vz, data: data, layout: l}
}

// stolenEtcd is an etcd client holding node id's certificate, as an
// attacker who copied that node's key files would.
func (ic *identityCluster) stolenEtcd(t *testing.T, id string) *clientv3.Client {
	t.Helper()
	b, err := auth.Load(auth.DirFiles(ic.cl.PKIDir(), pki.Role{Kind: pki.RoleNode, Name: id}, false, true))
	require.NoError(t, err)
	conf, err := b.ClientTLS(&pki.Role{Kind: pki.RoleEtcd}, "")
	require.NoError(t, err)
	cli, err := clientv3.New(clientv3.Config{Endpoints: ic.cl.Etcd.Endpoints(), TLS: conf, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// moveNode rewrites node id's registered address to addr through etcd (with
// the record's own lease) and waits until the arbiter serves the new address.
func (ic *identityCluster) moveNode(t *testing.T, ctx context.Context, etc *clientv3.Client, id, addr string) {
	t.Helper()
	resp, err := etc.Get(ctx, cluster.NodeKey(id))
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	rec, err := cluster.DecodeNode(string(resp.Kvs[0].Key), resp.Kvs[0].Value)
	require.NoError(t, err)
	rec.Addr = addr
	val, err := json.Marshal(rec)
	require.NoError(t, err)
	_, err = etc.Put(ctx, cluster.NodeKey(id), string(val), clientv3.WithLease(clientv3.LeaseID(resp.Kvs[0].Lease)))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		n, err := ic.admin.GetNode(ctx, id)
		return err == nil && n.GetAddr() == addr
	}, time.Minute, 20*time.Millisecond, "the arbiter never served the rewritten record")
}

// recorded is one call that reached a recording node.
type recorded struct {
	method string
	md     metadata.MD
}

// recorder is a gRPC server over TLS presenting a node certificate of the
// cluster (a stolen one, or a compromised node's own) that records every
// call's method and metadata and answers UNAVAILABLE.
type recorder struct {
	addr  string
	mu    sync.Mutex
	calls []recorded
}

func startRecorder(t *testing.T, ic *identityCluster, as string) *recorder {
	t.Helper()
	b, err := auth.Load(auth.DirFiles(ic.cl.PKIDir(), pki.Role{Kind: pki.RoleNode, Name: as}, false, true))
	require.NoError(t, err)
	conf, err := b.ServerTLS()
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &recorder{addr: lis.Addr().String()}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(conf)), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		method, _ := grpc.MethodFromServerStream(ss)
		r.mu.Lock()
		r.calls = append(r.calls, recorded{method: method, md: md.Copy()})
		r.mu.Unlock()
		return status.Error(codes.Unavailable, "recording node")
	}))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return r
}

func (r *recorder) snapshot() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.calls...)
}

// A node's record rewritten to an address served by another node's
// certificate: the client library, a remote
// tenant, the local tenant's mount path and zctl all refuse the server with
// a *zerr.PeerIdentityError naming both identities, and nothing reaches it.
func TestClientRefusesNodeUnderAnotherIdentity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ic := startIdentityCluster(t, ctx)
	z := ic.layout.GetGroups()[0].GetZones()[0]
	victim := z.GetNode()
	other := "node-1"
	if victim == other {
		other = "node-2"
	}
	// A listener presenting the other node's certificate, and the victim's
	// record pointing at it (written with the victim's own certificate:
	// etcd lets a node write only its own registration).
	rec := startRecorder(t, ic, other)
	ic.moveNode(t, ctx, ic.stolenEtcd(t, victim), victim, rec.addr)

	// A remote tenant (TLS, no unix sockets) reading the victim's zones.
	remote := ic.cl.ClientConfig("t")
	remote.LocalSockets = nil
	rc, err := client.New(ctx, remote)
	require.NoError(t, err)
	defer rc.Close()
	_, err = rc.VZone(ic.vz.ID()).Read(ctx, 0, 4)
	require.Error(t, err)
	var pe *zerr.PeerIdentityError
	require.True(t, errors.As(err, &pe), "want *zerr.PeerIdentityError, got %T: %v", err, err)
	assert.Equal(t, "node:"+victim, pe.Want)
	assert.Equal(t, "node:"+other, pe.Got)
	assert.Equal(t, rec.addr, pe.Addr)
	assert.ErrorIs(t, err, zerr.ErrPeerIdentity)

	// The operator's Device client, by node id.
	dev, dctx, err := ic.admin.Device(victim, rec.addr)
	require.NoError(t, err)
	_, err = dev.Identify(dctx, &v1.IdentifyRequest{Device: z.GetDevice()})
	require.True(t, errors.As(err, &pe), "want *zerr.PeerIdentityError, got %T: %v", err, err)

	// zctl resolves the node through the arbiter and refuses it too.
	_, errOut, code := run(t, "", "zone", "report", "--node", victim, "--max", "1")
	assert.Equal(t, ExitDenied, code, errOut)
	assert.Contains(t, errOut, "is not node:"+victim)
	// --addr without --node cannot be verified: refused before dialling.
	_, errOut, code = run(t, "", "zone", "report", "--addr", rec.addr)
	assert.Equal(t, ExitUsage, code, errOut)

	// The local tenant reaches nodes by id over their unix sockets: the
	// record's address is not used, its data reads back.
	got, err := ic.vz.Read(ctx, 0, 4)
	require.NoError(t, err)
	assert.Equal(t, ic.data, got)

	// Nothing got past the handshake.
	assert.Empty(t, rec.snapshot())
}

// A compromised node (its own certificate, its own record) records every
// call it gets: operator commands against it (zctl zone …, the admin
// client's Device calls, the arbiter's work on its zones) carry the admin
// certificate's identity, never the admin token.
func TestAdminTokenNeverReachesANode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ic := startIdentityCluster(t, ctx)
	token := ic.cl.AdminToken()
	require.NotEmpty(t, token)
	z := ic.layout.GetGroups()[0].GetZones()[0]
	victim := z.GetNode()
	rec := startRecorder(t, ic, victim)
	ic.moveNode(t, ctx, ic.stolenEtcd(t, victim), victim, rec.addr)

	// zctl as the operator: cluster.json gives it the admin certificate
	// and the admin token file.
	for _, args := range [][]string{
		{"zone", "report", "--node", victim, "--max", "1"},
		{"zone", "id", "--node", victim},
		{"zone", "log", "--node", victim},
		{"zone", "finish", "100", "--node", victim},
		{"zone", "report", "--node", victim, "--addr", rec.addr},
		{"-n", "t", "zone", "report", "--node", victim},
	} {
		_, errOut, code := run(t, "", args...)
		assert.NotEqual(t, 0, code, "%v reached the recording node, which fails every call: %s", args, errOut)
	}
	// The admin client with the admin token configured as well.
	acfg := ic.cl.AdminClientConfig()
	acfg.Token = token
	ac, err := client.New(ctx, acfg)
	require.NoError(t, err)
	defer ac.Close()
	dev, dctx, err := ac.Device(victim, rec.addr)
	require.NoError(t, err)
	_, _ = dev.ReportZones(dctx, &v1.ReportZonesRequest{Device: z.GetDevice()})
	_, _ = dev.Identify(dctx, &v1.IdentifyRequest{Device: z.GetDevice()})
	// A tenant of an admin-capable client (token configured) reading.
	tcfg := ic.cl.ClientConfig("t")
	tcfg.LocalSockets = nil
	tcfg.Token = token
	tcfg.RetryDeadline = time.Second
	tc, err := client.New(ctx, tcfg)
	require.NoError(t, err)
	defer tc.Close()
	_, _ = tc.VZone(ic.vz.ID()).Read(ctx, 0, 1)

	calls := rec.snapshot()
	require.NotEmpty(t, calls, "no call reached the recording node: the test proves nothing")
	methods := map[string]bool{}
	for _, c := range calls {
		methods[c.method] = true
		for k, vs := range c.md {
			for _, v := range vs {
				assert.NotContains(t, v, token, "%s carried the admin token in %q", c.method, k)
			}
			if k == "authorization" {
				for _, v := range vs {
					assert.True(t, strings.HasPrefix(v, "Bearer "+auth.TokenPrefix), "%s: only namespace tokens may reach a node, got %q…", c.method, v[:min(len(v), 12)])
				}
			}
		}
	}
	for _, m := range []string{"/zonefleet.v1.ZonedDevice/ReportZones", "/zonefleet.v1.ZonedDevice/Identify"} {
		assert.True(t, methods[m], "%s never reached the recording node (got %v)", m, methods)
	}
}

// `zctl cert etcd-roles` (what compose runs before the components start)
// adds the roles of new nodes to a running etcd with authentication, with
// the etcd certificate only; another certificate cannot.
func TestCertEtcdRoles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ic := startIdentityCluster(t, ctx)
	ep := strings.Join(ic.cl.Etcd.Endpoints(), ",")
	out, errOut, code := run(t, "", "cert", "etcd-roles", "--dir", ic.cl.PKIDir(), "--etcd", ep, "--nodes", "node-1,node-2,node-9", "-o", "json")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `"authentication": "enabled"`)
	cli, err := ic.cl.Etcd.Client()
	require.NoError(t, err)
	defer cli.Close()
	r, err := cli.RoleGet(ctx, "zonefleet-node-node-9")
	require.NoError(t, err)
	assert.NotEmpty(t, r.Perm)
	_, _, code = run(t, "", "cert", "etcd-roles", "--dir", ic.cl.PKIDir(), "--etcd", ep, "--nodes", "bad/id")
	assert.Equal(t, ExitUsage, code)

	// With a node's files in place of etcd's: refused by etcd.
	dir := t.TempDir()
	for _, f := range []string{auth.FileCA, "node-node-1.crt", "node-node-1.key"} {
		b, err := os.ReadFile(filepath.Join(ic.cl.PKIDir(), f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, strings.Replace(f, "node-node-1", "etcd", 1)), b, 0o600))
	}
	_, errOut, code = run(t, "", "cert", "etcd-roles", "--dir", dir, "--etcd", ep, "--nodes", "node-1", "--wait", "1s")
	assert.NotEqual(t, 0, code)
	assert.Contains(t, errOut, "permission denied")
}
