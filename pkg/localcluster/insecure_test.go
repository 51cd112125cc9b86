package localcluster

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// A cluster is secure by default; Insecure drops TLS but not
// authentication: the operator needs the admin token, a tenant its namespace
// token (node-to-node calls carry node tokens), and a caller without
// credentials is refused.
//
// The tenant's data path goes over the nodes' unix sockets by default; the
// tcp case keeps it on TLS over TCP, as a mount on another host.
func TestSecurityModes(t *testing.T) {
	for _, tc := range []struct {
		name          string
		insecure, tcp bool
	}{{"tls", false, false}, {"tls over tcp", false, true}, {"insecure", true, false}} {
		insecure := tc.insecure
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			dir := t.TempDir()
			cl, err := Start(ctx, Config{Dir: dir, Nodes: 2, Clock: "off", Device: TinyDevice(), Insecure: insecure, TCPOnly: tc.tcp})
			require.NoError(t, err)
			defer cl.Close()

			st, err := os.Stat(cl.AdminTokenFile())
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
			assert.NotContains(t, cl.AdminToken(), "local-")
			assert.Equal(t, insecure, cl.Info().Insecure)
			assert.Equal(t, filepath.Join(dir, "pki", "ca.crt"), cl.Info().CAFile)

			admin, err := client.New(ctx, cl.AdminClientConfig())
			require.NoError(t, err)
			defer admin.Close()
			_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "t", MaxActiveVzones: 2, ZonesPerVzone: 2})
			require.NoError(t, err)

			tcfg := cl.ClientConfig("t")
			assert.Equal(t, tc.tcp, len(tcfg.LocalSockets) == 0)
			tenant, err := client.New(ctx, tcfg)
			require.NoError(t, err)
			defer tenant.Close()
			vz, err := tenant.OpenVZone(ctx)
			require.NoError(t, err)
			data := bytes.Repeat([]byte("z"), 4096*8)
			require.NoError(t, vz.Write(ctx, 0, data))
			got, err := vz.Read(ctx, 0, 8)
			require.NoError(t, err)
			assert.Equal(t, data, got)

			// No credentials at all (plaintext for the insecure cluster, TLS
			// without a certificate or token for the secure one).
			anon := client.Config{Arbiters: cl.ArbiterAddrs(), TLS: cl.ClientTLS(), RetryDeadline: time.Second}
			_, err = client.New(ctx, anon)
			require.Error(t, err)
			assert.ErrorIs(t, err, zerr.ErrUnauthenticated)
		})
	}
}
