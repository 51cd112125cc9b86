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

// A tenant's PeerWrite authority is a grant the arbiter signs for the node
// the tenant asked (DelegatePeerWrite), never the tenant's token: a node
// that saw the token cannot use it to write the tenant's zones on another
// node, and the grant works only for the node and zones it names, only
// while the namespace's tokens are not revoked.
func TestPeerWriteDelegation(t *testing.T) {
	k, err := GenerateSigningKey()
	require.NoError(t, err)
	iss, err := NewIssuer(k, nil)
	require.NoError(t, err)
	v, err := NewVerifier(VerifierConfig{Keys: []ed25519.PublicKey{k.Public().(ed25519.PublicKey)}})
	require.NoError(t, err)
	gen := uint64(3)
	revoked := func(ns string, g uint64) error {
		if g < gen {
			return zerr.ErrUnauthenticated
		}
		return nil
	}
	d, c, err := iss.DelegatePeerWrite("n1", "t", 3, []string{"n2/0/5"}, PeerGrantTTL)
	require.NoError(t, err)
	assert.True(t, c.Delegated)
	tok, _, err := iss.Issue(TokenRoleNamespace, "t", 3, time.Minute)
	require.NoError(t, err)
	compactor, err := iss.IssuePeerWrite("n1", "t", []string{"n2/0/5"}, PeerGrantTTL)
	require.NoError(t, err)
	cases := []struct {
		name, grant, caller, ns, zone string
		ok                            bool
	}{
		{"the tenant's grant, from the node it names", d, "n1", "t", "n2/0/5", true},
		{"the arbiter's compactor grant", compactor, "n1", "t", "n2/0/5", true},
		{"the tenant's grant, replayed by another node", d, "n3", "t", "n2/0/5", false},
		{"the tenant's grant, another zone", d, "n1", "t", "n2/0/6", false},
		{"the tenant's grant, another namespace", d, "n1", "u", "n2/0/5", false},
		{"the tenant's own token, forwarded by the node it called", tok, "n1", "t", "n2/0/5", false},
		{"the tenant's own token, replayed by another node", tok, "n3", "t", "n2/0/5", false},
	}
	for _, tc := range cases {
		err := CheckPeerWrite(v, revoked, tc.grant, tc.caller, tc.ns, tc.zone)
		if tc.ok {
			assert.NoError(t, err, tc.name)
			continue
		}
		assert.ErrorIs(t, err, zerr.ErrPermissionDenied, tc.name)
		assert.Equal(t, RefusedPeerNotAssigned, reasonOf(err), tc.name)
	}
	gen = 4 // the namespace's tokens were revoked
	assert.ErrorIs(t, CheckPeerWrite(v, revoked, d, "n1", "t", "n2/0/5"), zerr.ErrPermissionDenied, "revoked with the tenant's tokens")
	assert.NoError(t, CheckPeerWrite(v, revoked, compactor, "n1", "t", "n2/0/5"), "the arbiter's own grant follows no tenant generation")
	assert.ErrorIs(t, CheckPeerRead(v, d, "n1", "t", "n2/0/5"), zerr.ErrPermissionDenied, "a write grant reads nothing")
	_, _, err = iss.DelegatePeerWrite("n1", "t", 3, nil, PeerGrantTTL)
	assert.Error(t, err, "no zones")
}
