package localcluster

import (
	"bytes"
	"context"
	"errors"
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

	// The grant the arbiter would sign for this node's rebuild.
	good, err := iss.IssuePeerRead(thief, "t", []string{zoneName}, time.Minute)
	require.NoError(t, err)
	got, err = peerRead(good)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(secret, got[:4096]), "the granted read returns the zone's data")
}
