package paper

import (
	"context"
	"fmt"
	"slices"

	"github.com/zonefleet/zonefleet/pkg/bench/znsplus"
)

// ScalingResult is the ZNS+ hardware-parallelism figure (ZNS+ §4.4-4.5,
// Fig. 11-12) on the ZNS+ harness (package znsplus), fileserver at the
// paper's 90 %: Fig. 11 varies the flash chips (2 to 32) with the host link
// fixed; Fig. 12 varies the PCIe lanes (600 MB/s each) and the chips
// together (1/8, 2/16, 4/32 of the paper's 1/8 to 5/40: the drive model's
// D_zone is a power of two). As in the paper the zone spans every chip
// (D_zone = chips), so the zone and the segment grow with the chips, and
// the file system keeps its size: the zone count falls as the zones grow
// (the paper's 16 GiB; here Default's 76 MiB, 96 zones at 16 chips).
type ScalingResult struct {
	Workload    string           `json:"workload"`
	Utilization float64          `json:"utilization"`
	Chips       []ScalingPoint   `json:"chips"` // Fig. 11
	Link        []ScalingPoint   `json:"link"`  // Fig. 12
	Configs     []znsplus.Config `json:"-"`     // the runs' configurations (the manifest records them)
}

// ScalingPoint is one drive of the sweeps: zns, izc and zns+ on it.
type ScalingPoint struct {
	Chips    int     `json:"chips"`
	Lanes    int     `json:"lanes,omitempty"` // Fig. 12: the link is Lanes x 600 MB/s
	LinkMBps float64 `json:"link_mb_per_s"`
	Zones    int     `json:"zones"`
	ZoneMiB  float64 `json:"zone_mib"`
	FSMiB    float64 `json:"fs_mib"` // the file system's user capacity (its reserve zones grow with the zone)
	ZNSMBps  float64 `json:"zns_mb_per_s"`
	IZCvsZNS float64 `json:"izc_vs_zns"`
	PlusVsZN float64 `json:"zns_plus_vs_zns"`
	// Fig. 11: izc with copyback-unaware allocation over zns, izc (CAB)
	// over it, and the share of izc's in-storage copies made by copyback
	// with and without CAB.
	IZCCUBvsZNS float64 `json:"izc_cub_vs_zns,omitempty"`
	IZCCABvsCUB float64 `json:"izc_cab_vs_cub,omitempty"`
	CopybackCAB float64 `json:"izc_copyback_share_cab"`
	CopybackCUB float64 `json:"izc_copyback_share_cub,omitempty"`
	// PlusPlugCopyback is the share of zns+'s plugged blocks copied by
	// copyback (Fig. 11b's ZNS+ bars: threaded logging's plugging copies
	// fully valid chunks on their own chip).
	PlusPlugCopyback float64 `json:"zns_plus_plug_copyback_share"`
	ChipUtilZNS      float64 `json:"chip_utilization_zns"` // Fig. 12b
	ChipUtilIZC      float64 `json:"chip_utilization_izc"`
	ChipUtilZNSPlus  float64 `json:"chip_utilization_zns_plus"`
}

// laneBytesPerSec is ZNS+ §4.5: "each of which was assumed to provide
// 600 MB/s of bandwidth".
const laneBytesPerSec = 600_000_000

// fig11CABOverCUB is ZNS+ §4.4: "the performance of IZC-CAB is about 1.13
// times better than that of IZC-CUB when the number of flash chips is 32".
const fig11CABOverCUB = 1.13

func scalingConfigs(o Options) (chips, lanes []int, cfg func(chips, lanes int) znsplus.Config) {
	// the paper's lanes / chips run 1/8 to 5/40; the drive model's D_zone is
	// a power of two, so 3/24 and 5/40 are left out
	chips, lanes = []int{2, 4, 8, 16, 32}, []int{1, 2, 4}
	base, util, blocks := znsplus.Default(), 0.90, 96*16 // zone count x chips: the file system's size in chip blocks
	base.CopybackPagesPerBlock, base.CopybackZones = 0, 0
	if o.Short {
		chips, lanes = []int{4, 16}, []int{1, 2}
		base, util, blocks = znsplus.Small(), 0.85, 32*16
		base.Threads, base.Overwrite = 8, 0.25
	}
	cfg = func(c, l int) znsplus.Config {
		x := base
		x.Workload, x.Utilizations, x.Chips = znsplus.Fileserver, []float64{util}, c
		x.Zones = (blocks + c/2) / c
		x.NoCABRun = l > 0 // the CUB run is Fig. 11's
		if l > 0 {
			x.LinkBytesPerSec = int64(l) * laneBytesPerSec
		}
		return x
	}
	return chips, lanes, cfg
}

