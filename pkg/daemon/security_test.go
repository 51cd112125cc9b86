package daemon

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/pki"
)

// TestInsecureIsTransportOnly: --insecure makes gRPC plaintext but keeps
// authentication; trusting every caller takes --insecure-open-access, which
// is refused with TLS or with credentials and logged at ERROR level.
func TestInsecureIsTransportOnly(t *testing.T) {
	t.Setenv(AdminTokenEnv, "")
	node := pki.Role{Kind: pki.RoleNode, Name: "n1"}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	_, err := LoadSecurity(SecurityFlags{}, node, false, nil, log)
	assert.ErrorContains(t, err, "--insecure", "TLS by default: no certificate, no start")
	_, err = LoadSecurity(SecurityFlags{Insecure: true}, node, false, nil, log)
	assert.ErrorContains(t, err, "--insecure-open-access", "plaintext without credentials no longer trusts everyone")
	_, err = LoadSecurity(SecurityFlags{OpenAccess: true}, node, false, nil, log)
	assert.ErrorContains(t, err, "needs --insecure")

	sec, err := LoadSecurity(SecurityFlags{Insecure: true, OpenAccess: true}, node, false, nil, log)
	require.NoError(t, err)
	assert.Nil(t, sec.Auth, "open access: no authenticator")
	assert.Contains(t, logs.String(), "level=ERROR")
	assert.Contains(t, logs.String(), "NO authentication")

	dir := t.TempDir()
	_, err = auth.InitDir(auth.InitOptions{Dir: dir, Nodes: []string{"n1"}})
	require.NoError(t, err)
	_, err = LoadSecurity(SecurityFlags{Insecure: true, OpenAccess: true, PKIDir: dir}, node, false, nil, log)
	assert.ErrorContains(t, err, "with credentials configured")
	sec, err = LoadSecurity(SecurityFlags{Insecure: true, PKIDir: dir}, node, false, nil, log)
	require.NoError(t, err)
	require.NotNil(t, sec.Auth, "--insecure with credentials: plaintext, still authenticated")
	assert.Nil(t, sec.TLS)
	require.NotNil(t, sec.Generations, "namespace token revocation is wired by default")
}
