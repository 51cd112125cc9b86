// Package paper is `zctl bench paper`: the eZNS figures, the ZNS+ figure
// and the P-GC figure of F2FS on ZNS (package znsplus), and the ZMS figures
// (package zms), reproduced deterministically on simulated clocks. The
// registry (figures, in paper.go) lists the figures that run; a figure is
// added with its id, title, the paper's numbers and a run function whose
// lines carry the paper's number (Line.Ref) where the paper states one, so
// the fidelity table picks it up. The figures that do not run are listed in
// catalog.go with the reason.
//
// # What runs
//
// Each figure runs the code the cluster runs on its data path — the pkg/zns
// drive model (chips, channels, host link, shared write cache), the node's
// write admission control (node.Admission, Algorithm 1 lines 11–27) and
// device slots (node.WRR, driven through WRR.AcquireAsync: reads and writes
// take a slot, as in the node), the client's read congestion window
// (client.CongestionAdmits and client.CongestionUpdate, lines 1–10; in
// Fig. 29a's cc_on_zonefleet also its unit, client.ReadUnits, and the
// node's read latency, node.FromSlotRequest) — with
// in-process calls instead of gRPC, on ONE clock: a sim.Sim (package sim).
// Where a component waits on a channel (WRR, the client's window), the
// harness waits on a sim.Cond instead and calls the component's own decision
// code. The congestion window admits a read I/O as a whole, as Algorithm 1
// does, and as pkg/client now does (Fig. 29a also shows per-leg admission,
// which the client did before, as an ablation).
// Writers and readers are goroutines that block only on that clock; exactly
// one runs at a time and time advances only when all of them wait, so two
// runs give byte-identical results. Nothing reads the wall clock.
//
// Logical zones are placed by the arbiter's rule (distinct chip groups, least
// populated first, collisions only once every die is populated) and written
// like the client writes them (the stripes of one I/O coalesced per physical
// zone, submitted in parallel, the I/O completing with the last). Stripe
// widths are the experiment's variable, set as in the paper's figure, except
// for Fig. 26's v-zones and in Fig. 27–28, where the arbiter itself places
// every stripe group:
// arbiter.NewInMemory is the leader's code (local and global overdrive,
// recalls, CheckReclaim with zone_compaction through the harness's
// Compactor, which copies on the simulated drive) with its state published
// in memory instead of committed to etcd, and Config.Now on the sim clock.
//
// The drives' backing files are scratch: the rig gives pkg/zns an in-memory
// sparse file system (package scratch) that keeps only non-zero pages and
// never syncs. The figures write zeros, so gigabytes of modelled writes
// cost no memory and no system calls; the disk would add only this
// machine's latency to the wall time, never to modelled time.
//
// # Concurrency and failure
//
// A figure's runs are sequential; each builds its own drive (a sparse file
// under the given directory, removed afterwards) and simulation, which it
// stops before returning. An error of the drive stops the run and is
// returned; nothing is retried.
package paper

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Options select the scale.
type Options struct {
	// Short runs a reduced configuration (for the determinism test).
	Short bool `json:"short"`
}

// Figure is one reproducible figure.
type Figure struct {
	ID    string
	Title string
	Paper string // the paper's number, for the table and docs/paper-figures.md
	run   func(ctx context.Context, dir string, o Options) (any, []Line, error)
}

// Line is one row of the terminal table: a label and the ratio the paper quotes.
type Line struct {
	Label string  `json:"label"`
	Ours  float64 `json:"ours"`
	Paper string  `json:"paper"`
	// Ref is the paper's number where it states one for exactly this
	// quantity (0: none, only a range or a direction); the line is then a
	// row of the fidelity table.
	Ref float64 `json:"paper_value,omitempty"`
}

