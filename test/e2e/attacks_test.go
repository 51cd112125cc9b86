package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
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
	"github.com/zonefleet/zonefleet/pkg/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestAttacks runs what a tenant with a valid account (mallory) would try
// against a running secure local cluster (real gRPC over TLS, real etcd).
// Every attack must fail with UNAUTHENTICATED or
// PERMISSION_DENIED (UNAVAILABLE for a plaintext client: the TLS listener
// never lets its preface reach gRPC) and change nothing: the victim's data
// and namespace are intact afterwards.
func TestAttacks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := localcluster.Start(ctx, localcluster.Config{Dir: t.TempDir(), Nodes: 2, Clock: "off", Device: localcluster.TinyDevice()})
	require.NoError(t, err)
	defer cl.Close()

	admin, err := client.New(ctx, cl.AdminClientConfig())
	require.NoError(t, err)
	defer admin.Close()
	for _, ns := range []string{"victim", "mallory"} {
		_, err := admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: ns, MaxActiveVzones: 2, ZonesPerVzone: 2})
		require.NoError(t, err)
	}
	tenant := func(ns string) *client.Client {
		c, err := client.New(ctx, cl.ClientConfig(ns))
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	}
	victim, mallory := tenant("victim"), tenant("mallory")
	secret := bytes.Repeat([]byte("victim-secret-"), 4096*4/14+1)[:4096*4]
	vvz, err := victim.OpenVZone(ctx)
	require.NoError(t, err)
	require.NoError(t, vvz.Write(ctx, 0, secret))
	mvz, err := mallory.OpenVZone(ctx)
	require.NoError(t, err)
	require.NoError(t, mvz.Write(ctx, 0, bytes.Repeat([]byte("m"), 4096*4)))
	vlay, err := vvz.Layout(ctx)
	require.NoError(t, err)
	mlay, err := mvz.Layout(ctx)
	require.NoError(t, err)
	nodes, err := admin.ListNodes(ctx)
	require.NoError(t, err)
	zoneSize := nodes[0].GetDevices()[0].GetZoneSize()
	vz0 := vlay.GetGroups()[0].GetZones()[0] // a zone holding the victim's data
	mz0 := mlay.GetGroups()[0].GetZones()[0] // mallory's own zone
	arbiter := cl.ArbiterAddrs()[0]

	// Credentials.
	malTok, err := cl.MintToken("mallory", 10*time.Minute)
	require.NoError(t, err)
	sk, err := auth.LoadSigningKey(cl.PKIDir() + "/" + auth.FileSigningKey)
	require.NoError(t, err)
	past, err := auth.NewIssuer(sk, func() time.Time { return time.Now().Add(-2 * time.Hour) })
	require.NoError(t, err)
	expired, _, err := past.Issue(auth.TokenRoleNamespace, "victim", 0, 15*time.Minute)
	require.NoError(t, err)
	victimTok, err := cl.MintToken("victim", 10*time.Minute)
	require.NoError(t, err)
	tampered := []byte(victimTok)
	tampered[len(tampered)-3] ^= 1 // the signature
	otherKey, err := auth.GenerateSigningKey()
	require.NoError(t, err)
	otherIss, err := auth.NewIssuer(otherKey, nil)
	require.NoError(t, err)
	forgedTok, _, err := otherIss.Issue(auth.TokenRoleNamespace, "victim", 0, 10*time.Minute)
	require.NoError(t, err)
	nodeTok, _, err := mustIssuer(t, cl).Issue(auth.TokenRoleNode, "node-1", 0, 10*time.Minute)
	require.NoError(t, err)
	foreignCA, err := pki.NewCA(pki.CAOptions{})
	require.NoError(t, err)
	foreignAdmin, err := foreignCA.Issue(pki.LeafOptions{Role: pki.Role{Kind: pki.RoleAdmin}})
	require.NoError(t, err)

	tlsNoCert := cl.ClientTLS()
	foreignTLS := cl.ClientTLS().Clone()
	fc := foreignAdmin.TLSCertificate()
	foreignTLS.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &fc, nil }

	type conn struct {
		tls   *tls.Config // nil: plaintext
		token string
	}
	dial := func(addr string, c conn) *grpc.ClientConn {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if c.tls != nil {
			opts = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(c.tls))}
		}
		if c.token != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(auth.PerRPC(auth.StaticToken(c.token), c.tls == nil)))
		}
		cc, err := grpc.NewClient(addr, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	asMallory := conn{tls: tlsNoCert, token: malTok}
	readVictim := func(c conn, md ...string) error {
		cctx := metadata.AppendToOutgoingContext(ctx, md...)
		_, err := v1.NewZonedDeviceClient(dial(vz0.GetAddr(), c)).Read(cctx, &v1.ReadRequest{Device: vz0.GetDevice(), Lba: uint64(vz0.GetZone()) * zoneSize, Blocks: 1})
		return err
	}
	arb := func(c conn) v1.ArbiterClient { return v1.NewArbiterClient(dial(arbiter, c)) }
	node := func(c conn) v1.ZonedDeviceClient { return v1.NewZonedDeviceClient(dial(vz0.GetAddr(), c)) }

	for _, tc := range []struct {
		name   string
		attack func() error
		want   codes.Code
	}{
		{"forged namespace metadata on a node", func() error { return readVictim(asMallory, auth.NamespaceKey, "victim") }, codes.PermissionDenied},
		{"forged namespace metadata on the arbiter", func() error {
			_, err := arb(asMallory).ListVZones(metadata.AppendToOutgoingContext(ctx, auth.NamespaceKey, "victim"), &v1.ListVZonesRequest{Namespace: "victim"})
			return err
		}, codes.PermissionDenied},
		{"metadata only, no token", func() error { return readVictim(conn{tls: tlsNoCert}, auth.NamespaceKey, "victim") }, codes.Unauthenticated},
		{"another tenant's token reads the victim's zone", func() error { return readVictim(asMallory) }, codes.PermissionDenied},
		{"another tenant's token lists the victim's v-zones", func() error {
			_, err := arb(asMallory).ListVZones(ctx, &v1.ListVZonesRequest{Namespace: "victim"})
			return err
		}, codes.PermissionDenied},
		{"another tenant's token resets the victim's v-zone", func() error {
			_, err := arb(asMallory).ResetVZone(ctx, &v1.VZoneRequest{Namespace: "victim", Id: vvz.ID()})
			return err
		}, codes.PermissionDenied},
		{"expired token", func() error { return readVictim(conn{tls: tlsNoCert, token: expired}) }, codes.Unauthenticated},
		{"tampered token", func() error { return readVictim(conn{tls: tlsNoCert, token: string(tampered)}) }, codes.Unauthenticated},
		{"token signed by another key", func() error { return readVictim(conn{tls: tlsNoCert, token: forgedTok}) }, codes.Unauthenticated},
		{"node token on a TLS cluster", func() error { return readVictim(conn{tls: tlsNoCert, token: nodeTok}) }, codes.Unauthenticated},
		{"tenant deletes a namespace", func() error {
			_, err := arb(asMallory).DeleteNamespace(ctx, &v1.DeleteNamespaceRequest{Name: "victim", Force: true})
			return err
		}, codes.PermissionDenied},
		{"tenant creates a namespace", func() error {
			_, err := arb(asMallory).CreateNamespace(ctx, &v1.CreateNamespaceRequest{Name: "evil", MaxActiveVzones: 1, ZonesPerVzone: 1})
			return err
		}, codes.PermissionDenied},
		{"tenant resets every zone of a node", func() error {
			_, err := node(asMallory).ZoneManagement(ctx, &v1.ZoneManagementRequest{Device: vz0.GetDevice(), Action: v1.ZoneAction_ZONE_ACTION_RESET, SelectAll: true})
			return err
		}, codes.PermissionDenied},
		{"tenant resets the victim's zone", func() error {
			_, err := node(asMallory).ZoneManagement(ctx, &v1.ZoneManagementRequest{Device: vz0.GetDevice(), Zone: vz0.GetZone(), Action: v1.ZoneAction_ZONE_ACTION_RESET})
			return err
		}, codes.PermissionDenied},
		{"tenant reads a node's log", func() error {
			_, err := node(asMallory).GetLog(ctx, &v1.GetLogRequest{Device: vz0.GetDevice()})
			return err
		}, codes.PermissionDenied},
		{"tenant pushes PeerWrite into the victim's zone", func() error {
			s, err := node(asMallory).PeerWrite(ctx)
			if err != nil {
				return err
			}
			_ = s.Send(&v1.PeerWriteRequest{Device: vz0.GetDevice(), Namespace: "victim", Extents: []*v1.PeerExtent{{DstLba: uint64(vz0.GetZone()) * zoneSize, Data: make([]byte, 4096)}}})
			_, err = s.CloseAndRecv()
			return err
		}, codes.PermissionDenied},
		{"tenant asks the arbiter for another tenant's token", func() error {
			_, err := arb(asMallory).IssueToken(ctx, &v1.IssueTokenRequest{Namespace: "victim"})
			return err
		}, codes.PermissionDenied},
		{"tenant revokes another tenant's tokens", func() error {
			_, err := arb(asMallory).RevokeTokens(ctx, &v1.RevokeTokensRequest{Namespace: "victim"})
			return err
		}, codes.PermissionDenied},
		{"expired token renews itself at the arbiter", func() error {
			_, err := arb(conn{tls: tlsNoCert, token: expired}).IssueToken(ctx, &v1.IssueTokenRequest{Namespace: "victim"})
			return err
		}, codes.Unauthenticated},
		{"client certificate from another CA", func() error { return readVictim(conn{tls: foreignTLS}) }, codes.Unauthenticated},
		{"plaintext client against the TLS server", func() error { return readVictim(conn{token: victimTok}) }, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.attack()
			require.Error(t, err)
			assert.Equal(t, tc.want, status.Code(err), "%v", err)
		})
	}

	t.Run("ZoneCompaction peer address does not leak anything", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer lis.Close()
		var accepted atomic.Int64
		go func() {
			for {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				_ = c.Close()
			}
		}()
		other := "node-1"
		if mz0.GetNode() == "node-1" {
			other = "node-2"
		}
		dev := v1.NewZonedDeviceClient(dial(mz0.GetAddr(), asMallory))
		for _, peer := range []*v1.PeerTarget{
			{NodeId: other, Addr: lis.Addr().String()},      // a registered node, the attacker's address
			{NodeId: "attacker", Addr: lis.Addr().String()}, // an unregistered id
		} {
			r, err := dev.ZoneCompaction(ctx, &v1.ZoneCompactionRequest{Device: mz0.GetDevice(), Copies: []*v1.CompactionCopy{
				{SrcLba: uint64(mz0.GetZone()) * zoneSize, Blocks: 1, DstLba: 0, Peer: peer}}})
			if err == nil {
				_, err = dev.WaitCompaction(ctx, &v1.WaitCompactionRequest{Device: mz0.GetDevice(), OperationId: r.GetOperationId()})
			}
			assert.Error(t, err, "a copy into a zone mallory does not own fails")
		}
		// The calls have returned, so a dial by the node would be queued at
		// the listener by now; accept is in order: once the test's own
		// sentinel connection is accepted, every earlier one was too.
		sentinel, err := net.Dial("tcp", lis.Addr().String())
		require.NoError(t, err)
		defer sentinel.Close()
		require.Eventually(t, func() bool { return accepted.Load() >= 1 }, 30*time.Second, time.Millisecond, "the sentinel is accepted")
		assert.Equal(t, int64(1), accepted.Load(), "the node never dials the address from the request (only the sentinel connected)")
	})

	t.Run("revoked token", func(t *testing.T) {
		// mallory renews its own token at the arbiter (a tenant may), then
		// the operator revokes mallory's tokens: the renewed and the
		// original token stop working on nodes and on the arbiter, and a
		// renewal with them is refused too.
		renewed, err := arb(asMallory).IssueToken(ctx, &v1.IssueTokenRequest{Namespace: "mallory"})
		require.NoError(t, err)
		assert.Equal(t, "mallory", renewed.GetNamespace())
		assert.WithinDuration(t, time.Now().Add(auth.DefaultTokenTTL), renewed.GetExpires().AsTime(), time.Minute)
		_, err = arb(asMallory).IssueToken(ctx, &v1.IssueTokenRequest{Namespace: "mallory", TtlSeconds: 3600})
		assert.Equal(t, codes.InvalidArgument, status.Code(err), "a tenant may not ask for more than the default lifetime: %v", err)
		asRenewed := conn{tls: tlsNoCert, token: renewed.GetToken()}
		readOwn := func(c conn) error {
			_, err := v1.NewZonedDeviceClient(dial(mz0.GetAddr(), c)).Read(ctx, &v1.ReadRequest{Device: mz0.GetDevice(), Lba: uint64(mz0.GetZone()) * zoneSize, Blocks: 1})
			return err
		}
		require.NoError(t, readOwn(asRenewed), "the renewed token works before the revocation")

		gen, err := admin.RevokeTokens(ctx, "mallory")
		require.NoError(t, err)
		assert.Equal(t, renewed.GetGeneration()+1, gen)
		for _, c := range []conn{asMallory, asRenewed} {
			require.Eventually(t, func() bool { return status.Code(readOwn(c)) == codes.Unauthenticated }, 60*time.Second, 20*time.Millisecond,
				"the node refuses a revoked token")
			require.Eventually(t, func() bool {
				_, err := arb(c).ListVZones(ctx, &v1.ListVZonesRequest{Namespace: "mallory"})
				return status.Code(err) == codes.Unauthenticated
			}, 60*time.Second, 20*time.Millisecond, "the arbiter refuses a revoked token")
			_, err := arb(c).IssueToken(ctx, &v1.IssueTokenRequest{Namespace: "mallory"})
			assert.Equal(t, codes.Unauthenticated, status.Code(err), "a revoked token cannot renew itself: %v", err)
		}
		// The operator issues a token of the new generation: it works.
		fresh, err := admin.IssueToken(ctx, "mallory", time.Hour)
		require.NoError(t, err)
		assert.Equal(t, gen, fresh.GetGeneration())
		require.NoError(t, readOwn(conn{tls: tlsNoCert, token: fresh.GetToken()}))
	})

	// Nothing changed: the victim's data and both namespaces are intact, no
	// namespace "evil" exists.
	got, err := victim.VZone(vvz.ID()).Read(ctx, 0, uint64(len(secret)/4096))
	require.NoError(t, err)
	assert.Equal(t, secret, got)
	nss, err := admin.Namespaces().List(ctx)
	require.NoError(t, err)
	var names []string
	for _, n := range nss {
		names = append(names, n.GetName())
	}
	assert.ElementsMatch(t, []string{"victim", "mallory"}, names)

	t.Run("cross-tenant read after the victim's zone is given to mallory by an overwrite", func(t *testing.T) {
		// What the arbiter's grant repair or a watch gap does: the grant key
		// of a zone holding the victim's data is overwritten for mallory, no
		// deletion in between. Mallory's first read must find nothing of it.
		cli, err := cl.Etcd.Client()
		require.NoError(t, err)
		defer cli.Close()
		key := cluster.GrantKey(vz0.GetNode(), vz0.GetDevice(), vz0.GetZone())
		val, err := cluster.EncodeGrant(cluster.Grant{Namespace: "mallory", VZone: 999})
		require.NoError(t, err)
		put, err := cli.Put(ctx, key, string(val))
		require.NoError(t, err)
		issued, err := admin.IssueToken(ctx, "mallory", 10*time.Minute) // its older tokens were revoked above
		require.NoError(t, err)
		tok := issued.GetToken()
		var resp *v1.ReadResponse
		require.Eventually(t, func() bool {
			resp, err = v1.NewZonedDeviceClient(dial(vz0.GetAddr(), conn{tls: tlsNoCert, token: tok})).Read(wire.WithMinRevision(ctx, put.Header.Revision),
				&v1.ReadRequest{Device: vz0.GetDevice(), Lba: uint64(vz0.GetZone()) * zoneSize, Blocks: 4})
			return status.Code(err) != codes.Unauthenticated // the new generation reached the node
		}, 60*time.Second, 20*time.Millisecond)
		if err == nil {
			assert.False(t, bytes.Contains(resp.GetData(), []byte("victim-secret")), "mallory read the victim's blocks")
		} else {
			assert.NotEqual(t, codes.PermissionDenied, status.Code(err), "mallory owns the zone now: %v", err)
		}
	})
}

