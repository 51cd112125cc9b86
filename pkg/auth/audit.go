package auth

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Refusal reasons: the reason label of zonefleet_auth_refusals_total. The
// set is fixed (bounded label values); a refusal is classified once, where
// it is decided.
const (
	RefusedPlaintext       = "plaintext"             // no TLS on a TLS-only server
	RefusedCertificate     = "certificate"           // client certificate failed verification
	RefusedNoCredentials   = "no_credentials"        // neither certificate nor bearer token
	RefusedMalformed       = "malformed_credentials" // bad authorization header, several values, oversized
	RefusedTokenInvalid    = "token_invalid"         // malformed, unknown key, bad signature
	RefusedTokenExpired    = "token_expired"         // expired or not yet valid
	RefusedTokenRevoked    = "token_revoked"         // older generation (revoked, namespace re-created)
	RefusedUnknownBearer   = "unknown_bearer"        // not a signed token and not the admin token
	RefusedNodeToken       = "node_token"            // node token on a TLS server
	RefusedNamespace       = "namespace_mismatch"    // namespace metadata or request names another namespace
	RefusedPolicy          = "policy"                // the method is not allowed to this kind of caller
	RefusedUnknownMethod   = "unknown_method"        // not in the policy
	RefusedPeerNotAssigned = "peer_not_assigned"     // a node's peer call outside an operation assigned to it
	RefusedRateLimited     = "rate_limited"          // too many calls of this kind from this caller
)

// refusal is a refused call's error with its reason label. It unwraps to
// the typed error (*zerr.UnauthenticatedError, *zerr.PermissionDeniedError,
// *TokenError) that goes on the wire through pkg/rpcerr.
type refusal struct {
	reason string
	err    error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

func refuse(reason string, err error) error { return &refusal{reason: reason, err: err} }

// reasonOf is the reason label of a refusal; "other" for an error nobody
// classified (kept so that the label set stays closed).
func reasonOf(err error) string {
	var r *refusal
	if errors.As(err, &r) {
		return r.reason
	}
	var te *TokenError
	if errors.As(err, &te) {
		switch te.Kind {
		case ErrTokenExpired, ErrTokenNotYetValid:
			return RefusedTokenExpired
		case ErrTokenRevoked:
			return RefusedTokenRevoked
		}
		return RefusedTokenInvalid
	}
	if errors.Is(err, zerr.ErrPermissionDenied) {
		return RefusedPolicy
	}
	return "other"
}

// audit counts refusals and logs them at WARN, at most logBurst lines at
// once and logRate a second after that; the lines it drops are counted and
// reported on the next line it writes, so a flood of bad calls neither
// floods the log nor hides itself.
type audit struct {
	refusals *prometheus.CounterVec
	log      *slog.Logger
	now      func() time.Time

	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed uint64
}

const (
	logRate  = 1.0 // refusal lines per second, sustained
	logBurst = 10.0
)

func newAudit(log *slog.Logger, now func() time.Time) *audit {
	return &audit{
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zonefleet_auth_refusals_total",
			Help: "Calls refused by authentication or authorization, by reason (a fixed set) and method (the policy's methods, else \"unknown\").",
		}, []string{"reason", "method"}),
		log: log, now: now, tokens: logBurst, last: now(),
	}
}

// refused records one refusal of method (already bounded) and logs it if
// the log budget allows.
func (a *audit) refused(method, fullMethod, stage string, err error) {
	reason := reasonOf(err)
	a.refusals.WithLabelValues(reason, method).Inc()
	a.mu.Lock()
	now := a.now()
	if dt := now.Sub(a.last).Seconds(); dt > 0 {
		a.tokens = min(logBurst, a.tokens+dt*logRate)
		a.last = now
	}
	if a.tokens < 1 {
		a.suppressed++
		a.mu.Unlock()
		return
	}
	a.tokens--
	dropped := a.suppressed
	a.suppressed = 0
	a.mu.Unlock()
	a.log.Warn("call refused", "method", fullMethod, "reason", reason, "stage", stage, "err", err, "suppressed_since_last", dropped)
}

// Describe implements prometheus.Collector.
func (a *Authenticator) Describe(ch chan<- *prometheus.Desc) { a.audit.refusals.Describe(ch) }

// Collect implements prometheus.Collector: the Authenticator is registered
// on its server's registry (zonefleet_auth_refusals_total).
func (a *Authenticator) Collect(ch chan<- prometheus.Metric) { a.audit.refusals.Collect(ch) }

// Refused records a refusal a handler decided itself (a node's admin-only
// options, a peer call outside an assigned operation): counted and logged
// like the interceptor's. method is the full gRPC method.
func (a *Authenticator) Refused(method, reason string, err error) error {
	m := method
	if _, ok := a.cfg.Policy[method]; !ok {
		m = "unknown"
	}
	err = refuse(reason, err)
	a.audit.refused(m, method, "handler", err)
	return statusOf(err)
}
