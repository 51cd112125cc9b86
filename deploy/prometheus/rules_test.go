// Package prometheus holds the tests of deploy/prometheus: the scrape config
// and the alerting rules (rules/*.rules.yml) are valid for promtool, the rules'
// unit tests (rules/*.test.yml, `promtool test rules`) pass, every alert has a
// runbook in deploy/README.md and a test case, every metric a rule reads is
// documented (or listed below as coming with a named issue), and every
// Grafana panel query parses as PromQL.
//
// promtool comes with Debian's prometheus package (.ci/run installs it);
// without it the promtool tests skip and say so, the others still run.
package prometheus

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/zonefleet/zonefleet/deploy/grafana"
)

// futureMetrics are read by rules before any process exports them; the
// value says what is missing. Until then their rules have no series and
// never fire.
var futureMetrics = map[string]string{}

// etcdMetrics are etcd's own (checked against etcd v3.7's source).
var etcdMetrics = map[string]bool{
	"etcd_server_has_leader":           true,
	"etcd_mvcc_db_total_size_in_bytes": true,
	"etcd_server_quota_backend_bytes":  true,
	"etcd_server_health_failures":      true,
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

type rule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type testFile struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			Alertname string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found: install Debian's prometheus package (apt-get install prometheus; .ci/run does) to check the rules")
	}
	return p
}

func runPromtool(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

func ruleFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("rules", "*.rules.yml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files
}

func alerts(t *testing.T) []rule {
	t.Helper()
	var out []rule
	for _, f := range ruleFiles(t) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var rf ruleFile
		require.NoError(t, yaml.UnmarshalStrict(b, &rf), f)
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Alert != "" {
					out = append(out, r)
				}
			}
		}
	}
	return out
}

// The scrape config loads the rule files and both are valid; the rules'
// unit tests pass.
func TestPromtool(t *testing.T) {
	out := runPromtool(t, "check", "config", "prometheus.yml")
	for _, f := range ruleFiles(t) {
		assert.Contains(t, out, f, "prometheus.yml loads %s (rule_files)", f)
	}
	tests, err := filepath.Glob(filepath.Join("rules", "*.test.yml"))
	require.NoError(t, err)
	require.NotEmpty(t, tests)
	for _, f := range tests {
		runPromtool(t, "test", "rules", f)
	}
}

// Every alert: a severity, a summary and description, a runbook_url whose
// anchor is a runbook heading in deploy/README.md, and test cases in
// rules/*.test.yml that expect it to fire.
func TestAlertsHaveRunbooksAndTests(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#{2,4} Runbook: (.+)$`).FindAllStringSubmatch(string(readme), -1) {
		anchors["runbook-"+strings.ToLower(strings.ReplaceAll(strings.TrimSpace(m[1]), ", ", "-"))] = true
	}
	fired := map[string]bool{}
	tests, err := filepath.Glob(filepath.Join("rules", "*.test.yml"))
	require.NoError(t, err)
	for _, f := range tests {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var tf testFile
		require.NoError(t, yaml.Unmarshal(b, &tf), f)
		for _, tc := range tf.Tests {
			for _, a := range tc.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					fired[a.Alertname] = true
				}
			}
		}
	}
	seen := map[string]bool{}
	for _, a := range alerts(t) {
		assert.False(t, seen[a.Alert], "alert %s defined twice", a.Alert)
		seen[a.Alert] = true
		assert.Regexp(t, `^ZoneFleet[A-Z][A-Za-z]+$`, a.Alert)
		assert.Contains(t, []string{"warning", "critical"}, a.Labels["severity"], "%s: severity", a.Alert)
		assert.NotEmpty(t, a.Annotations["summary"], "%s: summary", a.Alert)
		assert.NotEmpty(t, a.Annotations["description"], "%s: description", a.Alert)
		url := a.Annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(url, "deploy/README.md#")
		if assert.True(t, ok, "%s: runbook_url %q is deploy/README.md#runbook-…", a.Alert, url) {
			assert.True(t, anchors[anchor], "%s: deploy/README.md has no heading \"### Runbook: …\" for #%s", a.Alert, anchor)
		}
		assert.True(t, fired[a.Alert], "%s: no test case in rules/*.test.yml expects it to fire", a.Alert)
	}
	assert.GreaterOrEqual(t, len(seen), 15)
}

var metricName = regexp.MustCompile(`\b((?:zonefleet|etcd)_[a-z0-9_]+)\b`)

// histogramPart is the suffix of a histogram's series (README names the histogram).
var histogramPart = regexp.MustCompile(`_(sum|count|bucket)$`)

