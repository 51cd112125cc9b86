package zctl

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// isolate points every config and cluster location at dir and clears the
// ZONEFLEET_* variables a developer's shell may carry.
func isolate(t *testing.T, dir string) {
	t.Helper()
	for _, v := range []string{"ZONEFLEET_ARBITER", "ZONEFLEET_ETCD", "ZONEFLEET_NAMESPACE", "ZONEFLEET_TOKEN", "ZONEFLEET_TOKEN_FILE",
		"ZONEFLEET_CONFIG", "ZONEFLEET_CLUSTER_NAME", "ZONEFLEET_CLUSTER", "ZONEFLEET_OUTPUT"} {
		t.Setenv(v, "")
		require.NoError(t, os.Unsetenv(v))
	}
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "xdg"))
}

// runG runs zctl in-process and returns its globals after the command.
func runG(t *testing.T, args ...string) (*Globals, string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	root, g := newRoot(&out, &errb)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	if err != nil {
		errb.WriteString(errorLine(err) + "\n")
	}
	return g, out.String(), errb.String(), ExitCode(err)
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// The precedence of the connection settings: flags > environment >
// --cluster-name > ZONEFLEET_CLUSTER's cluster.json > the config's current
// cluster > the cluster.json of the last `zctl local up`.
func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	isolate(t, dir)
	tokCompose := writeFile(t, filepath.Join(dir, "compose.token"), "tok-compose\n")
	tokFlag := writeFile(t, filepath.Join(dir, "flag.token"), "tok-flagfile")
	cfgPath := filepath.Join(dir, "xdg", "zonefleet", "config.yaml")
	cfg := &ConfigFile{CurrentCluster: "compose", Clusters: []ClusterEntry{
		{Name: "compose", Etcd: []string{"e1:1", "e2:2"}, Arbiters: []string{"a1:1"}, Namespace: "cns", TokenFile: tokCompose},
		{Name: "other", Etcd: []string{"o:1"}, Namespace: "ons"},
	}}
	require.NoError(t, cfg.Save(cfgPath))
	altPath := filepath.Join(dir, "alt.yaml")
	require.NoError(t, (&ConfigFile{CurrentCluster: "alt", Clusters: []ClusterEntry{{Name: "alt", Etcd: []string{"alt:1"}}}}).Save(altPath))
	noCurrent := filepath.Join(dir, "nocurrent.yaml")
	require.NoError(t, (&ConfigFile{Clusters: []ClusterEntry{{Name: "x", Etcd: []string{"x:1"}}}}).Save(noCurrent))
	broken := writeFile(t, filepath.Join(dir, "broken.yaml"), "clusters: [{name: 'bad name!'}]\n")

	// The cluster.json of a local cluster, and the pointer `zctl local up` leaves.
	local := filepath.Join(dir, "local")
	require.NoError(t, os.MkdirAll(local, 0o700))
	require.NoError(t, localcluster.WriteInfo(localcluster.Info{Dir: local, Etcd: []string{"l:1"},
		Arbiters: []localcluster.Endpoint{{ID: "arbiter-1", GRPC: "la:1"}}, AdminToken: "tok-local", Namespace: "lns"}))
	writeFile(t, filepath.Join(dir, "xdg", "zonefleet", "current-cluster"), filepath.Join(local, "cluster.json")+"\n")

	type want struct {
		etcd, arbiter, ns, token, source string
		code                             int
	}
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want want
	}{
		{"the config's current cluster", nil, nil, want{"e1:1,e2:2", "a1:1", "cns", "tok-compose", "config:compose", 0}},
		{"flag endpoints beat the config (both replaced)", nil, []string{"--etcd", "f:1"}, want{"f:1", "", "cns", "tok-compose", "flags", 0}},
		{"env endpoints beat the config", map[string]string{"ZONEFLEET_ARBITER": "v:1"}, nil, want{"", "v:1", "cns", "tok-compose", "flags", 0}},
		{"flag beats env", map[string]string{"ZONEFLEET_ETCD": "v:1"}, []string{"--etcd", "f:1"}, want{"f:1", "", "cns", "tok-compose", "flags", 0}},
		{"namespace flag beats the config", nil, []string{"-n", "x"}, want{"e1:1,e2:2", "a1:1", "x", "tok-compose", "config:compose", 0}},
		{"namespace env beats the config", map[string]string{"ZONEFLEET_NAMESPACE": "y"}, nil, want{"e1:1,e2:2", "a1:1", "y", "tok-compose", "config:compose", 0}},
		{"namespace flag beats env", map[string]string{"ZONEFLEET_NAMESPACE": "y"}, []string{"-n", "z"}, want{"e1:1,e2:2", "a1:1", "z", "tok-compose", "config:compose", 0}},
		{"a token on the command line is refused (ps shows argv)", nil, []string{"--token", "tok-inline"}, want{code: ExitUsage}},
		{"token env beats the config's token file", map[string]string{"ZONEFLEET_TOKEN": "tok-env"}, nil, want{"e1:1,e2:2", "a1:1", "cns", "tok-env", "config:compose", 0}},
		{"--token-file beats the config's", nil, []string{"--token-file", tokFlag}, want{"e1:1,e2:2", "a1:1", "cns", "tok-flagfile", "config:compose", 0}},
		{"$ZONEFLEET_TOKEN beats --token-file", map[string]string{"ZONEFLEET_TOKEN": "tok-env"}, []string{"--token-file", tokFlag}, want{"e1:1,e2:2", "a1:1", "cns", "tok-env", "config:compose", 0}},
		{"--cluster-name picks another cluster (nothing from the current one)", nil, []string{"--cluster-name", "other"}, want{"o:1", "", "ons", "", "config:other", 0}},
		{"ZONEFLEET_CLUSTER_NAME picks another cluster", map[string]string{"ZONEFLEET_CLUSTER_NAME": "other"}, nil, want{"o:1", "", "ons", "", "config:other", 0}},
		{"--cluster-name beats ZONEFLEET_CLUSTER", map[string]string{"ZONEFLEET_CLUSTER": filepath.Join(local, "cluster.json")}, []string{"--cluster-name", "other"}, want{"o:1", "", "ons", "", "config:other", 0}},
		{"an unknown --cluster-name", nil, []string{"--cluster-name", "nope"}, want{code: ExitNotFound}},
		{"ZONEFLEET_CLUSTER's cluster.json beats the current cluster", map[string]string{"ZONEFLEET_CLUSTER": filepath.Join(local, "cluster.json")}, nil, want{"l:1", "la:1", "lns", "tok-local", "cluster.json", 0}},
		{"--config beats ZONEFLEET_CONFIG", map[string]string{"ZONEFLEET_CONFIG": noCurrent}, []string{"--config", altPath}, want{"alt:1", "", "", "", "config:alt", 0}},
		{"ZONEFLEET_CONFIG beats the default path", map[string]string{"ZONEFLEET_CONFIG": altPath}, nil, want{"alt:1", "", "", "", "config:alt", 0}},
		{"no current cluster: the last local up", map[string]string{"ZONEFLEET_CONFIG": noCurrent}, nil, want{"l:1", "la:1", "lns", "tok-local", "cluster.json", 0}},
		{"a broken config is a usage error", map[string]string{"ZONEFLEET_CONFIG": broken}, nil, want{code: ExitUsage}},
		{"--cluster-name in a broken config is a usage error, even with flag endpoints", map[string]string{"ZONEFLEET_CONFIG": broken}, []string{"--cluster-name", "x", "--etcd", "f:1"}, want{code: ExitUsage}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			g, out, errOut, code := runG(t, append(c.args, "config", "current", "-o", "json")...)
			require.Equal(t, c.want.code, code, "stdout %s stderr %s", out, errOut)
			if code != 0 {
				if c.want.code == ExitUsage && c.env["ZONEFLEET_CONFIG"] == broken {
					assert.Contains(t, errOut, broken, "the error names the file")
				}
				return
			}
			assert.Equal(t, c.want.etcd, g.Etcd)
			assert.Equal(t, c.want.arbiter, g.Arbiter)
			assert.Equal(t, c.want.ns, g.Namespace)
			assert.Equal(t, c.want.token, g.Token)
			var got struct {
				Source   Source `json:"source"`
				HasToken bool   `json:"has_token"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &got), out)
			src := got.Source.Kind
			if got.Source.Name != "" {
				src += ":" + got.Source.Name
			}
			assert.Equal(t, c.want.source, src)
			assert.Equal(t, c.want.token != "", got.HasToken)
			if c.want.token != "" {
				assert.NotContains(t, out, c.want.token, "the token itself is never printed")
			}
		})
	}
}

// config set / use / list / current / delete, the file's mode and its refusals.
func TestConfigCommands(t *testing.T) {
	dir := t.TempDir()
	isolate(t, dir)
	path := DefaultConfigPath()
	assert.Equal(t, filepath.Join(dir, "xdg", "zonefleet", "config.yaml"), path)
	tok := writeFile(t, filepath.Join(dir, "compose.token"), "secret-token\n")

	// Nothing configured: list is empty, current says so.
	_, out, _, code := runG(t, "config", "list")
	require.Equal(t, 0, code)
	assert.Equal(t, "CURRENT  NAME  ETCD  ARBITERS  NAMESPACE  TOKEN FILE\n", squeeze(out))
	_, out, _, code = runG(t, "config", "current")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "from:")
	assert.Contains(t, out, "nothing")

	// An inline token is refused; nothing is written.
	_, _, errOut, code := runG(t, "config", "set", "compose", "--etcd", "127.0.0.1:2379", "--token", "secret-token")
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, errOut, "--token-file")
	assert.NoFileExists(t, path)

	// set with a relative token file (made absolute), --use.
	t.Chdir(dir)
	_, out, errOut, code = runG(t, "config", "set", "compose", "--etcd", "127.0.0.1:2379,127.0.0.1:22379", "--arbiter", "127.0.0.1:7700",
		"--token-file", "compose.token", "-n", "tenant", "--ca-file", "ca.pem", "--use")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "it is the current cluster")
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "config file mode")
	st, err = os.Stat(filepath.Dir(path))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm(), "config directory mode")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "secret-token", "the config holds no token")
	assert.Contains(t, string(b), "token-file: "+tok)
	assert.Contains(t, string(b), "ca-file: "+filepath.Join(dir, "ca.pem"))
	assert.Contains(t, string(b), "version: 1")

	// set changes only what is given.
	_, _, errOut, code = runG(t, "config", "set", "compose", "-n", "other-ns")
	require.Equal(t, 0, code, errOut)
	c, err := LoadConfig(path)
	require.NoError(t, err)
	e, ok := c.Find("compose")
	require.True(t, ok)
	assert.Equal(t, ClusterEntry{Name: "compose", Etcd: []string{"127.0.0.1:2379", "127.0.0.1:22379"}, Arbiters: []string{"127.0.0.1:7700"},
		Namespace: "other-ns", TokenFile: tok, CAFile: filepath.Join(dir, "ca.pem")}, *e)

	// --arbiter alone keeps the etcd endpoints.
	_, _, errOut, code = runG(t, "config", "set", "compose", "--arbiter", "127.0.0.1:7700,127.0.0.1:7710")
	require.Equal(t, 0, code, errOut)
	c, err = LoadConfig(path)
	require.NoError(t, err)
	e, _ = c.Find("compose")
	assert.Equal(t, []string{"127.0.0.1:2379", "127.0.0.1:22379"}, e.Etcd)
	assert.Equal(t, []string{"127.0.0.1:7700", "127.0.0.1:7710"}, e.Arbiters)
	_, _, errOut, code = runG(t, "config", "set", "compose", "--arbiter", "127.0.0.1:7700")
	require.Equal(t, 0, code, errOut)

	// A second cluster; use switches; list marks the current one.
	_, _, errOut, code = runG(t, "config", "set", "lab", "--etcd", "10.0.0.1:2379")
	require.Equal(t, 0, code, errOut)
	_, _, _, code = runG(t, "config", "use", "lab")
	require.Equal(t, 0, code)
	_, out, _, code = runG(t, "config", "list")
	require.Equal(t, 0, code)
	assert.Equal(t, "CURRENT  NAME  ETCD  ARBITERS  NAMESPACE  TOKEN FILE\n"+
		"  compose  127.0.0.1:2379,127.0.0.1:22379  127.0.0.1:7700  other-ns  "+tok+"\n"+
		"*  lab  10.0.0.1:2379  -  -  -\n", squeeze(out))
	_, out, _, code = runG(t, "config", "list", "-o", "json")
	require.Equal(t, 0, code)
	var listed struct {
		CurrentCluster string         `json:"current_cluster"`
		Clusters       []ClusterEntry `json:"clusters"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	assert.Equal(t, "lab", listed.CurrentCluster)
	assert.Len(t, listed.Clusters, 2)
	g, _, _, code := runG(t, "config", "current")
	require.Equal(t, 0, code)
	assert.Equal(t, "10.0.0.1:2379", g.Etcd)

	// Errors: unknown cluster, bad name, bad endpoint, missing token file; nothing changes.
	before, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, bad := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"config", "use", "nope"}, ExitNotFound, "no cluster \"nope\""},
		{[]string{"config", "delete", "nope"}, ExitNotFound, "no cluster \"nope\""},
		{[]string{"config", "set", "bad name"}, ExitUsage, "cluster name"},
		{[]string{"config", "set", "x", "--etcd", "no-port"}, ExitUsage, "want host:port"},
		{[]string{"config", "set", "x", "--token-file", filepath.Join(dir, "missing")}, ExitUsage, "token file"},
		{[]string{"config", "use"}, ExitUsage, "accepts 1 arg"},
	} {
		_, _, errOut, code := runG(t, bad.args...)
		assert.Equal(t, bad.code, code, "%v: %s", bad.args, errOut)
		assert.Contains(t, errOut, bad.msg, "%v", bad.args)
	}
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after), "failed commands change nothing")

	// delete the current cluster: none is current afterwards.
	_, _, _, code = runG(t, "config", "delete", "lab")
	require.Equal(t, 0, code)
	c, err = LoadConfig(path)
	require.NoError(t, err)
	assert.Empty(t, c.CurrentCluster)
	assert.Len(t, c.Clusters, 1)

	// A file from a newer zctl is refused and left alone.
	newer := writeFile(t, filepath.Join(dir, "newer.yaml"), "version: 2\nclusters: []\n")
	_, _, errOut, code = runG(t, "--config", newer, "config", "set", "y", "--etcd", "h:1")
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, errOut, "upgrade zctl")
	b, err = os.ReadFile(newer)
	require.NoError(t, err)
	assert.Equal(t, "version: 2\nclusters: []\n", string(b))
}

