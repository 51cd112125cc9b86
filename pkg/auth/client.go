package auth

import (
	"context"
	"crypto/tls"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// TokenSource gives the bearer token for the next call.
type TokenSource interface {
	Token(ctx context.Context) (string, error)
}

// StaticToken is a fixed token (the admin token, or a token minted offline).
type StaticToken string

// Token implements TokenSource.
func (s StaticToken) Token(context.Context) (string, error) {
	if s == "" {
		return "", errors.New("auth: empty token")
	}
	return string(s), nil
}

// FetchFunc obtains a new token and its expiry (for a tenant: the arbiter's
// token exchange with the namespace credential).
type FetchFunc func(ctx context.Context) (token string, expires time.Time, err error)

// RefreshingSource caches a fetched token and refreshes it when two thirds
// of its lifetime have passed. A call that finds the token still valid never
// waits: if a refresh is due it starts one in the background (at most one at
// a time) and returns the current token. Only a caller without any valid
// token waits for the fetch. No lock is held while fetching.
type RefreshingSource struct {
	fetch FetchFunc
	now   func() time.Time

	mu       sync.Mutex
	tok      string
	issued   time.Time
	expires  time.Time
	inflight chan struct{} // closed when the running fetch ends
	lastErr  error
}

// NewRefreshingSource returns a source over fetch. now may be nil.
func NewRefreshingSource(fetch FetchFunc, now func() time.Time) *RefreshingSource {
	if now == nil {
		now = time.Now
	}
	return &RefreshingSource{fetch: fetch, now: now}
}

// Token implements TokenSource.
func (r *RefreshingSource) Token(ctx context.Context) (string, error) {
	for {
		r.mu.Lock()
		now := r.now()
		valid := r.tok != "" && now.Before(r.expires)
		due := !valid || !now.Before(r.issued.Add(r.expires.Sub(r.issued)*2/3))
		if due && r.inflight == nil {
			r.inflight = make(chan struct{})
			go r.refresh(context.WithoutCancel(ctx), r.inflight)
		}
		tok, wait, lastErr := r.tok, r.inflight, r.lastErr
		r.mu.Unlock()
		if valid {
			return tok, nil
		}
		select {
		case <-wait:
			r.mu.Lock()
			ok := r.tok != "" && r.now().Before(r.expires)
			tok, lastErr = r.tok, r.lastErr
			r.mu.Unlock()
			if ok {
				return tok, nil
			}
			if lastErr != nil {
				return "", lastErr
			}
		case <-ctx.Done():
			if lastErr != nil {
				return "", lastErr
			}
			return "", ctx.Err()
		}
	}
}

func (r *RefreshingSource) refresh(ctx context.Context, done chan struct{}) {
	start := r.now()
	tok, exp, err := r.fetch(ctx)
	r.mu.Lock()
	if err == nil && tok != "" && exp.After(start) {
		r.tok, r.issued, r.expires, r.lastErr = tok, start, exp, nil
	} else if err == nil {
		r.lastErr = errors.New("auth: token fetch returned an empty or expired token")
	} else {
		r.lastErr = err
	}
	r.inflight = nil
	r.mu.Unlock()
	close(done)
}

// PerRPC returns call credentials that put "authorization: Bearer <token>"
// on every call. They require transport security, so grpc refuses to send
// the token over plaintext unless allowInsecure (explicit --insecure).
func PerRPC(src TokenSource, allowInsecure bool) credentials.PerRPCCredentials {
	return &perRPC{src: src, secure: !allowInsecure}
}

type perRPC struct {
	src    TokenSource
	secure bool
}

func (p *perRPC) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	if p.secure {
		if ri, ok := credentials.RequestInfoFromContext(ctx); ok {
			if err := credentials.CheckSecurityLevel(ri.AuthInfo, credentials.PrivacyAndIntegrity); err != nil {
				return nil, err
			}
		}
	}
	tok, err := p.src.Token(ctx)
	if err != nil {
		return nil, err
	}
	return map[string]string{AuthorizationKey: bearerPrefix + tok}, nil
}

func (p *perRPC) RequireTransportSecurity() bool { return p.secure }

// DialOptions returns the transport and call credentials of a client:
// TLS with tlsConf (nil means plaintext and must come with allowInsecure),
// plus a bearer token from src if src is not nil.
func DialOptions(tlsConf *tls.Config, src TokenSource, allowInsecure bool) ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	switch {
	case tlsConf != nil:
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(tlsConf)))
	case allowInsecure:
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	default:
		return nil, errors.New("auth: no TLS configuration; plaintext needs an explicit --insecure")
	}
	if src != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(PerRPC(src, allowInsecure)))
	}
	return opts, nil
}
