package localcluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc"
)

// A node certificate reads a tenant's zone from another node (PeerRead)
// only with an arbiter-signed grant naming that node, namespace and zone:
// a stolen node certificate alone reads nothing.
func TestPeerReadNeedsAnOperationGrant(t *testing.T) {
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
	tenant, err := client.New(ctx, cl.ClientConfig("t"))
	require.NoError(t, err)
	defer tenant.Close()
	vz, err := tenant.OpenVZone(ctx)
	require.NoError(t, err)
	secret := bytes.Repeat([]byte("tenant-secret-"), 4096*4/14+1)[:4096*4]
	require.NoError(t, vz.Write(ctx, 0, secret))
	loc, err := vz.Locate(ctx, 0)
	require.NoError(t, err)
	victim := loc.Node
	thief := "node-1"
	if victim == thief {
		thief = "node-2"
	}
	zone := loc.Zone // block 0 of a fresh v-zone is at offset 0 of its first leg
	zoneName := cluster.PhysZone{Node: victim, Device: loc.Device, Zone: zone}.String()

	// The thief's certificate, dialling the victim node (pinned to its id).
	b, err := auth.Load(auth.DirFiles(cl.PKIDir(), pki.Role{Kind: pki.RoleNode, Name: thief}, false, true))
	require.NoError(t, err)
	conf, err := b.ClientTLS(nil, "")
	require.NoError(t, err)
	creds, err := auth.NewNodeCredentials(conf, victim)
	require.NoError(t, err)
	cc, err := grpc.NewClient(loc.Addr, append(rpcerr.DialOptions(), grpc.WithTransportCredentials(creds))...)
	require.NoError(t, err)
	defer cc.Close()
	peerRead := func(grant string) ([]byte, error) {
		pctx := auth.WithPeerGrant(wire.WithNamespace(ctx, "t"), grant)
		st, err := v1.NewZonedDeviceClient(cc).PeerRead(pctx, &v1.PeerReadRequest{Namespace: "t", Device: loc.Device, Zone: zone, Blocks: 4})
		if err != nil {
			return nil, rpcerr.FromError(err)
		}
		var out []byte
		for {
			m, err := st.Recv()
			if err != nil {
				if len(out) > 0 {
					return out, nil
				}
				return nil, rpcerr.FromError(err)
			}
			out = append(out, m.GetData()...)
		}
	}
	denied := func(what string, got []byte, err error) {
		t.Helper()
		require.Error(t, err, what)
		var pd *zerr.PermissionDeniedError
		assert.True(t, errors.As(err, &pd), "%s: want *zerr.PermissionDeniedError, got %T: %v", what, err, err)
		assert.False(t, bytes.Contains(got, []byte("tenant-secret")), what)
	}
	got, err := peerRead("")
	denied("no grant", got, err)

	iss := cl.adm.Issuer // the arbiter's signing key (token-signing.key)
	other, err := iss.IssuePeerRead(thief, "t", []string{cluster.PhysZone{Node: victim, Device: loc.Device, Zone: zone + 1}.String()}, time.Minute)
	require.NoError(t, err)
	got, err = peerRead(other)
	denied("a grant for another zone", got, err)
	forOther, err := iss.IssuePeerRead(victim, "t", []string{zoneName}, time.Minute)
	require.NoError(t, err)
	got, err = peerRead(forOther)
	denied("a grant for another node", got, err)
	wrongNS, err := iss.IssuePeerRead(thief, "u", []string{zoneName}, time.Minute)
	require.NoError(t, err)
	got, err = peerRead(wrongNS)
	denied("a grant for another namespace", got, err)
	tok, err := cl.MintToken("t", time.Minute)
	require.NoError(t, err)
	got, err = peerRead(tok)
	denied("a namespace token in place of a grant", got, err)
	forger, err := auth.GenerateSigningKey()
	require.NoError(t, err)
	fiss, err := auth.NewIssuer(forger, nil)
	require.NoError(t, err)
	forged, err := fiss.IssuePeerRead(thief, "t", []string{zoneName}, time.Minute)
	require.NoError(t, err)
	got, err = peerRead(forged)
	denied("a grant signed by another key", got, err)

	// Every refusal is counted on the victim node.
	var metricsAddr string
	for _, n := range cl.Info().Nodes {
		if n.ID == victim {
			metricsAddr = n.Metrics
		}
	}
	require.NotEmpty(t, metricsAddr)
	resp, err := http.Get(metricsAddr) // a URL
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Contains(t, string(body), `zonefleet_auth_refusals_total{method="/zonefleet.v1.ZonedDevice/PeerRead",reason="peer_not_assigned"} 6`)

	// The grant the arbiter would sign for this node's rebuild.
	good, err := iss.IssuePeerRead(thief, "t", []string{zoneName}, time.Minute)
	require.NoError(t, err)
	got, err = peerRead(good)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(secret, got[:4096]), "the granted read returns the zone's data")
}

