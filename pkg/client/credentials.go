package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/zonefleet/zonefleet/pkg/auth"
)

// Credentials name the files a client authenticates with, the way etcdctl
// and kubectl users expect: a CA bundle, optionally a client certificate
// (the operator's admin certificate), a tenant's namespace token file and
// the admin token file. zctl fills it from --ca-file, --cert-file,
// --key-file, --token-file, --admin-token-file, their ZONEFLEET_* twins and
// the config file's cluster entry.
type Credentials struct {
	CAFile, CertFile, KeyFile string
	TokenFile                 string // a namespace token (re-read when it changes; renewed by client.New)
	AdminTokenFile            string // the admin token (0600)
	// Insecure dials plaintext: only for clusters started with --insecure.
	Insecure bool
}

// Apply loads the files into cfg: TLS (unless Insecure), the tenant's token
// source and the admin token. Without a CA and without Insecure it fails:
// a client never falls back to plaintext on its own.
func (cr Credentials) Apply(cfg *Config) error {
	if cr.CertFile != "" && cr.KeyFile == "" || cr.CertFile == "" && cr.KeyFile != "" {
		return errors.New("a client certificate needs both --cert-file and --key-file")
	}
	if !cr.Insecure {
		if cr.CAFile == "" {
			return errors.New("no CA certificate: give --ca-file (zctl cert init writes ca.crt) or --insecure for a plaintext cluster")
		}
		b, err := auth.Load(auth.Files{CA: cr.CAFile, Cert: cr.CertFile, Key: cr.KeyFile})
		if err != nil {
			return err
		}
		if cfg.TLS, err = b.ClientTLS(nil, ""); err != nil {
			return err
		}
	}
	if cr.TokenFile != "" {
		cfg.Credentials = auth.NewFileToken(cr.TokenFile, 0, nil)
		if _, err := cfg.Credentials.Token(context.Background()); err != nil {
			return fmt.Errorf("token file: %w", err)
		}
	}
	if cr.AdminTokenFile != "" {
		tok, err := auth.LoadSecret(cr.AdminTokenFile, "")
		if err != nil {
			return fmt.Errorf("admin token: %w", err)
		}
		cfg.Token = tok
	}
	return nil
}
