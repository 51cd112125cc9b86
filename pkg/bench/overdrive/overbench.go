// Package overbench is `zctl bench overdrive`: the arbiter's overdrive
// against static striping on a local cluster with the realtime clock.
//
//   - Fig. 26 (eZNS): aggregate write bandwidth of 4, 8 and 16 writers, each on
//     its own v-zone (width chosen by local overdrive) versus statically
//     striped zones of a fixed width over the same drives.
//   - Fig. 27–28: four namespaces write; three go idle and come back; each
//     namespace's bandwidth and spare count per interval shows global
//     overdrive lending the idle namespaces' spares and recalling them.
//
// Bandwidths are MiB/s of modelled time (wall time / time scale).
//
// It runs on the realtime clock, so it measures this machine's software path
// and moves between runs; the paper's Fig. 26–28, deterministic, are `zctl
// bench paper fig26 fig27_28` (pkg/bench/paper).
package overbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Options of the benchmark.
type Options struct {
	Dir          string
	TimeScale    float64       // default 8
	Run          time.Duration // modelled time of each Fig. 26 run (default 250ms)
	Phase        time.Duration // modelled time of each timeline phase (default 300ms)
	Intervals    int           // samples per phase (default 3)
	Writers      []int         // default 4, 8, 16
	StaticWidth  int           // width of the static zones (default 2)
	SkipTimeline bool
}

// Result of the benchmark.
type Result struct {
	Fig26     []Fig26Row    `json:"fig26"`
	Timeline  []TimelineRow `json:"timeline,omitempty"`
	TimeScale float64       `json:"time_scale"`
	Dies      int           `json:"dies"`
}

// Fig26Row compares v-zones with static striping at one writer count.
type Fig26Row struct {
	Writers     int     `json:"writers"`
	VZoneMiBps  float64 `json:"vzone_mib_per_second"`
	StaticMiBps float64 `json:"static_mib_per_second"`
	Gain        float64 `json:"vzone_over_static"`
	MeanWidth   float64 `json:"vzone_mean_width"`
	StaticWidth int     `json:"static_width"`
}

// TimelineRow is one sampling interval of the global-overdrive timeline.
type TimelineRow struct {
	Phase  string             `json:"phase"`
	AtMs   float64            `json:"at_ms"`
	MiBps  map[string]float64 `json:"mib_per_second"`
	Spares map[string]int     `json:"spares"` // own spares - lent + borrowed
}

// drive: 8 chips with single-die 1 MiB zones, MAR 14 → 8 essentials + 6 spares per drive.
func drive() flash.Config {
	c := localcluster.SmallDevice()
	c.PagesPerBlock, c.BlocksPerChip, c.SpareBlocksPerChip = 64, 18, 2
	return c
}

func defaults(o *Options) {
	if o.TimeScale <= 0 {
		o.TimeScale = 8
	}
	if o.Run <= 0 {
		o.Run = 250 * time.Millisecond
	}
	if o.Phase <= 0 {
		o.Phase = 300 * time.Millisecond
	}
	if o.Intervals <= 0 {
		o.Intervals = 3
	}
	if len(o.Writers) == 0 {
		o.Writers = []int{4, 8, 16}
	}
	if o.StaticWidth <= 0 {
		o.StaticWidth = 1
	}
}

// Run runs both scenarios.
func Run(ctx context.Context, o Options) (*Result, error) {
	defaults(&o)
	for _, w := range o.Writers {
		if w < 1 || w > 16 {
			return nil, &zerr.InvalidArgumentError{Field: "writers", Reason: fmt.Sprintf("%d: want 1 to 16", w)}
		}
	}
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "zonefleet-overbench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		o.Dir = d
	}
	res := &Result{TimeScale: o.TimeScale, Dies: 16}
	for _, w := range o.Writers {
		row := Fig26Row{Writers: w, StaticWidth: o.StaticWidth}
		var err error
		if row.VZoneMiBps, row.MeanWidth, err = vzoneRun(ctx, o, w); err != nil {
			return nil, fmt.Errorf("v-zones, %d writers: %w", w, err)
		}
		if row.StaticMiBps, err = staticRun(ctx, o, w); err != nil {
			return nil, fmt.Errorf("static, %d writers: %w", w, err)
		}
		if row.StaticMiBps > 0 {
			row.Gain = row.VZoneMiBps / row.StaticMiBps
		}
		res.Fig26 = append(res.Fig26, row)
	}
	if !o.SkipTimeline {
		tl, err := timeline(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("timeline: %w", err)
		}
		res.Timeline = tl
	}
	return res, nil
}