func runScaling(ctx context.Context, dir string, o Options) (any, []Line, error) {
	chips, lanes, cfg := scalingConfigs(o)
	var cfgs []znsplus.Config
	for _, c := range chips {
		cfgs = append(cfgs, cfg(c, 0))
	}
	// a lanes / chips point on the default link is a chip point already
	// (2 lanes / 16 chips): its runs are reused
	same := map[int]int{}
	for j, l := range lanes {
		x := cfg(8*l, l)
		if x.LinkBytesPerSec == znsplus.LinkBytesPerSec {
			if k := slices.Index(chips, 8*l); k >= 0 {
				same[len(chips)+j] = k
				continue
			}
		}
		same[len(chips)+j] = len(cfgs)
		cfgs = append(cfgs, x)
	}
	for i := range cfgs {
		cfgs[i].Dir = dir
	}
	ran, err := znsplus.RunAll(ctx, cfgs)
	if err != nil {
		return nil, nil, err
	}
	for i := range cfgs {
		cfgs[i].Dir = ""
	}
	rs, link := ran[:len(chips)], make([]znsplus.Config, 0, len(lanes))
	for j, l := range lanes {
		rs = append(rs, ran[same[len(chips)+j]])
		x := cfg(8*l, l)
		x.Dir = ""
		link = append(link, x)
	}
	points := append(append([]znsplus.Config(nil), cfgs[:len(chips)]...), link...)
	res := &ScalingResult{Workload: znsplus.Fileserver, Utilization: cfgs[0].Utilizations[0], Configs: cfgs}
	var lines []Line
	for i, r := range rs {
		u := r.Utils[0]
		link := points[i].LinkBytesPerSec
		if link == 0 {
			link = znsplus.LinkBytesPerSec
		}
		p := ScalingPoint{Chips: r.Chips, LinkMBps: float64(link) / 1e6, Zones: points[i].Zones, ZoneMiB: r.ZoneMiB, FSMiB: round(r.FSMiB),
			ZNSMBps: u.ZNS.ThroughputMBps, IZCvsZNS: u.IZCvsZNS, PlusVsZN: u.ZNSPlusVsZNS,
			CopybackCAB: u.CopybackShareCAB, PlusPlugCopyback: u.ZNSPlus.PlugCopybackShare,
			ChipUtilZNS: u.ZNS.ChipUtilization, ChipUtilIZC: u.IZC.ChipUtilization, ChipUtilZNSPlus: u.ZNSPlus.ChipUtilization}
		if i < len(chips) {
			if u.IZCNoCABvsZNS != nil && u.CopybackShareNoCAB != nil {
				p.IZCCUBvsZNS, p.CopybackCUB = *u.IZCNoCABvsZNS, *u.CopybackShareNoCAB
				p.IZCCABvsCUB = ratio(u.IZCvsZNS, p.IZCCUBvsZNS)
			}
			res.Chips = append(res.Chips, p)
			tag := fmt.Sprintf("%d chips (%g MiB zones), fileserver %.0f%%", p.Chips, p.ZoneMiB, 100*res.Utilization)
			cab, cabRef := "- (1.13 at 32 chips)", 0.0
			if p.Chips == 32 {
				cab, cabRef = "1.13 (§4.4)", fig11CABOverCUB
			}
			lines = append(lines,
				Line{Label: "fig11 izc-cab / zns, " + tag, Ours: p.IZCvsZNS, Paper: "- (near 1 at 2 chips, rises with chips)"},
				Line{Label: "fig11 izc-cub / zns, " + tag, Ours: p.IZCCUBvsZNS, Paper: "-"},
				Line{Label: "fig11 zns+ / zns, " + tag, Ours: p.PlusVsZN, Paper: "- (gap to IZC grows with chips)"},
				Line{Label: "fig11 izc-cab / izc-cub, " + tag, Ours: p.IZCCABvsCUB, Paper: cab, Ref: cabRef},
				Line{Label: "fig11b izc copyback share cab, " + tag, Ours: p.CopybackCAB, Paper: "> 0.80"},
				Line{Label: "fig11b izc copyback share cub, " + tag, Ours: p.CopybackCUB, Paper: "- (falls as chips grow)"},
				Line{Label: "fig11b zns+ plugging copyback share, " + tag, Ours: p.PlusPlugCopyback, Paper: "- (high whatever the allocation)"})
			continue
		}
		p.Lanes = lanes[i-len(chips)]
		res.Link = append(res.Link, p)
		tag := fmt.Sprintf("%d lanes / %d chips, fileserver %.0f%%", p.Lanes, p.Chips, 100*res.Utilization)
		lines = append(lines,
			Line{Label: "fig12 izc / zns, " + tag, Ours: p.IZCvsZNS, Paper: "- (gain grows with parallelism)"},
			Line{Label: "fig12 zns+ / zns, " + tag, Ours: p.PlusVsZN, Paper: "- (gain grows with parallelism)"},
			Line{Label: "fig12b zns chip utilization, " + tag, Ours: p.ChipUtilZNS, Paper: "- (low at high parallelism)"},
			Line{Label: "fig12b zns+ chip utilization, " + tag, Ours: p.ChipUtilZNSPlus, Paper: "- (above ZNS)"})
	}
	return res, lines, nil
}

func scalingPlot(r *ScalingResult, path string) error {
	b := bars{title: "ZNS+ Fig. 11-12: fileserver over ZNS as chips (and PCIe lanes) grow", ylabel: "throughput / ZNS",
		series: []string{"IZC-CUB", "IZC-CAB", "ZNS+"}, values: make([][]float64, 3)}
	for _, p := range r.Chips {
		b.labels = append(b.labels, fmt.Sprintf("%d chips", p.Chips))
		b.values[0] = append(b.values[0], p.IZCCUBvsZNS)
		b.values[1] = append(b.values[1], p.IZCvsZNS)
		b.values[2] = append(b.values[2], p.PlusVsZN)
	}
	for _, p := range r.Link {
		b.labels = append(b.labels, fmt.Sprintf("%d/%d", p.Lanes, p.Chips))
		b.values[0] = append(b.values[0], 0)
		b.values[1] = append(b.values[1], p.IZCvsZNS)
		b.values[2] = append(b.values[2], p.PlusVsZN)
	}
	return b.save(path)
}
