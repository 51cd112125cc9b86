package auth

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/zonefleet/zonefleet/pkg/auth/limit"
	"github.com/zonefleet/zonefleet/pkg/pki"
)

// Token format (version 1):
//
//	zf1.<kid>.<payload>.<signature>
//
// kid is 16 lower-case hex digits (KeyID of the signing key), payload is
// base64url (no padding) of a JSON object {"role","sub","gen","iat","exp",
// "jti"}, signature is base64url of the Ed25519 signature over the bytes
// "zf1.<kid>.<payload>". The whole token is at most MaxTokenLen bytes.
const (
	TokenPrefix = "zf1."
	MaxTokenLen = 1024
)

// Token roles.
const (
	TokenRoleNamespace = "namespace" // sub is a namespace name
	TokenRoleNode      = "node"      // sub is a node id (plaintext --insecure clusters only)
	// TokenRolePeerRead is an operation grant, not a credential: sub is the
	// node allowed to PeerRead the listed zones of namespace ns (peergrant.go).
	TokenRolePeerRead = "peer-read"
	// TokenRolePeerWrite is the same for PeerWrite (a copy into the zones).
	TokenRolePeerWrite = "peer-write"
)

// Claims are the verified contents of a token.
type Claims struct {
	Role       string // TokenRoleNamespace or TokenRoleNode
	Subject    string // namespace name or node id
	Generation uint64 // the namespace's token generation at issue time (revocation)
	IssuedAt   time.Time
	ExpiresAt  time.Time
	ID         string // random, for logs and audit
	KeyID      string // the key that signed it
	// Namespace and Zones scope an operation grant (TokenRolePeerRead);
	// empty in credentials.
	Namespace string
	Zones     []string
	// Delegated marks a PeerWrite grant a tenant asked for (its namespace's
	// token generation in Generation, so a revocation refuses it) rather
	// than one the arbiter's own compactor signed.
	Delegated bool
}

type wireClaims struct {
	Role string `json:"role"`
	Sub  string `json:"sub"`
	Gen  uint64 `json:"gen"`
	Iat  int64  `json:"iat"`
	Exp  int64  `json:"exp"`
	Jti  string `json:"jti"`
	// Operation grants only.
	NS    string   `json:"ns,omitempty"`
	Zones []string `json:"zones,omitempty"`
	Dlg   bool     `json:"dlg,omitempty"` // a tenant's PeerWrite delegation
}

// KeyID is the identifier of a verification key: the first 8 bytes of the
// SHA-256 of the public key, in hex.
func KeyID(pub ed25519.PublicKey) string {
	h := sha256.Sum256(pub)
	return hex.EncodeToString(h[:8])
}

// ValidSubject checks a namespace name or node id the way the arbiter does
// (1-128 bytes of printable UTF-8, no '/', no space).
func ValidSubject(s string) error {
	if s == "" || len(s) > 128 || !utf8.ValidString(s) {
		return errors.New("must be 1 to 128 bytes of UTF-8")
	}
	for _, r := range s {
		if r == '/' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("%q contains '/', a space or a control character", s)
		}
	}
	return nil
}

var b64 = base64.RawURLEncoding

// Issuer signs tokens. It holds the private key: only the arbiter (online
// issuance) and zctl (offline, from the directory of `zctl cert init`) have one.
type Issuer struct {
	key    ed25519.PrivateKey
	kid    string
	now    func() time.Time
	maxTTL time.Duration
}

// Token lifetimes.
const (
	DefaultTokenTTL = 15 * time.Minute
	DefaultMaxTTL   = 24 * time.Hour
	DefaultSkew     = 30 * time.Second
)

// NewIssuer returns an issuer signing with key. now may be nil.
func NewIssuer(key ed25519.PrivateKey, now func() time.Time) (*Issuer, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("auth: not an Ed25519 private key")
	}
	if now == nil {
		now = time.Now
	}
	return &Issuer{key: key, kid: KeyID(key.Public().(ed25519.PublicKey)), now: now, maxTTL: DefaultMaxTTL}, nil
}

