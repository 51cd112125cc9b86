package auth

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
		st, err := os.Stat(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), e.Name())
	}
	sort.Strings(out)
	return out
}

func TestExportLeastPrivilege(t *testing.T) {
	src := filepath.Join(t.TempDir(), "pki")
	_, err := InitDir(InitOptions{Dir: src, Nodes: []string{"n1", "n2"}})
	require.NoError(t, err)
	comps, err := Components(src)
	require.NoError(t, err)
	assert.Equal(t, []string{"admin", "arbiter", "etcd", "node-n1", "node-n2"}, comps)

	out := filepath.Join(t.TempDir(), "export")
	files, err := ExportAll(src, out)
	require.NoError(t, err)
	assert.Len(t, files, 4+3+5+4+4)

	want := map[string][]string{
		"etcd":    {"ca.crt", "etcd.crt", "etcd.key"},
		"arbiter": {"arbiter.crt", "arbiter.key", "ca.crt", FileSigningKey, FileVerifyKeys},
		"node-n1": {"ca.crt", "node-n1.crt", "node-n1.key", FileVerifyKeys},
		"node-n2": {"ca.crt", "node-n2.crt", "node-n2.key", FileVerifyKeys},
		"admin":   {"admin.crt", "admin.key", FileAdminToken, "ca.crt"},
	}
	for c, names := range want {
		got := listDir(t, filepath.Join(out, c))
		assert.Equal(t, names, got, c)
		assert.NotContains(t, got, FileCAKey, c)
		st, err := os.Stat(filepath.Join(out, c))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())
		for _, n := range names {
			a, err := os.ReadFile(filepath.Join(src, n))
			require.NoError(t, err)
			b, err := os.ReadFile(filepath.Join(out, c, n))
			require.NoError(t, err)
			assert.Equal(t, a, b, "%s/%s is a copy", c, n)
		}
	}

	// A node's export is a working --pki-dir: its certificate and the
	// token verification keys load, and there is no issuer, no admin token.
	b, err := Load(DirFiles(filepath.Join(out, "node-n1"), pki.Role{Kind: pki.RoleNode, Name: "n1"}, false, false))
	require.NoError(t, err)
	assert.NotNil(t, b.Cert)
	assert.NotNil(t, b.Verifier)
	assert.Nil(t, b.Issuer)
	assert.Empty(t, b.AdminToken)
	// The arbiter's can issue tenant tokens.
	b, err = Load(DirFiles(filepath.Join(out, "arbiter"), pki.Role{Kind: pki.RoleArbiter}, true, false))
	require.NoError(t, err)
	assert.NotNil(t, b.Issuer)
}

func TestExportIdempotentRenewsAndCleans(t *testing.T) {
	src := filepath.Join(t.TempDir(), "pki")
	_, err := InitDir(InitOptions{Dir: src, Nodes: []string{"n1"}})
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "n1")
	files, err := ExportDir(src, "node-n1", out)
	require.NoError(t, err)
	assert.Len(t, files, 4)

	// Again: nothing changes.
	files, err = ExportDir(src, "node-n1", out)
	require.NoError(t, err)
	assert.Empty(t, files)

	// A renewed certificate reaches the export; a stray CA key, signing key
	// or admin token (an older layout) is removed; other files stay.
	_, err = IssueInDir(src, pki.Role{Kind: pki.RoleNode, Name: "n1"}, []string{"localhost"}, 0, true)
	require.NoError(t, err)
	for _, n := range []string{FileCAKey, FileSigningKey, FileAdminToken, "node-n2.key"} {
		require.NoError(t, os.WriteFile(filepath.Join(out, n), []byte("x"), 0o600))
	}
	require.NoError(t, os.WriteFile(filepath.Join(out, "README"), []byte("x"), 0o600))
	files, err = ExportDir(src, "node-n1", out)
	require.NoError(t, err)
	kinds := map[string]string{}
	for _, f := range files {
		kinds[filepath.Base(f.Path)] = f.Kind
	}
	assert.Equal(t, map[string]string{"node-n1.crt": "cert", "node-n1.key": "key", FileCAKey: "removed",
		FileSigningKey: "removed", FileAdminToken: "removed", "node-n2.key": "removed"}, kinds)
	assert.Equal(t, []string{"README", "ca.crt", "node-n1.crt", "node-n1.key", FileVerifyKeys}, listDir(t, out))
	a, _ := os.ReadFile(filepath.Join(src, "node-n1.crt"))
	b, _ := os.ReadFile(filepath.Join(out, "node-n1.crt"))
	assert.Equal(t, a, b)

	// A loosened mode is repaired.
	require.NoError(t, os.Chmod(filepath.Join(out, "node-n1.key"), 0o644))
	files, err = ExportDir(src, "node-n1", out)
	require.NoError(t, err)
	assert.Len(t, files, 1)
	listDir(t, out)
}

func TestExportRefusesBadInput(t *testing.T) {
	src := filepath.Join(t.TempDir(), "pki")
	_, err := InitDir(InitOptions{Dir: src, Nodes: []string{"n1"}})
	require.NoError(t, err)
	var ia *zerr.InvalidArgumentError
	var nf *zerr.NotFoundError
	for _, c := range []string{"", "ca", "node-", "node-a/b", "../etcd", "Admin", "node:n1"} {
		out := filepath.Join(t.TempDir(), "x")
		_, err := ExportDir(src, c, out)
		assert.True(t, errors.As(err, &ia), "%q: %v", c, err)
		_, statErr := os.Stat(out)
		assert.True(t, os.IsNotExist(statErr), "%q: nothing written", c)
	}
	_, err = ExportDir(src, "etcd", src)
	assert.True(t, errors.As(err, &ia), "exporting into the init directory: %v", err)
	out := filepath.Join(t.TempDir(), "x")
	_, err = ExportDir(src, "node-n9", out)
	assert.True(t, errors.As(err, &nf), "%v", err)
	_, statErr := os.Stat(out)
	assert.True(t, os.IsNotExist(statErr))
	// A private source file others can read is refused, not copied.
	require.NoError(t, os.Chmod(filepath.Join(src, "etcd.key"), 0o644))
	_, err = ExportDir(src, "etcd", out)
	assert.Error(t, err)
	_, err = ExportAll(t.TempDir(), out)
	assert.True(t, errors.As(err, &nf), "%v", err)
}
