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

// DelegatePeerWrite signs the grant a tenant of namespace ns asks for
// (Arbiter.IssueToken with a PeerWrite scope) before a compaction it asks
// node to run: node may PeerWrite into zones of ns, for ttl, while the
// namespace's token generation stays gen. Unlike the tenant's own token,
// which every node the tenant calls sees, the grant names the one node it
// was given to and the zones the tenant named: a node cannot reuse a
// tenant's token it saw to write the tenant's zones elsewhere.
func (i *Issuer) DelegatePeerWrite(node, ns string, gen uint64, zones []string, ttl time.Duration) (string, Claims, error) {
	if err := checkGrantScope(node, ns, zones); err != nil {
		return "", Claims{}, err
	}
	return i.sign(wireClaims{Role: TokenRolePeerWrite, Sub: node, NS: ns, Gen: gen, Zones: slices.Clone(zones), Dlg: true}, ttl)
}

func checkGrantScope(node, ns string, zones []string) error {
	if err := ValidSubject(node); err != nil {
		return fmt.Errorf("auth: grant node: %w", err)
	}
	if err := ValidSubject(ns); err != nil {
		return fmt.Errorf("auth: grant namespace: %w", err)
	}
	if len(zones) == 0 || len(zones) > MaxGrantZones {
		return fmt.Errorf("auth: grant of %d zones: want 1..%d", len(zones), MaxGrantZones)
	}
	return nil
}

func (i *Issuer) issuePeer(role, node, ns string, zones []string, ttl time.Duration) (string, error) {
	if err := checkGrantScope(node, ns, zones); err != nil {
		return "", err
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

// CheckPeerWrite decides one destination zone of a node's PeerWrite: only
// with a peer-write grant naming caller, ns and zone — one the arbiter's
// compactor signed for a copy it assigned, or one a tenant asked the
// arbiter for (DelegatePeerWrite), refused through revoked (may be nil)
// once the namespace's tokens were revoked. A namespace token is no
// authority here: every node a tenant calls sees it.
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
	if c.Role == TokenRoleNamespace {
		return deny("a namespace token is not an operation grant: the tenant asks the arbiter for a grant naming the node that pushes the copies (IssueToken with peer_write)")
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
	if c.Delegated && revoked != nil {
		if err := revoked(c.Namespace, c.Generation); err != nil {
			return deny("the tenant's grant: " + err.Error())
		}
	}
	return nil
}