// A node certificate pushes compaction data into a tenant's zone on another
// node (PeerWrite) only with the arbiter's grant for that node and zone, or
// with the tenant's own token (a compaction the tenant asked for).
func TestPeerWriteNeedsAuthority(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := Start(ctx, Config{Dir: t.TempDir(), Nodes: 2, Clock: "off", Device: TinyDevice()})
	require.NoError(t, err)
	defer cl.Close()
	admin, err := client.New(ctx, cl.AdminClientConfig())
	require.NoError(t, err)
	defer admin.Close()
	for _, ns := range []string{"t", "u"} {
		_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: ns, MaxActiveVzones: 2, ZonesPerVzone: 2})
		require.NoError(t, err)
	}
	tenant, err := client.New(ctx, cl.ClientConfig("t"))
	require.NoError(t, err)
	defer tenant.Close()
	vz, err := tenant.OpenVZone(ctx) // empty: its zones' write pointers are at their starts
	require.NoError(t, err)
	loc, err := vz.Locate(ctx, 0)
	require.NoError(t, err)
	victim, thief := loc.Node, "node-1"
	if victim == thief {
		thief = "node-2"
	}
	zoneName := cluster.PhysZone{Node: victim, Device: loc.Device, Zone: loc.Zone}.String()

	b, err := auth.Load(auth.DirFiles(cl.PKIDir(), pki.Role{Kind: pki.RoleNode, Name: thief}, false, true))
	require.NoError(t, err)
	conf, err := b.ClientTLS(nil, "")
	require.NoError(t, err)
	creds, err := auth.NewNodeCredentials(conf, victim)
	require.NoError(t, err)
	cc, err := grpc.NewClient(loc.Addr, append(rpcerr.DialOptions(), grpc.WithTransportCredentials(creds))...)
	require.NoError(t, err)
	defer cc.Close()
	lba := loc.LBA
	push := func(authority string) error {
		st, err := v1.NewZonedDeviceClient(cc).PeerWrite(auth.WithPeerGrant(wire.WithNamespace(ctx, "t"), authority))
		if err != nil {
			return rpcerr.FromError(err)
		}
		if err := st.Send(&v1.PeerWriteRequest{Namespace: "t", Device: loc.Device,
			Extents: []*v1.PeerExtent{{DstLba: lba, Data: bytes.Repeat([]byte("forged!!"), 512)}}}); err != nil {
			_, err = st.CloseAndRecv()
			return rpcerr.FromError(err)
		}
		_, err = st.CloseAndRecv()
		return rpcerr.FromError(err)
	}
	denied := func(what string, err error) {
		t.Helper()
		var pd *zerr.PermissionDeniedError
		assert.True(t, errors.As(err, &pd), "%s: want *zerr.PermissionDeniedError, got %T: %v", what, err, err)
	}
	iss := cl.adm.Issuer
	denied("no authority", push(""))
	read, err := iss.IssuePeerRead(thief, "t", []string{zoneName}, time.Minute)
	require.NoError(t, err)
	denied("a read grant", push(read))
	other, err := iss.IssuePeerWrite(victim, "t", []string{zoneName}, time.Minute)
	require.NoError(t, err)
	denied("a grant for another node", push(other))
	tokU, err := cl.MintToken("u", time.Minute)
	require.NoError(t, err)
	denied("another tenant's token", push(tokU))
	// The thief's node served tenant t and saw its token: the token is no
	// authority to write t's zones on another node.
	tokT, err := cl.MintToken("t", time.Minute)
	require.NoError(t, err)
	denied("the tenant's own token, replayed by a node that saw it", push(tokT))
	// A grant t asked for names the node it asked: another node's is refused.
	forVictim, _, err := iss.DelegatePeerWrite(victim, "t", 0, []string{zoneName}, time.Minute)
	require.NoError(t, err)
	denied("the tenant's grant for another node", push(forVictim))
	got, err := vz.Read(ctx, 0, 1)
	if err == nil {
		assert.False(t, bytes.Contains(got, []byte("forged!!")), "a refused push wrote nothing")
	}

	// The arbiter's grant for this node and zone is accepted, and so is the
	// grant t asked for this node, until t's tokens are revoked.
	good, err := iss.IssuePeerWrite(thief, "t", []string{zoneName}, time.Minute)
	require.NoError(t, err)
	require.NoError(t, push(good))
	lba++
	delegated, _, err := iss.DelegatePeerWrite(thief, "t", 0, []string{zoneName}, time.Minute)
	require.NoError(t, err)
	require.NoError(t, push(delegated))
	lba++
	_, err = admin.RevokeTokens(ctx, "t")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var pd *zerr.PermissionDeniedError
		return errors.As(push(delegated), &pd)
	}, time.Minute, 10*time.Millisecond, "the tenant's grant dies with its tokens")
}

// A tenant's compaction that copies to another node runs on a TLS cluster:
// the client asks the arbiter for a PeerWrite grant naming the source node
// and the destination zone, the source node forwards it, the destination
// accepts it.
func TestTenantCompactionAcrossNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := Start(ctx, Config{Dir: t.TempDir(), Nodes: 2, Clock: "off", Device: TinyDevice()})
	require.NoError(t, err)
	defer cl.Close()
	admin, err := client.New(ctx, cl.AdminClientConfig())
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "t", MaxActiveVzones: 8, ZonesPerVzone: 1})
	require.NoError(t, err)
	tenant, err := client.New(ctx, cl.ClientConfig("t"))
	require.NoError(t, err)
	defer tenant.Close()
	src, err := tenant.OpenVZone(ctx)
	require.NoError(t, err)
	block := bytes.Repeat([]byte("moved!"), 4096/6+1)[:4096]
	require.NoError(t, src.Write(ctx, 0, block))
	from, err := src.Locate(ctx, 0)
	require.NoError(t, err)
	var dst *client.VZone
	for range 6 { // a v-zone with its first zone on the other node
		vz, err := tenant.OpenVZone(ctx)
		require.NoError(t, err)
		to, err := vz.Locate(ctx, 0)
		require.NoError(t, err)
		if to.Node != from.Node {
			dst = vz
			break
		}
	}
	require.NotNil(t, dst, "no v-zone on the other node")
	st, err := tenant.Compact(ctx, []client.Copy{{Src: src.ID(), Dst: dst.ID(), Blocks: 1}})
	require.NoError(t, err)
	assert.Equal(t, uint64(1), st.Remote, "%+v", st)
	got, err := dst.Read(ctx, 0, 1)
	require.NoError(t, err)
	assert.Equal(t, block, got)
}
