package grafana

import "strings"

// Variables every dashboard has. Each query filters on some of them; the
// "All" value of each is ".*" (it also matches a missing label).
var (
	// VarNames are the template variables a query may filter on.
	VarNames = []string{"namespace", "node", "device", "instance"}
)

func variables() []Variable {
	all := map[string]any{"selected": true, "text": []string{"All"}, "value": []string{"$__all"}}
	q := func(name, label, metric string) Variable {
		def := "label_values(" + metric + ", " + name + ")"
		// A classic label_values() query string: every Grafana since 7
		// reads it (refresh 2: on each time-range change).
		return Variable{Name: name, Label: label, Type: "query", Datasource: &ds, Definition: def,
			Query: def, Current: all, Multi: true, IncludeAll: true, AllValue: ".*", Refresh: 2, Sort: 1, Regex: "", Hide: 0}
	}
	return []Variable{
		{Name: "datasource", Label: "Datasource", Type: "datasource", Query: "prometheus",
			Current: map[string]any{"selected": false, "text": "Prometheus", "value": DatasourceUID}, Refresh: 1},
		q("namespace", "Namespace", "zonefleet_arbiter_namespace_essential_zones"),
		q("node", "Node", `up{component="ssdnode"}`),
		q("device", "Drive", `zonefleet_node_zones{node=~"$node"}`), // the drives of the chosen nodes
		q("instance", "Instance", "up"),
	}
}

// opt configures a panel.
type opt func(*Panel)

func unit(u string) opt { return func(p *Panel) { p.FieldConfig.Defaults.Unit = u } }
func desc(d string) opt { return func(p *Panel) { p.Description = d } }
func size(w, h int) opt {
	return func(p *Panel) { p.GridPos.W, p.GridPos.H = w, h }
}
func maxv(v float64) opt {
	return func(p *Panel) { p.FieldConfig.Defaults.Min, p.FieldConfig.Defaults.Max = f64(0), f64(v) }
}
func stacked() opt {
	return func(p *Panel) {
		if c := p.FieldConfig.Defaults.Custom; c != nil {
			c["stacking"] = map[string]any{"mode": "normal", "group": "A"}
			c["fillOpacity"] = 60
		}
	}
}

// thresholds: base green, then each (value, colour) step. Colours turn the
// stat backgrounds and the time series' threshold lines.
func thresholds(steps ...any) opt {
	return func(p *Panel) {
		t := Thresholds{Mode: "absolute", Steps: []Step{{Color: "green"}}}
		for i := 0; i+1 < len(steps); i += 2 {
			t.Steps = append(t.Steps, Step{Color: steps[i+1].(string), Value: f64(steps[i].(float64))})
		}
		p.FieldConfig.Defaults.Thresholds = t
		if c := p.FieldConfig.Defaults.Custom; c != nil && len(t.Steps) > 1 {
			c["thresholdsStyle"] = map[string]any{"mode": "line+area"}
		}
	}
}

// unitOf sets the unit of one query's series (refID).
func unitOf(refID, u string) opt {
	return func(p *Panel) {
		p.FieldConfig.Overrides = append(p.FieldConfig.Overrides, Override{
			Matcher:    map[string]any{"id": "byFrameRefID", "options": refID},
			Properties: []map[string]any{{"id": "unit", "value": u}},
		})
	}
}

// linkTo links the panel to another dashboard, keeping time range and variables.
func linkTo(uid, title string) opt {
	return func(p *Panel) {
		p.Links = append(p.Links, Link{Title: title, Type: "link", URL: dashURL(uid)})
	}
}

func dashURL(uid string) string { return "/d/" + uid + "?${__url_time_range}&${__all_variables}" }

type query struct{ expr, legend string }

func q(expr, legend string) query { return query{expr, legend} }

