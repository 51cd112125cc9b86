package auth

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"
)

// PeekClaims reads a token's claims WITHOUT verifying its signature: a
// client holds no verification key and needs only the times and the
// namespace to schedule a renewal (client.Config.Credentials). Never use
// the result to decide access; servers use Verifier. The parse is as strict
// as Verify's (size, prefix, part count, base64, unknown fields, role,
// subject, lifetime > 0). Errors are *TokenError with ErrTokenMalformed.
func PeekClaims(tok string) (Claims, error) {
	if len(tok) > MaxTokenLen {
		return Claims{}, tokErr(ErrTokenMalformed, "longer than %d bytes", MaxTokenLen)
	}
	rest, ok := strings.CutPrefix(tok, TokenPrefix)
	if !ok {
		return Claims{}, tokErr(ErrTokenMalformed, "no %q prefix", TokenPrefix)
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 || len(parts[0]) != 16 {
		return Claims{}, tokErr(ErrTokenMalformed, "want 4 dot-separated parts and a 16-digit key id")
	}
	js, err := b64.Strict().DecodeString(parts[1])
	if err != nil {
		return Claims{}, tokErr(ErrTokenMalformed, "bad payload encoding")
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var wc wireClaims
	if err := dec.Decode(&wc); err != nil || dec.More() {
		return Claims{}, tokErr(ErrTokenMalformed, "bad payload")
	}
	if wc.Role != TokenRoleNamespace && wc.Role != TokenRoleNode {
		return Claims{}, tokErr(ErrTokenMalformed, "unknown role %q", wc.Role)
	}
	if err := ValidSubject(wc.Sub); err != nil {
		return Claims{}, tokErr(ErrTokenMalformed, "subject: %v", err)
	}
	if wc.Exp <= wc.Iat || time.Duration(wc.Exp-wc.Iat)*time.Second > DefaultMaxTTL {
		return Claims{}, tokErr(ErrTokenMalformed, "lifetime out of (0, %v]", DefaultMaxTTL)
	}
	return wc.claims(parts[0]), nil
}
