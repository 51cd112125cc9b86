// Package pki creates and loads the X.509 material of a ZoneFleet cluster: one
// cluster CA, and per-component certificates whose role is encoded in the
// certificate, plus the tls.Config builders every gRPC server and client uses.
//
// # Roles
//
// A certificate carries exactly one role as a URI SAN:
//
//	zonefleet://role/admin          the operator (zctl with a client cert)
//	zonefleet://role/arbiter        an arbiter replica
//	zonefleet://role/node/<id>      the ssdnode whose registered id is <id>
//	zonefleet://role/etcd           an etcd member (server and peer)
//
// Tenants do not get certificates: a tenant proves its namespace with a signed
// token (see pkg/auth for why). The role is read only from a chain that
// verified against the cluster CA (VerifyClient), never from an unverified
// certificate, and never from the subject CN (which is informational).
//
// # Keys and files
//
// Keys are ECDSA P-256 (every TLS stack and etcd accept it; Ed25519
// certificates are not accepted everywhere yet), serial numbers are 128 random
// bits, all randomness comes from crypto/rand. Files are PEM; WriteFile writes
// atomically (temp file + rename) with mode 0600 and refuses to overwrite
// unless asked. LoadKeyPair refuses a private key readable by group or others,
// like ssh does.
//
// # TLS
//
// ServerConfig and ClientConfig build TLS 1.3-only configs. Servers of the gRPC
// API use ClientCertRequest: the handshake asks for a client certificate but
// does not verify it, and pkg/auth's interceptor verifies the chain on every
// call (so a certificate from another CA fails with UNAUTHENTICATED, an error
// an operator can tell from a network failure, and the interceptor is the one
// place that turns a certificate into an identity). etcd and anything without
// that interceptor uses ClientCertRequire, which rejects in the handshake.
// A client that dials a component it looked up (a node from its registered
// record) sets WantRole so the server must prove that exact role, not only a
// matching host name.
//
// # Expiry and rotation
//
// SecondsUntilExpiry feeds the zonefleet_tls_cert_expiry_seconds gauge.
// Rotation is by re-issuing a certificate from the same CA and replacing the
// files; Reloader serves the newest files to new handshakes without a restart.
// Rotating the CA itself means a bundle with both CAs in the pool during the
// transition (LoadCertPool accepts several certificates in one file).
//
// Concurrency: CA.Issue and the loaders are safe for concurrent use; a
// tls.Config is shared read-only by the TLS stack.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// RoleKind is what a certificate's holder is.
type RoleKind string

// Role kinds.
const (
	RoleAdmin   RoleKind = "admin"
	RoleArbiter RoleKind = "arbiter"
	RoleNode    RoleKind = "node"
	RoleEtcd    RoleKind = "etcd"
)

// Role is a certificate's role: a kind and, for nodes, the node id.
type Role struct {
	Kind RoleKind
	Name string // node id for RoleNode, empty otherwise
}

// String renders admin, arbiter, etcd or node:<id>.
func (r Role) String() string {
	if r.Kind == RoleNode {
		return "node:" + r.Name
	}
	return string(r.Kind)
}

// URI is the role's URI SAN.
func (r Role) URI() *url.URL {
	p := "/" + string(r.Kind)
	if r.Kind == RoleNode {
		p += "/" + r.Name
	}
	return &url.URL{Scheme: "zonefleet", Host: "role", Path: p}
}

var idRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$`)

// Validate checks the kind and the node id.
func (r Role) Validate() error {
	switch r.Kind {
	case RoleAdmin, RoleArbiter, RoleEtcd:
		if r.Name != "" {
			return fmt.Errorf("pki: role %s takes no name", r.Kind)
		}
	case RoleNode:
		if !idRE.MatchString(r.Name) {
			return fmt.Errorf("pki: node id %q: want 1-63 of [a-zA-Z0-9._-], starting alphanumeric", r.Name)
		}
	default:
		return fmt.Errorf("pki: unknown role kind %q", r.Kind)
	}
	return nil
}

// ParseRole parses admin, arbiter, etcd or node:<id>.
func ParseRole(s string) (Role, error) {
	var r Role
	if id, ok := strings.CutPrefix(s, "node:"); ok {
		r = Role{Kind: RoleNode, Name: id}
	} else {
		r = Role{Kind: RoleKind(s)}
	}
	return r, r.Validate()
}

// RoleOf returns the role in cert's URI SAN. It does not verify the
// certificate: call it only on a verified chain (VerifyClient does).
func RoleOf(cert *x509.Certificate) (Role, error) {
	var found []Role
	for _, u := range cert.URIs {
		if u.Scheme != "zonefleet" || u.Host != "role" {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
		r := Role{Kind: RoleKind(parts[0])}
		if len(parts) == 2 {
			r.Name = parts[1]
		} else if len(parts) > 2 {
			return Role{}, fmt.Errorf("pki: malformed role URI %q", u.String())
		}
		if err := r.Validate(); err != nil {
			return Role{}, err
		}
		found = append(found, r)
	}
	switch len(found) {
	case 0:
		return Role{}, errors.New("pki: certificate carries no zonefleet role")
	case 1:
		return found[0], nil
	}
	return Role{}, errors.New("pki: certificate carries more than one zonefleet role")
}

// CA is the cluster certificate authority.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	KeyPEM  []byte
}

// KeyPair is an issued certificate with its private key.
type KeyPair struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// TLSCertificate returns the pair for a tls.Config (leaf parsed).
func (k *KeyPair) TLSCertificate() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{k.Cert.Raw}, PrivateKey: k.Key, Leaf: k.Cert}
}

// Defaults.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultLeafValidity = 365 * 24 * time.Hour
	// backdate absorbs clock skew between the issuing and verifying machines.
	backdate = 5 * time.Minute
)

// CAOptions configure NewCA. Zero values take defaults.
type CAOptions struct {
	CommonName string        // "ZoneFleet CA"
	Validity   time.Duration // DefaultCAValidity
	Now        time.Time     // time.Now()
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}

func keyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// NewCA creates a self-signed CA that may sign leaf certificates only.
func NewCA(o CAOptions) (*CA, error) {
	if o.CommonName == "" {
		o.CommonName = "ZoneFleet CA"
	}
	if o.Validity <= 0 {
		o.Validity = DefaultCAValidity
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	ski := sha256.Sum256(pub)
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: o.CommonName, Organization: []string{"ZoneFleet"}},
		NotBefore:             o.Now.Add(-backdate),
		NotAfter:              o.Now.Add(o.Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		SubjectKeyId:          ski[:20],
	}
	cert, cp, kp, err := sign(tmpl, tmpl, key, key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: cp, KeyPEM: kp}, nil
}

// sign creates the certificate tmpl for key, signed by parent's signer, and
// returns it parsed and PEM-encoded with key's PEM.
func sign(tmpl, parent *x509.Certificate, key *ecdsa.PrivateKey, signer crypto.Signer) (*x509.Certificate, []byte, []byte, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return cert, certPEM(der), kp, nil
}

// LeafOptions configure CA.Issue.
type LeafOptions struct {
	Role     Role
	DNSNames []string
	IPs      []net.IP
	Validity time.Duration // DefaultLeafValidity
	Now      time.Time     // time.Now()
}

// Issue creates a key and a certificate for a component. The certificate is
// good for both TLS server and client authentication (components are both).
func (ca *CA) Issue(o LeafOptions) (*KeyPair, error) {
	if err := o.Role.Validate(); err != nil {
		return nil, err
	}
	if o.Validity <= 0 {
		o.Validity = DefaultLeafValidity
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	notAfter := o.Now.Add(o.Validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	for _, d := range o.DNSNames {
		if d == "" || strings.ContainsAny(d, " /:") {
			return nil, fmt.Errorf("pki: bad DNS name %q", d)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: o.Role.String(), Organization: []string{"ZoneFleet"}},
		NotBefore:             o.Now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		DNSNames:              append([]string(nil), o.DNSNames...),
		IPAddresses:           append([]net.IP(nil), o.IPs...),
		URIs:                  []*url.URL{o.Role.URI()},
		AuthorityKeyId:        ca.Cert.SubjectKeyId,
	}
	cert, cp, kp, err := sign(tmpl, ca.Cert, key, ca.Key)
	if err != nil {
		return nil, err
	}
	return &KeyPair{Cert: cert, Key: key, CertPEM: cp, KeyPEM: kp}, nil
}

// Pool returns a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// ErrExists: WriteFile would overwrite a file.
var ErrExists = errors.New("file exists")

// WriteFile writes data to path atomically with mode 0600. Without
// overwrite it fails with ErrExists if path exists.
func WriteFile(path string, data []byte, overwrite bool) error {
	if !overwrite {
		if _, err := os.Lstat(path); err == nil {
			return fmt.Errorf("%s: %w (use --force to replace it)", path, ErrExists)
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// ReadPrivateFile reads a private-key file and refuses one that group or
// others can access.
func ReadPrivateFile(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("pki: %s has mode %v: a private key must not be accessible by group or others (chmod 600)", path, st.Mode().Perm())
	}
	return os.ReadFile(path)
}

// ParseCertificates reads every CERTIFICATE block of a PEM bundle.
func ParseCertificates(pemData []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, pemData = pem.Decode(pemData)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("pki: %w", err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("pki: no certificate in PEM data")
	}
	return out, nil
}

func parseKey(pemData []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(pemData)
	if b == nil {
		return nil, errors.New("pki: no PEM block in key data")
	}
	var k any
	var err error
	switch b.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(b.Bytes)
	default:
		return nil, fmt.Errorf("pki: unexpected PEM block %q in key file", b.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("pki: key cannot sign")
	}
	return s, nil
}

// LoadCertPool reads a PEM bundle of CA certificates.
func LoadCertPool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	certs, err := ParseCertificates(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p, nil
}

// LoadCA reads a CA certificate and its key (the key file must be 0600).
func LoadCA(certFile, keyFile string) (*CA, error) {
	cp, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	kp, err := ReadPrivateFile(keyFile)
	if err != nil {
		return nil, err
	}
	certs, err := ParseCertificates(cp)
	if err != nil {
		return nil, err
	}
	if !certs[0].IsCA {
		return nil, fmt.Errorf("pki: %s is not a CA certificate", certFile)
	}
	key, err := parseKey(kp)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: certs[0], Key: key, CertPEM: cp, KeyPEM: kp}, nil
}

// LoadKeyPair reads a certificate (chain) and its key (the key file must be
// 0600) and parses the leaf.
func LoadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	cp, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	kp, err := ReadPrivateFile(keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	c, err := tls.X509KeyPair(cp, kp)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: %s / %s: %w", certFile, keyFile, err)
	}
	return c, nil
}

// ClientAuth is how a server treats client certificates.
type ClientAuth int

const (
	// ClientCertRequest asks for a certificate and lets the application
	// (pkg/auth) verify it per call; clients without one may present a token.
	ClientCertRequest ClientAuth = iota
	// ClientCertRequire rejects, in the handshake, clients without a
	// certificate that verifies against the pool.
	ClientCertRequire
)

// ServerConfig returns a TLS 1.3 server config presenting cert.
func ServerConfig(cert tls.Certificate, clientCAs *x509.CertPool, mode ClientAuth) *tls.Config {
	c := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientCAs:    clientCAs,
		ClientAuth:   tls.RequestClientCert,
		NextProtos:   []string{"h2"},
	}
	if mode == ClientCertRequire {
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c
}

// ServerConfigFrom is ServerConfig with a GetCertificate callback (Reloader).
func ServerConfigFrom(get func(*tls.ClientHelloInfo) (*tls.Certificate, error), clientCAs *x509.CertPool, mode ClientAuth) *tls.Config {
	c := ServerConfig(tls.Certificate{}, clientCAs, mode)
	c.Certificates = nil
	c.GetCertificate = get
	return c
}

// ClientOptions configure ClientConfig.
type ClientOptions struct {
	Roots      *x509.CertPool   // the cluster CA (required)
	Cert       *tls.Certificate // the component's own certificate; nil for tenants
	ServerName string           // host name to verify; "" = taken from the dial address by gRPC
	// WantRole, when set, requires the server's certificate to carry exactly
	// this role: a node dialling a peer it resolved from the registered node
	// record sets node:<id>, so a lookalike server with another valid
	// certificate of the cluster is refused.
	WantRole *Role
}

// ClientConfig returns a TLS 1.3 client config that verifies the server
// against Roots (host name as usual, and WantRole if set).
func ClientConfig(o ClientOptions) *tls.Config {
	c := &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    o.Roots,
		ServerName: o.ServerName,
		NextProtos: []string{"h2"},
	}
	if o.Cert != nil {
		cert := *o.Cert
		c.Certificates = []tls.Certificate{cert}
	}
	if o.WantRole != nil {
		want := *o.WantRole
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
				return errors.New("pki: server certificate not verified")
			}
			got, err := RoleOf(cs.VerifiedChains[0][0])
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("pki: server is %s, want %s", got, want)
			}
			return nil
		}
	}
	return c
}

// VerifyClient verifies a client's certificate chain (leaf first) against
// roots at time now and returns the leaf's role.
func VerifyClient(chain []*x509.Certificate, roots *x509.CertPool, now time.Time) (Role, error) {
	if len(chain) == 0 {
		return Role{}, errors.New("pki: no client certificate")
	}
	if roots == nil {
		return Role{}, errors.New("pki: no CA configured to verify client certificates")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return Role{}, fmt.Errorf("pki: client certificate: %w", err)
	}
	return RoleOf(chain[0])
}

// SecondsUntilExpiry is how long cert stays valid after now (negative once
// expired): the value of zonefleet_tls_cert_expiry_seconds.
func SecondsUntilExpiry(cert *x509.Certificate, now time.Time) float64 {
	return cert.NotAfter.Sub(now).Seconds()
}

// LeafOf returns the parsed leaf of a tls.Certificate.
func LeafOf(c *tls.Certificate) (*x509.Certificate, error) {
	if c.Leaf != nil {
		return c.Leaf, nil
	}
	if len(c.Certificate) == 0 {
		return nil, errors.New("pki: empty certificate")
	}
	return x509.ParseCertificate(c.Certificate[0])
}
