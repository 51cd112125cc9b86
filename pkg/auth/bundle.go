package auth

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/zonefleet/zonefleet/pkg/pki"
)

// File names in a PKI directory written by `zctl cert init`.
const (
	FileCA         = "ca.crt"
	FileCAKey      = "ca.key"
	FileAdminToken = "admin.token"
	FileSigningKey = "token-signing.key"
	FileVerifyKeys = "token-verify.pub"
)

// ComponentFileName is the base name of a component's certificate and key
// files: admin, arbiter, etcd or node-<id> (+ ".crt" / ".key").
func ComponentFileName(r pki.Role) string {
	if r.Kind == pki.RoleNode {
		return "node-" + r.Name
	}
	return string(r.Kind)
}

// Files are the paths a component loads its trust material from. Empty
// paths are skipped (a node has no signing key; a tenant has no certificate).
type Files struct {
	CA         string // cluster CA bundle
	Cert, Key  string // the component's certificate and key
	VerifyKeys string // token verification keys (nodes, arbiter)
	SigningKey string // token signing key (arbiter only)
	AdminToken string // admin token file (servers that accept it, zctl)
}

// DirFiles returns the paths of role's material in a `zctl cert init`
// directory. withSigning adds the signing key (the arbiter), withAdmin the
// admin token.
func DirFiles(dir string, r pki.Role, withSigning, withAdmin bool) Files {
	base := filepath.Join(dir, ComponentFileName(r))
	f := Files{CA: filepath.Join(dir, FileCA), Cert: base + ".crt", Key: base + ".key", VerifyKeys: filepath.Join(dir, FileVerifyKeys)}
	if withSigning {
		f.SigningKey = filepath.Join(dir, FileSigningKey)
	}
	if withAdmin {
		f.AdminToken = filepath.Join(dir, FileAdminToken)
	}
	return f
}

// Bundle is a component's loaded trust material.
type Bundle struct {
	Roots      *x509.CertPool
	Cert       *pki.Reloader // nil without Cert/Key
	Verifier   *Verifier     // nil without VerifyKeys
	Issuer     *Issuer       // nil without SigningKey
	AdminToken string        // "" without AdminToken
	files      Files
}

// Load reads every file named in f. Keys and secrets must be 0600.
func Load(f Files) (*Bundle, error) {
	b := &Bundle{files: f}
	var err error
	if f.CA != "" {
		if b.Roots, err = pki.LoadCertPool(f.CA); err != nil {
			return nil, err
		}
	}
	if f.Cert != "" || f.Key != "" {
		if b.Cert, err = pki.NewReloader(f.Cert, f.Key, 0, nil); err != nil {
			return nil, err
		}
	}
	if f.VerifyKeys != "" {
		keys, err := readVerifyKeys(f.VerifyKeys)
		if err != nil {
			return nil, err
		}
		if b.Verifier, err = NewVerifier(VerifierConfig{Keys: keys}); err != nil {
			return nil, err
		}
	}
	if f.SigningKey != "" {
		k, err := LoadSigningKey(f.SigningKey)
		if err != nil {
			return nil, err
		}
		if b.Issuer, err = NewIssuer(k, nil); err != nil {
			return nil, err
		}
	}
	if f.AdminToken != "" {
		if b.AdminToken, err = LoadSecret(f.AdminToken, ""); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func readVerifyKeys(path string) ([]ed25519.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	keys, err := ParseVerifyKeys(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

// ReloadVerifyKeys re-reads the verification keys file (key rotation; call
// it on SIGHUP or from a timer).
func (b *Bundle) ReloadVerifyKeys() error {
	if b.Verifier == nil || b.files.VerifyKeys == "" {
		return nil
	}
	keys, err := readVerifyKeys(b.files.VerifyKeys)
	if err != nil {
		return err
	}
	return b.Verifier.SetKeys(keys...)
}

// ServerTLS is the TLS config of a gRPC server guarded by an Authenticator.
func (b *Bundle) ServerTLS() (*tls.Config, error) {
	if b.Cert == nil || b.Roots == nil {
		return nil, fmt.Errorf("auth: a server needs %s and its certificate", FileCA)
	}
	return pki.ServerConfigFrom(b.Cert.GetCertificate, b.Roots, pki.ClientCertRequest), nil
}

// ClientTLS is the TLS config for dialling a cluster server; want pins the
// server's role (node:<id> for peers), serverName overrides the host name
// taken from the address.
func (b *Bundle) ClientTLS(want *pki.Role, serverName string) (*tls.Config, error) {
	if b.Roots == nil {
		return nil, fmt.Errorf("auth: a client needs %s", FileCA)
	}
	c := pki.ClientConfig(pki.ClientOptions{Roots: b.Roots, ServerName: serverName, WantRole: want})
	if b.Cert != nil {
		c.GetClientCertificate = b.Cert.GetClientCertificate
	}
	return c, nil
}

// Authenticator builds the server-side Authenticator from the bundle; cfg
// supplies Policy, Revoked, Observe, Insecure and Logger.
func (b *Bundle) Authenticator(cfg Config) (*Authenticator, error) {
	cfg.Roots, cfg.Verifier, cfg.AdminToken = b.Roots, b.Verifier, b.AdminToken
	return New(cfg)
}

// CertExpirySeconds is the value of zonefleet_tls_cert_expiry_seconds for
// the component's current certificate.
func (b *Bundle) CertExpirySeconds(now time.Time) (float64, error) {
	if b.Cert == nil {
		return 0, fmt.Errorf("auth: no certificate loaded")
	}
	leaf, err := pki.LeafOf(b.Cert.Current())
	if err != nil {
		return 0, err
	}
	return pki.SecondsUntilExpiry(leaf, now), nil
}
