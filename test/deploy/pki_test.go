//go:build deploy

package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/auth"
)

// TestComponentsHoldOnlyTheirOwnKeys: least privilege per component. Each
// running container's /pki (its own volume, mounted read-only)
// holds exactly what `zctl cert export` gives that component: never the CA
// key, never the admin token, the token signing key only on arbiters. The
// files are copied out of the live containers (docker cp reads the mount
// the server uses), so a compose change that mounted the whole `pki`
// volume again fails here.
func TestComponentsHoldOnlyTheirOwnKeys(t *testing.T) {
	component := map[string]string{
		"etcd-1": "etcd", "etcd-2": "etcd", "etcd-3": "etcd",
		"arbiter-1": "arbiter", "arbiter-2": "arbiter",
		"ssdnode-1": "node-node-1", "ssdnode-2": "node-node-2", "ssdnode-3": "node-node-3", "ssdnode-4": "node-node-4",
	}
	for svc, comp := range component {
		id := strings.TrimSpace(compose(t, "ps", "-q", svc))
		require.NotEmpty(t, id, svc)
		dir := t.TempDir()
		out, err := exec.Command("docker", "cp", id+":/pki/.", dir).CombinedOutput()
		require.NoError(t, err, "%s: %s", svc, out)
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		var got []string
		for _, e := range ents {
			got = append(got, e.Name())
			st, err := os.Stat(filepath.Join(dir, e.Name()))
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "%s: %s", svc, e.Name())
		}
		sort.Strings(got)
		want, err := auth.ExportedFiles(comp)
		require.NoError(t, err)
		sort.Strings(want)
		assert.Equal(t, want, got, svc)
		assert.NotContains(t, got, auth.FileCAKey, svc)
		assert.NotContains(t, got, auth.FileAdminToken, svc)
		if comp != "arbiter" {
			assert.NotContains(t, got, auth.FileSigningKey, svc)
		}
		// The exported certificate is the one in the init volume.
		crt := comp + ".crt"
		a, err := os.ReadFile(filepath.Join(dir, crt))
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(pkiDir, crt))
		require.NoError(t, err)
		assert.Equal(t, b, a, svc)
	}
	// The operator's export: the admin certificate, no CA key.
	id := strings.TrimSpace(compose(t, "ps", "-a", "-q", "pki-admin"))
	require.NotEmpty(t, id)
	dir := t.TempDir()
	out, err := exec.Command("docker", "cp", id+":/pki/.", dir).CombinedOutput()
	require.NoError(t, err, string(out))
	_, err = os.Stat(filepath.Join(dir, "admin.crt"))
	assert.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, auth.FileCAKey))
	assert.True(t, os.IsNotExist(err))
}