func TestParseConfigErrors(t *testing.T) {
	for _, c := range []struct {
		name, in, msg string
	}{
		{"unknown field", "clusters: []\nendpoints: [a]\n", "unknown field"},
		{"duplicate cluster", "clusters: [{name: a}, {name: a}]\n", "twice"},
		{"current not a cluster", "current-cluster: b\nclusters: [{name: a}]\n", "not one of the clusters"},
		{"relative token file", "clusters: [{name: a, token-file: tok}]\n", "not absolute"},
		{"bad endpoint", "clusters: [{name: a, etcd: ['http://x']}]\n", "want host:port"},
		{"negative version", "version: -1\n", "not valid"},
		{"not yaml", "{{{", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.in))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.msg)
		})
	}
	got, err := ParseConfig([]byte("version: 1\ncurrent-cluster: a\nclusters: [{name: a, etcd: ['http://127.0.0.1:2379'], arbiters: ['[::1]:7700']}]\n"))
	require.NoError(t, err)
	assert.Equal(t, "a", got.CurrentCluster)
}

// Whatever the bytes, ParseConfig returns a config or an error, and a config
// it accepts saves and parses back to itself.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("version: 1\ncurrent-cluster: a\nclusters: [{name: a, etcd: ['127.0.0.1:2379'], namespace: n}]\n"))
	f.Add([]byte("clusters: [{name: a}, {name: b, token-file: /t}]\n"))
	f.Add([]byte("version: 9\n"))
	f.Add([]byte("{}"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		path := filepath.Join(dir, "c.yaml")
		require.NoError(t, c.Save(path))
		back, err := LoadConfig(path)
		require.NoError(t, err)
		assert.Equal(t, c.CurrentCluster, back.CurrentCluster)
		assert.Equal(t, len(c.Clusters), len(back.Clusters))
	})
}

