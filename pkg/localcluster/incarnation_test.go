package localcluster_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/internal/testcluster"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// A namespace deleted and created again under the same name is another
// tenant: none of the first incarnation's tokens reaches the second's data
// (nodes), its namespace (arbiter), or renews itself (IssueToken).
func TestRecreatedNamespaceRefusesOldTokens(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := testcluster.Start(t, localcluster.Config{Nodes: 2})
	admin := testcluster.Client(t, cl, "")
	create := func() {
		testcluster.CreateNamespace(t, cl, &v1.CreateNamespaceRequest{Name: "inc", MaxActiveVzones: 2, ZonesPerVzone: 2})
	}
	// The tenant's calls must succeed, after retries where a node's
	// grants watch lags the arbiter: the deadline only bounds a hang.
	tenant := func(tok string) (*client.Client, error) {
		return client.New(ctx, client.Config{Arbiters: cl.ArbiterAddrs(), Namespace: "inc", TLS: cl.ClientTLS(),
			Credentials: auth.StaticToken(tok), RetryDeadline: 30 * time.Second})
	}

	create()
	first, err := admin.IssueToken(ctx, "inc", 0)
	require.NoError(t, err)
	old, err := tenant(first.GetToken())
	require.NoError(t, err)
	ovz, err := old.OpenVZone(ctx)
	require.NoError(t, err)
	require.NoError(t, ovz.Write(ctx, 0, bytes.Repeat([]byte("o"), 4096)))
	old.Close()

	require.NoError(t, admin.Namespaces().Delete(ctx, "inc", true))
	create()
	second, err := admin.IssueToken(ctx, "inc", 0)
	require.NoError(t, err)
	assert.Greater(t, second.GetGeneration(), first.GetGeneration())
	cur, err := tenant(second.GetToken())
	require.NoError(t, err)
	defer cur.Close()
	vz, err := cur.OpenVZone(ctx)
	require.NoError(t, err)
	secret := bytes.Repeat([]byte("second-incarnation"), 4096*2/18+1)[:4096*2]
	require.NoError(t, vz.Write(ctx, 0, secret))
	loc, err := vz.Locate(ctx, 0)
	require.NoError(t, err)

	// The node holding the second tenant's data, asked with the old token.
	direct := client.NewDirect(client.Config{Namespace: "inc", TLS: cl.ClientTLS(), Credentials: auth.StaticToken(first.GetToken()), RetryDeadline: time.Second})
	defer direct.Close()
	dev, dctx, err := direct.Device(loc.Node, loc.Addr)
	require.NoError(t, err)
	var readErr error
	require.Eventually(t, func() bool { // until the node's watch has the new generation
		var r *v1.ReadResponse
		r, readErr = dev.Read(dctx, &v1.ReadRequest{Device: loc.Device, Lba: loc.LBA, Blocks: 1})
		if readErr == nil {
			require.False(t, bytes.Equal(secret[:4096], r.GetData()), "the old incarnation's token read the new tenant's data")
		}
		return readErr != nil
	}, time.Minute, 20*time.Millisecond)
	assert.ErrorIs(t, readErr, zerr.ErrUnauthenticated)
	assert.Contains(t, readErr.Error(), "revoked")

	// The arbiter refuses it, and it cannot renew itself.
	_, err = tenant(first.GetToken())
	require.Error(t, err)
	assert.ErrorIs(t, err, zerr.ErrUnauthenticated)
	cc, err := grpc.NewClient(cl.ArbiterAddrs()[0], append(rpcerr.DialOptions(),
		grpc.WithTransportCredentials(credentials.NewTLS(cl.ClientTLS())),
		grpc.WithPerRPCCredentials(auth.PerRPC(auth.StaticToken(first.GetToken()), false)))...)
	require.NoError(t, err)
	defer cc.Close()
	_, err = v1.NewArbiterClient(cc).IssueToken(ctx, &v1.IssueTokenRequest{Namespace: "inc"})
	require.Error(t, err)
	assert.True(t, errors.Is(err, zerr.ErrUnauthenticated), "renewal with the old token: %v", err)

	// The second incarnation's own token still works.
	got, err := vz.Read(ctx, 0, 2)
	require.NoError(t, err)
	assert.Equal(t, secret, got)
}
