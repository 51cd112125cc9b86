package arbiter

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/auth/tokengen"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Token issuance and revocation. Any arbiter replica serves
// both: they touch no arbiter state, only the namespace record (read) and
// the namespace's token generation (tokengen, in etcd), so a tenant renews
// its token even while the leader changes.
//
// IssueToken: the policy lets the operator ask for any namespace and a
// tenant only for its own (NamespaceField). A tenant's renewal is refused
// when its presented token is of an older generation than the one etcd
// holds now (a linearizable read): the authenticator's check uses the
// watched table, which may lag a revocation by a watch delivery, and a
// renewal in that window must not carry a revoked token into the new
// generation. Lifetimes: the default (auth.DefaultTokenTTL) for tenants at
// most; the operator may ask up to auth.DefaultMaxTTL.
//
// RevokeTokens (admin): tokengen.Bump; nodes and arbiters refuse older
// tokens once their watch delivers the new generation.
//
// Issuance is rate-limited per caller identity (IssueRate a second, bursts
// of IssueBurst; IssueGlobalRate over all callers): a renewing client needs
// one token per 10 minutes, so the limit only stops a caller minting in a
// loop. Past it the answer is RESOURCE_EXHAUSTED. Every request is logged
// (issued at INFO, refused at WARN) and counted in
// zonefleet_arbiter_token_issuance_total{caller,outcome}.

// IssueToken rate limits.
const (
	IssueRate       = 1.0 // tokens a second per caller, sustained
	IssueBurst      = 10.0
	IssueGlobalRate = 50.0 // over all callers
	// PeerWrite grants (IssueToken with peer_write) have their own budget:
	// a tenant asks for one per compaction that copies across nodes (the
	// client reuses a grant while it covers the zones), more often than it
	// renews its token, and still cannot mint in a loop.
	GrantRate       = 20.0
	GrantBurst      = 100.0
	GrantGlobalRate = 500.0
)

// PeerWrite grants a tenant asks for (IssueToken with peer_write): the
// tenant names the node it asks for a compaction and the destination zones;
// the arbiter signs a peer-write grant for exactly that
// (auth.DelegatePeerWrite), carrying the namespace's token generation and
// valid auth.PeerGrantTTL. The tenant sends it with ZoneCompaction; the
// source node forwards it on PeerWrite and the destination accepts it from
// that node only, for those zones, until it expires or the namespace's
// tokens are revoked. So the tenant's own token, which every node it calls
// sees, is never an authority for one node to write into another: a node
// can use a grant only as the node it names and only for the zones the
// tenant named. The zones need not be checked here: the destination
// writes only zones granted to the namespace (its zone fencing).

// WithIssuer gives the server the token signing key (the arbiter's
// token-signing.key); without it IssueToken answers UNAVAILABLE.
func (s *Server) WithIssuer(iss *auth.Issuer) *Server {
	s.iss = iss
	return s
}

// IssueToken implements v1.ArbiterServer.
func (s *Server) IssueToken(ctx context.Context, req *v1.IssueTokenRequest) (*v1.IssueTokenResponse, error) {
	id, authed := auth.FromContext(ctx)
	caller, kind := "anonymous", "other"
	if authed {
		caller = id.String()
		switch {
		case id.IsAdmin():
			kind = "admin"
		case id.Kind == auth.KindNamespace:
			kind = "namespace"
		}
	}
	lim, what, rate, burst := s.issue, "token issuance", IssueRate, IssueBurst
	if req.GetPeerWrite() != nil {
		lim, what, rate, burst = s.grant, "PeerWrite grant", GrantRate, GrantBurst
	}
	if !lim.Allow(caller) {
		s.a.m.tokens.WithLabelValues(kind, "rate_limited").Inc()
		s.a.log.Warn(what+" refused: rate limited", "caller", caller, "namespace", req.GetNamespace())
		return nil, rpcerr.ToError(&zerr.NoResourcesError{Resource: fmt.Sprintf("%s budget of %s (%.0f a second, bursts of %.0f)", what, caller, rate, burst), Requested: 1})
	}
	resp, err := s.issueToken(ctx, req)
	if err != nil {
		s.a.m.tokens.WithLabelValues(kind, "refused").Inc()
		s.a.log.Warn("token issuance refused", "caller", caller, "namespace", req.GetNamespace(), "err", err)
		return nil, rpcerr.ToError(err)
	}
	s.a.m.tokens.WithLabelValues(kind, "issued").Inc()
	return resp, nil
}

