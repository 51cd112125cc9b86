package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/zonefleet/zonefleet/pkg/auth/limit"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Metadata keys.
const (
	// AuthorizationKey carries "Bearer <token>": a namespace or node token,
	// or the admin token.
	AuthorizationKey = "authorization"
	// NamespaceKey is wire.NamespaceKey: the namespace an admin, arbiter or
	// node acts for. From a tenant it must equal the token's namespace.
	NamespaceKey = "zonefleet-namespace"
	// legacyTokenKey is wire.TokenKey, the legacy admin token key. It is
	// stripped from every call so no handler can consult it any more.
	legacyTokenKey = "zonefleet-token"
	bearerPrefix   = "Bearer "
)

// Config configures an Authenticator.
type Config struct {
	// Roots verifies client certificates (the cluster CA). nil: certificates
	// prove nothing and admin, arbiter and node callers need tokens.
	Roots *x509.CertPool
	// AdminToken is the admin bearer secret. "" disables the admin token
	// (admin by certificate only); a non-empty one must pass CheckSecret.
	AdminToken string
	// Verifier checks namespace and node tokens. nil: no tokens accepted.
	Verifier *Verifier
	// Policy decides who may call what (DefaultPolicy()).
	Policy Policy
	// Insecure accepts calls over plaintext connections (explicit
	// --insecure only). Credentials are still required.
	Insecure bool
	// Revoked, if set, is asked about every namespace token after its
	// signature and times verified: the node compares the generation with
	// the namespace record it watches (deleted or rotated namespace).
	Revoked func(namespace string, generation uint64) error
	// Observe, if set, is told the outcome of every decision (for a
	// zonefleet_auth_* counter; method is bounded by the policy table,
	// unknown methods are reported as "unknown").
	Observe func(method string, code codes.Code)
	Now     func() time.Time
	Logger  *slog.Logger
}

// Authenticator authenticates and authorizes every call of a gRPC server.
type Authenticator struct {
	cfg       Config
	adminHash [32]byte
	hasAdmin  bool
	// verified remembers client chains that verified (by the SHA-256 of the
	// chain, until the earliest NotAfter), so calls on a connection pay a
	// hash, not an x509 verification. Sharded: no single lock on the data path.
	verified [cacheShards]*limit.LRU[[32]byte, pki.Role]
	audit    *audit
	// observers are told every decision besides cfg.Observe (OnDecision);
	// copy on write, read without a lock on every call.
	observers atomic.Pointer[[]func(method string, code codes.Code)]
}

// OnDecision adds f to the functions told the outcome of every decision,
// like Config.Observe (method bounded by the policy: an API method or
// "unknown"). A refusal never reaches the server's interceptors or
// handlers, so this is how the server that installs the authenticator
// counts refusals with its other requests. Safe to call at any time.
func (a *Authenticator) OnDecision(f func(method string, code codes.Code)) {
	for {
		old := a.observers.Load()
		var next []func(string, codes.Code)
		if old != nil {
			next = append(next, *old...)
		}
		next = append(next, f)
		if a.observers.CompareAndSwap(old, &next) {
			return
		}
	}
}

func (a *Authenticator) observe(method string, code codes.Code) {
	if a.cfg.Observe != nil {
		a.cfg.Observe(method, code)
	}
	if fs := a.observers.Load(); fs != nil {
		for _, f := range *fs {
			f(method, code)
		}
	}
}