var figures = []Figure{
	{ID: "fig26", Title: "Fig. 26 local overdrive: v-zones (widths chosen by the arbiter) over static (width 4)", Paper: "2.0x at 4 writers (width 8), ~1.0x at 8 and 16 (width 4)", run: runFig26},
	{ID: "fig27_28", Title: "Fig. 27-28 global overdrive: NS4 (8 writers) while NS1-3 (2 each) idle", Paper: "NS4 takes up to 3x more spares and maxes out the device; releases them when the others resume", run: runFig27},
	{ID: "fig29a", Title: "Fig. 29a read-read fairness: congestion control", Paper: "A/B per thread: CC off 0.06 (sc. 1), CC on 1.0 (sc. 1), similar in sc. 2, B maxes out (sc. 3)", run: runFig29a},
	{ID: "fig29b", Title: "Fig. 29b write-write fairness: admission control", Paper: "regular writer +35.7% (sc. 1); device +6.6% (sc. 2), +24.7% (sc. 3)", run: runFig29b},
	{ID: "fig29c", Title: "Fig. 29c read-write fairness: CC, AC, CC+AC", Paper: "CC+AC: readers 71.6 %, busy 57.5 %, regular 70.1 % of max (none: 19.3 % and 27.3 % for the writers)", run: runFig29c},
	{ID: "zns_plus", Title: "ZNS+ Fig. 6-9, Tables 4-5: ZNS (host copy) vs IZC vs ZNS+ (threaded logging + HSR + IZC), fileserver, varmail and tpcc-like", Paper: "IZC 1.21-1.77x, ZNS+ 1.33-2.91x of ZNS; 85.8-94.8 % of segments recycled by threaded logging", run: runZNSPlus},
	{ID: "zns_plus_scaling", Title: "ZNS+ Fig. 11-12: fileserver at 90 % as flash chips (2-32) and PCIe lanes with chips (1/8, 2/16, 4/32) grow; copyback-aware vs unaware allocation", Paper: "IZC-CAB 1.13x IZC-CUB at 32 chips, > 80 % of copies by copyback with CAB; the gain of IZC and ZNS+ over ZNS grows with parallelism", run: runScaling},
	{ID: "pgc", Title: "F2FS on ZNS (HotStorage 2023) Fig. 8, 4: parallel foreground GC (P-GC) at 95 %, 1 vs 2 and 4 workers, fileserver and varmail; over-provisioning sweep", Paper: "P-GC up to +42 %, fileserver +17 % (2 threads); throughput rises with over-provisioning (Fig. 4)", run: runPGC},
	zmsFigure("zms_ipu"),
	zmsFigure("zms_l2p"),
	zmsFigure("zms_iotailor"),
}

// Figures lists the figures in order.
func Figures() []Figure { return append([]Figure(nil), figures...) }

// IDs lists the figure ids.
func IDs() []string {
	var out []string
	for _, f := range figures {
		out = append(out, f.ID)
	}
	return out
}

// Result is the output of Run.
type Result struct {
	Figures map[string]any    `json:"figures"`
	Lines   map[string][]Line `json:"-"`
	Order   []string          `json:"-"`
}

// Run runs the figures with the given ids (all if none).
func Run(ctx context.Context, dir string, ids []string, o Options) (*Result, error) {
	if len(ids) == 0 {
		ids = IDs()
	}
	sel := map[string]Figure{}
	for _, id := range ids {
		f, ok := lookup(id)
		if !ok {
			return nil, &zerr.InvalidArgumentError{Field: "figure", Reason: fmt.Sprintf("unknown figure %q (have %v)", id, IDs())}
		}
		sel[id] = f
	}
	res := &Result{Figures: map[string]any{}, Lines: map[string][]Line{}}
	for _, f := range figures { // in the registry's order
		if _, ok := sel[f.ID]; !ok {
			continue
		}
		v, lines, err := f.run(ctx, dir, o)
		if err != nil {
			return nil, err
		}
		res.Figures[f.ID] = v
		res.Lines[f.ID] = lines
		res.Order = append(res.Order, f.ID)
	}
	return res, nil
}

func lookup(id string) (Figure, bool) {
	for _, f := range figures {
		if f.ID == id {
			return f, true
		}
	}
	return Figure{}, false
}

func runFig26(ctx context.Context, dir string, o Options) (any, []Line, error) {
	c := DefaultFig26()
	if o.Short {
		c.Writers, c.Run = []int{4, 8}, 10*time.Millisecond
	}
	r, err := RunFig26(ctx, dir, c)
	if err != nil {
		return nil, nil, err
	}
	var lines []Line
	for _, row := range r.Rows {
		p, ref := "~1.0", 1.0
		if row.Writers == 4 {
			p, ref = "2.0", 2.0
		}
		lines = append(lines, Line{Label: fmt.Sprintf("vzone_over_static, %d writers", row.Writers), Ours: row.VZoneOverStatic, Paper: p, Ref: ref})
		w := 4.0
		if row.Writers == 4 {
			w = 8
		}
		lines = append(lines, Line{Label: fmt.Sprintf("vzone_mean_width, %d writers", row.Writers), Ours: row.VZoneWidth, Paper: fmt.Sprint(w), Ref: w})
	}
	return r, lines, nil
}

