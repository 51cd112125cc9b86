package fdpbench

import (
	"image/color"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

var palette = []color.Color{
	color.RGBA{R: 0x4c, G: 0x72, B: 0xb0, A: 0xff},
	color.RGBA{R: 0x55, G: 0xa8, B: 0x68, A: 0xff},
	color.RGBA{R: 0xdd, G: 0x84, B: 0x52, A: 0xff},
	color.RGBA{R: 0xc4, G: 0x4e, B: 0x52, A: 0xff},
	color.RGBA{R: 0x81, G: 0x72, B: 0xb3, A: 0xff},
	color.RGBA{R: 0x93, G: 0x78, B: 0x60, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x8c, B: 0x8c, A: 0xff},
}

// series1 names a row's bar: its placement, the handle type for the
// placements that use several handles.
func series1(x Row) string {
	switch x.Placement {
	case "matched", "fs-hints":
		if strings.HasSuffix(x.Handles, "pi") {
			return "matched / fs-hints, persistently isolated"
		}
		return "matched / fs-hints, initially isolated"
	case "one-handle":
		return "one handle"
	case "no-fdp":
		return "no FDP (page-mapped SSD)"
	}
	return x.Placement
}

// Plot writes a grouped bar chart of the WAF, one group per workload and
// one bar per placement, to path (PNG, SVG or PDF by its extension).
func (r *Result) Plot(path string) error {
	var workloads, series []string
	val := map[[2]string]float64{}
	seen := map[string]bool{}
	for _, x := range r.Rows {
		s := series1(x)
		if !seen[x.Workload] {
			seen[x.Workload] = true
			workloads = append(workloads, x.Workload)
		}
		if !seen["s:"+s] {
			seen["s:"+s] = true
			series = append(series, s)
		}
		val[[2]string{x.Workload, s}] = x.WAF
	}
	p := plot.New()
	p.Title.Text = "FDP drive: device WAF per placement"
	p.Y.Label.Text = "WAF (media / host bytes)"
	p.Y.Min = 0
	top := 1.0
	for _, v := range val {
		top = max(top, v)
	}
	p.Y.Max = top * 1.5 // room for the legend
	w := vg.Points(14)
	for i, s := range series {
		vs := make(plotter.Values, len(workloads))
		for j, wl := range workloads {
			vs[j] = val[[2]string{wl, s}]
		}
		bc, err := plotter.NewBarChart(vs, w)
		if err != nil {
			return err
		}
		bc.Color = palette[i%len(palette)]
		bc.LineStyle.Width = 0
		bc.Offset = w * vg.Length(2*i-len(series)+1) / 2
		p.Add(bc)
		p.Legend.Add(s, bc)
	}
	p.Legend.Top = true
	p.NominalX(workloads...)
	return p.Save(200*vg.Millimeter, 100*vg.Millimeter, path)
}
