package auth

import (
	"context"
	"crypto/ed25519"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/auth/limit"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func TestExchanger(t *testing.T) {
	c := &clk{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	k, _ := GenerateSigningKey()
	iss, _ := NewIssuer(k, c.now)
	v, _ := NewVerifier(VerifierConfig{Keys: []ed25519.PublicKey{k.Public().(ed25519.PublicKey)}, Now: c.now})
	credA, _ := GenerateSecret(NamespaceCredentialPrefix)
	credB, _ := GenerateSecret(NamespaceCredentialPrefix)
	store := map[string]NamespaceSecrets{
		"tenant-a": {CredentialHash: CredentialHash(credA), Generation: 4},
		"tenant-b": {CredentialHash: CredentialHash(credB)},
	}
	var down bool
	x, err := NewExchanger(ExchangerConfig{Issuer: iss, TTL: 5 * time.Minute,
		Failures: limit.LimiterConfig{PerKeyRate: 1, PerKeyBurst: 2, GlobalRate: 100, GlobalBurst: 100, Now: c.now},
		Lookup: func(_ context.Context, ns string) (NamespaceSecrets, error) {
			if down {
				return NamespaceSecrets{}, &zerr.UnavailableError{What: "etcd", Reason: "no leader"}
			}
			s, ok := store[ns]
			if !ok {
				return NamespaceSecrets{}, &zerr.NotFoundError{Kind: "namespace", Name: ns}
			}
			return s, nil
		}})
	require.NoError(t, err)
	ctx := context.Background()

	tok, cl, err := x.Exchange(ctx, "tenant-a", credA)
	require.NoError(t, err)
	assert.Equal(t, uint64(4), cl.Generation)
	assert.Equal(t, c.now().Add(5*time.Minute), cl.ExpiresAt)
	got, err := v.Verify(tok)
	require.NoError(t, err)
	assert.Equal(t, "tenant-a", got.Subject)

	_, _, errWrong := x.Exchange(ctx, "tenant-a", credB)
	_, _, errUnknown := x.Exchange(ctx, "nobody", credA)
	assert.ErrorIs(t, errWrong, zerr.ErrUnauthenticated)
	assert.ErrorIs(t, errUnknown, zerr.ErrUnauthenticated)
	assert.Equal(t, errWrong.Error(), errUnknown.Error(), "an unknown namespace looks like a wrong credential")

	_, _, err = x.Exchange(ctx, "tenant-a", "")
	assert.ErrorIs(t, err, zerr.ErrUnauthenticated, "second failure for tenant-a (burst 2)")
	_, _, err = x.Exchange(ctx, "tenant-a", credB)
	assert.ErrorIs(t, err, ErrTooManyFailures)
	assert.ErrorIs(t, err, zerr.ErrUnauthenticated)
	_, _, err = x.Exchange(ctx, "tenant-a", credA)
	assert.NoError(t, err, "successes are not limited")
	c.add(time.Second)
	_, _, err = x.Exchange(ctx, "tenant-a", credB)
	assert.False(t, errors.Is(err, ErrTooManyFailures), "the budget refills")

	_, _, err = x.Exchange(ctx, "a/b", credA)
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
	down = true
	_, _, err = x.Exchange(ctx, "tenant-b", credB)
	assert.ErrorIs(t, err, zerr.ErrUnavailable, "a store outage is not reported as a bad credential")

	_, err = NewExchanger(ExchangerConfig{Issuer: iss})
	assert.Error(t, err)
}
