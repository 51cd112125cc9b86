package auth

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/zonefleet/zonefleet/pkg/auth/limit"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// NamespaceSecrets is what the arbiter keeps per namespace for token
// issuance (in the namespace record in etcd).
type NamespaceSecrets struct {
	CredentialHash [32]byte // CredentialHash of the namespace credential
	Generation     uint64   // token generation; bump to revoke all tokens
}

// LookupFunc returns a namespace's secrets, or a *zerr.NotFoundError.
type LookupFunc func(ctx context.Context, namespace string) (NamespaceSecrets, error)

// Exchanger is the arbiter's side of IssueToken: a tenant presents its
// namespace credential and gets a short-lived token. Failed attempts are
// rate-limited per namespace and in total (limit.Limiter), and an unknown
// namespace fails exactly like a wrong credential, so the call cannot be
// used to list namespaces.
type Exchanger struct {
	issuer   *Issuer
	lookup   LookupFunc
	ttl      time.Duration
	failures *limit.Limiter
}

// ErrTooManyFailures: too many failed exchanges for the namespace; retry later.
var ErrTooManyFailures = errors.New("too many failed token requests")

// ExchangerConfig configures an Exchanger.
type ExchangerConfig struct {
	Issuer *Issuer
	Lookup LookupFunc
	TTL    time.Duration // DefaultTokenTTL
	// Failures limits failed attempts (default: 1/s per namespace, burst 5;
	// 20/s in total).
	Failures limit.LimiterConfig
}

// NewExchanger returns an exchanger.
func NewExchanger(cfg ExchangerConfig) (*Exchanger, error) {
	if cfg.Issuer == nil || cfg.Lookup == nil {
		return nil, errors.New("auth: an exchanger needs an issuer and a namespace lookup")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTokenTTL
	}
	f := cfg.Failures
	if f.PerKeyRate == 0 {
		f.PerKeyRate, f.PerKeyBurst, f.GlobalRate, f.GlobalBurst = 1, 5, 20, 50
	}
	return &Exchanger{issuer: cfg.Issuer, lookup: cfg.Lookup, ttl: cfg.TTL, failures: limit.NewLimiter(f)}, nil
}

// Exchange checks credential for namespace and returns a token. Errors:
// *zerr.UnauthenticatedError (unknown namespace or wrong credential — the
// same message), an error matching ErrTooManyFailures and
// zerr.ErrUnauthenticated once the failure budget is spent, or the
// lookup's error if the store is unavailable.
func (x *Exchanger) Exchange(ctx context.Context, namespace, credential string) (string, Claims, error) {
	if err := ValidSubject(namespace); err != nil {
		return "", Claims{}, &zerr.InvalidArgumentError{Field: "namespace", Reason: err.Error()}
	}
	refused := func() (string, Claims, error) {
		if !x.failures.Allow(namespace) {
			return "", Claims{}, fmt.Errorf("%w: %w", ErrTooManyFailures, &zerr.UnauthenticatedError{Reason: "too many failed token requests for this namespace; retry later"})
		}
		return "", Claims{}, &zerr.UnauthenticatedError{Reason: "unknown namespace or wrong credential"}
	}
	if credential == "" {
		return refused()
	}
	sec, err := x.lookup(ctx, namespace)
	if errors.Is(err, zerr.ErrNotFound) {
		return refused()
	}
	if err != nil {
		return "", Claims{}, err
	}
	if !CredentialMatches(credential, sec.CredentialHash) {
		return refused()
	}
	return x.issuer.Issue(TokenRoleNamespace, namespace, sec.Generation, x.ttl)
}