func (s *Server) issueToken(ctx context.Context, req *v1.IssueTokenRequest) (*v1.IssueTokenResponse, error) {
	ns := req.GetNamespace()
	if err := auth.ValidSubject(ns); err != nil {
		return nil, &zerr.InvalidArgumentError{Field: "namespace", Reason: err.Error()}
	}
	if s.iss == nil {
		return nil, &zerr.UnavailableError{What: "token issuance", Reason: "this arbiter has no token signing key (token-signing.key)"}
	}
	id, authed := auth.FromContext(ctx)
	maxTTL := auth.DefaultTokenTTL
	if !authed || id.IsAdmin() {
		maxTTL = auth.DefaultMaxTTL
	}
	ttl := time.Duration(req.GetTtlSeconds()) * time.Second
	if ttl == 0 {
		ttl = auth.DefaultTokenTTL
	}
	if ttl > maxTTL {
		return nil, &zerr.InvalidArgumentError{Field: "ttl_seconds", Reason: fmt.Sprintf("%v exceeds the %v this caller may ask for", ttl, maxTTL)}
	}
	rec, err := s.a.cli.Get(ctx, cluster.NamespaceKey(ns))
	if err != nil {
		return nil, &zerr.UnavailableError{What: "etcd", Reason: err.Error()}
	}
	if len(rec.Kvs) == 0 {
		return nil, &zerr.NotFoundError{Kind: "namespace", Name: ns}
	}
	gen, _, err := tokengen.Current(ctx, s.a.cli, ns)
	if err != nil {
		return nil, err
	}
	if authed && id.Kind == auth.KindNamespace && id.Generation < gen {
		return nil, &zerr.UnauthenticatedError{Reason: fmt.Sprintf("token of generation %d was revoked (namespace %q is at generation %d)", id.Generation, ns, gen)}
	}
	if pw := req.GetPeerWrite(); pw != nil {
		return s.delegatePeerWrite(ns, gen, pw, id)
	}
	tok, c, err := s.iss.Issue(auth.TokenRoleNamespace, ns, gen, ttl)
	if err != nil {
		return nil, err
	}
	s.a.log.Info("issued a namespace token", "namespace", ns, "generation", gen, "expires", c.ExpiresAt, "caller", id.String())
	return &v1.IssueTokenResponse{Token: tok, Namespace: ns, Generation: gen, Expires: timestamppb.New(c.ExpiresAt)}, nil
}

func (s *Server) delegatePeerWrite(ns string, gen uint64, pw *v1.PeerWriteScope, id auth.Identity) (*v1.IssueTokenResponse, error) {
	if err := auth.ValidSubject(pw.GetSourceNode()); err != nil {
		return nil, &zerr.InvalidArgumentError{Field: "peer_write.source_node", Reason: err.Error()}
	}
	zones := pw.GetZones()
	if len(zones) == 0 || len(zones) > auth.MaxGrantZones {
		return nil, &zerr.InvalidArgumentError{Field: "peer_write.zones", Reason: fmt.Sprintf("%d zones: want 1 to %d", len(zones), auth.MaxGrantZones)}
	}
	for _, z := range zones {
		pz, err := cluster.ParsePhysZone(z)
		if err != nil {
			return nil, err
		}
		if pz.String() != z {
			return nil, &zerr.InvalidArgumentError{Field: "peer_write.zones", Reason: fmt.Sprintf("%q is not in the form %q", z, pz.String())}
		}
	}
	tok, c, err := s.iss.DelegatePeerWrite(pw.GetSourceNode(), ns, gen, zones, auth.PeerGrantTTL)
	if err != nil {
		return nil, &zerr.InvalidArgumentError{Field: "peer_write", Reason: err.Error()}
	}
	s.a.log.Debug("issued a PeerWrite grant", "namespace", ns, "node", pw.GetSourceNode(), "zones", len(zones), "caller", id.String())
	return &v1.IssueTokenResponse{Token: tok, Namespace: ns, Generation: gen, Expires: timestamppb.New(c.ExpiresAt)}, nil
}

// RevokeTokens implements v1.ArbiterServer.
func (s *Server) RevokeTokens(ctx context.Context, req *v1.RevokeTokensRequest) (*v1.RevokeTokensResponse, error) {
	ns := req.GetNamespace()
	if err := auth.ValidSubject(ns); err != nil {
		return nil, rpcerr.ToError(&zerr.InvalidArgumentError{Field: "namespace", Reason: err.Error()})
	}
	gen, err := tokengen.Bump(ctx, s.a.cli, ns)
	if err != nil {
		return nil, rpcerr.ToError(err)
	}
	s.a.log.Warn("revoked namespace tokens", "namespace", ns, "generation", gen)
	return &v1.RevokeTokensResponse{Generation: gen}, nil
}