// `zctl local up` adds the cluster "local" (endpoints, namespace, the token
// file) to the config and makes it current; other commands then find it.
func TestLocalUpRegistersCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster")
	}
	dir := t.TempDir()
	isolate(t, dir)
	cfgPath := filepath.Join(dir, "cfg", "config.yaml")
	require.NoError(t, (&ConfigFile{CurrentCluster: "compose", Clusters: []ClusterEntry{{Name: "compose", Etcd: []string{"127.0.0.1:1"}}}}).Save(cfgPath))
	data := filepath.Join(dir, "data")

	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	root := NewRoot(&out, &errb)
	root.SetArgs([]string{"--config", cfgPath, "local", "up", "--data", data, "--nodes", "1", "--clock", "off", "--default-namespace", "lns", "--token-file", ""})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	var c *ConfigFile
	require.Eventually(t, func() bool {
		var err error
		c, err = LoadConfig(cfgPath)
		return err == nil && c.CurrentCluster == LocalClusterName
	}, 60*time.Second, 100*time.Millisecond, "local up registers itself")
	e, ok := c.Find(LocalClusterName)
	require.True(t, ok)
	assert.Equal(t, "lns", e.Namespace)
	assert.Equal(t, filepath.Join(data, "pki", "admin.token"), e.TokenFile)
	assert.Equal(t, filepath.Join(data, "pki", "ca.crt"), e.CAFile, "the entry names the local CA")
	assert.Equal(t, filepath.Join(data, "pki", "admin.crt"), e.CertFile)
	js, err := os.Stat(filepath.Join(data, "cluster.json"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), js.Mode().Perm(), "cluster.json is private")
	in, err := localcluster.ReadInfo(filepath.Join(data, "cluster.json"))
	require.NoError(t, err)
	assert.Empty(t, in.AdminToken, "no secret in cluster.json, only paths")
	assert.Equal(t, e.TokenFile, in.AdminTokenFile)
	require.Len(t, e.Arbiters, 1)
	require.NotEmpty(t, e.Etcd)
	_, ok = c.Find("compose")
	assert.True(t, ok, "other clusters stay")
	st, err := os.Stat(e.TokenFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	// Another zctl finds the cluster through the config alone.
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "Ready.") }, 30*time.Second, 50*time.Millisecond)
	_, nsOut, errOut, code := runG(t, "--config", cfgPath, "ns", "list")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, nsOut, "lns")
	g, _, _, code := runG(t, "--config", cfgPath, "config", "current")
	require.Equal(t, 0, code)
	assert.Equal(t, strings.Join(e.Arbiters, ","), g.Arbiter)
	tok, err := os.ReadFile(e.TokenFile)
	require.NoError(t, err)
	assert.Equal(t, strings.TrimSpace(string(tok)), g.Token)
	assert.True(t, strings.HasPrefix(g.Token, "zfa_"), "a random admin token, not local-<time>")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("local up did not stop")
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRegisterLocalWanted(t *testing.T) {
	for _, c := range []struct {
		name, cluster, config string
		want                  bool
	}{
		{"default", "", "", true},
		{"ZONEFLEET_CLUSTER names a pointer file", "/x/current", "", true},
		{"ZONEFLEET_CLUSTER names the cluster.json: leave the user's config", "/x/cluster.json", "", false},
		{"... unless a config is named", "/x/cluster.json", "/c.yaml", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("ZONEFLEET_CLUSTER", c.cluster)
			assert.Equal(t, c.want, registerLocalWanted(&Globals{ConfigPath: c.config}))
		})
	}
}