func mustIssuer(t *testing.T, cl *localcluster.Cluster) *auth.Issuer {
	sk, err := auth.LoadSigningKey(cl.PKIDir() + "/" + auth.FileSigningKey)
	require.NoError(t, err)
	iss, err := auth.NewIssuer(sk, nil)
	require.NoError(t, err)
	return iss
}

// TestMountLeaseIsTheTenantsOwn: the mount lease (AcquireMount,
// ReleaseMount) over real gRPC against a secure local cluster (TLS, real
// etcd, the arbiter's policy). A tenant takes and gives back its own
// namespace's lease; another tenant's token is refused with
// PERMISSION_DENIED before the handler runs — taking a free lease, forcing a
// held one over (which would fence the victim's mount) or releasing it in
// the holder's name (which would let a second mount in) — and the refused
// calls change nothing: the victim can still take its free lease, and once
// taken its holder keeps it.
func TestMountLeaseIsTheTenantsOwn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := localcluster.Start(ctx, localcluster.Config{Dir: t.TempDir(), Nodes: 1, Clock: "off", Device: localcluster.TinyDevice()})
	require.NoError(t, err)
	defer cl.Close()
	admin, err := client.New(ctx, cl.AdminClientConfig())
	require.NoError(t, err)
	defer admin.Close()
	for _, ns := range []string{"victim", "mallory"} {
		_, err := admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: ns, MaxActiveVzones: 1, ZonesPerVzone: 1})
		require.NoError(t, err)
	}
	arb := func(ns string) v1.ArbiterClient {
		tok, err := cl.MintToken(ns, 10*time.Minute)
		require.NoError(t, err)
		cc, err := grpc.NewClient(cl.ArbiterAddrs()[0], grpc.WithTransportCredentials(credentials.NewTLS(cl.ClientTLS())),
			grpc.WithPerRPCCredentials(auth.PerRPC(auth.StaticToken(tok), false)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = cc.Close() })
		return v1.NewArbiterClient(cc)
	}
	victim, mallory := arb("victim"), arb("mallory")
	const ttl = 60 // seconds: no lease here ends by itself during the test
	acquire := func(ctx context.Context, c v1.ArbiterClient, ns, holder string, force bool) (*v1.MountLease, error) {
		return c.AcquireMount(ctx, &v1.AcquireMountRequest{Namespace: ns, Holder: holder, TtlSeconds: ttl, Force: force})
	}
	release := func(c v1.ArbiterClient, ns, holder string) error {
		_, err := c.ReleaseMount(ctx, &v1.ReleaseMountRequest{Namespace: ns, Holder: holder})
		return err
	}
	denied := func(what string, err error) {
		t.Helper()
		require.Error(t, err, what)
		assert.Equal(t, codes.PermissionDenied, status.Code(err), "%s: %v", what, err)
	}
	// holds: the victim's lease is held by holder (its renewal succeeds, a
	// second mount of the victim's is refused naming it).
	holds := func(holder string) {
		t.Helper()
		_, err := acquire(ctx, victim, "victim", "victim-backup pid 9", false)
		assert.Equal(t, codes.AlreadyExists, status.Code(err), "the lease is held: %v", err)
		assert.ErrorContains(t, err, holder)
		l, err := acquire(ctx, victim, "victim", holder, false)
		require.NoError(t, err, "the holder renews")
		assert.Equal(t, holder, l.GetHolder())
	}

	// A free lease: mallory cannot take it, by the request or by forged
	// namespace metadata; the victim then can.
	_, err = acquire(ctx, mallory, "victim", "mallory-host pid 1", false)
	denied("mallory takes the victim's free lease", err)
	_, err = acquire(metadata.AppendToOutgoingContext(ctx, auth.NamespaceKey, "victim"), mallory, "victim", "mallory-host pid 1", false)
	denied("mallory takes the victim's lease with forged namespace metadata", err)
	l, err := acquire(ctx, victim, "victim", "victim-host pid 7", false)
	require.NoError(t, err, "the victim takes its own lease after mallory's refused attempts")
	assert.Equal(t, "victim", l.GetNamespace())
	assert.Equal(t, "victim-host pid 7", l.GetHolder())

	// A held lease: mallory can neither force it over nor release it in
	// the holder's name.
	_, err = acquire(ctx, mallory, "victim", "mallory-host pid 1", true)
	denied("mallory forces the victim's lease over", err)
	denied("mallory releases the victim's lease in the holder's name", release(mallory, "victim", "victim-host pid 7"))
	denied("mallory releases the victim's lease as another holder", release(mallory, "victim", "mallory-host pid 1"))
	holds("victim-host pid 7")

	// Mallory's own lease: taken, held, given back.
	ml, err := acquire(ctx, mallory, "mallory", "mallory-host pid 1", false)
	require.NoError(t, err, "mallory takes its own lease")
	assert.Equal(t, "mallory-host pid 1", ml.GetHolder())
	_, err = acquire(ctx, mallory, "mallory", "mallory-host pid 2", false)
	assert.Equal(t, codes.AlreadyExists, status.Code(err), "mallory's lease is held: %v", err)
	require.NoError(t, release(mallory, "mallory", "mallory-host pid 1"), "mallory releases its own lease")
	ml, err = acquire(ctx, mallory, "mallory", "mallory-host pid 2", false)
	require.NoError(t, err, "the released lease is free")
	assert.Equal(t, "mallory-host pid 2", ml.GetHolder())

	// After all of it the victim's holder still has the lease, and its
	// own release frees it.
	holds("victim-host pid 7")
	require.NoError(t, release(victim, "victim", "victim-host pid 7"))
	l, err = acquire(ctx, victim, "victim", "victim-host pid 8", false)
	require.NoError(t, err, "the victim's released lease is free")
	assert.Equal(t, "victim-host pid 8", l.GetHolder())
}
