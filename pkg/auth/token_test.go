package auth

import (
	"crypto/ed25519"
	"encoding/base64"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc"
)

type clk struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clk) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clk) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestTokenRoundTripAndTimes(t *testing.T) {
	c := &clk{t: time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC)}
	k, err := GenerateSigningKey()
	require.NoError(t, err)
	iss, err := NewIssuer(k, c.now)
	require.NoError(t, err)
	v, err := NewVerifier(VerifierConfig{Keys: []ed25519.PublicKey{k.Public().(ed25519.PublicKey)}, Skew: 30 * time.Second, Now: c.now})
	require.NoError(t, err)

	tok, cl, err := iss.Issue(TokenRoleNamespace, "tenant-a", 7, 10*time.Minute)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(tok, TokenPrefix+iss.KeyID()+"."))
	assert.LessOrEqual(t, len(tok), MaxTokenLen)
	got, err := v.Verify(tok)
	require.NoError(t, err)
	assert.Equal(t, cl, got)
	assert.Equal(t, "tenant-a", got.Subject)
	assert.Equal(t, uint64(7), got.Generation)
	assert.Equal(t, iss.KeyID(), got.KeyID)

	c.add(10*time.Minute + 20*time.Second)
	_, err = v.Verify(tok)
	assert.NoError(t, err, "within the skew after expiry (cached path)")
	c.add(15 * time.Second)
	_, err = v.Verify(tok)
	assert.ErrorIs(t, err, ErrTokenExpired, "past expiry + skew, even when cached")
	assert.ErrorIs(t, err, zerr.ErrUnauthenticated)

	// A token from a machine whose clock runs ahead.
	ahead := &clk{t: c.now().Add(20 * time.Second)}
	issAhead, _ := NewIssuer(k, ahead.now)
	tok2, _, err := issAhead.Issue(TokenRoleNamespace, "tenant-a", 0, time.Minute)
	require.NoError(t, err)
	_, err = v.Verify(tok2)
	assert.NoError(t, err, "20s ahead is inside the 30s skew")
	ahead.add(time.Minute)
	tok3, _, _ := issAhead.Issue(TokenRoleNamespace, "tenant-a", 0, 5*time.Minute)
	_, err = v.Verify(tok3)
	assert.ErrorIs(t, err, ErrTokenNotYetValid)

	for _, bad := range []struct {
		role, sub string
		ttl       time.Duration
	}{{"admin", "x", 0}, {TokenRoleNamespace, "", 0}, {TokenRoleNamespace, "a/b", 0}, {TokenRoleNamespace, "a b", 0},
		{TokenRoleNamespace, strings.Repeat("x", 129), 0}, {TokenRoleNamespace, "x", -time.Second}, {TokenRoleNamespace, "x", 25 * time.Hour}} {
		_, _, err := iss.Issue(bad.role, bad.sub, 0, bad.ttl)
		assert.Error(t, err, "%+v", bad)
	}
}

func TestKeyRotation(t *testing.T) {
	old, _ := GenerateSigningKey()
	neu, _ := GenerateSigningKey()
	oldIss, _ := NewIssuer(old, nil)
	newIss, _ := NewIssuer(neu, nil)
	oldPub, newPub := old.Public().(ed25519.PublicKey), neu.Public().(ed25519.PublicKey)
	v, err := NewVerifier(VerifierConfig{Keys: []ed25519.PublicKey{oldPub}})
	require.NoError(t, err)
	tOld, _, _ := oldIss.Issue(TokenRoleNamespace, "a", 0, 0)
	tNew, _, _ := newIss.Issue(TokenRoleNamespace, "a", 0, 0)
	_, err = v.Verify(tOld)
	require.NoError(t, err)
	_, err = v.Verify(tNew)
	assert.ErrorIs(t, err, ErrTokenUnknownKey)

	require.NoError(t, v.SetKeys(oldPub, newPub)) // step 1: publish the new key
	_, err = v.Verify(tNew)
	require.NoError(t, err)
	_, err = v.Verify(tOld)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{KeyID(oldPub), KeyID(newPub)}, v.KeyIDs())

	require.NoError(t, v.SetKeys(newPub)) // step 3: retire the old key
	_, err = v.Verify(tOld)
	assert.ErrorIs(t, err, ErrTokenUnknownKey, "a retired key stops working at once, cache included")
	assert.Error(t, v.SetKeys(ed25519.PublicKey("short")))

	pem, err := MarshalVerifyKeys(oldPub, newPub)
	require.NoError(t, err)
	keys, err := ParseVerifyKeys(pem)
	require.NoError(t, err)
	assert.Equal(t, []ed25519.PublicKey{oldPub, newPub}, keys)
	sk, err := MarshalSigningKey(neu)
	require.NoError(t, err)
	back, err := ParseSigningKey(sk)
	require.NoError(t, err)
	assert.True(t, neu.Equal(back))
	_, err = ParseSigningKey(pem)
	assert.Error(t, err)
	_, err = ParseVerifyKeys(sk)
	assert.Error(t, err)
}

