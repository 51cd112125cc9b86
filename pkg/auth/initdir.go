package auth

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// InitOptions configure InitDir.
type InitOptions struct {
	Dir          string
	Nodes        []string      // node ids
	Hosts        []string      // DNS names / IPs of every server certificate
	ArbiterHosts []string      // extra SANs of the arbiter ("arbiter" always)
	EtcdHosts    []string      // extra SANs of etcd ("etcd" always)
	Validity     time.Duration // component certificates (pki.DefaultLeafValidity)
	CAValidity   time.Duration // (pki.DefaultCAValidity)
	Force        bool          // replace existing files
	Now          time.Time
}

// WrittenFile describes one file InitDir or IssueInDir wrote.
type WrittenFile struct {
	Path        string    `json:"path"`
	Kind        string    `json:"kind"`           // ca-cert, ca-key, cert, key, token-signing-key, token-verify-keys, admin-token
	Role        string    `json:"role,omitempty"` // for certificates and keys
	NotAfter    time.Time `json:"not_after,omitzero"`
	Fingerprint string    `json:"fingerprint,omitempty"` // SHA-256 of the certificate, or the token key id
}

// SplitHosts separates DNS names from IP addresses, dropping duplicates.
func SplitHosts(hosts []string) ([]string, []net.IP, error) {
	var dns []string
	var ips []net.IP
	seen := map[string]bool{}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if h == "" || seen[h] {
			continue
		}
		seen[h] = true
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
			continue
		}
		if strings.ContainsAny(h, " /:") {
			return nil, nil, &zerr.InvalidArgumentError{Field: "host", Reason: fmt.Sprintf("%q is neither an IP address nor a DNS name", h)}
		}
		dns = append(dns, h)
	}
	return dns, ips, nil
}

