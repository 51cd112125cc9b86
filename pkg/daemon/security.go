package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/pflag"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/auth/tokengen"
	"github.com/zonefleet/zonefleet/pkg/pki"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpclocal "google.golang.org/grpc/credentials/local"
)

// SecurityFlags are the trust flags every server binary shares (see pkg/auth).
// Secrets are named by file (or come from the environment), never given as
// values in argv, where `ps` shows them.
//
// By default a server is TLS-only (TLS 1.3, certificates from `zctl cert
// init`) and authenticates every call through pkg/auth. --insecure only
// changes the transport: gRPC is plaintext, and calls must still carry a
// credential (the admin token, a namespace or node token), so a server
// with --insecure and no credential refuses to start. Trusting every
// caller takes a second explicit flag, --insecure-open-access (with
// --insecure only; logged at ERROR level on every start).
type SecurityFlags struct {
	Insecure       bool
	OpenAccess     bool   // --insecure-open-access: no authentication at all
	PKIDir         string // DirFiles(dir, role, …) unless the single-file flags say otherwise
	CAFile         string
	CertFile       string
	KeyFile        string
	VerifyKeysFile string
	SigningKeyFile string // arbiter only: mints namespace tokens
	AdminTokenFile string
}

// AddSecurityFlags registers the trust flags.
func AddSecurityFlags(fs *pflag.FlagSet, f *SecurityFlags) {
	fs.BoolVar(&f.Insecure, "insecure", f.Insecure, "serve plaintext gRPC (development only); by default the server is TLS-only. Calls still need credentials")
	fs.BoolVar(&f.OpenAccess, "insecure-open-access", f.OpenAccess, "with --insecure and no credentials: trust EVERY caller as the operator (development only)")
	fs.StringVar(&f.PKIDir, "pki-dir", f.PKIDir, "directory written by `zctl cert init` (ca.crt, <component>.crt/.key, token-verify.pub, admin.token)")
	fs.StringVar(&f.CAFile, "ca-file", f.CAFile, "cluster CA certificate (default PKI-DIR/ca.crt)")
	fs.StringVar(&f.CertFile, "cert-file", f.CertFile, "this component's certificate (default PKI-DIR/<component>.crt)")
	fs.StringVar(&f.KeyFile, "key-file", f.KeyFile, "this component's private key (default PKI-DIR/<component>.key)")
	fs.StringVar(&f.VerifyKeysFile, "token-verify-keys-file", f.VerifyKeysFile, "namespace token verification keys (default PKI-DIR/token-verify.pub)")
	fs.StringVar(&f.SigningKeyFile, "token-signing-key-file", f.SigningKeyFile, "namespace token signing key (arbiter; default PKI-DIR/token-signing.key when present)")
	fs.StringVar(&f.AdminTokenFile, "admin-token-file", f.AdminTokenFile, "file holding the admin token, mode 0600 (default PKI-DIR/admin.token when present; or $ZONEFLEET_ADMIN_TOKEN)")
}

// AdminTokenEnv is the environment variable a server reads the admin token
// from when no file is named.
const AdminTokenEnv = "ZONEFLEET_ADMIN_TOKEN"

// Security is what a server (and its outgoing peer calls) runs with.
type Security struct {
	Insecure bool
	Bundle   *auth.Bundle        // nil only for --insecure without any credential
	Auth     *auth.Authenticator // nil only for --insecure without any credential
	TLS      *tls.Config         // server TLS; nil with --insecure
	Role     pki.Role            // the component's certificate role
	// Generations revokes namespace tokens of older generations (Revoked of
	// the authenticator); FollowTokenGenerations keeps it current from etcd.
	Generations *tokengen.Table
}

// FollowTokenGenerations loads the namespace token generations from etcd
// and follows them until ctx ends (servers call it before serving). Nil-safe.
func (s *Security) FollowTokenGenerations(ctx context.Context, cli *clientv3.Client, log *slog.Logger) error {
	if s == nil || s.Generations == nil {
		return nil
	}
	return s.Generations.Follow(ctx, cli, log)
}

// Files resolves the flags to file names for role.
func (f SecurityFlags) Files(role pki.Role, withSigning bool) auth.Files {
	var out auth.Files
	if f.PKIDir != "" {
		out = auth.DirFiles(f.PKIDir, role, withSigning, true)
		if !exists(out.SigningKey) {
			out.SigningKey = ""
		}
		if !exists(out.AdminToken) {
			out.AdminToken = ""
		}
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&out.CA, f.CAFile)
	set(&out.Cert, f.CertFile)
	set(&out.Key, f.KeyFile)
	set(&out.VerifyKeys, f.VerifyKeysFile)
	set(&out.SigningKey, f.SigningKeyFile)
	set(&out.AdminToken, f.AdminTokenFile)
	return out
}

