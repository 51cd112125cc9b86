package arbiter

import (
	"context"
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