// Every metric a rule reads exists: documented in docs/operations.md's metrics
// table, one of etcd's, or a future metric listed with what is missing.
func TestRulesReadKnownMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	require.NoError(t, err)
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile(`zonefleet_[a-z0-9_]+`).FindAllString(string(b), -1) {
		documented[m] = true
	}
	used := map[string]bool{}
	for _, a := range alerts(t) {
		for _, m := range metricName.FindAllString(a.Expr, -1) {
			m = histogramPart.ReplaceAllString(m, "")
			used[m] = true
			switch {
			case strings.HasPrefix(m, "etcd_"):
				assert.True(t, etcdMetrics[m], "%s reads %s: not one of the etcd metrics checked", a.Alert, m)
			case documented[m]:
			case futureMetrics[m] != "":
			default:
				t.Errorf("%s reads %s: neither in docs/operations.md's metrics table nor in futureMetrics", a.Alert, m)
			}
		}
	}
	var landed []string
	for m, issue := range futureMetrics {
		assert.True(t, used[m], "futureMetrics lists %s, which no rule reads", m)
		if documented[m] {
			landed = append(landed, fmt.Sprintf("%s (%s)", m, issue))
		}
	}
	sort.Strings(landed)
	if len(landed) > 0 {
		t.Logf("these future metrics are documented now: drop them from futureMetrics: %v", landed)
	}
}

var templateVar = regexp.MustCompile(`\$\{?([A-Za-z_]+)\}?`)

// Every Grafana panel query, with its variables substituted as Grafana does
// for "All", parses as PromQL: promtool checks them as recording rules.
func TestDashboardQueriesParse(t *testing.T) {
	tool := promtool(t)
	type rec struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rec
	for _, d := range grafana.Dashboards() {
		for _, q := range d.Queries() {
			expr := templateVar.ReplaceAllStringFunc(q.Target.Expr, func(v string) string {
				if strings.Contains(v, "__rate_interval") {
					return "1m"
				}
				return ".*"
			})
			rules = append(rules, rec{Record: fmt.Sprintf("dashboard:%s:%d:%s", strings.ReplaceAll(d.UID, "-", "_"), q.Panel.ID, q.Target.RefID), Expr: expr})
		}
	}
	require.Greater(t, len(rules), 60)
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboards", "rules": rules}}})
	require.NoError(t, err)
	f := filepath.Join(t.TempDir(), "dashboards.yml")
	require.NoError(t, os.WriteFile(f, b, 0o644))
	out, err := exec.Command(tool, "check", "rules", f).CombinedOutput()
	require.NoError(t, err, "a dashboard query does not parse:\n%s", out)
	assert.Contains(t, string(out), fmt.Sprintf("%d rules found", len(rules)))
}

// The compose monitoring profile's Prometheus loads the rules: its config
// file is prometheus.yml, whose rule_files (relative to it) the mounted
// rules directory satisfies.
func TestComposeLoadsRules(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docker-compose.yml"))
	require.NoError(t, err)
	var compose struct {
		Services map[string]struct {
			Profiles []string `json:"profiles"`
			Command  []string `json:"command"`
			Volumes  []string `json:"volumes"`
		} `json:"services"`
	}
	require.NoError(t, yaml.Unmarshal(b, &compose))
	prom, ok := compose.Services["prometheus"]
	require.True(t, ok, "a prometheus service")
	assert.Contains(t, prom.Profiles, "monitoring")
	assert.Contains(t, prom.Command, "--config.file=/etc/prometheus/prometheus.yml")
	mounts := map[string]string{} // container path -> host path
	for _, v := range prom.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 {
			mounts[parts[1]] = parts[0]
		}
	}
	assert.Equal(t, "./prometheus/prometheus.yml", mounts["/etc/prometheus/prometheus.yml"])
	assert.Equal(t, "./prometheus/rules", mounts["/etc/prometheus/rules"], "the rules directory is mounted next to the config")

	cfg, err := os.ReadFile("prometheus.yml")
	require.NoError(t, err)
	var pc struct {
		RuleFiles []string `json:"rule_files"`
	}
	require.NoError(t, yaml.Unmarshal(cfg, &pc))
	require.NotEmpty(t, pc.RuleFiles)
	for _, pattern := range pc.RuleFiles {
		require.True(t, strings.HasPrefix(pattern, "rules/"), "rule_files %s lies in the mounted rules directory", pattern)
		matches, err := filepath.Glob(pattern) // relative to the config, as Prometheus resolves it
		require.NoError(t, err)
		assert.ElementsMatch(t, ruleFiles(t), matches, "rule_files %s loads every rule file and no test file", pattern)
	}
}
