package zctl

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// zctl token issue|revoke against a local cluster: the operator issues a
// token (stdout or a 0600 file), the tenant renews its own with it, may not
// issue for another namespace nor revoke (6); after the operator's revoke
// the issued token is refused (UNAUTHENTICATED: exit 6) and a new one works.
func TestTokenIssueRevoke(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	cl, err := localcluster.Start(ctx, localcluster.Config{Dir: dir, Nodes: 1, Clock: "off", Device: localcluster.TinyDevice()})
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, localcluster.WriteInfo(cl.Info()))
	t.Setenv("ZONEFLEET_CLUSTER", filepath.Join(dir, "cluster.json"))
	t.Setenv("ZONEFLEET_CONFIG", filepath.Join(dir, "config.yaml"))
	for _, ns := range []string{"t", "u"} {
		_, errOut, code := run(t, "", "ns", "create", ns, "--max-active-vzones", "1", "--zones-per-vzone", "1")
		require.Equal(t, 0, code, errOut)
	}

	out, errOut, code := run(t, "", "token", "issue", "t", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var issued TokenIssued
	require.NoError(t, json.Unmarshal([]byte(out), &issued), out)
	assert.Equal(t, "t", issued.Namespace)
	assert.Zero(t, issued.Generation)
	assert.WithinDuration(t, time.Now().Add(15*time.Minute), issued.ExpiresAt, time.Minute)
	require.NotEmpty(t, issued.Token)

	tokFile := filepath.Join(dir, "t.token")
	out, errOut, code = run(t, "", "token", "issue", "t", "--ttl", "1h", "--file", tokFile)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "wrote "+tokFile)
	assert.NotContains(t, out, "zf1.", "the token is not printed with --file")
	st, err := os.Stat(tokFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	_, _, code = run(t, "", "token", "issue", "t", "--file", tokFile)
	assert.Equal(t, ExitConflict, code, "an existing file is not overwritten")

	asTenant := []string{"--ca-file", cl.Info().CAFile, "--token-file", tokFile, "--namespace", "t"}
	_, errOut, code = run(t, "", append(asTenant, "token", "issue", "t")...)
	assert.Equal(t, 0, code, "a tenant renews its own token: %s", errOut)
	_, errOut, code = run(t, "", append(asTenant, "token", "issue", "u")...)
	assert.Equal(t, ExitDenied, code, errOut)
	_, errOut, code = run(t, "", append(asTenant, "token", "revoke", "t")...)
	assert.Equal(t, ExitDenied, code, errOut)

	out, errOut, code = run(t, "", "token", "revoke", "t", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var rev TokenRevoked
	require.NoError(t, json.Unmarshal([]byte(out), &rev), out)
	assert.Equal(t, TokenRevoked{Namespace: "t", Generation: 1}, rev)
	require.Eventually(t, func() bool {
		_, _, code := run(t, "", append(asTenant, "token", "issue", "t")...)
		return code == ExitDenied
	}, 10*time.Second, 50*time.Millisecond, "the revoked token is refused")

	out, errOut, code = run(t, "", "token", "issue", "t", "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &issued), out)
	assert.Equal(t, uint64(1), issued.Generation, "new tokens carry the new generation")
	// Rotation: --force replaces the tenant's token file atomically with one
	// of the new generation; the tenant works again.
	before, err := os.ReadFile(tokFile)
	require.NoError(t, err)
	_, errOut, code = run(t, "", "token", "issue", "t", "--file", tokFile, "--force")
	require.Equal(t, 0, code, errOut)
	after, err := os.ReadFile(tokFile)
	require.NoError(t, err)
	assert.NotEqual(t, before, after)
	_, errOut, code = run(t, "", append(asTenant, "token", "issue", "t")...)
	assert.Equal(t, 0, code, "the rotated token works: %s", errOut)
	_, _, code = run(t, "", "token", "issue", "nope")
	assert.Equal(t, 3, code, "unknown namespace: not found")
}
