package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// IssueToken asks the arbiter for a signed namespace token:
// the operator for any namespace, a tenant for its own (a renewal). ttl 0
// is the arbiter's default (15 minutes).
func (c *Client) IssueToken(ctx context.Context, namespace string, ttl time.Duration) (*v1.IssueTokenResponse, error) {
	return arbiterCall(ctx, c, "issue token", func(ctx context.Context, a v1.ArbiterClient) (*v1.IssueTokenResponse, error) {
		return a.IssueToken(ctx, &v1.IssueTokenRequest{Namespace: namespace, TtlSeconds: uint32(ttl / time.Second)})
	})
}

// RevokeTokens bumps a namespace's token generation (admin only): tokens
// issued before are refused once nodes and arbiters see the new generation.
func (c *Client) RevokeTokens(ctx context.Context, namespace string) (uint64, error) {
	r, err := arbiterCall(ctx, c, "revoke tokens", func(ctx context.Context, a v1.ArbiterClient) (*v1.RevokeTokensResponse, error) {
		return a.RevokeTokens(ctx, &v1.RevokeTokensRequest{Namespace: namespace})
	})
	return r.GetGeneration(), err
}

// Token renewal. A tenant's namespace token is short-lived
// (auth.DefaultTokenTTL, 15 minutes, from `zctl token issue`); a mount or
// any long-running program must not stop at its expiry. New wraps
// Config.Credentials in a renewingSource:
//
//   - Every outgoing call (arbiter and nodes, through the per-RPC
//     credentials of every connection) takes the token from it.
//   - A background loop (one per Client, ended by Close) renews the current
//     token through Arbiter.IssueToken, presenting that token, when two
//     thirds of its lifetime have passed minus a random jitter of up to a
//     tenth of the lifetime (so the mounts of a tenant do not renew in
//     step). It asks for the same lifetime (at most auth.DefaultTokenTTL, a
//     tenant's limit). A failure is retried with jittered exponential
//     backoff (from 1 s, at most a tenth of the lifetime) until the token
//     expires; every failure is logged (WARN, without the token) and
//     counted in zonefleet_client_token_renewals_total{outcome="error"}.
//   - A definitive refusal — UNAUTHENTICATED (the namespace's tokens were
//     revoked: zctl token revoke), PERMISSION_DENIED or NOT_FOUND (the
//     namespace was deleted) — stops the renewal of that token (ERROR log,
//     outcome="refused") and calls fail at once with UNAUTHENTICATED naming
//     the cause and the way out, instead of sending a token the servers
//     refuse.
//   - The wrapped source is asked on every call (auth.FileToken stats its
//     file at most every 5 s and re-reads it when it changed): a token that
//     differs from the last one it gave — the operator rotated the file,
//     perhaps after a revocation — replaces the renewed one and renewal
//     starts over from it.
//   - A token that is not a namespace token (the admin token, a token this
//     version cannot parse) is passed through unchanged and never renewed.
//   - After expiry (plus auth.DefaultSkew, what servers tolerate) with no
//     renewal, calls fail locally with UNAUTHENTICATED and the last renewal
//     error.
//
// Times are wall-clock: a token's iat/exp are the arbiter's Unix seconds,
// not modelled device time, so the loop waits on wall-time timers (now and
// after are replaceable in tests), not on Config.Clock. No lock is held
// across the IssueToken call.

// renewalRetryMin is the first retry delay after a failed renewal.
const renewalRetryMin = time.Second

type renewingSource struct {
	base  auth.TokenSource
	issue func(ctx context.Context, ns string, ttl time.Duration) (string, error)
	log   *slog.Logger
	count *prometheus.CounterVec
	now   func() time.Time
	after func(time.Duration) <-chan time.Time
	wake  chan struct{} // the token in use changed (buffer 1)

	mu      sync.Mutex
	baseTok string      // the last token base gave
	tok     string      // the token in use
	claims  auth.Claims // of tok; valid when renew
	renew   bool        // tok is a namespace token this source renews
	refused error       // the arbiter refused to renew tok: definitive
	lastErr error       // the last renewal failure
}

func renewalCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	cv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "zonefleet_client_token_renewals_total",
		Help: "Renewals of the client's namespace token through the arbiter, by outcome (ok, error, refused)."}, []string{"outcome"})
	if reg == nil {
		return cv
	}
	if err := reg.Register(cv); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if old, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return old
			}
		}
	}
	return cv
}

// renewCredentials wraps the tenant's token source (client.New). A direct
// client has no arbiter and keeps its source as is.
func (c *Client) renewCredentials(src auth.TokenSource) auth.TokenSource {
	if src == nil || c.direct {
		return src
	}
	r := &renewingSource{
		base: src,
		issue: func(ctx context.Context, ns string, ttl time.Duration) (string, error) {
			resp, err := c.IssueToken(ctx, ns, ttl)
			return resp.GetToken(), err
		},
		log:   c.log,
		count: renewalCounter(c.cfg.Registerer),
		now:   time.Now,
		after: time.After,
		wake:  make(chan struct{}, 1),
	}
	go r.run(c.bg)
	return r
}

