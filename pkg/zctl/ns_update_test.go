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
	"sigs.k8s.io/yaml"
)

// zctl ns update changes the flags given of an existing namespace (admin
// only), in table, JSON and YAML; bad values and refusals are typed exit
// codes and change nothing.
func TestNamespaceUpdate(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	cl, err := localcluster.Start(ctx, localcluster.Config{Dir: dir, Nodes: 2, Clock: "off", Device: localcluster.TinyDevice()})
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, localcluster.WriteInfo(cl.Info()))
	t.Setenv("ZONEFLEET_CLUSTER", filepath.Join(dir, "cluster.json"))
	t.Setenv("ZONEFLEET_CONFIG", filepath.Join(dir, "config.yaml"))
	_, errOut, code := run(t, "", "ns", "create", "u", "--max-active-vzones", "2", "--zones-per-vzone", "2")
	require.Equal(t, 0, code, errOut)

	type ns struct {
		Name            string `json:"name"`
		MaxActiveVzones uint32 `json:"max_active_vzones"`
		Weight          uint32 `json:"weight"`
		Vzones          string `json:"vzones"`
		Redundancy      string `json:"redundancy"`
	}
	out, errOut, code := run(t, "", "ns", "update", "u", "--vzones", "4", "--weight", "3", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var got ns
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	assert.Equal(t, ns{Name: "u", MaxActiveVzones: 2, Weight: 3, Vzones: "4", Redundancy: "none"}, got)

	out, errOut, code = run(t, "", "ns", "update", "u", "--redundancy", "mirror:2", "--max-active-vzones", "1", "-o", "yaml")
	require.Equal(t, 0, code, errOut)
	got = ns{}
	require.NoError(t, yaml.Unmarshal([]byte(out), &got), out)
	assert.Equal(t, ns{Name: "u", MaxActiveVzones: 1, Weight: 3, Vzones: "4", Redundancy: "mirror:2"}, got)

	out, errOut, code = run(t, "", "ns", "update", "u", "--vzones", "0")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "NAMESPACE")
	assert.Contains(t, out, "mirror:2")

	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"nothing to change", []string{"ns", "update", "u"}, ExitUsage},
		{"a bad redundancy", []string{"ns", "update", "u", "--redundancy", "mirror:9"}, ExitUsage},
		{"an unknown namespace", []string{"ns", "update", "nope", "--weight", "2"}, ExitNotFound},
		{"a bad active count", []string{"ns", "update", "u", "--max-active-vzones", "0"}, ExitUsage},
	} {
		_, errOut, code := run(t, "", tc.args...)
		assert.Equal(t, tc.code, code, "%s: %s", tc.name, errOut)
	}

	// Once the namespace holds a v-zone its redundancy is fixed, and a
	// quota must cover what it holds.
	_, errOut, code = run(t, "", "--namespace", "u", "vzone", "open")
	require.Equal(t, 0, code, errOut)
	_, errOut, code = run(t, "", "ns", "update", "u", "--redundancy", "none")
	assert.Equal(t, ExitConflict, code, errOut)
	out, errOut, code = run(t, "", "ns", "show", "u", "-o", "json")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `"mirror:2"`, "a refused update changes nothing")

	// A tenant may not update its namespace.
	tok, err := cl.MintToken("u", time.Minute)
	require.NoError(t, err)
	tokFile := filepath.Join(dir, "u.token")
	require.NoError(t, os.WriteFile(tokFile, []byte(tok), 0o600))
	_, errOut, code = run(t, "", "--ca-file", cl.Info().CAFile, "--token-file", tokFile, "--namespace", "u", "ns", "update", "u", "--vzones", "64")
	assert.Equal(t, ExitDenied, code, errOut)
}
