package auth

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc/metadata"
)

// An operation grant names one node, one namespace and its zones; it is
// checked against all three and is never accepted as a credential.
func TestPeerGrant(t *testing.T) {
	k, err := GenerateSigningKey()
	require.NoError(t, err)
	iss, err := NewIssuer(k, nil)
	require.NoError(t, err)
	v, err := NewVerifier(VerifierConfig{Keys: []ed25519.PublicKey{k.Public().(ed25519.PublicKey)}})
	require.NoError(t, err)
	g, err := iss.IssuePeerRead("n2", "t", []string{"n1/0/7", "n3/0/9"}, PeerGrantTTL)
	require.NoError(t, err)
	c, err := v.Verify(g)
	require.NoError(t, err)
	assert.Equal(t, TokenRolePeerRead, c.Role)
	assert.Equal(t, []string{"n1/0/7", "n3/0/9"}, c.Zones)

	cases := []struct {
		name, grant, caller, ns, zone string
		ok                            bool
	}{
		{"the assigned read", g, "n2", "t", "n1/0/7", true},
		{"another listed zone", g, "n2", "t", "n3/0/9", true},
		{"a zone not listed", g, "n2", "t", "n1/0/8", false},
		{"another node", g, "n3", "t", "n1/0/7", false},
		{"another namespace", g, "n2", "u", "n1/0/7", false},
		{"no grant", "", "n2", "t", "n1/0/7", false},
		{"garbage", "zf1.x.y.z", "n2", "t", "n1/0/7", false},
	}
	for _, tc := range cases {
		err := CheckPeerRead(v, tc.grant, tc.caller, tc.ns, tc.zone)
		if tc.ok {
			assert.NoError(t, err, tc.name)
			continue
		}
		assert.ErrorIs(t, err, zerr.ErrPermissionDenied, tc.name)
		assert.Equal(t, RefusedPeerNotAssigned, reasonOf(err), tc.name)
	}
	tok, _, err := iss.Issue(TokenRoleNamespace, "t", 0, time.Minute)
	require.NoError(t, err)
	assert.Error(t, CheckPeerRead(v, tok, "n2", "t", "n1/0/7"), "a namespace token is not a grant")
	assert.Error(t, CheckPeerRead(nil, g, "n2", "t", "n1/0/7"), "no verifier, no grant")
	_, err = iss.IssuePeerRead("n2", "t", nil, time.Minute)
	assert.Error(t, err)

	// As a bearer token it authenticates nobody.
	a, err := New(Config{Verifier: v, Insecure: true})
	require.NoError(t, err)
	_, err = a.Authenticate(metadata.NewIncomingContext(context.Background(), metadata.Pairs(AuthorizationKey, "Bearer "+g)),
		v1.ZonedDevice_Read_FullMethodName, &v1.ReadRequest{})
	assert.ErrorIs(t, err, zerr.ErrUnauthenticated)
}