// KeyID is the id of the issuer's key.
func (i *Issuer) KeyID() string { return i.kid }

// Issue signs a token for role/subject valid for ttl (0 = DefaultTokenTTL,
// at most DefaultMaxTTL).
func (i *Issuer) Issue(role, subject string, gen uint64, ttl time.Duration) (string, Claims, error) {
	if role != TokenRoleNamespace && role != TokenRoleNode {
		return "", Claims{}, fmt.Errorf("auth: unknown token role %q", role)
	}
	if err := ValidSubject(subject); err != nil {
		return "", Claims{}, fmt.Errorf("auth: token subject: %w", err)
	}
	return i.sign(wireClaims{Role: role, Sub: subject, Gen: gen}, ttl)
}

// sign completes wc (times, jti) and signs it.
func (i *Issuer) sign(wc wireClaims, ttl time.Duration) (string, Claims, error) {
	if ttl == 0 {
		ttl = DefaultTokenTTL
	}
	if ttl < 0 || ttl > i.maxTTL {
		return "", Claims{}, fmt.Errorf("auth: token lifetime %v: want (0, %v]", ttl, i.maxTTL)
	}
	var jti [12]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return "", Claims{}, err
	}
	now := i.now().Truncate(time.Second)
	wc.Iat, wc.Exp, wc.Jti = now.Unix(), now.Add(ttl).Unix(), hex.EncodeToString(jti[:])
	js, err := json.Marshal(wc)
	if err != nil {
		return "", Claims{}, err
	}
	signed := TokenPrefix + i.kid + "." + b64.EncodeToString(js)
	sig := ed25519.Sign(i.key, []byte(signed))
	tok := signed + "." + b64.EncodeToString(sig)
	if len(tok) > MaxTokenLen {
		return "", Claims{}, fmt.Errorf("auth: token of %d bytes exceeds %d", len(tok), MaxTokenLen)
	}
	return tok, wc.claims(i.kid), nil
}

func (w wireClaims) claims(kid string) Claims {
	return Claims{Role: w.Role, Subject: w.Sub, Generation: w.Gen, IssuedAt: time.Unix(w.Iat, 0).UTC(),
		ExpiresAt: time.Unix(w.Exp, 0).UTC(), ID: w.Jti, KeyID: kid, Namespace: w.NS, Zones: w.Zones, Delegated: w.Dlg}
}

// Verifier checks tokens offline against a set of public keys (several during
// a key rotation, chosen by kid). It remembers verified tokens in a bounded
// LRU keyed by the token's SHA-256, so the data path pays one Ed25519
// verification per token, not per call; expiry is checked on every call.
type Verifier struct {
	mu     sync.RWMutex
	keys   map[string]ed25519.PublicKey
	skew   time.Duration
	maxTTL time.Duration
	now    func() time.Time
	// cache is sharded by the token hash so concurrent calls of different
	// tenants do not share one lock on the data path; nil when disabled.
	cache []*limit.LRU[[32]byte, Claims]
}

const cacheShards = 16

func (v *Verifier) shard(h [32]byte) *limit.LRU[[32]byte, Claims] { return v.cache[h[0]%cacheShards] }

// VerifierConfig configures a Verifier. Zero fields take defaults.
type VerifierConfig struct {
	Keys         []ed25519.PublicKey
	Skew         time.Duration // tolerated clock difference with the issuer (DefaultSkew)
	MaxTTL       time.Duration // longer-lived tokens are refused (DefaultMaxTTL)
	CacheEntries int           // verified tokens remembered (4096; <0 disables)
	Now          func() time.Time
}

