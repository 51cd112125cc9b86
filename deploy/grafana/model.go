// Package grafana generates the ZoneFleet Grafana dashboards
// (deploy/grafana/dashboards/*.json) from Go: `go generate ./deploy/grafana`
// (or `go run ./deploy/grafana/gen`) rewrites them; commit both. The test of
// this package fails when the committed JSON differs from what the
// generator writes (drift), when a panel has no unit or thresholds, and when a
// query ignores the dashboard's template variables or uses a fixed rate
// window instead of $__rate_interval.
//
// Conventions the tests and the live panel test in test/deploy rely on:
// dashboard uids are stable (links and exempt panels name them); panel ids
// are stable within a dashboard (rows take ids from 100); every query filters
// on at least one of the variables namespace, node, device, instance, each a
// multi-value variable whose "All" is the regex ".*", so the live test can
// substitute ".*" for every variable and "1m" for $__rate_interval and send the
// query to Prometheus verbatim.
//
// The generator is pure: no clock, no randomness, maps only where
// encoding/json sorts their keys, so its output is byte-for-byte stable.
package grafana

//go:generate go run ./gen -out dashboards

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// DatasourceUID is the provisioned Prometheus datasource
// (provisioning/datasources/prometheus.yml); the datasource variable
// defaults to it.
const DatasourceUID = "zonefleet-prometheus"

// ds is the datasource of every panel and query: the $datasource variable.
var ds = Ref{Type: "prometheus", UID: "${datasource}"}

// Ref names a datasource.
type Ref struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Target is one query of a panel.
type Target struct {
	RefID        string `json:"refId"`
	Datasource   Ref    `json:"datasource"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
	Format       string `json:"format,omitempty"`
	Instant      bool   `json:"instant,omitempty"`
}

// GridPos is a panel's place on the 24-column grid.
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// Link is a dashboard or panel link.
type Link struct {
	Title       string   `json:"title"`
	Type        string   `json:"type"`
	URL         string   `json:"url,omitempty"`
	Tags        []string `json:"tags,omitempty"`
	AsDropdown  bool     `json:"asDropdown,omitempty"`
	IncludeVars bool     `json:"includeVars,omitempty"`
	KeepTime    bool     `json:"keepTime,omitempty"`
	TargetBlank bool     `json:"targetBlank,omitempty"`
}

// Step is one threshold step (Value nil: the base).
type Step struct {
	Color string   `json:"color"`
	Value *float64 `json:"value"`
}

// Thresholds colour a panel's values.
type Thresholds struct {
	Mode  string `json:"mode"`
	Steps []Step `json:"steps"`
}

// Defaults is a panel's fieldConfig.defaults.
type Defaults struct {
	Unit       string         `json:"unit"`
	Decimals   *int           `json:"decimals,omitempty"`
	Min        *float64       `json:"min,omitempty"`
	Max        *float64       `json:"max,omitempty"`
	Thresholds Thresholds     `json:"thresholds"`
	Color      map[string]any `json:"color,omitempty"`
	Custom     map[string]any `json:"custom,omitempty"`
	Links      []Link         `json:"links,omitempty"`
}

// Override changes properties of the fields a matcher selects.
type Override struct {
	Matcher    map[string]any   `json:"matcher"`
	Properties []map[string]any `json:"properties"`
}

// FieldConfig is a panel's fieldConfig.
type FieldConfig struct {
	Defaults  Defaults   `json:"defaults"`
	Overrides []Override `json:"overrides"`
}

// Panel is a Grafana panel, or a row (Type "row").
type Panel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description,omitempty"`
	Datasource  *Ref           `json:"datasource,omitempty"`
	GridPos     GridPos        `json:"gridPos"`
	Collapsed   *bool          `json:"collapsed,omitempty"`
	Panels      []Panel        `json:"panels,omitempty"`
	Targets     []Target       `json:"targets,omitempty"`
	FieldConfig *FieldConfig   `json:"fieldConfig,omitempty"`
	Options     map[string]any `json:"options,omitempty"`
	Links       []Link         `json:"links,omitempty"`
}

// Variable is a template variable.
type Variable struct {
	Name       string         `json:"name"`
	Label      string         `json:"label"`
	Type       string         `json:"type"`
	Query      any            `json:"query"`
	Datasource *Ref           `json:"datasource,omitempty"`
	Definition string         `json:"definition,omitempty"`
	Current    map[string]any `json:"current"`
	Multi      bool           `json:"multi"`
	IncludeAll bool           `json:"includeAll"`
	AllValue   string         `json:"allValue,omitempty"`
	Refresh    int            `json:"refresh"`
	Regex      string         `json:"regex"`
	Sort       int            `json:"sort"`
	Hide       int            `json:"hide"`
}

// Dashboard is one dashboard file.
type Dashboard struct {
	UID           string         `json:"uid"`
	Title         string         `json:"title"`
	Description   string         `json:"description"`
	Tags          []string       `json:"tags"`
	Timezone      string         `json:"timezone"`
	SchemaVersion int            `json:"schemaVersion"`
	Version       int            `json:"version"`
	Editable      bool           `json:"editable"`
	GraphTooltip  int            `json:"graphTooltip"`
	Refresh       string         `json:"refresh"`
	Time          map[string]any `json:"time"`
	Templating    struct {
		List []Variable `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []any `json:"list"`
	} `json:"annotations"`
	Links  []Link  `json:"links"`
	Panels []Panel `json:"panels"`
}

// JSON renders d as the committed file: two-space indented, newline-terminated.
func (d Dashboard) JSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, fmt.Errorf("dashboard %s: %w", d.UID, err)
	}
	return buf.Bytes(), nil
}

// FileName is the dashboard's file in deploy/grafana/dashboards.
func (d Dashboard) FileName() string { return d.UID + ".json" }

// Queries lists every query of the dashboard with its panel (rows included).
func (d Dashboard) Queries() []PanelQuery {
	var out []PanelQuery
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			out = append(out, PanelQuery{Panel: p, Target: t})
		}
	}
	return out
}

// PanelQuery is a query with its panel.
type PanelQuery struct {
	Panel  Panel
	Target Target
}

func f64(v float64) *float64 { return &v }