func startCluster(ctx context.Context, o Options, name string) (*localcluster.Cluster, error) {
	dir := fmt.Sprintf("%s/%s", o.Dir, name)
	_ = os.RemoveAll(dir)
	return localcluster.Start(ctx, localcluster.Config{Dir: dir, Nodes: 2, Clock: "realtime", TimeScale: o.TimeScale,
		Device: drive(), Admission: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}) // as ssdnode and `zctl local up` run
}

func newClient(ctx context.Context, cl *localcluster.Cluster, ns string) (*client.Client, error) {
	return client.New(ctx, cl.ClientConfig(ns)) // "" = the operator (admin certificate)
}

// writer writes 256 KiB at a time to v-zones of its namespace, opening a new
// one when a v-zone fills and resetting the one before.
type writer struct {
	c      *client.Client
	static *client.VZone // fixed layout: written over and over
	bytes  atomic.Int64
	paused atomic.Bool
	// progress, when set, gets a token after each completed write
	progress chan struct{}
	widths   []int
	mu       sync.Mutex
}

func (w *writer) run(ctx context.Context) error {
	buf := make([]byte, 256<<10)
	if w.static != nil {
		capacity := w.static.Layout
		l, err := capacity(ctx)
		if err != nil {
			return err
		}
		for ctx.Err() == nil {
			for off := uint64(0); off+64 <= l.GetCapacity() && ctx.Err() == nil; off += 64 {
				if err := w.static.Write(ctx, off, buf); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				w.wrote(len(buf))
			}
			if err := w.static.Reset(ctx); err != nil && ctx.Err() == nil {
				return err
			}
		}
		return nil
	}
	var prev, vz *client.VZone
	defer func() { // the widths of the v-zone being written when the run stops
		if vz != nil {
			w.record(context.Background(), vz)
		}
	}()
	for ctx.Err() == nil {
		var err error
		vz, err = w.c.OpenVZone(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if prev != nil {
			_ = prev.Reset(ctx)
		}
		info, err := vz.ReportZone(ctx)
		if err != nil {
			return err
		}
		for off := uint64(0); off+64 <= info.Capacity && ctx.Err() == nil; off += 64 {
			for w.paused.Load() && ctx.Err() == nil {
				time.Sleep(2 * time.Millisecond)
			}
			if err := vz.Write(ctx, off, buf); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			w.wrote(len(buf))
		}
		if ctx.Err() != nil {
			return nil
		}
		w.record(ctx, vz)
		_ = vz.Finish(ctx)
		prev, vz = vz, nil
	}
	return nil
}

// wrote counts n written bytes.
func (w *writer) wrote(n int) {
	w.bytes.Add(int64(n))
	if w.progress != nil {
		select {
		case w.progress <- struct{}{}:
		default:
		}
	}
}

// record notes the stripe-group widths of a v-zone.
func (w *writer) record(ctx context.Context, vz *client.VZone) {
	l, err := vz.Layout(ctx)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, g := range l.GetGroups() {
		w.widths = append(w.widths, int(g.GetWidth()))
	}
}

func vzoneRun(ctx context.Context, o Options, writers int) (float64, float64, error) {
	cl, err := startCluster(ctx, o, fmt.Sprintf("vz-%d", writers))
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	admin, err := newClient(ctx, cl, "")
	if err != nil {
		return 0, 0, err
	}
	defer admin.Close()
	if _, err := admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "bench", MaxActiveVzones: 16, ZonesPerVzone: 32}); err != nil {
		return 0, 0, err
	}
	ws := make([]*writer, writers)
	for i := range ws {
		c, err := newClient(ctx, cl, "bench")
		if err != nil {
			return 0, 0, err
		}
		defer c.Close()
		ws[i] = &writer{c: c}
	}
	bw, err := measure(ctx, o, ws, o.Run)
	if err != nil {
		return 0, 0, err
	}
	var sum, n float64
	for _, w := range ws {
		for _, x := range w.widths {
			sum += float64(x)
			n++
		}
	}
	if n == 0 {
		n = 1
	}
	return bw, sum / n, nil
}