// NewVerifier returns a verifier.
func NewVerifier(cfg VerifierConfig) (*Verifier, error) {
	if cfg.Skew <= 0 {
		cfg.Skew = DefaultSkew
	}
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = DefaultMaxTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	v := &Verifier{skew: cfg.Skew, maxTTL: cfg.MaxTTL, now: cfg.Now}
	if cfg.CacheEntries == 0 {
		cfg.CacheEntries = 4096
	}
	if cfg.CacheEntries > 0 {
		per := max(1, cfg.CacheEntries/cacheShards)
		for range cacheShards {
			v.cache = append(v.cache, limit.NewLRU[[32]byte, Claims](per, cfg.Now))
		}
	}
	if err := v.SetKeys(cfg.Keys...); err != nil {
		return nil, err
	}
	return v, nil
}

// SetKeys replaces the verification keys (rotation: publish the new key
// next to the old one, switch the issuer, later drop the old key). Tokens
// remembered as verified are forgotten, so a dropped key stops working at once.
func (v *Verifier) SetKeys(keys ...ed25519.PublicKey) error {
	m := make(map[string]ed25519.PublicKey, len(keys))
	for _, k := range keys {
		if len(k) != ed25519.PublicKeySize {
			return errors.New("auth: not an Ed25519 public key")
		}
		m[KeyID(k)] = append(ed25519.PublicKey(nil), k...)
	}
	v.mu.Lock()
	v.keys = m
	v.mu.Unlock()
	for _, c := range v.cache {
		c.Clear()
	}
	return nil
}

// KeyIDs lists the ids of the current verification keys.
func (v *Verifier) KeyIDs() []string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]string, 0, len(v.keys))
	for k := range v.keys {
		out = append(out, k)
	}
	return out
}

func (v *Verifier) checkTimes(c Claims) error {
	now := v.now()
	if !now.Before(c.ExpiresAt.Add(v.skew)) {
		return tokErr(ErrTokenExpired, "expired at %s", c.ExpiresAt.Format(time.RFC3339))
	}
	if now.Add(v.skew).Before(c.IssuedAt) {
		return tokErr(ErrTokenNotYetValid, "issued at %s, in the future", c.IssuedAt.Format(time.RFC3339))
	}
	return nil
}

// Verify checks a token and returns its claims. Errors are *TokenError.
func (v *Verifier) Verify(tok string) (Claims, error) {
	if len(tok) > MaxTokenLen {
		return Claims{}, tokErr(ErrTokenMalformed, "longer than %d bytes", MaxTokenLen)
	}
	var h [32]byte
	if v.cache != nil {
		h = sha256.Sum256([]byte(tok))
		if c, ok := v.shard(h).Get(h); ok {
			if err := v.checkTimes(c); err != nil {
				v.shard(h).Remove(h)
				return Claims{}, err
			}
			return c, nil
		}
	}
	c, err := v.verify(tok)
	if err != nil {
		return Claims{}, err
	}
	if v.cache != nil {
		v.shard(h).PutUntil(h, c, c.ExpiresAt.Add(v.skew))
	}
	return c, nil
}

