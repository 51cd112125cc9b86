package paper

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
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

// fig27Plot: throughput (Fig. 27) and spares in use (Fig. 28) per namespace
// over time with the paper's reclaim timing, NS4 with the default timing dashed.
func fig27Plot(r *Fig27Result, path string) error {
	mk := func(title, ylabel string, val func(s Fig27Series, b int) float64) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "time (fraction of the run; paper: 100 s)"
		p.Y.Label.Text = ylabel
		p.Y.Min = 0
		add := func(s Fig27Series, name string, c color.Color, dashed bool) error {
			pts := make(plotter.XYs, len(s.MBps))
			for b := range pts {
				pts[b].X = float64(b+1) / float64(len(pts))
				pts[b].Y = val(s, b)
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color = c
			l.Width = vg.Points(1.2)
			if dashed {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			p.Add(l)
			p.Legend.Add(name, l)
			return nil
		}
		for i, s := range r.Paper.Series {
			if err := add(s, s.Namespace, palette[i%len(palette)], false); err != nil {
				return nil, err
			}
		}
		if n := len(r.Default.Series); n > 0 {
			if err := add(r.Default.Series[n-1], r.Default.Series[n-1].Namespace+", default T_ReadOnly", color.Gray{Y: 0x60}, true); err != nil {
				return nil, err
			}
		}
		p.Legend.Top = true
		p.Legend.Left = true
		return p, nil
	}
	top, err := mk("Fig. 27: write throughput (NS1-3 idle 30-80 %)", "MB/s", func(s Fig27Series, b int) float64 { return s.MBps[b] })
	if err != nil {
		return err
	}
	bot, err := mk("Fig. 28: spare zones in use", "spares", func(s Fig27Series, b int) float64 { return float64(s.Spares[b]) })
	if err != nil {
		return err
	}
	const w, h = 160 * vg.Millimeter, 180 * vg.Millimeter
	img := vgimg.New(w, h)
	dc := draw.New(img)
	t := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadY: vg.Millimeter * 4,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	ps := [][]*plot.Plot{{top}, {bot}}
	cs := plot.Align(ps, t, dc)
	top.Draw(cs[0][0])
	bot.Draw(cs[1][0])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func plotFigure(id string, v any, path string) error {
	switch r := v.(type) {
	case *ZNSPlusResult:
		return znsplusPlot(r, path)
	case *Fig27Result:
		return fig27Plot(r, path)
	case *Fig26Result:
		b := bars{title: "Fig. 26: static (width 4) vs v-zones (widths by local overdrive)", ylabel: "aggregate write MB/s",
			series: []string{"static", "v-zone"}, values: make([][]float64, 2)}
		for _, row := range r.Rows {
			b.labels = append(b.labels, fmt.Sprintf("%d writers (width %g)", row.Writers, row.VZoneWidth))
			b.values[0] = append(b.values[0], row.StaticMBps)
			b.values[1] = append(b.values[1], row.VZoneMBps)
		}
		return b.save(path)
	case *Fig29aResult:
		b := bars{title: "Fig. 29a: read congestion control (CC on: Algorithm 1, = ZoneFleet's)", ylabel: "per-thread read MB/s",
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
		b := bars{title: "Fig. 29b: AC (cap N: token cap; die: per-die cache limit)", ylabel: "per-thread write MB/s",
			series: []string{"regular, AC off", "regular, AC on", "busy, AC off", "busy, AC on"}, values: make([][]float64, 4)}
		for _, row := range r.Rows {
			b.labels = append(b.labels, "sc"+row.Scenario.Name[:1])
			b.values[0] = append(b.values[0], row.Off.RegularMBps)
			b.values[1] = append(b.values[1], row.On.RegularMBps)
			b.values[2] = append(b.values[2], row.Off.BusyMBps)
			b.values[3] = append(b.values[3], row.On.BusyMBps)
		}
		if len(r.Rows) > 0 {
			off := r.Rows[0].Off
			for _, bu := range r.Bursts {
				b.labels = append(b.labels, fmt.Sprintf("cap %s", capLabel(bu.BurstBlocks)))
				b.values[0] = append(b.values[0], off.RegularMBps)
				b.values[1] = append(b.values[1], bu.On.RegularMBps)
				b.values[2] = append(b.values[2], off.BusyMBps)
				b.values[3] = append(b.values[3], bu.On.BusyMBps)
			}
		}
		for _, d := range r.Die {
			for _, row := range d.Rows {
				b.labels = append(b.labels, fmt.Sprintf("die sc%s", row.Scenario.Name[:1]))
				b.values[0] = append(b.values[0], row.Off.RegularMBps)
				b.values[1] = append(b.values[1], row.On.RegularMBps)
				b.values[2] = append(b.values[2], row.Off.BusyMBps)
				b.values[3] = append(b.values[3], row.On.BusyMBps)
			}
		}
		return b.save(path)
	case *PGCResult:
		return pgcPlot(r, path)
	case *ScalingResult:
		return scalingPlot(r, path)
	}
	if ok, err := zmsPlot(v, path); ok {
		return err
	}
	return fmt.Errorf("no plot for figure %s", id)
}

// capLabel is a token cap for a bar label (1048576 is "1M").
func capLabel(n int) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%dM", n>>20)
	}
	return fmt.Sprint(n)
}
