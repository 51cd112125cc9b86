package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The server binaries are secure by default: no credentials, no start; no
// secrets in argv; no weak admin token; TLS-only listeners that refuse
// unauthenticated calls.
func TestSecureServerBinaries(t *testing.T) {
	dir := t.TempDir()
	pkiDir := filepath.Join(dir, "pki")
	_, err := auth.InitDir(auth.InitOptions{Dir: pkiDir, Nodes: []string{"e2e-n1"}, Hosts: []string{"127.0.0.1", "localhost"}})
	require.NoError(t, err)
	node := func(extra ...string) []string {
		return append(append([]string{"--id=e2e-n1", "--standalone", "--data=" + t.TempDir(), "--clock=off", "--listen=127.0.0.1:0", "--http-listen="}, smallDrive...), extra...)
	}

	t.Run("refusals", func(t *testing.T) {
		for _, tc := range []struct {
			name, bin string
			env       []string
			args      []string
			code      int
			says      string
		}{
			{"no credentials and no --insecure", "ssdnode", nil, node(), 1, "--insecure"},
			{"the node has no admin token flag any more", "ssdnode", nil, node("--pki-dir="+pkiDir, "--admin-token=zfa_whatever"), 2, "unknown flag"},
			{"the arbiter has no admin token flag any more", "arbiter", nil, []string{"--listen=127.0.0.1:0", "--http-listen=", "--pki-dir=" + pkiDir, "--admin-token", "zonefleet"}, 2, "unknown flag"},
			{"well-known admin token in the environment", "ssdnode", []string{"ZONEFLEET_ADMIN_TOKEN=zonefleet"}, node("--insecure"), 1, "well-known"},
			{"weak admin token file", "ssdnode", nil, node("--pki-dir="+pkiDir, "--admin-token-file="+weakFile(t, "local-1700000000")), 1, "predictable"},
			{"admin token file readable by others", "ssdnode", nil, node("--pki-dir="+pkiDir, "--admin-token-file="+openFile(t)), 1, "chmod 600"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				out, code := run(t, tc.env, tc.bin, tc.args...)
				assert.Equal(t, tc.code, code, out)
				assert.Contains(t, out, tc.says)
			})
		}
	})

	t.Run("TLS and authentication", func(t *testing.T) {
		p := start(t, "ssdnode", append(node("--pki-dir="+pkiDir), "--http-listen=127.0.0.1:0")...)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard for the calls below
		defer cancel()
		b, err := auth.Load(auth.DirFiles(pkiDir, pki.Role{Kind: pki.RoleAdmin}, false, true))
		require.NoError(t, err)
		report := func(opts ...grpc.DialOption) error {
			cc, err := grpc.NewClient(p.grpcAddr, append(rpcerr.DialOptions(), opts...)...)
			require.NoError(t, err)
			defer cc.Close()
			_, err = v1.NewZonedDeviceClient(cc).ReportZones(ctx, &v1.ReportZonesRequest{MaxZones: 1})
			return err
		}
		// Plaintext against the TLS listener: the handshake fails, no handler runs.
		err = report(grpc.WithTransportCredentials(insecure.NewCredentials()))
		assert.ErrorIs(t, err, zerr.ErrUnavailable)
		// TLS without credentials.
		tenantTLS, err := b.ClientTLS(nil, "")
		require.NoError(t, err)
		tenantTLS.GetClientCertificate = nil
		err = report(grpc.WithTransportCredentials(credentials.NewTLS(tenantTLS)))
		assert.ErrorIs(t, err, zerr.ErrUnauthenticated)
		// The admin certificate, and the admin token over TLS, are accepted.
		adminTLS, err := b.ClientTLS(nil, "")
		require.NoError(t, err)
		assert.NoError(t, report(grpc.WithTransportCredentials(credentials.NewTLS(adminTLS))))
		assert.NoError(t, report(grpc.WithTransportCredentials(credentials.NewTLS(tenantTLS)),
			grpc.WithPerRPCCredentials(auth.PerRPC(auth.StaticToken(b.AdminToken), false))))
		// The health service answers anyone who completes the TLS handshake.
		cc, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(tenantTLS)))
		require.NoError(t, err)
		defer cc.Close()
		_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		assert.NoError(t, err)
	})
}

func weakFile(t *testing.T, content string) string {
	p := filepath.Join(t.TempDir(), "weak.token")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func openFile(t *testing.T) string {
	tok, err := auth.GenerateSecret(auth.AdminTokenPrefix)
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "open.token")
	require.NoError(t, os.WriteFile(p, []byte(tok), 0o644))
	require.NoError(t, os.Chmod(p, 0o644))
	return p
}