func fingerprint(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

type dirWriter struct {
	dir   string
	force bool
	files []WrittenFile
}

func (w *dirWriter) write(name string, data []byte, f WrittenFile) error {
	p := filepath.Join(w.dir, name)
	if err := pki.WriteFile(p, data, w.force); err != nil {
		if errors.Is(err, pki.ErrExists) {
			return &zerr.AlreadyExistsError{Kind: "file", Name: p + " (use --force to replace)"}
		}
		return err
	}
	f.Path = p
	w.files = append(w.files, f)
	return nil
}

func (w *dirWriter) pair(kp *pki.KeyPair, r pki.Role) error {
	name := ComponentFileName(r)
	if err := w.write(name+".crt", kp.CertPEM, WrittenFile{Kind: "cert", Role: r.String(), NotAfter: kp.Cert.NotAfter, Fingerprint: fingerprint(kp.Cert.Raw)}); err != nil {
		return err
	}
	return w.write(name+".key", kp.KeyPEM, WrittenFile{Kind: "key", Role: r.String()})
}

// InitDir creates a cluster's trust material in o.Dir (mode 0700, files
// 0600): a CA, certificates for admin, arbiter, etcd and every node, the
// token signing and verification keys, and a random admin token. Without
// Force it writes nothing if any target exists (no half-replaced PKI).
func InitDir(o InitOptions) ([]WrittenFile, error) {
	if o.Dir == "" {
		return nil, &zerr.InvalidArgumentError{Field: "dir", Reason: "is empty"}
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	common, commonIPs, err := SplitHosts(o.Hosts)
	if err != nil {
		return nil, err
	}
	roles := []pki.Role{{Kind: pki.RoleAdmin}, {Kind: pki.RoleArbiter}, {Kind: pki.RoleEtcd}}
	seen := map[string]bool{}
	for _, n := range o.Nodes {
		n = strings.TrimSpace(n)
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		r := pki.Role{Kind: pki.RoleNode, Name: n}
		if err := r.Validate(); err != nil {
			return nil, &zerr.InvalidArgumentError{Field: "node id", Reason: err.Error()}
		}
		roles = append(roles, r)
	}
	if !o.Force {
		names := []string{FileCA, FileCAKey, FileAdminToken, FileSigningKey, FileVerifyKeys}
		for _, r := range roles {
			names = append(names, ComponentFileName(r)+".crt", ComponentFileName(r)+".key")
		}
		for _, n := range names {
			if _, err := os.Lstat(filepath.Join(o.Dir, n)); err == nil {
				return nil, &zerr.AlreadyExistsError{Kind: "file", Name: filepath.Join(o.Dir, n) + " (use --force to replace)"}
			}
		}
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(o.Dir, 0o700); err != nil {
		return nil, err
	}
	w := &dirWriter{dir: o.Dir, force: o.Force}
	ca, err := pki.NewCA(pki.CAOptions{Validity: o.CAValidity, Now: o.Now})
	if err != nil {
		return nil, err
	}
	if err := w.write(FileCA, ca.CertPEM, WrittenFile{Kind: "ca-cert", NotAfter: ca.Cert.NotAfter, Fingerprint: fingerprint(ca.Cert.Raw)}); err != nil {
		return nil, err
	}
	if err := w.write(FileCAKey, ca.KeyPEM, WrittenFile{Kind: "ca-key"}); err != nil {
		return nil, err
	}
	for _, r := range roles {
		var extra []string
		switch r.Kind {
		case pki.RoleArbiter:
			extra = append([]string{"arbiter"}, o.ArbiterHosts...)
		case pki.RoleEtcd:
			extra = append([]string{"etcd"}, o.EtcdHosts...)
		case pki.RoleNode:
			extra = []string{r.Name}
		}
		xdns, xips, err := SplitHosts(extra)
		if err != nil {
			return nil, err
		}
		dns := append(append([]string{}, common...), xdns...)
		ips := append(append([]net.IP{}, commonIPs...), xips...)
		if r.Kind == pki.RoleAdmin {
			dns, ips = nil, nil // a client certificate names no host
		}
		kp, err := ca.Issue(pki.LeafOptions{Role: r, DNSNames: dns, IPs: ips, Validity: o.Validity, Now: o.Now})
		if err != nil {
			return nil, err
		}
		if err := w.pair(kp, r); err != nil {
			return nil, err
		}
	}
	sk, err := GenerateSigningKey()
	if err != nil {
		return nil, err
	}
	skPEM, err := MarshalSigningKey(sk)
	if err != nil {
		return nil, err
	}
	pub := sk.Public().(ed25519.PublicKey)
	pubPEM, err := MarshalVerifyKeys(pub)
	if err != nil {
		return nil, err
	}
	if err := w.write(FileSigningKey, skPEM, WrittenFile{Kind: "token-signing-key", Fingerprint: KeyID(pub)}); err != nil {
		return nil, err
	}
	if err := w.write(FileVerifyKeys, pubPEM, WrittenFile{Kind: "token-verify-keys", Fingerprint: KeyID(pub)}); err != nil {
		return nil, err
	}
	tok, err := GenerateSecret(AdminTokenPrefix)
	if err != nil {
		return nil, err
	}
	if err := w.write(FileAdminToken, []byte(tok+"\n"), WrittenFile{Kind: "admin-token"}); err != nil {
		return nil, err
	}
	return w.files, nil
}

// IssueInDir issues one more component certificate from the CA in dir (a
// new node, a renewal with force).
func IssueInDir(dir string, r pki.Role, hosts []string, validity time.Duration, force bool) ([]WrittenFile, error) {
	if err := r.Validate(); err != nil {
		return nil, &zerr.InvalidArgumentError{Field: "role", Reason: err.Error()}
	}
	ca, err := pki.LoadCA(filepath.Join(dir, FileCA), filepath.Join(dir, FileCAKey))
	if err != nil {
		return nil, err
	}
	if r.Kind == pki.RoleNode {
		hosts = append(append([]string{}, hosts...), r.Name)
	}
	dns, ips, err := SplitHosts(hosts)
	if err != nil {
		return nil, err
	}
	kp, err := ca.Issue(pki.LeafOptions{Role: r, DNSNames: dns, IPs: ips, Validity: validity})
	if err != nil {
		return nil, err
	}
	w := &dirWriter{dir: dir, force: force}
	if err := w.pair(kp, r); err != nil {
		return nil, err
	}
	return w.files, nil
}
