package zctl

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/node"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var normalizers = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`127\.0\.0\.1:\d+`), "ADDR"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`), "TIME"},
	{regexp.MustCompile(`"seconds":\s*"?\d+"?`), `"seconds": "S"`},
	{regexp.MustCompile(`"nanos":\s*\d+`), `"nanos": 0`},
	{regexp.MustCompile(`(node|arbiter)-\d-\d-\d+`), "$1-OP"},
	{regexp.MustCompile(`(go1\.\d+(\.\d+)?|revision [0-9a-f]+|revision unknown|"revision": "[^"]*"|"version": "[^"]*")`), "BUILD"},
	{regexp.MustCompile(`-\d+-\d+\b`), "-OP"},
	{regexp.MustCompile(`"uuid": "[0-9a-f]+"`), `"uuid": "UUID"`},
	{regexp.MustCompile(`"etcd_revision": "?\d+"?`), `"etcd_revision": "REV"`},
}

func normalize(s string) string {
	for _, n := range normalizers {
		s = n.re.ReplaceAllString(s, n.with)
	}
	return s
}

// squeeze folds runs of spaces: table column widths follow the addresses' lengths.
func squeeze(s string) string { return regexp.MustCompile(` {2,}`).ReplaceAllString(s, "  ") }

// run executes one zctl command in-process and returns stdout, stderr and the exit code.
func run(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	root := NewRoot(&out, &errb)
	root.SetArgs(args)
	if stdin != "" {
		root.SetIn(strings.NewReader(stdin))
	}
	err := root.ExecuteContext(context.Background())
	if err != nil {
		errb.WriteString(errorLine(err) + "\n")
	}
	return out.String(), errb.String(), ExitCode(err)
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name+".golden")
	got = normalize(got)
	if strings.HasSuffix(name, ".table") {
		got = squeeze(got)
	}
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run go test ./pkg/zctl -run Golden -update")
	assert.Equal(t, string(want), got, "golden %s (run with -update to accept a deliberate change)", name)
}