func runFig27(ctx context.Context, dir string, o Options) (any, []Line, error) {
	c := DefaultFig27()
	if o.Short {
		c.Run = time.Second
		c.IdleFrom, c.IdleTo, c.Bin = c.Run*30/100, c.Run*80/100, c.Run/50
		c.DefaultTReadOnly = scaleOf(5*time.Minute, c.Run)
	}
	r, err := RunFig27(ctx, dir, c)
	if err != nil {
		return nil, nil, err
	}
	var lines []Line
	for i, run := range []*Fig27Run{&r.Paper, &r.Default} {
		t := " (" + run.Timing + " reclaim timing)"
		ref := func(v float64) float64 { // the paper's timing only
			if i == 0 {
				return v
			}
			return 0
		}
		lines = append(lines,
			Line{Label: "ns4_spares_idle_over_busy" + t, Ours: run.NS4SparesIdleOverBusy, Paper: "up to 3", Ref: ref(3)},
			Line{Label: "ns4_mb_per_second_idle_over_busy" + t, Ours: run.NS4MBpsIdleOverBusy, Paper: ">1 (maxes out)"},
			Line{Label: "ns4_idle_over_total_busy" + t, Ours: run.NS4IdleOverTotalBusy, Paper: "~1 (~2.3 GB/s)", Ref: ref(1)},
			Line{Label: "ns4_spares_resumed_over_busy" + t, Ours: run.NS4SparesResumedOverBusy, Paper: "~1 (released)", Ref: ref(1)})
		lines = append(lines, Line{Label: "t_read_only / two overdrive cycles" + t, Ours: ratio(float64(run.TReadOnly), float64(run.TwoCycles)), Paper: "1 (\"two cycles of global overdrive\")"})
	}
	return r, lines, nil
}

func runFig29a(ctx context.Context, dir string, o Options) (any, []Line, error) {
	c := DefaultFig29a()
	if o.Short {
		c.Scenarios, c.Warmup, c.Run = c.Scenarios[:2], 2*time.Millisecond, 5*time.Millisecond
	}
	r, err := RunFig29a(ctx, dir, c)
	if err != nil {
		return nil, nil, err
	}
	// B's mean window over its cap: below 1 where reads pass lat_thresh.
	bwin := map[int]string{2: "<1", 4: "<1 (\"similar\")", 8: "1 (below lat_thresh)"}
	var lines []Line
	for _, row := range r.Rows {
		off, on := "-", "~1.0"
		var offRef, onRef float64
		switch row.Scenario.AWidth {
		case 2:
			off, on = "0.059", "1.0" // per thread: 76 / 1,287 and 290 / 290 MB/s
			offRef, onRef = 0.059, 1.0
		case 8:
			on = "<1 (B maxes out)" // "the read latency also becomes below the threshold"
		}
		lines = append(lines, Line{Label: "a_over_b cc_off, " + row.Scenario.Name, Ours: row.Off.AOverB, Paper: off, Ref: offRef})
		lines = append(lines, Line{Label: "a_over_b cc_on, " + row.Scenario.Name, Ours: row.On.AOverB, Paper: on, Ref: onRef})
		lines = append(lines, Line{Label: "b_window_mean/cap cc_on, " + row.Scenario.Name, Ours: round(row.On.BWindowMean / float64(4*r.Config.BWidth)), Paper: bwin[row.Scenario.AWidth]})
		lines = append(lines, Line{Label: "b_window_mean/cap cc_on_zonefleet, " + row.Scenario.Name, Ours: round(row.OnZoneFleet.BWindowMean / float64(4*r.Config.BWidth)), Paper: bwin[row.Scenario.AWidth]})
		for _, ab := range []struct {
			name string
			run  Fig29aRun
		}{{"cc_on_zonefleet", row.OnZoneFleet}, {"cc_on_stripe_units", row.OnStripes}, {"cc_on_device_latency", row.OnDevLat}, {"cc_on_zonefleet_before", row.OnZoneFleetBefore}, {"cc_on_client_legs", row.OnLegs}} {
			lines = append(lines, Line{Label: "a_over_b " + ab.name + ", " + row.Scenario.Name, Ours: ab.run.AOverB, Paper: "-"})
		}
	}
	return r, lines, nil
}