// panel builds a panel of kind (timeseries, stat, table, bargauge).
func panel(id int, kind, title string, qs []query, opts ...opt) Panel {
	p := Panel{ID: id, Type: kind, Title: title, Datasource: &ds, GridPos: GridPos{W: 12, H: 8},
		FieldConfig: &FieldConfig{Defaults: Defaults{Unit: "", Thresholds: Thresholds{Mode: "absolute", Steps: []Step{{Color: "green"}}}},
			Overrides: []Override{}}}
	for i, x := range qs {
		p.Targets = append(p.Targets, Target{RefID: string(rune('A' + i)), Datasource: ds, Expr: x.expr, LegendFormat: x.legend})
	}
	switch kind {
	case "timeseries":
		p.FieldConfig.Defaults.Custom = map[string]any{"lineWidth": 1, "fillOpacity": 10, "stacking": map[string]any{"mode": "none", "group": "A"},
			"thresholdsStyle": map[string]any{"mode": "off"}}
		p.FieldConfig.Defaults.Color = map[string]any{"mode": "palette-classic"}
		p.Options = map[string]any{"legend": map[string]any{"displayMode": "table", "placement": "bottom", "calcs": []string{"lastNotNull", "max"}},
			"tooltip": map[string]any{"mode": "multi", "sort": "desc"}}
	case "stat":
		p.GridPos = GridPos{W: 4, H: 4}
		p.FieldConfig.Defaults.Color = map[string]any{"mode": "thresholds"}
		p.Options = map[string]any{"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}}, "colorMode": "background", "graphMode": "area"}
	case "bargauge":
		p.Options = map[string]any{"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}}, "orientation": "horizontal", "displayMode": "gradient"}
	case "table":
		p.Options = map[string]any{"showHeader": true}
		for i := range p.Targets {
			p.Targets[i].Format, p.Targets[i].Instant = "table", true
		}
	}
	for _, o := range opts {
		o(&p)
	}
	return p
}

// item is a row or a panel in a dashboard's list.
type item struct {
	row   string
	rowID int
	panel Panel
}

func row(id int, title string) item { return item{row: title, rowID: id} }
func pn(p Panel) item               { return item{panel: p} }

// dashboard lays the items out: each row starts a new line; panels fill
// lines of 24 columns left to right.
func dashboard(uid, title, description string, tags []string, items ...item) Dashboard {
	d := Dashboard{UID: uid, Title: title, Description: description, Tags: append([]string{"zonefleet"}, tags...),
		Timezone: "utc", SchemaVersion: 39, Version: 1, Editable: false, GraphTooltip: 1, Refresh: "10s",
		Time: map[string]any{"from": "now-30m", "to": "now"}}
	d.Templating.List = variables()
	d.Annotations.List = []any{}
	d.Links = []Link{{Title: "ZoneFleet", Type: "dashboards", Tags: []string{"zonefleet"}, AsDropdown: true, IncludeVars: true, KeepTime: true}}
	x, y, lineH := 0, 0, 0
	for _, it := range items {
		if it.row != "" {
			if x > 0 {
				y += lineH
			}
			f := false
			d.Panels = append(d.Panels, Panel{ID: it.rowID, Type: "row", Title: it.row, Collapsed: &f, GridPos: GridPos{H: 1, W: 24, X: 0, Y: y}, Panels: []Panel{}})
			x, y, lineH = 0, y+1, 0
			continue
		}
		p := it.panel
		if x+p.GridPos.W > 24 {
			x, y, lineH = 0, y+lineH, 0
		}
		p.GridPos.X, p.GridPos.Y = x, y
		x += p.GridPos.W
		lineH = max(lineH, p.GridPos.H)
		d.Panels = append(d.Panels, p)
	}
	return d
}

// sel renders a label selector body from pairs of label and variable, plus
// fixed matchers: sel("node", "device") = `node=~"$node", device=~"$device"`.
func sel(parts ...string) string {
	var out []string
	for _, p := range parts {
		if strings.ContainsAny(p, "=!~") {
			out = append(out, p)
			continue
		}
		out = append(out, p+`=~"$`+p+`"`)
	}
	return strings.Join(out, ", ")
}
