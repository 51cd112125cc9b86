package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
)

// MinSecretBytes is the shortest secret accepted.
const MinSecretBytes = 32

// minEntropyBits is the least estimated entropy a secret must show.
const minEntropyBits = 128

// Prefixes of generated secrets: they make leaked secrets easy to find with
// secret scanners and to tell apart in support requests.
const (
	AdminTokenPrefix          = "zfa_"
	NamespaceCredentialPrefix = "zfn_"
)

// wellKnown are secrets that shipped in examples or defaults; the project's
// own compose file used "zonefleet".
var wellKnown = []string{"zonefleet", "admin", "password", "secret", "token", "changeme", "change-me", "test", "default", "root"}

// ErrWeakSecret is matched by *WeakSecretError.
var ErrWeakSecret = errors.New("weak secret")

// WeakSecretError: a configured secret is empty, well known or too weak.
type WeakSecretError struct{ Reason string }

func (e *WeakSecretError) Error() string   { return "refusing secret: " + e.Reason }
func (e *WeakSecretError) Is(t error) bool { return t == ErrWeakSecret }

// GenerateSecret returns prefix + 32 random bytes from crypto/rand in base64url.
func GenerateSecret(prefix string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// CheckSecret refuses empty, well-known and weak secrets: shorter than
// MinSecretBytes, "local-<anything>" (the old zctl local token), a
// well-known word (alone or repeated), or less than 128 bits of estimated
// entropy (Shannon entropy of the characters times the length, which a
// random secret passes easily and a repeated or low-variety string fails).
func CheckSecret(s string) error {
	if s == "" {
		return &WeakSecretError{Reason: "empty"}
	}
	low := strings.ToLower(s)
	if strings.HasPrefix(low, "local-") {
		return &WeakSecretError{Reason: `"local-…" tokens are predictable`}
	}
	for _, w := range wellKnown {
		if strings.ReplaceAll(low, w, "") == "" {
			return &WeakSecretError{Reason: "well-known value"}
		}
	}
	if len(s) < MinSecretBytes {
		return &WeakSecretError{Reason: fmt.Sprintf("%d bytes, want at least %d", len(s), MinSecretBytes)}
	}
	if bits := entropyBits(s); bits < minEntropyBits {
		return &WeakSecretError{Reason: fmt.Sprintf("about %.0f bits of entropy, want %d (generate one with zctl cert init)", bits, minEntropyBits)}
	}
	return nil
}

func entropyBits(s string) float64 {
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	n := float64(len(s))
	h := 0.0
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h * n
}

// ErrNoSecret: neither the file nor the environment variable gave a secret.
var ErrNoSecret = errors.New("no secret configured")

// LoadSecret reads a secret from file path if set, else from environment
// variable env, trims surrounding white space and checks it with
// CheckSecret. Secrets never come from argv (visible in ps): flags name a
// file, the environment may hold the value. A file others can access is
// refused (group access is allowed for container runtimes that share a
// group with the service).
func LoadSecret(path, env string) (string, error) {
	var s, from string
	switch {
	case path != "":
		st, err := os.Stat(path)
		if err != nil {
			return "", err
		}
		if st.Mode().Perm()&0o007 != 0 {
			return "", fmt.Errorf("%s has mode %v: a secret file must not be accessible by others (chmod 600)", path, st.Mode().Perm())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		s, from = string(b), path
	case env != "" && os.Getenv(env) != "":
		s, from = os.Getenv(env), "$"+env
	default:
		return "", fmt.Errorf("%w: give a file or set $%s", ErrNoSecret, env)
	}
	s = strings.TrimSpace(s)
	if err := CheckSecret(s); err != nil {
		return "", fmt.Errorf("%s: %w", from, err)
	}
	return s, nil
}

// CredentialHash is what the arbiter stores for a namespace credential: its
// SHA-256. Credentials are 32 random bytes, so a plain hash is enough (a
// slow password hash protects guessable secrets; these are not guessable).
func CredentialHash(cred string) [32]byte { return sha256.Sum256([]byte(cred)) }

// CredentialMatches compares a presented credential with a stored hash in
// constant time.
func CredentialMatches(cred string, stored [32]byte) bool {
	h := CredentialHash(cred)
	return subtle.ConstantTimeCompare(h[:], stored[:]) == 1
}
