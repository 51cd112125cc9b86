package grafana

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The committed JSON is exactly what the generator writes: edit the Go,
// run `go generate ./deploy/grafana`, commit both.
func TestCommittedDashboardsMatchGenerator(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("dashboards", "*.json"))
	require.NoError(t, err)
	want := map[string]bool{}
	for _, d := range Dashboards() {
		want[d.FileName()] = true
		b, err := d.JSON()
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join("dashboards", d.FileName()))
		require.NoError(t, err, "run `go generate ./deploy/grafana`")
		assert.Equal(t, string(b), string(got), "%s differs from the generator's output: run `go generate ./deploy/grafana` and commit", d.FileName())
	}
	for _, f := range files {
		assert.True(t, want[filepath.Base(f)], "%s is not generated (delete it or add it to the generator)", f)
	}
	assert.Len(t, files, len(want))
}

var (
	varRef   = regexp.MustCompile(`\$\{?([A-Za-z_]+)`)
	rangeSel = regexp.MustCompile(`\[([^\]]+)\]`)
	rateCall = regexp.MustCompile(`\b(rate|irate|increase)\(`)
)

// Every panel has a unit and thresholds, the datasource variable; every
// query filters on a template variable and uses $__rate_interval (a fixed
// window only in an increase() whose panel title names that window).
func TestPanelsUseUnitsAndVariables(t *testing.T) {
	for _, d := range Dashboards() {
		declared := map[string]bool{"__rate_interval": true}
		for _, v := range d.Templating.List {
			declared[v.Name] = true
			if v.Type == "query" {
				assert.True(t, v.Multi && v.IncludeAll, "%s: $%s is multi-value with All", d.UID, v.Name)
				assert.Equal(t, ".*", v.AllValue, "%s: $%s's All is .* (the live test substitutes it)", d.UID, v.Name)
				assert.Equal(t, &ds, v.Datasource, "%s: $%s queries $datasource", d.UID, v.Name)
			}
		}
		for _, name := range append([]string{"datasource"}, VarNames...) {
			assert.True(t, declared[name], "%s declares $%s", d.UID, name)
		}
		rows := 0
		for _, p := range d.Panels {
			if p.Type == "row" {
				rows++
				assert.Empty(t, p.Targets, "%s row %q", d.UID, p.Title)
				assert.GreaterOrEqual(t, p.ID, 100, "%s row %q: row ids start at 100", d.UID, p.Title)
				continue
			}
			where := d.UID + "/" + p.Title
			require.NotNil(t, p.FieldConfig, where)
			assert.NotEmpty(t, p.FieldConfig.Defaults.Unit, "%s has no unit", where)
			assert.NotEmpty(t, p.FieldConfig.Defaults.Thresholds.Steps, "%s has no thresholds", where)
			require.NotNil(t, p.Datasource, where)
			assert.Equal(t, "${datasource}", p.Datasource.UID, where)
			require.NotEmpty(t, p.Targets, where)
			for _, tg := range p.Targets {
				assert.Equal(t, "${datasource}", tg.Datasource.UID, where)
				used := false
				for _, m := range varRef.FindAllStringSubmatch(tg.Expr, -1) {
					assert.True(t, declared[m[1]], "%s: $%s is not declared: %s", where, m[1], tg.Expr)
					for _, v := range VarNames {
						used = used || m[1] == v
					}
				}
				assert.True(t, used, "%s: the query ignores every variable (%v): %s", where, VarNames, tg.Expr)
				for _, r := range rangeSel.FindAllStringSubmatch(tg.Expr, -1) {
					if r[1] == "$__rate_interval" {
						continue
					}
					assert.Contains(t, p.Title, "("+r[1]+")", "%s: fixed window [%s] (use $__rate_interval, or name the window in the title): %s", where, r[1], tg.Expr)
					assert.NotRegexp(t, `\brate\([^)]*\[`+regexp.QuoteMeta(r[1])+`\]`, tg.Expr, "%s: rate() over a fixed window", where)
				}
				if rateCall.MatchString(tg.Expr) {
					assert.Contains(t, tg.Expr, "[", where)
				}
			}
		}
		assert.GreaterOrEqual(t, rows, 3, "%s: rows per component", d.UID)
	}
}

// Dashboards link to each other (the tag dropdown, keeping time and
// variables), and every panel link names a dashboard that exists.
func TestDashboardLinks(t *testing.T) {
	uids := map[string]bool{}
	for _, d := range Dashboards() {
		uids[d.UID] = true
	}
	assert.Len(t, uids, 4)
	links := 0
	for _, d := range Dashboards() {
		require.NotEmpty(t, d.Links, d.UID)
		l := d.Links[0]
		assert.Equal(t, "dashboards", l.Type)
		assert.Equal(t, []string{"zonefleet"}, l.Tags)
		assert.True(t, l.IncludeVars && l.KeepTime, "%s: the dashboard links keep time and variables", d.UID)
		assert.Contains(t, d.Tags, "zonefleet", "%s is reached by the tag links", d.UID)
		for _, p := range d.Panels {
			for _, pl := range p.Links {
				links++
				uid, _, ok := strings.Cut(strings.TrimPrefix(pl.URL, "/d/"), "?")
				assert.True(t, ok && uids[uid], "%s/%d links to %s", d.UID, p.ID, pl.URL)
				assert.NotEqual(t, d.UID, uid, "%s/%d links to itself", d.UID, p.ID)
				assert.Contains(t, pl.URL, "${__all_variables}")
			}
		}
	}
	assert.GreaterOrEqual(t, links, 8, "panel links between dashboards")
}

// The datasource variable defaults to the provisioned datasource.
func TestDatasourceMatchesProvisioning(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("provisioning", "datasources", "prometheus.yml"))
	require.NoError(t, err)
	assert.Contains(t, string(b), "uid: "+DatasourceUID)
	for _, d := range Dashboards() {
		v := d.Templating.List[0]
		assert.Equal(t, "datasource", v.Type)
		assert.Equal(t, DatasourceUID, v.Current["value"])
	}
}

// Panels are laid out on the grid without overlap, rows across the width.
func TestLayout(t *testing.T) {
	for _, d := range Dashboards() {
		type cell struct{ x, y int }
		taken := map[cell]int{}
		for _, p := range d.Panels {
			g := p.GridPos
			assert.LessOrEqual(t, g.X+g.W, 24, "%s/%d", d.UID, p.ID)
			if p.Type == "row" {
				assert.Equal(t, 24, g.W)
			}
			for x := g.X; x < g.X+g.W; x++ {
				for y := g.Y; y < g.Y+g.H; y++ {
					if other, ok := taken[cell{x, y}]; ok {
						t.Errorf("%s: panels %d and %d overlap at %d,%d", d.UID, other, p.ID, x, y)
					}
					taken[cell{x, y}] = p.ID
				}
			}
		}
	}
}

func TestSel(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{[]string{"node"}, `node=~"$node"`},
		{[]string{"node", "device"}, `node=~"$node", device=~"$device"`},
		{[]string{`state="x"`, "instance"}, `state="x", instance=~"$instance"`},
		{nil, ""},
	} {
		assert.Equal(t, c.want, sel(c.in...))
	}
}

// The JSON is valid and round-trips.
func TestJSONRoundTrip(t *testing.T) {
	for _, d := range Dashboards() {
		b, err := d.JSON()
		require.NoError(t, err)
		var back Dashboard
		require.NoError(t, json.Unmarshal(b, &back))
		b2, err := back.JSON()
		require.NoError(t, err)
		assert.Equal(t, string(b), string(b2), d.UID)
	}
}
