package zctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// currentFile records where the last `zctl local up` keeps its cluster.json,
// so that other zctl commands find the cluster with no flags.
func currentFile() string {
	if p := os.Getenv("ZONEFLEET_CLUSTER"); p != "" {
		return p
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "zonefleet", "current-cluster")
}

// rememberCluster points currentFile at dir/cluster.json.
func rememberCluster(dir string) error {
	abs, err := filepath.Abs(filepath.Join(dir, "cluster.json"))
	if err != nil {
		return err
	}
	f := currentFile()
	if strings.HasSuffix(f, ".json") { // ZONEFLEET_CLUSTER names the cluster.json itself
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		return err
	}
	return os.WriteFile(f, []byte(abs+"\n"), 0o644)
}

// clusterInfo returns the cluster.json that ZONEFLEET_CLUSTER or the last
// `zctl local up` names, and its path, if any.
func clusterInfo() (localcluster.Info, string, bool) {
	f := currentFile()
	path := f
	if !strings.HasSuffix(f, ".json") {
		b, err := os.ReadFile(f)
		if err != nil {
			return localcluster.Info{}, "", false
		}
		path = strings.TrimSpace(string(b))
	}
	in, err := localcluster.ReadInfo(path)
	if err != nil {
		return localcluster.Info{}, "", false
	}
	return in, path, true
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// connect returns a client; withNamespace requires --namespace.
func (g *Globals) connect(ctx context.Context, withNamespace bool) (*client.Client, error) {
	if err := g.resolved0(); err != nil {
		return nil, err
	}
	ns := ""
	if withNamespace {
		if g.Namespace == "" {
			return nil, usageErr(errors.New("no namespace: give --namespace (-n) or ZONEFLEET_NAMESPACE"))
		}
		ns = g.Namespace
	}
	cfg, err := g.clientConfig(ns)
	if err != nil {
		return nil, err
	}
	cfg.RetryDeadline = 5 * time.Second
	return client.New(ctx, cfg)
}

// clientConfig is the client configuration of the resolved settings: TLS
// from the CA (and the client certificate, if any) unless --insecure, and the
// bearer token: a namespace token ("zf1.…") is the tenant's credential on
// every call, anything else is the admin token (administrative calls only).
func (g *Globals) clientConfig(ns string) (client.Config, error) {
	cfg := client.Config{Arbiters: split(g.Arbiter), Etcd: split(g.Etcd), Namespace: ns}
	cr := client.Credentials{CAFile: g.CAFile, CertFile: g.CertFile, KeyFile: g.KeyFile, Insecure: g.Insecure}
	if err := cr.Apply(&cfg); err != nil {
		return cfg, usageErr(err)
	}
	switch {
	case g.Token == "":
	case strings.HasPrefix(g.Token, auth.TokenPrefix) && g.tokenFromFile:
		cfg.Credentials = auth.NewFileToken(g.TokenFile, 0, nil) // re-read: a rotated token is picked up
	case strings.HasPrefix(g.Token, auth.TokenPrefix):
		cfg.Credentials = auth.StaticToken(g.Token)
	default:
		cfg.Token = g.Token
	}
	return cfg, nil
}

// resolved0 resolves the connection settings and fails when they name no cluster.
func (g *Globals) resolved0() error {
	g.resolve()
	if g.resolveErr != nil {
		return g.resolveErr
	}
	if g.Arbiter == "" && g.Etcd == "" {
		return &exitError{code: ExitUnavailable, err: errors.New("no cluster: give --arbiter or --etcd, pick one with `zctl config use NAME`, or start one with `zctl local up`")}
	}
	return nil
}

// codeFor maps typed errors to exit codes.
func codeFor(err error) int {
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, zerr.ErrNotFound):
		return ExitNotFound
	case errors.Is(err, zerr.ErrAlreadyExists), errors.Is(err, zerr.ErrWritePointer), errors.Is(err, zerr.ErrZoneState),
		errors.Is(err, zerr.ErrZoneFull), errors.Is(err, zerr.ErrTLViolation), errors.Is(err, zerr.ErrStaleLayout):
		return ExitConflict
	case errors.Is(err, zerr.ErrUnavailable), errors.Is(err, zerr.ErrNotLeader), errors.Is(err, zerr.ErrClosed),
		errors.Is(err, context.DeadlineExceeded):
		return ExitUnavailable
	case errors.Is(err, zerr.ErrNotOwner), errors.Is(err, zerr.ErrUnauthenticated), errors.Is(err, zerr.ErrPermissionDenied),
		errors.Is(err, zerr.ErrPeerIdentity),
		status.Code(err) == codes.PermissionDenied: // the auth policy refused the call (e.g. a tenant's admin call)
		return ExitDenied
	case errors.Is(err, zerr.ErrNoResources), errors.Is(err, zerr.ErrTooManyActive), errors.Is(err, zerr.ErrTooManyOpen),
		errors.Is(err, zerr.ErrIPUBudget):
		return ExitNoResources
	case errors.Is(err, zerr.ErrInvalidArgument), errors.Is(err, zerr.ErrOutOfRange), errors.Is(err, zerr.ErrInvalidBitmap):
		return ExitUsage
	}
	return ExitFailed
}

// hint says what to do about an error, when there is something to say.
func hint(err error) string {
	switch {
	case errors.Is(err, zerr.ErrUnavailable):
		return "is the cluster running? (`zctl local up`; `zctl config current` shows which one zctl dials)"
	case errors.Is(err, zerr.ErrNotFound) && strings.Contains(err.Error(), "namespace"):
		return "create it with `zctl ns create NAME`"
	case errors.Is(err, zerr.ErrPeerIdentity):
		return "the node's registered address is served by another identity: check the node records (`zctl node show ID`) and the node's certificate"
	case errors.Is(err, zerr.ErrUnauthenticated):
		return "give credentials: --ca-file with --cert-file/--key-file, or --token-file (zctl cert init writes them)"
	case errors.Is(err, zerr.ErrWritePointer):
		return "`zctl vzone show ID` tells the write pointer"
	}
	return ""
}

func errorLine(err error) string {
	msg := err.Error()
	if h := hint(err); h != "" {
		msg += "; " + h
	}
	return fmt.Sprintf("zctl: %s", msg)
}

func withNS(ctx context.Context, ns string) context.Context { return wire.WithNamespace(ctx, ns) }

// withAdminToken attaches the admin token to a direct node call (a namespace
// token travels as the connection's per-call credential instead).
func withAdminToken(ctx context.Context, tok string) context.Context {
	if tok == "" || strings.HasPrefix(tok, auth.TokenPrefix) {
		return ctx
	}
	return metadata.AppendToOutgoingContext(wire.WithToken(ctx, tok), auth.AuthorizationKey, "Bearer "+tok)
}

// run returns a cobra RunE that connects (withNamespace: the namespace is
// required), calls fn with the client and closes it.
func (g *Globals) run(withNamespace bool, fn func(cmd *cobra.Command, c *client.Client, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, err := g.connect(cmd.Context(), withNamespace)
		if err != nil {
			return err
		}
		defer c.Close()
		return fn(cmd, c, args)
	}
}
