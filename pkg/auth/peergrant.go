package auth

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc/metadata"
)

// Operation grants. A node's certificate proves which node calls, not what
// that node was asked to do: with the certificate alone any node could
// PeerRead every tenant's zones on every other node. A raid5 leg rebuild
// therefore carries a grant the arbiter signs with the token-signing key
// when it assigns the rebuild: role TokenRolePeerRead, subject the node
// that rebuilds, the namespace, the zones it may read (node/device/zone),
// a lifetime of PeerGrantTTL. The arbiter sends it with RebuildParityLeg in
// the PeerGrantKey metadata; the rebuilding node forwards it on its PeerRead
// calls; the serving node checks it (CheckPeerRead) against the calling
// node's certificate, the request's namespace and zone. A grant is not a
// credential: the authenticator refuses it as a bearer token.

// PeerGrantKey is the metadata key of an operation grant.
const PeerGrantKey = "zonefleet-peer-grant"

// PeerGrantTTL is the lifetime of an operation grant: one leg rebuild.
const PeerGrantTTL = 15 * time.Minute

// MaxGrantZones bounds the zones of one grant (a raid5 group's survivors
// and partial-parity logs fit many times over; the token stays under
// MaxTokenLen).
const MaxGrantZones = 24

// IssuePeerRead signs a grant for node to PeerRead zones of namespace ns.
func (i *Issuer) IssuePeerRead(node, ns string, zones []string, ttl time.Duration) (string, error) {
	return i.issuePeer(TokenRolePeerRead, node, ns, zones, ttl)
}

// IssuePeerWrite signs a grant for node to PeerWrite into zones of
// namespace ns (the copies of a compaction the arbiter assigns).
func (i *Issuer) IssuePeerWrite(node, ns string, zones []string, ttl time.Duration) (string, error) {
	return i.issuePeer(TokenRolePeerWrite, node, ns, zones, ttl)
}

func (i *Issuer) issuePeer(role, node, ns string, zones []string, ttl time.Duration) (string, error) {
	if err := ValidSubject(node); err != nil {
		return "", fmt.Errorf("auth: grant node: %w", err)
	}
	if err := ValidSubject(ns); err != nil {
		return "", fmt.Errorf("auth: grant namespace: %w", err)
	}
	if len(zones) == 0 || len(zones) > MaxGrantZones {
		return "", fmt.Errorf("auth: grant of %d zones: want 1..%d", len(zones), MaxGrantZones)
	}
	tok, _, err := i.sign(wireClaims{Role: role, Sub: node, NS: ns, Zones: slices.Clone(zones)}, ttl)
	return tok, err
}

// WithPeerGrant attaches grant to an outgoing call.
func WithPeerGrant(ctx context.Context, grant string) context.Context {
	if grant == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, PeerGrantKey, grant)
}

// PeerGrantFrom is the grant an incoming call carries ("" if none).
func PeerGrantFrom(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(PeerGrantKey); len(v) == 1 {
		return v[0]
	}
	return ""
}

// CheckPeerRead decides a node's PeerRead: caller (the node its certificate
// names) may read zone (node/device/zone) of namespace ns only with a grant
// from v's keys naming exactly that. The refusal is a
// *zerr.PermissionDeniedError.
func CheckPeerRead(v *Verifier, grant, caller, ns, zone string) error {
	return checkPeer(v, nil, grant, caller, ns, zone, false)
}

// CheckPeerWrite decides one destination zone of a node's PeerWrite: with
// a peer-write grant naming caller, ns and zone (a compaction the arbiter
// assigned), or with the namespace's own token, forwarded by the caller
// from the tenant who asked it for the compaction (revoked generations
// refused through revoked, which may be nil).
func CheckPeerWrite(v *Verifier, revoked func(string, uint64) error, grant, caller, ns, zone string) error {
	return checkPeer(v, revoked, grant, caller, ns, zone, true)
}

func checkPeer(v *Verifier, revoked func(string, uint64) error, grant, caller, ns, zone string, write bool) error {
	method, role := "PeerRead", TokenRolePeerRead
	if write {
		method, role = "PeerWrite", TokenRolePeerWrite
	}
	deny := func(reason string) error {
		return refuse(RefusedPeerNotAssigned, &zerr.PermissionDeniedError{Identity: "node:" + caller, Method: method, Reason: reason})
	}
	if v == nil {
		return deny("this node verifies no operation grants")
	}
	if grant == "" {
		return deny("no operation grant: peer calls need the arbiter's signed grant (or, for a tenant's compaction, the tenant's token)")
	}
	c, err := v.Verify(grant)
	if err != nil {
		return deny("operation grant: " + err.Error())
	}
	if write && c.Role == TokenRoleNamespace {
		if c.Subject != ns {
			return deny("the forwarded token is namespace " + c.Subject + "'s")
		}
		if revoked != nil {
			if err := revoked(c.Subject, c.Generation); err != nil {
				return deny("the forwarded token: " + err.Error())
			}
		}
		return nil
	}
	switch {
	case c.Role != role:
		return deny("not a " + role + " grant")
	case c.Subject != caller:
		return deny("the grant is for node " + c.Subject)
	case c.Namespace != ns:
		return deny("the grant is for namespace " + c.Namespace)
	case !slices.Contains(c.Zones, zone):
		return deny("zone " + zone + " is not in the grant")
	}
	return nil
}

type bearerKey struct{}

// ForwardableToken is the namespace token a tenant's call was authenticated
// with ("" otherwise): a node forwards it as the authority of the PeerWrite
// calls of that tenant's compaction. Handlers never log it.
func ForwardableToken(ctx context.Context) string {
	s, _ := ctx.Value(bearerKey{}).(string)
	return s
}