func TestVerifyRejectsMalformed(t *testing.T) {
	k, _ := GenerateSigningKey()
	iss, _ := NewIssuer(k, nil)
	v, _ := NewVerifier(VerifierConfig{Keys: []ed25519.PublicKey{k.Public().(ed25519.PublicKey)}, CacheEntries: -1})
	good, _, _ := iss.Issue(TokenRoleNamespace, "tenant-a", 0, 0)
	p := strings.Split(good, ".")
	sign := func(payload string) string { // validly signed, malformed inside
		body := TokenPrefix + iss.KeyID() + "." + base64.RawURLEncoding.EncodeToString([]byte(payload))
		return body + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(k, []byte(body)))
	}
	now := time.Now().Unix()
	ts := func(iat, exp int64) string {
		return `"iat":` + itoa(iat) + `,"exp":` + itoa(exp)
	}
	cases := map[string]string{
		"empty":              "",
		"no prefix":          "zf2." + strings.Join(p[1:], "."),
		"three parts":        strings.Join(p[:3], "."),
		"five parts":         good + ".x",
		"upper-case kid":     TokenPrefix + strings.ToUpper(p[1]) + "." + p[2] + "." + p[3],
		"kid not hex":        TokenPrefix + "zzzzzzzzzzzzzzzz." + p[2] + "." + p[3],
		"sig not base64":     TokenPrefix + p[1] + "." + p[2] + ".!!!",
		"sig short":          TokenPrefix + p[1] + "." + p[2] + ".AAAA",
		"too long":           good + strings.Repeat("A", MaxTokenLen),
		"payload not json":   sign("nope"),
		"unknown field":      sign(`{"role":"namespace","sub":"a",` + ts(now, now+60) + `,"admin":true}`),
		"trailing data":      sign(`{"role":"namespace","sub":"a",` + ts(now, now+60) + `}{}`),
		"unknown role":       sign(`{"role":"admin","sub":"a",` + ts(now, now+60) + `}`),
		"bad subject":        sign(`{"role":"namespace","sub":"a/b",` + ts(now, now+60) + `}`),
		"exp before iat":     sign(`{"role":"namespace","sub":"a",` + ts(now, now-1) + `}`),
		"lifetime too long":  sign(`{"role":"namespace","sub":"a",` + ts(now, now+25*3600) + `}`),
		"expired":            sign(`{"role":"namespace","sub":"a",` + ts(now-7200, now-3600) + `}`),
		"payload base64 pad": TokenPrefix + p[1] + "." + p[2] + "=." + p[3],
	}
	for name, tok := range cases {
		_, err := v.Verify(tok)
		assert.Error(t, err, name)
		assert.ErrorIs(t, err, zerr.ErrUnauthenticated, name)
	}
	_, err := v.Verify(sign(`{"role":"namespace","sub":"a",` + ts(now, now+60) + `}`))
	assert.NoError(t, err, "control: the hand-made token is otherwise valid")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Every RPC of the API has an access rule: a new method cannot ship
