package deploy

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestComposeLeastPrivilegePKI checks deploy/docker-compose.yml without
// docker: the init volume `pki` (it holds ca.key) is mounted only by the
// one-shot pki services, read-only by the exports; every long-running
// etcd, arbiter and ssdnode mounts exactly one per-component volume,
// read-only at /pki, filled by the export of its own component.
func TestComposeLeastPrivilegePKI(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", "docker-compose.yml"))
	require.NoError(t, err)
	var f struct {
		Services map[string]struct {
			Command []string `json:"command"`
			Volumes []string `json:"volumes"`
			Restart string   `json:"restart"`
		} `json:"services"`
	}
	require.NoError(t, yaml.Unmarshal(b, &f))
	exportOf := map[string]string{} // volume → component exported into it
	for name, s := range f.Services {
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if parts[0] != "pki" {
				continue
			}
			assert.True(t, name == "pki" || strings.HasPrefix(name, "pki-"), "%s mounts the init volume pki (it holds ca.key)", name)
			assert.Equal(t, "no", s.Restart, "%s is a one-shot step", name)
			if name != "pki" {
				assert.Equal(t, "ro", parts[len(parts)-1], "%s mounts pki read-only", name)
			}
		}
		if strings.HasPrefix(name, "pki-") {
			var comp, out string
			for _, a := range s.Command {
				if v, ok := strings.CutPrefix(a, "--component="); ok {
					comp = v
				}
				if v, ok := strings.CutPrefix(a, "--out="); ok {
					out = v
				}
			}
			require.NotEmpty(t, comp, name)
			for _, v := range s.Volumes {
				if parts := strings.Split(v, ":"); len(parts) >= 2 && parts[1] == out {
					exportOf[parts[0]] = comp
				}
			}
		}
	}
	want := map[string]string{"etcd-1": "etcd", "etcd-2": "etcd", "etcd-3": "etcd", "arbiter-1": "arbiter", "arbiter-2": "arbiter",
		"ssdnode-1": "node-node-1", "ssdnode-2": "node-node-2", "ssdnode-3": "node-node-3", "ssdnode-4": "node-node-4"}
	for name, comp := range want {
		s, ok := f.Services[name]
		require.True(t, ok, name)
		var mounts []string
		for _, v := range s.Volumes {
			if parts := strings.Split(v, ":"); len(parts) >= 2 && parts[1] == "/pki" {
				mounts = append(mounts, v)
				assert.Equal(t, comp, exportOf[parts[0]], "%s mounts %s, the export of %s", name, parts[0], exportOf[parts[0]])
				assert.Equal(t, "ro", parts[len(parts)-1], "%s mounts /pki read-only", name)
			}
		}
		assert.Len(t, mounts, 1, "%s: one PKI volume at /pki", name)
	}
}

// TestComposeAppliesEtcdRoles checks deploy/docker-compose.yml without
// docker: the one-shot etcd-roles runs `zctl cert etcd-roles` with the
// etcd export only, after etcd is healthy, naming every node the compose
// file runs; every arbiter and ssdnode starts only after it succeeded, so
// no component ever reaches etcd before authentication is on.
func TestComposeAppliesEtcdRoles(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", "docker-compose.yml"))
	require.NoError(t, err)
	type dep struct {
		Condition string `json:"condition"`
	}
	var f struct {
		Services map[string]struct {
			Command   []string       `json:"command"`
			Volumes   []string       `json:"volumes"`
			Restart   string         `json:"restart"`
			DependsOn map[string]dep `json:"depends_on"`
		} `json:"services"`
	}
	require.NoError(t, yaml.Unmarshal(b, &f))
	roles, ok := f.Services["etcd-roles"]
	require.True(t, ok, "a one-shot etcd-roles service")
	assert.Equal(t, "no", roles.Restart)
	require.GreaterOrEqual(t, len(roles.Command), 3)
	assert.Equal(t, []string{"zctl", "cert", "etcd-roles"}, roles.Command[:3])
	assert.Equal(t, []string{"pki-etcd:/pki:ro"}, roles.Volumes, "the etcd export only (never the CA key)")
	var nodes []string
	for _, a := range roles.Command {
		if v, ok := strings.CutPrefix(a, "--nodes="); ok {
			nodes = strings.Split(v, ",")
		}
	}
	for _, m := range []string{"etcd-1", "etcd-2", "etcd-3"} {
		assert.Equal(t, "service_healthy", roles.DependsOn[m].Condition, "etcd-roles waits for %s", m)
	}
	var want []string
	for name, s := range f.Services {
		if !strings.HasPrefix(name, "arbiter-") && !strings.HasPrefix(name, "ssdnode-") {
			continue
		}
		assert.Equal(t, "service_completed_successfully", s.DependsOn["etcd-roles"].Condition, "%s starts after etcd-roles", name)
		for _, a := range s.Command {
			if v, ok := strings.CutPrefix(a, "--id="); ok && strings.HasPrefix(name, "ssdnode-") {
				want = append(want, v)
			}
		}
	}
	sort.Strings(want)
	sort.Strings(nodes)
	assert.Equal(t, want, nodes, "etcd-roles gives every node of the compose file its role")
}