func runFig29c(ctx context.Context, dir string, o Options) (any, []Line, error) {
	c := DefaultFig29c()
	if o.Short {
		c.Readers, c.Regular, c.Warmup, c.Run = 4, 4, 2*time.Millisecond, 5*time.Millisecond
	}
	r, err := RunFig29c(ctx, dir, c)
	if err != nil {
		return nil, nil, err
	}
	paperGain := map[string]string{"busy": "2.98", "regular": "2.57"} // CC+AC over none, from % of max
	gainRef := map[string]float64{"busy": 2.98, "regular": 2.57}
	var lines []Line
	add := func(res *Fig29cResult, suffix string) {
		for _, m := range []string{"cc", "ac", "cc+ac"} {
			pa, pb, pr := "-", "-", "-"
			var ra, rb, rr float64
			if m != "ac" {
				pa = "<1"
			}
			if m == "cc+ac" {
				// the readers' maximum is taken as their bandwidth with no
				// scheduler (199.6 MB/s each: their share of the link)
				pa, ra = "0.716 (71.6 % of max)", 0.716
				pb, pr = paperGain["busy"], paperGain["regular"]
				rb, rr = gainRef["busy"], gainRef["regular"]
			}
			lines = append(lines,
				Line{Label: "reader_gain, " + m + suffix, Ours: res.ReaderGain[m], Paper: pa, Ref: ra},
				Line{Label: "busy_gain, " + m + suffix, Ours: res.BusyGain[m], Paper: pb, Ref: rb},
				Line{Label: "regular_gain, " + m + suffix, Ours: res.RegularGain[m], Paper: pr, Ref: rr})
		}
	}
	add(r, fmt.Sprintf(" (%d slots)", c.QueueSlots))
	if r.DeepQueue != nil {
		add(r.DeepQueue, fmt.Sprintf(" (%d slots)", c.DeepQueueSlots))
	}
	return r, lines, nil
}

func runFig29b(ctx context.Context, dir string, o Options) (any, []Line, error) {
	c := DefaultFig29b()
	if o.Short {
		c.Scenarios, c.Warmup, c.Run, c.BurstSweep = c.Scenarios[:1], 10*time.Millisecond, 20*time.Millisecond, []int{1}
		c.DieBackpressure, c.DieWarmup = c.DieBackpressure[:1], 0
	}
	r, err := RunFig29b(ctx, dir, c)
	if err != nil {
		return nil, nil, err
	}
	paperRegular := map[string]string{"1-regular": "1.357", "2-all-busy": "1.076 (zone A)", "3-collision-free": "-"}
	paperTotal := map[string]string{"1-regular": "-", "2-all-busy": "1.066", "3-collision-free": "1.247"}
	refRegular := map[string]float64{"1-regular": 1.357}
	refTotal := map[string]float64{"2-all-busy": 1.066, "3-collision-free": 1.247}
	refOff := map[string]float64{"2-all-busy": 2160.9, "3-collision-free": 2403.3}
	var lines []Line
	names := make([]string, 0, len(r.Rows))
	for _, row := range r.Rows {
		names = append(names, row.Scenario.Name)
	}
	sort.Strings(names)
	for _, n := range names {
		lines = append(lines, Line{Label: "regular_gain, " + n, Ours: r.RegularGain[n], Paper: paperRegular[n], Ref: refRegular[n]})
		lines = append(lines, Line{Label: "total_gain, " + n, Ours: r.TotalGain[n], Paper: paperTotal[n], Ref: refTotal[n]})
	}
	for _, b := range r.Bursts {
		p := "-"
		if b.BurstBlocks == 1 {
			p = "1.357 (tokens only for pending writes)"
		}
		lines = append(lines, Line{Label: fmt.Sprintf("regular_gain, 1-regular, token cap %d", b.BurstBlocks), Ours: b.RegularGain, Paper: p})
	}
	paperOff := map[string]string{"2-all-busy": "2,160.9", "3-collision-free": "2,403.3"}
	for _, row := range r.Rows {
		if p, ok := paperOff[row.Scenario.Name]; ok {
			lines = append(lines, Line{Label: "device MB/s AC off, " + row.Scenario.Name, Ours: row.Off.TotalMBps, Paper: p, Ref: refOff[row.Scenario.Name]})
		}
	}
	for _, d := range r.Die {
		for _, row := range d.Rows {
			if p, ok := paperOff[row.Scenario.Name]; ok {
				lines = append(lines, Line{Label: fmt.Sprintf("device MB/s AC off, %s, die back-pressure %d KiB", row.Scenario.Name, d.DieBytes>>10), Ours: row.Off.TotalMBps, Paper: p, Ref: refOff[row.Scenario.Name]})
			}
		}
		for _, n := range names {
			lines = append(lines, Line{Label: fmt.Sprintf("total_gain, %s, die back-pressure %d KiB", n, d.DieBytes>>10), Ours: d.TotalGain[n], Paper: paperTotal[n], Ref: refTotal[n]})
		}
	}
	return r, lines, nil
}