// LoadSecurity loads the credentials of a server with the given role.
// Without --insecure it needs the CA and the component's certificate, and a
// server refuses to start with a weak admin token (auth.CheckSecret). revoked
// (may be nil) answers whether a namespace token generation is revoked.
func LoadSecurity(f SecurityFlags, role pki.Role, withSigning bool, revoked func(string, uint64) error, log *slog.Logger) (*Security, error) {
	if f.OpenAccess && !f.Insecure {
		return nil, errors.New("--insecure-open-access needs --insecure (open access over TLS is not offered)")
	}
	files := f.Files(role, withSigning)
	for _, p := range []*string{&files.CA, &files.Cert, &files.Key, &files.VerifyKeys} {
		if *p != "" && !exists(*p) && f.Insecure {
			*p = "" // an insecure server takes whatever is there
		}
	}
	if files.Cert == "" || files.Key == "" {
		files.Cert, files.Key = "", ""
	}
	b, err := auth.Load(files)
	if err != nil {
		return nil, err
	}
	if b.AdminToken == "" && os.Getenv(AdminTokenEnv) != "" {
		if b.AdminToken, err = auth.LoadSecret("", AdminTokenEnv); err != nil {
			return nil, fmt.Errorf("admin token: %w", err)
		}
	}
	s := &Security{Insecure: f.Insecure, Bundle: b, Role: role}
	if revoked == nil {
		s.Generations = tokengen.New()
		revoked = s.Generations.Revoked
	}
	if !f.Insecure {
		if s.TLS, err = b.ServerTLS(); err != nil {
			return nil, fmt.Errorf("%w (or start with --insecure for a plaintext development cluster)", err)
		}
	}
	if b.Roots == nil && b.Verifier == nil && b.AdminToken == "" {
		if !f.Insecure {
			return nil, errors.New("no credentials configured: give --pki-dir (zctl cert init) or --insecure")
		}
		if !f.OpenAccess {
			return nil, errors.New("no credentials configured: --insecure makes gRPC plaintext but calls still need credentials; give --pki-dir (zctl cert init) or --admin-token-file, or add --insecure-open-access to trust every caller (development only)")
		}
		log.Error("SECURITY: --insecure --insecure-open-access: plaintext gRPC and NO authentication; every caller is trusted as the operator (development only)")
		s.Bundle = nil
		return s, nil
	}
	if f.OpenAccess {
		return nil, errors.New("--insecure-open-access with credentials configured: drop one (credentials are checked, or nobody is)")
	}
	if s.Auth, err = b.Authenticator(auth.Config{Insecure: f.Insecure, Revoked: revoked, Logger: log}); err != nil {
		return nil, err
	}
	if f.Insecure {
		log.Warn("--insecure: gRPC is plaintext; credentials cross the network in clear")
	}
	return s, nil
}

func exists(p string) bool {
	if p == "" {
		return false
	}
	_, err := os.Stat(p)
	return err == nil
}

// serverOptions are the gRPC options of the security: TLS transport and the
// authenticator's interceptors, which run before everything else.
// With local, the options are those of the unix socket's server: gRPC's
// local credentials instead of TLS (the authenticator takes them for a
// secure transport on a unix socket, and still wants a token).
func (s *Security) serverOptions(local bool) []grpc.ServerOption {
	if local {
		opts := []grpc.ServerOption{grpc.Creds(grpclocal.NewCredentials())}
		if s != nil && s.Auth != nil {
			opts = append(opts, s.Auth.ServerOptions()...)
		}
		return opts
	}
	if s == nil {
		return nil
	}
	var opts []grpc.ServerOption
	if s.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.TLS)))
	}
	if s.Auth != nil {
		opts = append(opts, s.Auth.ServerOptions()...)
	}
	return opts
}

// PeerDialOptions are the dial options of this component towards other
// components (the arbiter's compactor towards nodes): TLS with the
// component's own certificate and no bearer token, or plaintext with the
// admin token when --insecure.
func (s *Security) PeerDialOptions() []grpc.DialOption {
	if s == nil || s.Bundle == nil {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	if s.Insecure {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if s.Bundle.AdminToken != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(auth.PerRPC(auth.StaticToken(s.Bundle.AdminToken), true)))
		}
		return opts
	}
	c, err := s.Bundle.ClientTLS(nil, "")
	if err != nil {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(c))}
}

// Issuer is the namespace token signing key (the arbiter's), nil without one.
func (s *Security) Issuer() *auth.Issuer {
	if s == nil || s.Bundle == nil {
		return nil
	}
	return s.Bundle.Issuer
}

// EtcdClientTLS is the TLS configuration of this component towards etcd:
// the component's certificate as the client certificate (etcd runs with
// client-certificate authentication) and etcd's certificate pinned to the
// etcd role of the cluster CA. nil with --insecure or without a
// certificate: plaintext etcd (the endpoints' scheme decides, see
// etcdlocal.ConnectWith).
func (s *Security) EtcdClientTLS() (*tls.Config, error) {
	if s == nil || s.Insecure || s.Bundle == nil || s.Bundle.Cert == nil {
		return nil, nil
	}
	return s.Bundle.ClientTLS(&pki.Role{Kind: pki.RoleEtcd}, "")
}