// New validates cfg and returns an authenticator. It refuses a weak admin
// token and a configuration under which no one could authenticate.
func New(cfg Config) (*Authenticator, error) {
	if cfg.Policy == nil {
		cfg.Policy = DefaultPolicy()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &Authenticator{cfg: cfg, audit: newAudit(cfg.Logger, cfg.Now)}
	for i := range a.verified {
		a.verified[i] = limit.NewLRU[[32]byte, pki.Role](256, cfg.Now)
	}
	if cfg.AdminToken != "" {
		if err := CheckSecret(cfg.AdminToken); err != nil {
			return nil, fmt.Errorf("admin token: %w", err)
		}
		a.adminHash, a.hasAdmin = sha256.Sum256([]byte(cfg.AdminToken)), true
	}
	if cfg.Roots == nil && !a.hasAdmin && cfg.Verifier == nil {
		return nil, errors.New("auth: no CA, no admin token and no token verifier: no caller could authenticate")
	}
	return a, nil
}

// localUnix says whether the call came over a unix socket served with
// gRPC's local credentials (daemon.Config.UnixSocket): a connection between
// two processes of this host that only the socket file's owner could open.
// It is a secure transport, but carries no certificate: the caller is
// whoever its token says.
func localUnix(p *peer.Peer) bool {
	return p != nil && p.Addr != nil && p.Addr.Network() == "unix" &&
		p.AuthInfo != nil && p.AuthInfo.AuthType() == "local"
}

func unauth(format string, a ...any) error {
	return &zerr.UnauthenticatedError{Reason: fmt.Sprintf(format, a...)}
}

// Authenticate decides one call. It returns the context the handler must
// run with (carrying the Identity, with the namespace metadata replaced by
// the verified one) or an error for statusOf.
func (a *Authenticator) Authenticate(ctx context.Context, method string, req any) (context.Context, error) {
	return a.authenticate(ctx, method, req, false)
}

// authenticate is Authenticate; early (the tap handle: the request is not
// read yet) skips the check of the request's namespace field, which the
// interceptor makes once the request is there.
func (a *Authenticator) authenticate(ctx context.Context, method string, req any, early bool) (context.Context, error) {
	rule, known := a.cfg.Policy[method]
	if known && rule.Public {
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	md = md.Copy()

	// 1. Transport.
	var chain []*x509.Certificate
	p, _ := peer.FromContext(ctx)
	tlsInfo, isTLS := credentials.TLSInfo{}, false
	if p != nil {
		tlsInfo, isTLS = p.AuthInfo.(credentials.TLSInfo)
	}
	if !isTLS && !a.cfg.Insecure && !localUnix(p) {
		return ctx, refuse(RefusedPlaintext, unauth("plaintext connection refused: this server requires TLS"))
	}
	if isTLS {
		chain = tlsInfo.State.PeerCertificates
	}

	// 2. Who: certificate, then bearer token (a token wins: an arbiter
	// process holding a tenant token calls as that tenant).
	var id Identity
	var have bool
	if len(chain) > 0 {
		role, err := a.verifyChain(chain)
		if err != nil {
			return ctx, refuse(RefusedCertificate, unauth("client certificate refused: %v", err))
		}
		id, have = identityOfRole(role), true
	}
	auths := md.Get(AuthorizationKey)
	if len(auths) > 1 {
		return ctx, refuse(RefusedMalformed, unauth("more than one %s value", AuthorizationKey))
	}
	if len(auths) == 1 {
		tid, err := a.fromBearer(auths[0])
		if err != nil {
			return ctx, err
		}
		id, have = tid, true
	}
	if !have {
		return ctx, refuse(RefusedNoCredentials, unauth("no credentials: present a client certificate or a bearer token"))
	}

	// 3. For which namespace.
	nss := md.Get(NamespaceKey)
	if len(nss) > 1 {
		return ctx, refuse(RefusedMalformed, &PermissionDeniedError{Identity: id.String(), Method: method, Reason: "more than one " + NamespaceKey + " value"})
	}
	claimed := ""
	if len(nss) == 1 {
		claimed = nss[0]
	}
	switch id.Kind {
	case KindNamespace:
		if claimed != "" && claimed != id.Name {
			return ctx, refuse(RefusedNamespace, &PermissionDeniedError{Identity: id.String(), Method: method, Reason: "namespace metadata does not match the token"})
		}
		id.Namespace = id.Name
	default:
		if claimed != "" {
			if err := ValidSubject(claimed); err != nil {
				return ctx, refuse(RefusedMalformed, &PermissionDeniedError{Identity: id.String(), Method: method, Reason: "namespace metadata " + err.Error()})
			}
		}
		id.Namespace = claimed
	}

	// 4. May it call this method, for this namespace. (A method the policy
	// does not list passes the early screen of a caller with credentials:
	// grpc answers UNIMPLEMENTED when no handler has it, without reading
	// the request, and the interceptor denies a registered one.)
	if early && !known {
		return ctx, nil
	}
	if _, ok := a.cfg.Policy.allows(method, id.Kind); !ok {
		reason, label := "not allowed by policy", RefusedPolicy
		if !known {
			reason, label = "unknown method", RefusedUnknownMethod
		}
		return ctx, refuse(label, &PermissionDeniedError{Identity: id.String(), Method: method, Reason: reason})
	}
	if early {
		return ctx, nil
	}
	if rule.NamespaceField != "" && !id.IsAdmin() {
		target, err := stringField(req, rule.NamespaceField)
		if err != nil {
			return ctx, refuse(RefusedMalformed, &PermissionDeniedError{Identity: id.String(), Method: method, Reason: err.Error()})
		}
		if target != id.Namespace {
			return ctx, refuse(RefusedNamespace, &PermissionDeniedError{Identity: id.String(), Method: method, Reason: "request is about another namespace"})
		}
	}

	// 5. Handlers see only verified values.
	md.Delete(AuthorizationKey)
	md.Delete(legacyTokenKey)
	if id.Namespace != "" {
		md.Set(NamespaceKey, id.Namespace)
	} else {
		md.Delete(NamespaceKey)
	}
	ctx = metadata.NewIncomingContext(ctx, md)
	return NewContext(ctx, id), nil
}

func (a *Authenticator) verifyChain(chain []*x509.Certificate) (pki.Role, error) {
	h := sha256.New()
	notAfter := chain[0].NotAfter
	for _, c := range chain {
		h.Write(c.Raw)
		if c.NotAfter.Before(notAfter) {
			notAfter = c.NotAfter
		}
	}
	var key [32]byte
	h.Sum(key[:0])
	shard := a.verified[key[0]%cacheShards]
	if r, ok := shard.Get(key); ok {
		return r, nil
	}
	r, err := pki.VerifyClient(chain, a.cfg.Roots, a.cfg.Now())
	if err != nil {
		return pki.Role{}, err
	}
	shard.PutUntil(key, r, notAfter)
	return r, nil
}

func identityOfRole(r pki.Role) Identity {
	switch r.Kind {
	case pki.RoleAdmin:
		return Identity{Kind: KindAdmin, Via: "cert"}
	case pki.RoleArbiter:
		return Identity{Kind: KindArbiter, Via: "cert"}
	case pki.RoleNode:
		return Identity{Kind: KindNode, Name: r.Name, Via: "cert"}
	}
	// etcd certificates authenticate etcd, not gRPC callers: a kind no
	// policy entry lists.
	return Identity{Kind: Kind("component:" + string(r.Kind)), Via: "cert"}
}

func (a *Authenticator) fromBearer(v string) (Identity, error) {
	tok, ok := strings.CutPrefix(v, bearerPrefix)
	if !ok || tok == "" {
		return Identity{}, refuse(RefusedMalformed, unauth("%s must be %q followed by a token", AuthorizationKey, bearerPrefix))
	}
	if len(tok) > MaxTokenLen {
		return Identity{}, refuse(RefusedMalformed, unauth("token longer than %d bytes", MaxTokenLen))
	}
	if strings.HasPrefix(tok, TokenPrefix) {
		if a.cfg.Verifier == nil {
			return Identity{}, refuse(RefusedTokenInvalid, unauth("this server accepts no signed tokens"))
		}
		c, err := a.cfg.Verifier.Verify(tok)
		if err != nil {
			return Identity{}, refuse(reasonOf(err), unauth("%v", err))
		}
		if c.Role == TokenRolePeerRead || c.Role == TokenRolePeerWrite {
			return Identity{}, refuse(RefusedMalformed, unauth("an operation grant is not a credential"))
		}
		if c.Role == TokenRoleNode {
			if !a.cfg.Insecure {
				return Identity{}, refuse(RefusedNodeToken, unauth("node tokens are accepted only on --insecure clusters; nodes use certificates"))
			}
			return Identity{Kind: KindNode, Name: c.Subject, Via: "token"}, nil
		}
		if a.cfg.Revoked != nil {
			if err := a.cfg.Revoked(c.Subject, c.Generation); err != nil {
				return Identity{}, refuse(RefusedTokenRevoked, unauth("%v", &TokenError{Kind: ErrTokenRevoked, Reason: err.Error()}))
			}
		}
		return Identity{Kind: KindNamespace, Name: c.Subject, Generation: c.Generation, Via: "token"}, nil
	}
	if a.hasAdmin {
		h := sha256.Sum256([]byte(tok))
		if subtle.ConstantTimeCompare(h[:], a.adminHash[:]) == 1 {
			return Identity{Kind: KindAdmin, Via: "token"}, nil
		}
	}
	return Identity{}, refuse(RefusedUnknownBearer, unauth("unknown bearer token"))
}

func stringField(req any, name string) (string, error) {
	m, ok := req.(proto.Message)
	if !ok || m == nil {
		return "", errors.New("request is not a protobuf message")
	}
	r := m.ProtoReflect()
	fd := r.Descriptor().Fields().ByName(protoreflect.Name(name))
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
		return "", fmt.Errorf("request has no string field %q", name)
	}
	return r.Get(fd).String(), nil
}

func (a *Authenticator) decide(ctx context.Context, method string, req any) (context.Context, error) {
	nctx, err := a.Authenticate(ctx, method, req)
	m := a.methodLabel(method)
	code := codes.OK
	if err != nil {
		code = status.Code(statusOf(err))
	}
	a.observe(m, code)
	if err != nil {
		a.audit.refused(m, method, "call", err)
		return ctx, statusOf(err)
	}
	return nctx, nil
}

// methodLabel bounds the method label: the policy's methods, else "unknown".
func (a *Authenticator) methodLabel(method string) string {
	if _, ok := a.cfg.Policy[method]; ok {
		return method
	}
	return "unknown"
}

// UnaryServerInterceptor authenticates and authorizes unary calls.
func (a *Authenticator) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ctx, err := a.decide(ctx, info.FullMethod, req)
		if err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

// StreamServerInterceptor authenticates and authorizes streams (before the
// first message; NamespaceField rules need a unary request and are not used
// for streaming methods).
func (a *Authenticator) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		ctx, err := a.decide(ss.Context(), info.FullMethod, nil)
		if err != nil {
			return err
		}
		return h(srv, &ctxStream{ServerStream: ss, ctx: ctx})
	}
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }

// TapHandle screens a call as soon as its headers arrive, before the server
// reads a byte of its request: a caller without valid credentials, or one
// whose role may not call the method at all, is answered at once
// (Unauthenticated, PermissionDenied) and its payload is never buffered.
// Without it grpc reads a whole unary request (up to the server's message
// limit) before the interceptor runs, so anyone able to open a TLS
// connection could make a server hold that much per stream, on as many
// streams as it liked. The interceptors still decide every call (the
// request's namespace field needs the request).
func (a *Authenticator) TapHandle() tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if _, err := a.authenticate(ctx, info.FullMethodName, nil, true); err != nil {
			m := a.methodLabel(info.FullMethodName)
			a.observe(m, status.Code(statusOf(err)))
			a.audit.refused(m, info.FullMethodName, "headers", err)
			return ctx, statusOf(err)
		}
		return ctx, nil
	}
}

// ServerOptions installs the tap handle and the interceptors. Put them before pkg/rpcerr's
// (the first chained interceptor runs outermost).
func (a *Authenticator) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InTapHandle(a.TapHandle()),
		grpc.ChainUnaryInterceptor(a.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(a.StreamServerInterceptor()),
	}
}
