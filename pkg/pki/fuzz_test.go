package pki

import (
	"testing"
	"time"
)

// FuzzParseCertificatesAndRole: arbitrary PEM input is either refused or
// parsed; a role is only ever returned for a chain that verifies; never a panic.
func FuzzParseCertificatesAndRole(f *testing.F) {
	ca, err := NewCA(CAOptions{})
	if err != nil {
		f.Fatal(err)
	}
	kp, err := ca.Issue(LeafOptions{Role: Role{Kind: RoleNode, Name: "n1"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(kp.CertPEM)
	f.Add(append(append([]byte{}, kp.CertPEM...), ca.CertPEM...))
	f.Add(kp.KeyPEM)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte{})
	pool := ca.Pool()
	now := time.Now()
	f.Fuzz(func(t *testing.T, data []byte) {
		certs, err := ParseCertificates(data)
		if err != nil {
			return
		}
		for _, c := range certs {
			_, _ = RoleOf(c)
		}
		r, err := VerifyClient(certs, pool, now)
		if err == nil {
			if verr := r.Validate(); verr != nil {
				t.Fatalf("verified chain with invalid role %v: %v", r, verr)
			}
			if !certs[0].Equal(kp.Cert) {
				t.Fatalf("a certificate the CA never issued verified")
			}
		}
	})
}

func FuzzParseRole(f *testing.F) {
	for _, s := range []string{"admin", "node:n1", "node:", "etcd", "node:a/b", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRole(s)
		if err != nil {
			return
		}
		back, err := ParseRole(r.String())
		if err != nil || back != r {
			t.Fatalf("round trip %q -> %v -> %v (%v)", s, r, back, err)
		}
		u := r.URI()
		if u.Scheme != "zonefleet" || u.Host != "role" {
			t.Fatalf("bad URI %v", u)
		}
	})
}
