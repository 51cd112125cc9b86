package paper

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// bars is a grouped bar chart: one group per label, one bar per series.
type bars struct {
	title, ylabel string
	labels        []string
	series        []string
	values        [][]float64 // [series][label]
}

var palette = []color.Color{
	color.RGBA{R: 0x4c, G: 0x72, B: 0xb0, A: 0xff},
	color.RGBA{R: 0xdd, G: 0x84, B: 0x52, A: 0xff},
	color.RGBA{R: 0x55, G: 0xa8, B: 0x68, A: 0xff},
	color.RGBA{R: 0xc4, G: 0x4e, B: 0x52, A: 0xff},
}

func (b bars) save(path string) error {
	p := plot.New()
	p.Title.Text = b.title
	p.Y.Label.Text = b.ylabel
	p.Y.Min = 0
	top := 0.0
	for _, vs := range b.values {
		for _, v := range vs {
			top = max(top, v)
		}
	}
	p.Y.Max = top * 1.35 // room for the legend
	w := vg.Points(18)
	n := len(b.series)
	for i, s := range b.series {
		vals := make(plotter.Values, len(b.labels))
		copy(vals, b.values[i])
		bc, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bc.Color = palette[i%len(palette)]
		bc.LineStyle.Width = 0
		bc.Offset = w * vg.Length(2*i-n+1) / 2
		p.Add(bc)
		p.Legend.Add(s, bc)
	}
	p.Legend.Top = true
	p.NominalX(b.labels...)
	return p.Save(160*vg.Millimeter, 90*vg.Millimeter, path)
}

func plotFigure(id string, v any, path string) error {
	switch r := v.(type) {
	case *Fig26Result:
		b := bars{title: "Fig. 26: static (width 4) vs v-zones (width 8)", ylabel: "aggregate write MB/s",
			series: []string{"static", "v-zone"}, values: make([][]float64, 2)}
		for _, row := range r.Rows {
			b.labels = append(b.labels, fmt.Sprintf("%d writers", row.Writers))
			b.values[0] = append(b.values[0], row.StaticMBps)
			b.values[1] = append(b.values[1], row.VZoneMBps)
		}
		return b.save(path)
	case *Fig29aResult:
		b := bars{title: "Fig. 29a: read congestion control", ylabel: "per-zone read MB/s",
			series: []string{"A, CC off", "B, CC off", "A, CC on", "B, CC on"}, values: make([][]float64, 4)}
		for _, row := range r.Rows {
			b.labels = append(b.labels, row.Scenario.Name)
			b.values[0] = append(b.values[0], row.Off.AMBps)
			b.values[1] = append(b.values[1], row.Off.BMBps)
			b.values[2] = append(b.values[2], row.On.AMBps)
			b.values[3] = append(b.values[3], row.On.BMBps)
		}
		return b.save(path)
	case *Fig29cResult:
		b := bars{title: "Fig. 29c: read-write fairness (node slots | deep queue)", ylabel: "per-thread MB/s",
			series: []string{"reader (A)", "busy writer (B)", "regular writer (C)"}, values: make([][]float64, 3)}
		add := func(res *Fig29cResult, tag string) {
			for _, run := range res.Runs {
				b.labels = append(b.labels, run.Mode+tag)
				b.values[0] = append(b.values[0], run.ReaderMBps)
				b.values[1] = append(b.values[1], run.BusyMBps)
				b.values[2] = append(b.values[2], run.RegularMBps)
			}
		}
		add(r, "")
		if r.DeepQueue != nil {
			add(r.DeepQueue, " deep")
		}
		return b.save(path)
	case *Fig29bResult:
		b := bars{title: "Fig. 29b: write admission control", ylabel: "per-thread write MB/s",
			series: []string{"regular, AC off", "regular, AC on", "busy, AC off", "busy, AC on"}, values: make([][]float64, 4)}
		for _, row := range r.Rows {
			b.labels = append(b.labels, row.Scenario.Name)
			b.values[0] = append(b.values[0], row.Off.RegularMBps)
			b.values[1] = append(b.values[1], row.On.RegularMBps)
			b.values[2] = append(b.values[2], row.Off.BusyMBps)
			b.values[3] = append(b.values[3], row.On.BusyMBps)
		}
		return b.save(path)
	}
	return fmt.Errorf("no plot for figure %s", id)
}