// Every command's table and JSON output against a local cluster.
func TestGoldenOutputs(t *testing.T) {
	dir := t.TempDir()
	fdpOpts := node.DefaultFDPOptions()
	fdpOpts.Devices, fdpOpts.Handles, fdpOpts.RUChips, fdpOpts.OverProvision = 1, []string{"ii", "ii", "pi", "pi"}, 1, 0.3
	cl, err := localcluster.Start(context.Background(), localcluster.Config{Dir: dir, Nodes: 2, Clock: "off", Device: localcluster.TinyDevice(), FDP: fdpOpts})
	require.NoError(t, err)
	defer cl.Close()
	info := cl.Info()
	info.Namespace = "g"
	require.NoError(t, localcluster.WriteInfo(info))
	t.Setenv("ZONEFLEET_CLUSTER", filepath.Join(dir, "cluster.json"))
	t.Setenv("ZONEFLEET_CONFIG", filepath.Join(dir, "config.yaml")) // never the user's config

	steps := []struct {
		name  string
		stdin string
		args  []string
		code  int
	}{
		{"ns-create", "", []string{"ns", "create", "g", "--max-active-vzones", "2", "--zones-per-vzone", "8"}, 0},
		{"ns-create-again", "", []string{"ns", "create", "g"}, ExitConflict},
		{"ns-create-fdp", "", []string{"ns", "create", "f", "--kind", "fdp", "--capacity", "256KiB", "--handles", "2"}, 0},
		{"ns-create-bad-kind", "", []string{"ns", "create", "x", "--kind", "zfs"}, ExitUsage},
		{"ns-create-fdp-too-big", "", []string{"ns", "create", "x", "--kind", "fdp", "--capacity", "1TiB"}, ExitNoResources},
		{"ns-list", "", []string{"ns", "list"}, 0},
		{"ns-show", "", []string{"ns", "show", "g"}, 0},
		{"ns-show-missing", "", []string{"ns", "show", "nope"}, ExitNotFound},
		{"ns-show-fdp", "", []string{"ns", "get", "f"}, 0},
		{"cluster-status", "", []string{"cluster", "status"}, 0},
		{"node-list", "", []string{"node", "list"}, 0},
		{"node-show", "", []string{"node", "show", "node-1"}, 0},
		{"vzone-open", "", []string{"vzone", "open"}, 0},
		{"vzone-write", "", []string{"vzone", "write", "0", "-"}, 0},
		{"vzone-list", "", []string{"vzone", "list"}, 0},
		{"vzone-show", "", []string{"vzone", "show", "0"}, 0},
		{"vzone-write-off-wp", "", []string{"vzone", "write", "0", "-", "--offset", "0"}, ExitConflict},
		{"zone-report", "", []string{"zone", "report", "--node", "node-1", "--max", "4"}, 0},
		{"zone-report-open", "", []string{"zone", "report", "--node", "node-1", "--state", "imp_opened"}, 0},
		{"zone-id", "", []string{"zone", "id", "--node", "node-1"}, 0},
		{"zone-mapping", "", []string{"zone", "mapping", "--node", "node-1"}, 0},
		{"zone-finish", "", []string{"zone", "finish", "100", "--node", "node-2"}, 0},
		{"zone-reset", "", []string{"zone", "reset", "100", "--node", "node-2"}, 0},
		{"zone-bad-state", "", []string{"zone", "report", "--state", "sleepy"}, ExitUsage},
		{"zone-tl-open-empty", "", []string{"zone", "tl-open", "101", "--node", "node-2", "--valid", "0-3"}, ExitConflict},
		{"zone-compact", "", []string{"zone", "compact", "--node", "node-1", "0:1:2048"}, 0},
		{"zone-tl-open", "", []string{"zone", "tl-open", "0", "--node", "node-1", "--valid", "0", "--mode", "ppa"}, 0},
		{"zone-tl-open-bad-range", "", []string{"zone", "tl-open", "0", "--node", "node-1", "--valid", "9999"}, ExitUsage},
		{"zone-log", "", []string{"zone", "log", "--node", "node-1"}, 0},
		{"vzone-finish", "", []string{"vzone", "finish", "0"}, 0},
		{"vzone-reset", "", []string{"vzone", "reset", "0"}, 0},
		{"bad-output", "", []string{"ns", "list", "-o", "xml"}, ExitUsage},
	}
	for _, s := range steps {
		for _, format := range []string{"table", "json"} {
			if s.name == "vzone-write" || s.name == "vzone-write-off-wp" {
				s.stdin = "hello, zones\n"
			}
			if format == "json" && (s.name == "ns-create" || s.name == "ns-create-fdp" || s.name == "vzone-open" || s.name == "vzone-write" ||
				s.name == "zone-finish" || s.name == "zone-reset" || s.name == "zone-tl-open" || s.name == "zone-compact" ||
				s.name == "vzone-finish" || s.name == "vzone-reset") {
				continue // these change state: their JSON form is checked once below
			}
			args := append(append([]string{"-n", "g"}, s.args...), "-o", format)
			if s.name == "bad-output" {
				args = append([]string{"-n", "g"}, s.args...)
			}
			out, errOut, code := runStdin(t, s.stdin, args...)
			require.Equal(t, s.code, code, "%s %s: stdout %q stderr %q", s.name, format, out, errOut)
			golden(t, s.name+"."+format, out+errOut)
		}
	}
	// JSON of a state-changing command parses and names its fields.
	out, _, code := runStdin(t, "", "-n", "g", "vzone", "open", "-o", "json")
	require.Equal(t, 0, code)
	assert.Contains(t, out, `"write_pointer": 0`)
}

// runStdin feeds stdin through os.Stdin (the commands read os.Stdin).
func runStdin(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	if stdin == "" {
		return run(t, "", args...)
	}
	r, w, err := os.Pipe()
	require.NoError(t, err)
	_, _ = w.WriteString(stdin)
	w.Close()
	old := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = old; r.Close() }()
	return run(t, "", args...)
}
