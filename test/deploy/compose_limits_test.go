package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestComposeBoundedAndClosed checks deploy/docker-compose.yml without
// docker: every service has a memory limit; Grafana has no anonymous
// access and no password in the file (it reads a generated one from the
// grafana-secret volume, written by a one-shot that runs first);
// Prometheus, which has no authentication, listens on loopback by default.
func TestComposeBoundedAndClosed(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", "docker-compose.yml"))
	require.NoError(t, err)
	var f struct {
		Services map[string]struct {
			MemLimit    string                    `json:"mem_limit"`
			Command     any                       `json:"command"`
			Environment map[string]string         `json:"environment"`
			Volumes     []string                  `json:"volumes"`
			DependsOn   map[string]map[string]any `json:"depends_on"`
		} `json:"services"`
	}
	require.NoError(t, yaml.Unmarshal(b, &f))
	require.NotEmpty(t, f.Services)
	for name, s := range f.Services {
		assert.NotEmpty(t, s.MemLimit, "%s has no memory limit", name)
	}

	g, ok := f.Services["grafana"]
	require.True(t, ok)
	assert.Equal(t, "false", g.Environment["GF_AUTH_ANONYMOUS_ENABLED"], "no anonymous Grafana")
	_, plain := g.Environment["GF_SECURITY_ADMIN_PASSWORD"]
	assert.False(t, plain, "no admin password in the compose file or its defaults")
	assert.Equal(t, "/secret/admin-password", g.Environment["GF_SECURITY_ADMIN_PASSWORD__FILE"])
	assert.Contains(t, g.Volumes, "grafana-secret:/secret:ro")
	assert.Equal(t, "service_completed_successfully", g.DependsOn["grafana-password"]["condition"], "the password exists before Grafana starts")
	gen, ok := f.Services["grafana-password"]
	require.True(t, ok)
	script := strings.Join(toStrings(gen.Command), "\n")
	assert.Contains(t, script, "/dev/urandom", "the password is random")
	assert.Contains(t, script, "umask 077")
	assert.Contains(t, script, `if [ ! -s "$$f" ]`, "kept on later starts")

	p, ok := f.Services["prometheus"]
	require.True(t, ok)
	assert.Contains(t, toStrings(p.Command), "--web.listen-address=${PROMETHEUS_LISTEN:-127.0.0.1:9090}", "Prometheus on loopback")
}

func toStrings(v any) []string {
	switch c := v.(type) {
	case string:
		return []string{c}
	case []any:
		out := make([]string, 0, len(c))
		for _, x := range c {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}