// Token implements auth.TokenSource.
func (r *renewingSource) Token(ctx context.Context) (string, error) {
	b, berr := r.base.Token(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if berr == nil && b != r.baseTok {
		r.adoptLocked(b)
	}
	if r.tok == "" {
		if berr == nil {
			berr = errors.New("empty token")
		}
		return "", unauthenticated("namespace token: " + berr.Error())
	}
	if r.refused != nil {
		return "", unauthenticated(fmt.Sprintf(
			"the namespace token of %q can no longer be renewed: the arbiter refused: %v; give the client a new token (zctl token issue %s --file FILE --force)",
			r.claims.Subject, r.refused, r.claims.Subject))
	}
	if r.renew && !r.now().Before(r.claims.ExpiresAt.Add(auth.DefaultSkew)) {
		why := "no renewal succeeded"
		if r.lastErr != nil {
			why = "the last renewal failed: " + r.lastErr.Error()
		}
		return "", unauthenticated(fmt.Sprintf("the namespace token of %q expired at %s and %s",
			r.claims.Subject, r.claims.ExpiresAt.Format(time.RFC3339), why))
	}
	return r.tok, nil
}

// adoptLocked makes a new token from base the one in use.
func (r *renewingSource) adoptLocked(tok string) {
	r.baseTok, r.tok, r.refused, r.lastErr = tok, tok, nil, nil
	cl, err := auth.PeekClaims(tok)
	r.renew = err == nil && cl.Role == auth.TokenRoleNamespace
	r.claims = cl
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// state is what the loop needs: the token in use, its claims, whether it is
// to be renewed.
func (r *renewingSource) state() (string, auth.Claims, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tok, r.claims, r.renew && r.refused == nil
}

// run renews until ctx ends.
func (r *renewingSource) run(ctx context.Context) {
	var (
		lastTok     string
		at          time.Time     // next renewal attempt of lastTok
		backoff     time.Duration // after a failed attempt
		watchPeriod = 5 * time.Second
	)
	for ctx.Err() == nil {
		// Ask base first: a rotated file is adopted before deciding.
		_, _ = r.Token(ctx)
		tok, cl, renew := r.state()
		if tok != lastTok {
			lastTok, backoff = tok, 0
			life := cl.ExpiresAt.Sub(cl.IssuedAt)
			at = cl.IssuedAt.Add(life * 2 / 3).Add(-time.Duration(rand.Int64N(int64(life/10) + 1)))
		}
		wait := watchPeriod
		if renew {
			if d := at.Sub(r.now()); d <= 0 {
				backoff = r.renewOnce(ctx, tok, cl, backoff)
				if backoff > 0 {
					at = r.now().Add(backoff)
				}
				continue
			} else if d < wait {
				wait = d
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-r.after(wait):
		}
	}
}

// renewOnce asks the arbiter for a new token and returns the next retry
// delay (0: renewed, or refused for good).
func (r *renewingSource) renewOnce(ctx context.Context, tok string, cl auth.Claims, retry time.Duration) time.Duration {
	life := cl.ExpiresAt.Sub(cl.IssuedAt)
	ttl := min(life, auth.DefaultTokenTTL)
	if ttl < time.Second {
		ttl = time.Second
	}
	fresh, err := r.issue(ctx, cl.Subject, ttl)
	var ncl auth.Claims
	if err == nil {
		ncl, err = auth.PeekClaims(fresh)
		if err == nil && (ncl.Role != auth.TokenRoleNamespace || ncl.Subject != cl.Subject || !ncl.ExpiresAt.After(r.now())) {
			err = fmt.Errorf("the arbiter returned a token for %s %q expiring %s", ncl.Role, ncl.Subject, ncl.ExpiresAt.Format(time.RFC3339))
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tok != tok {
		return 0 // base gave a new token meanwhile: it wins
	}
	if err == nil {
		r.tok, r.claims, r.lastErr = fresh, ncl, nil
		r.count.WithLabelValues("ok").Inc()
		r.log.Debug("renewed the namespace token", "namespace", ncl.Subject, "generation", ncl.Generation, "expires", ncl.ExpiresAt)
		return 0
	}
	if ctx.Err() != nil {
		return 0
	}
	r.lastErr = err
	if errors.Is(err, zerr.ErrUnauthenticated) || errors.Is(err, zerr.ErrNotFound) || errors.Is(err, zerr.ErrPermissionDenied) ||
		status.Code(err) == codes.PermissionDenied || status.Code(err) == codes.Unauthenticated {
		r.refused = err
		r.count.WithLabelValues("refused").Inc()
		r.log.Error("the arbiter refused to renew the namespace token; calls fail until a new token is given",
			"namespace", cl.Subject, "generation", cl.Generation, "expires", cl.ExpiresAt, "err", err)
		return 0
	}
	r.count.WithLabelValues("error").Inc()
	next := max(renewalRetryMin, min(2*retry, life/10))
	next += time.Duration(rand.Int64N(int64(next/5) + 1))
	r.log.Warn("namespace token renewal failed; retrying", "namespace", cl.Subject, "expires", cl.ExpiresAt, "retry_in", next, "err", err)
	return next
}

// unauthenticated is the error of a token the client cannot present: a typed
// zerr error as a status (gRPC takes a per-RPC credential's error as the
// call's status), so the caller's rpcerr.FromError gives it back typed.
func unauthenticated(reason string) error {
	return rpcerr.ToError(&zerr.UnauthenticatedError{Reason: reason})
}