// measure runs the writers for d of modelled time and returns aggregate MiB/s.
func measure(ctx context.Context, o Options, ws []*writer, d time.Duration) (float64, error) {
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, len(ws))
	progress := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for _, w := range ws {
		w.progress = progress
		wg.Add(1)
		go func() { defer wg.Done(); errc <- w.run(rctx) }()
	}
	// Warm up one tenth, then measure.
	time.Sleep(time.Duration(float64(d) * o.TimeScale / 10))
	var start int64
	for _, w := range ws {
		start += w.bytes.Load()
	}
	wall := time.Duration(float64(d) * o.TimeScale)
	t0 := time.Now()
	// The window lasts d and, beyond it, until a write has completed in it:
	// on a machine too busy to complete one in d the figure is still a
	// bandwidth over the time taken, never a zero. A writer that fails ends
	// the wait.
	window := time.After(wall)
	var end int64
	failed := 0
	for over := false; ; {
		end = 0
		for _, w := range ws {
			end += w.bytes.Load()
		}
		if over && end > start {
			break
		}
		select {
		case <-window:
			over, window = true, nil
		case <-progress:
		case err := <-errc:
			failed++
			if err != nil && !errors.Is(err, context.Canceled) {
				cancel()
				wg.Wait()
				return 0, err
			}
			if failed == len(ws) {
				cancel()
				wg.Wait()
				return 0, fmt.Errorf("the writers stopped: %w", context.Cause(ctx))
			}
		}
	}
	elapsed := time.Since(t0).Seconds() / o.TimeScale
	cancel()
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil && !errors.Is(err, context.Canceled) {
			return 0, err
		}
	}
	return float64(end-start) / (1 << 20) / elapsed, nil
}

// staticRun: each writer stripes over StaticWidth physical zones on its own
// dies (round robin over the cluster's 16 dies), fixed for the whole run.
func staticRun(ctx context.Context, o Options, writers int) (float64, error) {
	cl, err := startCluster(ctx, o, fmt.Sprintf("st-%d", writers))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	admin, err := newClient(ctx, cl, "")
	if err != nil {
		return 0, err
	}
	nodes, err := admin.ListNodes(ctx)
	admin.Close()
	if err != nil {
		return 0, err
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].GetId() < nodes[j].GetId() })
	d := nodes[0].GetDevices()[0]
	dies := int(d.GetFcgs()) // D_zone 1: one die per FCG
	type die struct {
		node *v1.Node
		fcg  int
	}
	var all []die
	for f := 0; f < dies; f++ {
		for _, n := range nodes {
			all = append(all, die{n, f})
		}
	}
	used := map[string]int{}
	dcfg := cl.AdminClientConfig() // static layouts: the operator places the zones
	dcfg.Namespace = "static"
	direct := client.NewDirect(dcfg)
	defer direct.Close()
	ws := make([]*writer, writers)
	for i := range ws {
		g := &v1.StripeGroup{Width: uint32(o.StaticWidth), StripeBlocks: 8}
		for k := 0; k < o.StaticWidth; k++ {
			dd := all[(i*o.StaticWidth+k)%len(all)]
			key := fmt.Sprintf("%s/%d", dd.node.GetId(), dd.fcg)
			zone := uint32(dd.fcg + dies*used[key])
			used[key]++
			g.Zones = append(g.Zones, &v1.PhysicalZone{Node: dd.node.GetId(), Addr: dd.node.GetAddr(), Zone: zone, Available: true})
		}
		g.Capacity = uint64(o.StaticWidth) * d.GetZoneCapacity()
		ws[i] = &writer{c: direct}
		ws[i].static = direct.StaticVZone(&v1.VZone{Id: uint64(i), State: v1.VZoneState_VZONE_STATE_OPEN, Capacity: g.Capacity, Groups: []*v1.StripeGroup{g}})
	}
	return measure(ctx, o, ws, o.Run)
}

