package paper

import (
	"context"
	"fmt"

	"github.com/zonefleet/zonefleet/pkg/bench/zms"
)

// The ZMS figures (seeds/003, USENIX ATC'24) are package zms's, run as
// `zctl bench zms` runs them (their own drives on a clock.Virtual, one
// goroutine; see that package for what is modelled); here their lines get
// the paper's number where the paper states one for exactly that quantity.
// The paper compares a zoned UFS with the same device's block-interface
// firmware; package zms compares the mechanism on and off on one zoned
// drive, so a claim "w/o IPU x % below the baseline, w/ IPU on par" is the
// ratio 1/(1-x) of on over off.
var zmsRefs = map[string]float64{
	"in_place_over_logged, randwrite_fsync_in_budget": round(1 / 0.50), // Fig. 11: w/o IPU 50 % below, w/ IPU on par
	"in_place_over_logged, sqlite_delete":             round(1 / 0.65), // Fig. 14a: w/o IPU 35 % below, w/ IPU on par
	"slc_share_without_iotailor, 1 buffer(s)":         0.60,            // Fig. 13b
	"slc_share_without_iotailor, 2 buffer(s)":         0.30,
	"slc_share_with_iotailor, 1 buffer(s)":            0.05,
	"slc_share_with_iotailor, 2 buffer(s)":            0.05,
}

// zmsFigure is the registry's entry for package zms's figure id.
func zmsFigure(id string) Figure {
	f, lerr := zms.Lookup(id)
	return Figure{ID: id, Title: f.Title, Paper: f.Paper, run: func(ctx context.Context, _ string, o Options) (any, []Line, error) {
		if lerr != nil {
			return nil, nil, lerr
		}
		r, zl, err := f.Run(ctx, o.Short)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", id, err)
		}
		lines := make([]Line, 0, len(zl))
		for _, l := range zl {
			lines = append(lines, Line{Label: l.Label, Ours: l.Ours, Paper: l.Paper, Ref: zmsRefs[l.Label]})
		}
		return r, lines, nil
	}}
}

func zmsPlot(v any, path string) (bool, error) {
	switch r := v.(type) {
	case *zms.IPUResult:
		b := bars{title: "ZMS Fig. 11, 14a: tiny fsyncs logged vs in place (paper: w/ IPU 2x / 1.5x of w/o)", ylabel: "modelled ops/s",
			series: []string{"logged", "in place"}, values: make([][]float64, 2)}
		for _, w := range r.Workloads {
			b.labels = append(b.labels, w.Name)
			b.values[0] = append(b.values[0], w.Log.OpsPerSec)
			b.values[1] = append(b.values[1], w.IPU.OpsPerSec)
		}
		return true, b.save(path)
	case *zms.L2PResult:
		b := bars{title: "ZMS Fig. 11: random reads, page / chunk / zone L2P mapping (paper: zone +37-44 % on 8x range)", ylabel: "modelled KIOPS",
			series: []string{"page", "chunk", "zone"}, values: make([][]float64, 3)}
		col := map[string]int{"page": 0, "chunk": 1, "zone": 2}
		for i, row := range r.Rows {
			if i%3 == 0 {
				b.labels = append(b.labels, fmt.Sprintf("%d MiB", row.RangeMiB))
			}
			if c, ok := col[row.Granularity]; ok {
				b.values[c] = append(b.values[c], row.KIOPS)
			}
		}
		return true, b.save(path)
	case *zms.TailorResult:
		b := bars{title: "ZMS Fig. 13b: share of host writes buffered in SLC (paper: 0.60 / 0.30 -> 0.05)", ylabel: "SLC-buffered share",
			series: []string{"without IOTailor", "with IOTailor"}, values: make([][]float64, 2)}
		for _, run := range r.Runs {
			if !run.IOTailor {
				b.labels = append(b.labels, fmt.Sprintf("%d buffer(s)", run.WriteBuffers))
				b.values[0] = append(b.values[0], run.SLCShare)
			} else {
				b.values[1] = append(b.values[1], run.SLCShare)
			}
		}
		return true, b.save(path)
	}
	return false, nil
}