func (v *Verifier) verify(tok string) (Claims, error) {
	rest, ok := strings.CutPrefix(tok, TokenPrefix)
	if !ok {
		return Claims{}, tokErr(ErrTokenMalformed, "no %q prefix", TokenPrefix)
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return Claims{}, tokErr(ErrTokenMalformed, "want 4 dot-separated parts")
	}
	kid, payload, sigText := parts[0], parts[1], parts[2]
	if len(kid) != 16 || strings.ToLower(kid) != kid {
		return Claims{}, tokErr(ErrTokenMalformed, "bad key id")
	}
	if _, err := hex.DecodeString(kid); err != nil {
		return Claims{}, tokErr(ErrTokenMalformed, "bad key id")
	}
	v.mu.RLock()
	key, ok := v.keys[kid]
	v.mu.RUnlock()
	if !ok {
		return Claims{}, tokErr(ErrTokenUnknownKey, "key %s is not trusted", kid)
	}
	sig, err := b64.Strict().DecodeString(sigText)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return Claims{}, tokErr(ErrTokenMalformed, "bad signature encoding")
	}
	if !ed25519.Verify(key, []byte(tok[:len(tok)-len(sigText)-1]), sig) {
		return Claims{}, tokErr(ErrTokenSignature, "signature does not verify with key %s", kid)
	}
	// Signed by a trusted key from here on; still parse strictly.
	js, err := b64.Strict().DecodeString(payload)
	if err != nil {
		return Claims{}, tokErr(ErrTokenMalformed, "bad payload encoding")
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var wc wireClaims
	if err := dec.Decode(&wc); err != nil || dec.More() {
		return Claims{}, tokErr(ErrTokenMalformed, "bad payload")
	}
	switch wc.Role {
	case TokenRoleNamespace, TokenRoleNode:
		if wc.NS != "" || wc.Zones != nil || wc.Dlg {
			return Claims{}, tokErr(ErrTokenMalformed, "a credential carries no operation scope")
		}
	case TokenRolePeerRead, TokenRolePeerWrite:
		if wc.Dlg && wc.Role != TokenRolePeerWrite {
			return Claims{}, tokErr(ErrTokenMalformed, "only PeerWrite grants are delegated")
		}
		if err := ValidSubject(wc.NS); err != nil {
			return Claims{}, tokErr(ErrTokenMalformed, "grant namespace: %v", err)
		}
		if len(wc.Zones) == 0 || len(wc.Zones) > MaxGrantZones {
			return Claims{}, tokErr(ErrTokenMalformed, "grant of %d zones: want 1..%d", len(wc.Zones), MaxGrantZones)
		}
	default:
		return Claims{}, tokErr(ErrTokenMalformed, "unknown role %q", wc.Role)
	}
	if err := ValidSubject(wc.Sub); err != nil {
		return Claims{}, tokErr(ErrTokenMalformed, "subject: %v", err)
	}
	if wc.Exp <= wc.Iat || time.Duration(wc.Exp-wc.Iat)*time.Second > v.maxTTL {
		return Claims{}, tokErr(ErrTokenMalformed, "lifetime out of (0, %v]", v.maxTTL)
	}
	c := wc.claims(kid)
	if err := v.checkTimes(c); err != nil {
		return Claims{}, err
	}
	return c, nil
}

// GenerateSigningKey makes a new Ed25519 token-signing key.
func GenerateSigningKey() (ed25519.PrivateKey, error) {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	return k, err
}

// MarshalSigningKey encodes a private key as PKCS#8 PEM.
func MarshalSigningKey(k ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// MarshalVerifyKeys encodes public keys as a PEM bundle of PUBLIC KEY blocks.
func MarshalVerifyKeys(keys ...ed25519.PublicKey) ([]byte, error) {
	var out []byte
	for _, k := range keys {
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			return nil, err
		}
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})...)
	}
	return out, nil
}

// ParseSigningKey decodes a PKCS#8 PEM Ed25519 private key.
func ParseSigningKey(data []byte) (ed25519.PrivateKey, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, errors.New("auth: no PRIVATE KEY PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, errors.New("auth: signing key is not Ed25519")
	}
	return ek, nil
}

// ParseVerifyKeys decodes every PUBLIC KEY block of a PEM bundle.
func ParseVerifyKeys(data []byte) ([]ed25519.PublicKey, error) {
	var out []ed25519.PublicKey
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "PUBLIC KEY" {
			continue
		}
		k, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		ek, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, errors.New("auth: verification key is not Ed25519")
		}
		out = append(out, ek)
	}
	if len(out) == 0 {
		return nil, errors.New("auth: no PUBLIC KEY in PEM data")
	}
	return out, nil
}

// LoadSigningKey reads a signing key file (which must be 0600 or stricter).
func LoadSigningKey(path string) (ed25519.PrivateKey, error) {
	data, err := pki.ReadPrivateFile(path)
	if err != nil {
		return nil, err
	}
	return ParseSigningKey(data)
}
