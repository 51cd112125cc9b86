package auth

import (
	"context"
	"crypto/ed25519"
	"testing"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"google.golang.org/grpc/metadata"
)

// The data-path cost of a namespace token: a full Ed25519 verification
// (first call with a token) against a verified-token cache hit (every later
// call), and the whole interceptor decision on a hit.
func benchVerifier(b *testing.B, cache int) (*Verifier, string) {
	k, _ := GenerateSigningKey()
	iss, _ := NewIssuer(k, nil)
	v, err := NewVerifier(VerifierConfig{Keys: []ed25519.PublicKey{k.Public().(ed25519.PublicKey)}, CacheEntries: cache})
	if err != nil {
		b.Fatal(err)
	}
	tok, _, _ := iss.Issue(TokenRoleNamespace, "tenant-a", 0, 0)
	return v, tok
}

func BenchmarkVerifyUncached(b *testing.B) {
	v, tok := benchVerifier(b, -1)
	for b.Loop() {
		if _, err := v.Verify(tok); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyCached(b *testing.B) {
	v, tok := benchVerifier(b, 0)
	for b.Loop() {
		if _, err := v.Verify(tok); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAuthenticateCachedToken(b *testing.B) {
	v, tok := benchVerifier(b, 0)
	a, err := New(Config{Verifier: v, Insecure: true})
	if err != nil {
		b.Fatal(err)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(AuthorizationKey, "Bearer "+tok))
	req := &v1.ReadRequest{}
	for b.Loop() {
		if _, err := a.Authenticate(ctx, "/zonefleet.v1.ZonedDevice/Read", req); err != nil {
			b.Fatal(err)
		}
	}
}
