package auth

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"
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

// FileToken is a TokenSource that reads a token file (the way Kubernetes
// projected service-account tokens work): an operator or an agent rotates
// the file (`zctl token issue --file`, `zctl cert token`) and the source
// picks up the new token without a restart. It stats the file at most once
// per interval and re-reads it only when it changed (another inode — the
// atomic rename of a rotation —, size or modification time), so a
// long-running FUSE mount follows rotations within one interval. A file
// others can access is refused.
type FileToken struct {
	path     string
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex
	tok     string
	readAt  time.Time
	st      os.FileInfo // of the file tok was read from
	lastErr error
}

// NewFileToken returns a source over path (interval <= 0: 5s; now may be nil).
func NewFileToken(path string, interval time.Duration, now func() time.Time) *FileToken {
	if interval <= 0 {
		interval = 5 * time.Second
	}
	if now == nil {
		now = time.Now
	}
	return &FileToken{path: path, interval: interval, now: now}
}

// Path is the token file.
func (f *FileToken) Path() string { return f.path }

// Token implements TokenSource. A failed re-read keeps serving the last
// token read; only a source that never read one returns the error.
func (f *FileToken) Token(context.Context) (string, error) {
	f.mu.Lock()
	due := f.tok == "" || f.now().Sub(f.readAt) >= f.interval
	tok, prev := f.tok, f.st
	if due {
		f.readAt = f.now()
	}
	f.mu.Unlock()
	if !due {
		return tok, nil
	}
	// File I/O outside the lock.
	if st, err := os.Stat(f.path); err == nil && prev != nil && tok != "" && os.SameFile(st, prev) &&
		st.Size() == prev.Size() && st.ModTime().Equal(prev.ModTime()) && st.Mode() == prev.Mode() {
		return tok, nil // unchanged
	}
	fresh, st, err := readTokenFileStat(f.path)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.lastErr = err
		if f.tok == "" {
			return "", err
		}
		return f.tok, nil
	}
	f.tok, f.st, f.lastErr = fresh, st, nil
	return fresh, nil
}

func readTokenFile(path string) (string, error) {
	tok, _, err := readTokenFileStat(path)
	return tok, err
}

func readTokenFileStat(path string) (string, os.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", nil, err
	}
	if st.Mode().Perm()&0o007 != 0 {
		return "", nil, fmt.Errorf("%s has mode %v: a token file must not be accessible by others (chmod 600)", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", nil, fmt.Errorf("%s is empty", path)
	}
	return tok, st, nil
}
