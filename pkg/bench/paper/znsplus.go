package paper

import (
	"context"
	"fmt"

	"github.com/zonefleet/zonefleet/pkg/bench/znsplus"
)

// ZNSPlusResult is the ZNS+ figure (ZNS+ §4, Fig. 7-8 and Table 5): the
// file system over emulated ZNS+ drives in the three recycling modes, per
// workload, run by package znsplus (its own deterministic single-goroutine
// harness on the virtual clock; see its doc for what is modelled).
type ZNSPlusResult struct {
	Workloads []znsplus.Result `json:"workloads"`
}

func znsplusConfig(workload string, o Options) znsplus.Config {
	// znsplus.Default: 16 chips, 96 zones of 1 MiB, the copyback share
	// on 32 zones of 4 MiB, all four utilizations (minutes); short:
	// znsplus.Small at 85 %, no copyback geometry (seconds).
	c := znsplus.Default()
	if workload == znsplus.Varmail {
		c.Overwrite = 0.5 // its small fsynced files take about 3x the wall time per byte
	}
	if o.Short {
		c = znsplus.Small()
		c.Utilizations, c.Overwrite, c.NoCABRun = []float64{0.85}, 0.6, true
	}
	c.Workload = workload
	return c
}

func runZNSPlus(ctx context.Context, dir string, o Options) (any, []Line, error) {
	res := &ZNSPlusResult{}
	var lines []Line
	for _, wl := range []string{znsplus.Fileserver, znsplus.Varmail} {
		c := znsplusConfig(wl, o)
		c.Dir = dir
		r, err := znsplus.Run(ctx, c)
		if err != nil {
			return nil, nil, err
		}
		res.Workloads = append(res.Workloads, r)
		for _, u := range r.Utils {
			tag := fmt.Sprintf("%s %.0f%%", wl, u.Utilization*100)
			lines = append(lines,
				Line{Label: "izc_vs_zns, " + tag, Ours: u.IZCvsZNS, Paper: "1.21-1.77"},
				Line{Label: "zns_plus_vs_zns, " + tag, Ours: u.ZNSPlusVsZNS, Paper: "1.33-2.91"},
				Line{Label: "tl_share, " + tag, Ours: u.TLShare, Paper: "0.858-0.948"},
				Line{Label: fmt.Sprintf("copyback_share_cab (%g MiB zones), %s", cbZoneMiB(r, u), tag), Ours: u.CopybackShareCAB, Paper: "> 0.80"})
		}
	}
	return res, lines, nil
}

// cbZoneMiB is the zone size the copyback share of u was measured on.
func cbZoneMiB(r znsplus.Result, u znsplus.UtilResult) float64 {
	if u.CopybackZoneMiB > 0 {
		return u.CopybackZoneMiB
	}
	return r.ZoneMiB
}

func znsplusPlot(r *ZNSPlusResult, path string) error {
	b := bars{title: "ZNS+ Fig. 7: throughput normalized to ZNS (fs = fileserver, mail = varmail; utilization %)", ylabel: "throughput / ZNS",
		series: []string{"ZNS", "IZC", "ZNS+"}, values: make([][]float64, 3)}
	for _, w := range r.Workloads {
		for _, u := range w.Utils {
			short := map[string]string{"fileserver": "fs", "varmail": "mail"}[w.Workload]
			b.labels = append(b.labels, fmt.Sprintf("%s %.0f", short, u.Utilization*100))
			b.values[0] = append(b.values[0], 1)
			b.values[1] = append(b.values[1], u.IZCvsZNS)
			b.values[2] = append(b.values[2], u.ZNSPlusVsZNS)
		}
	}
	return b.save(path)
}