// timeline: four namespaces with one writer each; ns-1..ns-3 pause during
// the middle phase and resume in the last.
func timeline(ctx context.Context, o Options) ([]TimelineRow, error) {
	cl, err := startCluster(ctx, o, "timeline")
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	admin, err := newClient(ctx, cl, "")
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	names := []string{"ns-0", "ns-1", "ns-2", "ns-3"}
	var ws []*writer
	for _, n := range names {
		if _, err := admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: n, MaxActiveVzones: 2, ZonesPerVzone: 8}); err != nil {
			return nil, err
		}
		c, err := newClient(ctx, cl, n)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		ws = append(ws, &writer{c: c})
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(ws))
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); errc <- w.run(rctx) }()
	}
	interval := time.Duration(float64(o.Phase) * o.TimeScale / float64(o.Intervals))
	var rows []TimelineRow
	last := make([]int64, len(ws))
	start := time.Now()
	for phase, name := range []string{"all write", "ns-1..3 idle", "all write"} {
		for i := range ws[1:] {
			ws[i+1].paused.Store(phase == 1)
		}
		for k := 0; k < o.Intervals; k++ {
			t0 := time.Now()
			time.Sleep(interval)
			el := time.Since(t0).Seconds() / o.TimeScale
			row := TimelineRow{Phase: name, AtMs: time.Since(start).Seconds() / o.TimeScale * 1000, MiBps: map[string]float64{}, Spares: map[string]int{}}
			for i, w := range ws {
				b := w.bytes.Load()
				row.MiBps[names[i]] = float64(b-last[i]) / (1 << 20) / el
				last[i] = b
			}
			list, err := admin.Namespaces().List(ctx)
			if err != nil {
				return nil, err
			}
			for _, n := range list {
				row.Spares[n.GetName()] = int(n.GetSpares()) - int(n.GetSparesLent()) + int(n.GetSparesBorrowed())
			}
			rows = append(rows, row)
		}
	}
	cancel()
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, err
		}
	}
	return rows, nil
}

// WriteTable prints the result.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "eZNS Fig. 26 (%d dies, time scale %.0f)\tv-zones MiB/s\tmean width\tstatic MiB/s\tstatic width\tv-zone/static\n", r.Dies, r.TimeScale)
	for _, row := range r.Fig26 {
		fmt.Fprintf(tw, "%d writers\t%.1f\t%.1f\t%.1f\t%d\t%.2f\n", row.Writers, row.VZoneMiBps, row.MeanWidth, row.StaticMiBps, row.StaticWidth, row.Gain)
	}
	if len(r.Timeline) > 0 {
		names := make([]string, 0, len(r.Timeline[0].MiBps))
		for n := range r.Timeline[0].MiBps {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(tw, "\neZNS Fig. 27-28\tt (ms)")
		for _, n := range names {
			fmt.Fprintf(tw, "\t%s MiB/s (spares)", n)
		}
		fmt.Fprintln(tw)
		for _, row := range r.Timeline {
			fmt.Fprintf(tw, "%s\t%.0f", row.Phase, row.AtMs)
			for _, n := range names {
				fmt.Fprintf(tw, "\t%.1f (%d)", row.MiBps[n], row.Spares[n])
			}
			fmt.Fprintln(tw)
		}
	}
	return tw.Flush()
}
