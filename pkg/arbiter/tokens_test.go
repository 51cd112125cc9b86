package arbiter

import (
	"context"
	"crypto/ed25519"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc/codes"
)

// IssueToken is rate-limited per caller: a caller minting in a loop gets
// RESOURCE_EXHAUSTED after its burst while another caller is still served;
// its budget comes back with time. Every outcome is counted.
func TestIssueTokenIsRateLimitedPerCaller(t *testing.T) {
	tc, a := oneLeader(t, 2)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "t", MARLogical: 2, ZonesPerVZone: 2})
	require.NoError(t, err)
	_, err = a.CreateNamespace(ctx, NamespaceSpec{Name: "u", MARLogical: 2, ZonesPerVZone: 2})
	require.NoError(t, err)
	k, err := auth.GenerateSigningKey()
	require.NoError(t, err)
	iss, err := auth.NewIssuer(k, tc.clock.Now)
	require.NoError(t, err)
	srv := NewServer(a.Arbiter).WithIssuer(iss)
	as := func(ns string) context.Context {
		return auth.NewContext(ctx, auth.Identity{Kind: auth.KindNamespace, Name: ns, Namespace: ns, Via: "token"})
	}

	for i := 0; i < int(IssueBurst); i++ {
		_, err := srv.IssueToken(as("t"), &v1.IssueTokenRequest{Namespace: "t"})
		require.NoError(t, err, "token %d of the burst", i)
	}
	_, err = srv.IssueToken(as("t"), &v1.IssueTokenRequest{Namespace: "t"})
	require.Error(t, err)
	assert.Equal(t, codes.ResourceExhausted, rpcerr.Code(rpcerr.FromError(err)))
	var nr *zerr.NoResourcesError
	require.True(t, errors.As(rpcerr.FromError(err), &nr))
	assert.Contains(t, nr.Error(), "token issuance budget of namespace:t")

	_, err = srv.IssueToken(as("u"), &v1.IssueTokenRequest{Namespace: "u"})
	require.NoError(t, err, "another caller is not limited by t's loop")

	tc.clock.Advance(time.Second)
	_, err = srv.IssueToken(as("t"), &v1.IssueTokenRequest{Namespace: "t"})
	require.NoError(t, err, "the budget comes back")

	assert.Equal(t, IssueBurst+2, testutil.ToFloat64(a.m.tokens.WithLabelValues("namespace", "issued")), "t's burst, u's and t's after a second")
	assert.Equal(t, 1.0, testutil.ToFloat64(a.m.tokens.WithLabelValues("namespace", "rate_limited")))
}

// IssueToken with a PeerWrite scope signs a grant for the named node and
// zones, with the namespace's generation, not a credential; malformed
// scopes are INVALID_ARGUMENT; grants have their own budget, so a tenant
// compacting a lot still renews its token.
func TestIssuePeerWriteGrant(t *testing.T) {
	tc, a := oneLeader(t, 2)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "t", MARLogical: 2, ZonesPerVZone: 2})
	require.NoError(t, err)
	k, err := auth.GenerateSigningKey()
	require.NoError(t, err)
	iss, err := auth.NewIssuer(k, tc.clock.Now)
	require.NoError(t, err)
	v, err := auth.NewVerifier(auth.VerifierConfig{Keys: []ed25519.PublicKey{k.Public().(ed25519.PublicKey)}, Now: tc.clock.Now})
	require.NoError(t, err)
	srv := NewServer(a.Arbiter).WithIssuer(iss)
	as := auth.NewContext(ctx, auth.Identity{Kind: auth.KindNamespace, Name: "t", Namespace: "t", Via: "token"})

	resp, err := srv.IssueToken(as, &v1.IssueTokenRequest{Namespace: "t", PeerWrite: &v1.PeerWriteScope{SourceNode: "n1", Zones: []string{"n2/0/5"}}})
	require.NoError(t, err)
	c, err := v.Verify(resp.GetToken())
	require.NoError(t, err)
	assert.Equal(t, auth.TokenRolePeerWrite, c.Role)
	assert.True(t, c.Delegated)
	assert.Equal(t, "n1", c.Subject)
	assert.Equal(t, "t", c.Namespace)
	assert.Equal(t, []string{"n2/0/5"}, c.Zones)
	assert.NoError(t, auth.CheckPeerWrite(v, nil, resp.GetToken(), "n1", "t", "n2/0/5"))

	for name, pw := range map[string]*v1.PeerWriteScope{
		"no zones":        {SourceNode: "n1"},
		"a bad zone":      {SourceNode: "n1", Zones: []string{"n2/x/5"}},
		"a padded zone":   {SourceNode: "n1", Zones: []string{"n2/00/5"}},
		"no source node":  {Zones: []string{"n2/0/5"}},
		"too many zones":  {SourceNode: "n1", Zones: make([]string, auth.MaxGrantZones+1)},
		"a node with '/'": {SourceNode: "n1/0", Zones: []string{"n2/0/5"}},
	} {
		_, err := srv.IssueToken(as, &v1.IssueTokenRequest{Namespace: "t", PeerWrite: pw})
		assert.Equal(t, codes.InvalidArgument, rpcerr.Code(rpcerr.FromError(err)), "%s: %v", name, err)
	}
	for i := 0; i < int(GrantBurst); i++ {
		_, err := srv.IssueToken(as, &v1.IssueTokenRequest{Namespace: "t", PeerWrite: &v1.PeerWriteScope{SourceNode: "n1", Zones: []string{"n2/0/5"}}})
		if err != nil {
			assert.Equal(t, codes.ResourceExhausted, rpcerr.Code(rpcerr.FromError(err)))
			assert.GreaterOrEqual(t, i, int(GrantBurst)-10, "the grant budget is its own")
			break
		}
	}
	_, err = srv.IssueToken(as, &v1.IssueTokenRequest{Namespace: "t"})
	require.NoError(t, err, "grants do not use up the token budget")
}