// without a decision.
func TestPolicyCoversEveryMethod(t *testing.T) {
	pol := DefaultPolicy()
	for _, sd := range []grpc.ServiceDesc{v1.ZonedDevice_ServiceDesc, v1.Arbiter_ServiceDesc, v1.FDP_ServiceDesc} {
		for _, m := range sd.Methods {
			r, ok := pol["/"+sd.ServiceName+"/"+m.MethodName]
			assert.True(t, ok, "%s/%s has no rule", sd.ServiceName, m.MethodName)
			assert.False(t, r.Public, m.MethodName)
			assert.NotEmpty(t, r.Kinds, m.MethodName)
		}
		for _, s := range sd.Streams {
			r, ok := pol["/"+sd.ServiceName+"/"+s.StreamName]
			assert.True(t, ok, "%s/%s has no rule", sd.ServiceName, s.StreamName)
			assert.Empty(t, r.NamespaceField, "stream rules cannot inspect the request")
		}
	}
	// Namespace-scoped rules name a real string field of their request.
	reqs := map[string]any{
		"GetNamespace": &v1.GetNamespaceRequest{Name: "x"}, "OpenVZone": &v1.OpenVZoneRequest{Namespace: "x"},
		"NextStripeGroup": &v1.VZoneRequest{Namespace: "x"}, "FinishVZone": &v1.VZoneRequest{Namespace: "x"},
		"ResetVZone": &v1.VZoneRequest{Namespace: "x"}, "GetVZone": &v1.VZoneRequest{Namespace: "x"},
		"ResetVZones": &v1.ResetVZonesRequest{Namespace: "x"},
		"ListVZones":  &v1.ListVZonesRequest{Namespace: "x"}, "ReportActivity": &v1.ReportActivityRequest{Namespace: "x"},
		"AcquireMount": &v1.AcquireMountRequest{Namespace: "x"}, "ReleaseMount": &v1.ReleaseMountRequest{Namespace: "x"},
		"TLOpenVZone": &v1.TLOpenVZoneRequest{Namespace: "x"},
		"IssueToken":  &v1.IssueTokenRequest{Namespace: "x"},
	}
	for m, r := range pol {
		if r.NamespaceField == "" {
			continue
		}
		name := m[strings.LastIndex(m, "/")+1:]
		req, ok := reqs[name]
		require.True(t, ok, "test needs a request for %s", m)
		got, err := stringField(req, r.NamespaceField)
		require.NoError(t, err, m)
		assert.Equal(t, "x", got, m)
	}
	_, err := stringField(&v1.ReadRequest{}, "namespace")
	assert.Error(t, err)
	_, err = stringField(nil, "namespace")
	assert.Error(t, err)
}

func TestPeekClaims(t *testing.T) {
	sk, err := GenerateSigningKey()
	require.NoError(t, err)
	iss, err := NewIssuer(sk, nil)
	require.NoError(t, err)
	tok, want, err := iss.Issue(TokenRoleNamespace, "tenant-a", 3, time.Minute)
	require.NoError(t, err)
	got, err := PeekClaims(tok)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	parts := strings.Split(tok, ".")
	for name, bad := range map[string]string{
		"empty":       "",
		"no prefix":   strings.TrimPrefix(tok, TokenPrefix),
		"three parts": strings.Join(parts[:3], "."),
		"bad base64":  strings.Join([]string{parts[0], parts[1], parts[2] + "!", parts[3]}, "."),
		"unknown field": strings.Join([]string{parts[0], parts[1],
			b64.EncodeToString([]byte(`{"role":"namespace","sub":"a","gen":0,"iat":1,"exp":2,"jti":"x","admin":true}`)), parts[3]}, "."),
		"no lifetime": strings.Join([]string{parts[0], parts[1],
			b64.EncodeToString([]byte(`{"role":"namespace","sub":"a","gen":0,"iat":2,"exp":2,"jti":"x"}`)), parts[3]}, "."),
		"role": strings.Join([]string{parts[0], parts[1],
			b64.EncodeToString([]byte(`{"role":"admin","sub":"a","gen":0,"iat":1,"exp":2,"jti":"x"}`)), parts[3]}, "."),
		"too long": tok + strings.Repeat("a", MaxTokenLen),
	} {
		_, err := PeekClaims(bad)
		assert.ErrorIs(t, err, ErrTokenMalformed, name)
	}
}
