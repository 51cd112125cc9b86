package paper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/zonefleet/zonefleet/pkg/arbiter"
	"github.com/zonefleet/zonefleet/pkg/bench/paper/sim"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// Fig27Config is eZNS Fig. 27–28 (global overdrive): four namespaces with
// 2/2/2/8 writers (512 KiB, QD 1, one v-zone each); NS1–NS3 stop writing
// from IdleFrom to IdleTo. The paper's 100 s (idle 30–80 s) is scaled to Run
// (idle at the same fractions). The arbiter is the real one
// (arbiter.NewInMemory: the same allocation, global overdrive, recall and
// reclaim code as the leader, without etcd) on the simulated clock.
//
// Reclaim timing is the variable of the two runs: "paper" runs CheckReclaim
// every ReclaimTick and freezes a namespace idle for TReadOnly = two ticks
// (the paper's "no write activity for two cycles of global overdrive");
// "default" keeps ZoneFleet's default T_ReadOnly of 5 min, scaled by the same
// factor as the run (Run/100 s), which leaves the idle namespaces'
// overdriven stripe groups unreclaimed for the whole idle phase.
type Fig27Config struct {
	Writers          []int         `json:"writers"` // per namespace
	IOBytes          int           `json:"io_bytes"`
	Run              time.Duration `json:"run_ns"`
	IdleFrom         time.Duration `json:"idle_from_ns"`
	IdleTo           time.Duration `json:"idle_to_ns"`
	Bin              time.Duration `json:"bin_ns"` // sampling interval of the time series
	ReclaimTick      time.Duration `json:"reclaim_tick_ns"`
	PaperTReadOnly   time.Duration `json:"paper_t_read_only_ns"`
	DefaultTReadOnly time.Duration `json:"default_t_read_only_ns"`
	MARLogical       uint32        `json:"mar_logical"`
	ZonesPerVZone    uint32        `json:"zones_per_vzone"`
	DeviceMAR        uint32        `json:"device_mar"` // essentials + spares the node reports
	AdmissionControl bool          `json:"admission_control"`
	Drive            flash.Config  `json:"drive"`
}

// Fig27Drive is the Fig. 26 drive with 64 single-die chip groups (8
// channels x 8 ways), so that with DeviceMAR 128 every namespace gets 16
// essentials and 16 spares (the paper's 32 and 32 at half scale: minimum
// width 2, NS4's eight v-zones overdriven to width 4, NS1–NS3's two to 8),
// 512 KiB zones (stripe groups turn over many times and a reclaim copies
// little in a scaled run) and enough zones for every v-zone.
func Fig27Drive() flash.Config {
	c := Fig26Drive()
	c.Channels, c.Ways = 8, 8
	c.PagesPerBlock, c.BlocksPerChip, c.SpareBlocksPerChip = 32, 8, 1
	c.HostLinkBytesPerSec = 3_000_000_000 // PCIe 3.0 x4: the dies, not the link, bound the paper's 2.3 GB/s
	return c
}

// DefaultFig27 is the paper's experiment at 1/50 of its length.
func DefaultFig27() Fig27Config {
	run := 2 * time.Second
	return Fig27Config{
		Writers: []int{2, 2, 2, 8}, IOBytes: 512 << 10,
		Run: run, IdleFrom: run * 30 / 100, IdleTo: run * 80 / 100, Bin: run / 100,
		ReclaimTick: 50 * time.Millisecond, PaperTReadOnly: 100 * time.Millisecond,
		DefaultTReadOnly: scaleOf(5*time.Minute, run),
		MARLogical:       8, ZonesPerVZone: 16, DeviceMAR: 128, AdmissionControl: true, Drive: Fig27Drive(),
	}
}

// scaleOf scales a duration of the paper's 100 s experiment to a run of length run.
func scaleOf(d, run time.Duration) time.Duration {
	return time.Duration(float64(d) * run.Seconds() / 100)
}

// Fig27Series is one namespace's time series.
type Fig27Series struct {
	Namespace string    `json:"namespace"`
	MBps      []float64 `json:"mb_per_second"` // per bin
	Spares    []uint32  `json:"spares_in_use"` // at the end of each bin
}

// Fig27Run is one reclaim timing.
type Fig27Run struct {
	Timing    string        `json:"timing"` // "paper" or "default"
	TReadOnly time.Duration `json:"t_read_only_ns"`
	Series    []Fig27Series `json:"series"`
	// AllocationsPerSecondBusy is the physical zone allocations per
	// second of the busy phase, and TwoCycles the time two cycles of global
	// overdrive (2 x N_essential allocations) take at that rate: the
	// paper's T_ReadOnly in this run.
	AllocationsPerSecondBusy float64       `json:"allocations_per_second_busy"`
	TwoCycles                time.Duration `json:"two_overdrive_cycles_ns"`
	Reclaims                 int           `json:"reclaims"`
	Aborted                  int           `json:"reclaims_aborted"` // the namespace wrote again during the copy
	MovedBytes               uint64        `json:"reclaim_moved_bytes"`
	// NS4 in the phases: busy (second half before IdleFrom), idle (second
	// half of the idle phase), resumed (second half after IdleTo).
	NS4MBpsBusy      float64 `json:"ns4_mb_per_second_busy"`
	NS4MBpsIdle      float64 `json:"ns4_mb_per_second_idle"`
	NS4SparesBusy    float64 `json:"ns4_spares_busy"`
	NS4SparesIdleMax uint32  `json:"ns4_spares_idle_max"`
	NS4SparesResumed float64 `json:"ns4_spares_resumed"`
	TotalMBpsBusy    float64 `json:"total_mb_per_second_busy"`
	// The ratios: NS4 takes up to 3x more spares while the others idle and
	// maxes out the device's write bandwidth; it gives them back when they
	// resume.
	NS4SparesIdleOverBusy    float64 `json:"ns4_spares_idle_over_busy"`
	NS4MBpsIdleOverBusy      float64 `json:"ns4_mb_per_second_idle_over_busy"`
	NS4IdleOverTotalBusy     float64 `json:"ns4_idle_over_total_busy"`
	NS4SparesResumedOverBusy float64 `json:"ns4_spares_resumed_over_busy"`
}

// Fig27Result is the figure: the paper's reclaim timing and ZoneFleet's default.
type Fig27Result struct {
	Config  Fig27Config `json:"config"`
	Paper   Fig27Run    `json:"paper_timing"`
	Default Fig27Run    `json:"default_timing"`
}

// RunFig27 runs both reclaim timings.
func RunFig27(ctx context.Context, dir string, c Fig27Config) (*Fig27Result, error) {
	if len(c.Writers) < 2 || c.Bin <= 0 || c.Run <= 0 || !(c.IdleFrom < c.IdleTo && c.IdleTo < c.Run) {
		return nil, &zerr.InvalidArgumentError{Field: "fig27_28", Reason: "needs >= 2 namespaces, a positive bin and 0 <= idle_from < idle_to < run"}
	}
	res := &Fig27Result{Config: c}
	runs := []struct {
		timing string
		tro    time.Duration
		out    *Fig27Run
	}{{"paper", c.PaperTReadOnly, &res.Paper}, {"default", c.DefaultTReadOnly, &res.Default}}
	// two independent simulations, in parallel
	if err := parallel(len(runs), func(i int) error {
		v := runs[i]
		r, err := fig27Run(ctx, dir, c, v.tro)
		if err != nil {
			return fmt.Errorf("fig27_28 %s timing: %w", v.timing, err)
		}
		r.Timing = v.timing
		*v.out = *r
		return nil
	}); err != nil {
		return nil, err
	}
	return res, nil
}

// gsim is the global-overdrive simulation: the rig's drive and admission
// control with the in-memory arbiter placing the stripe groups.
type gsim struct {
	r     *rig
	arb   *arbiter.Arbiter
	zcap  uint64 // blocks per physical zone
	block int
	wp    map[uint32]uint64 // blocks written per zone since its last reset
	stale map[uint32]bool   // released by the arbiter; reset before the next write
	moved uint64
	// copying: source zones of the v-zone being reclaimed (its writer, if
	// it resumes, waits: a real client would find NextStripeGroup refused).
	copying  map[uint32]bool
	reclaimC *sim.Cond
}

func (g *gsim) setCopying(zones []cluster.PhysZone) {
	g.copying = map[uint32]bool{}
	for _, z := range zones {
		g.copying[z.Zone] = true
	}
	g.reclaimC.Broadcast()
}

const fig27Node = "sim-node"

func (g *gsim) lba(z uint32) uint64 { return uint64(z) * g.r.geo.ZoneSize }

// prepare resets a zone the arbiter handed out again (the node resets a
// physical zone before it is written again).
func (g *gsim) prepare(ctx context.Context, z uint32) error {
	if !g.stale[z] {
		return nil
	}
	delete(g.stale, z)
	g.wp[z] = 0
	_, err := g.r.dev.ZoneMgmt(ctx, uint64(z), zns.ActionReset, false)
	return err
}

// fresh marks a newly allocated zone: data of a previous owner is reset first.
func (g *gsim) fresh(zs ...cluster.PhysZone) {
	for _, z := range zs {
		if g.wp[z.Zone] > 0 {
			g.stale[z.Zone] = true
		}
	}
}

// WrittenBlocks and Compact make gsim the arbiter's Compactor (reclaim).
func (g *gsim) WrittenBlocks(_ context.Context, _ string, zones []cluster.PhysZone) ([]uint64, error) {
	g.setCopying(zones)
	out := make([]uint64, len(zones))
	for i, z := range zones {
		out[i] = g.wp[z.Zone]
	}
	return out, nil
}

func (g *gsim) Compact(ctx context.Context, _ string, dst cluster.PhysZone, ranges []arbiter.CopyRange) error {
	g.fresh(dst) // a reclaim target is newly allocated: one Compact per target
	if err := g.prepare(ctx, dst.Zone); err != nil {
		return err
	}
	var src []zns.Range
	var n uint64
	for _, cr := range ranges {
		src = append(src, zns.Range{LBA: g.lba(cr.Src.Zone) + cr.SrcBlock, Count: cr.Blocks})
		n += cr.Blocks
	}
	if _, err := g.r.dev.SimpleCopy(ctx, src, g.lba(dst.Zone)+g.wp[dst.Zone]); err != nil {
		return err
	}
	g.wp[dst.Zone] += n
	g.moved += n * uint64(g.block)
	return nil
}

// newArbiter makes the in-memory arbiter over the rig's drive (one node,
// one device reporting MAR deviceMAR) on the simulated clock, with g as its
// Compactor; tro is T_ReadOnly (0: the arbiter's default).
func (g *gsim) newArbiter(deviceMAR uint32, tro time.Duration) (*arbiter.Arbiter, error) {
	r := g.r
	id := r.dev.Identify()
	rec := cluster.NodeRecord{ID: fig27Node, Addr: "sim", Version: "sim", StartedAt: time.Unix(0, 0).UTC(),
		Devices: []cluster.DeviceInfo{{Index: 0, Channels: uint32(r.geo.Channels), Ways: uint32(r.geo.Chips / r.geo.Channels),
			DZone: uint32(r.geo.DZone), FCGs: uint32(r.geo.NFCG), MAR: deviceMAR, MOR: deviceMAR,
			BlockSize: uint32(id.BlockSize), PageSize: uint32(id.PageSize), ZoneSize: id.ZoneSize, ZoneCapacity: id.ZoneCapacity,
			NumZones: uint32(id.Zones), Media: id.Media}}}
	epoch := time.Unix(0, 0).UTC()
	arb, err := arbiter.NewInMemory(arbiter.Config{
		Now:       func() time.Time { return epoch.Add(r.s.Now()) },
		TReadOnly: tro, Logger: discardLogger(),
	}, []cluster.NodeRecord{rec}, g)
	if err != nil {
		return nil, err
	}
	g.arb = arb
	return arb, nil
}

// gwriter writes one v-zone of a namespace sequentially.
type gwriter struct {
	g   *gsim
	ns  string
	vz  uint64
	lay arbiter.Layout
	off uint64 // bytes written in the open stripe group
}

// reclaiming: the open stripe group is being copied by a reclaim.
func (w *gwriter) reclaiming() bool {
	for _, z := range w.group().Zones {
		if w.g.copying[z.Zone] {
			return true
		}
	}
	return false
}

func (w *gwriter) group() arbiter.StripeGroup { return w.lay.Groups[len(w.lay.Groups)-1] }

func (w *gwriter) open(ctx context.Context) error {
	lay, err := w.g.arb.OpenNewVZone(ctx, w.ns)
	if err != nil {
		return err
	}
	w.lay, w.vz, w.off = lay, lay.VZone, 0
	w.g.fresh(w.group().Zones...)
	return nil
}

// refresh picks up a layout the arbiter changed (a reclaim swapped the open
// stripe group): the write offset is what the copy left in the new group.
func (w *gwriter) refresh(ctx context.Context) error {
	lay, err := w.g.arb.Layout(ctx, w.ns, w.vz)
	if err != nil {
		return err
	}
	if lay.Generation == w.lay.Generation {
		return nil
	}
	w.lay, w.off = lay, 0
	for _, z := range w.group().Zones {
		w.off += w.g.wp[z.Zone] * uint64(w.g.block)
	}
	return nil
}

// advance opens the next stripe group; a full v-zone is finished, reset
// (its data is dropped, like a log-structured tenant recycling it) and a new
// one opened.
func (w *gwriter) advance(ctx context.Context) error {
	lay, err := w.g.arb.NextStripeGroup(ctx, w.ns, w.vz)
	if err == nil {
		w.lay, w.off = lay, 0
		w.g.fresh(w.group().Zones...)
		return nil
	}
	if !errors.Is(err, zerr.ErrZoneFull) {
		return err
	}
	if _, err := w.g.arb.FinishVZone(ctx, w.ns, w.vz); err != nil {
		return err
	}
	if err := w.g.arb.ResetVZone(ctx, w.ns, w.vz); err != nil {
		return err
	}
	return w.open(ctx)
}

// write writes n bytes at the v-zone's write pointer: RAID-0 over the open
// stripe group, the stripe units of one zone coalesced into one device
// write, all zones in parallel, done with the last.
func (w *gwriter) write(ctx context.Context, n int) error {
	for n > 0 {
		gr := w.group()
		capBytes := uint64(gr.Width) * w.g.zcap * uint64(w.g.block)
		if w.off >= capBytes {
			if err := w.advance(ctx); err != nil {
				return err
			}
			continue
		}
		k := int(min(uint64(n), capBytes-w.off))
		per := map[uint32]int{}
		var order []uint32
		s := uint64(gr.StripeSize)
		for o := w.off; o < w.off+uint64(k); {
			u := o / s
			z := gr.Zones[u%uint64(gr.Width)].Zone
			l := min(s-o%s, w.off+uint64(k)-o)
			if _, ok := per[z]; !ok {
				order = append(order, z)
			}
			per[z] += int(l)
			o += l
		}
		if err := w.g.parallel(ctx, order, per); err != nil {
			return err
		}
		w.off += uint64(k)
		n -= k
	}
	return nil
}

func (g *gsim) parallel(ctx context.Context, order []uint32, per map[uint32]int) error {
	r := g.r
	left := len(order)
	done := r.s.NewCond()
	var firstErr error
	for _, z := range order {
		r.s.Go(func(ctx context.Context) {
			err := g.prepare(ctx, z)
			if err == nil {
				blocks := per[z] / g.block
				start := g.wp[z]
				g.wp[z] += uint64(blocks)
				err = g.physWriteAt(ctx, z, start, per[z])
			}
			if err != nil && firstErr == nil {
				firstErr = err
			}
			left--
			if left == 0 {
				done.Broadcast()
			}
		})
	}
	for left > 0 {
		if err := done.Wait(ctx); err != nil {
			return err
		}
	}
	return firstErr
}

// physWriteAt is the node's write path: admission control, the drive write,
// the latency reported back to the admission monitor.
func (g *gsim) physWriteAt(ctx context.Context, z uint32, at uint64, n int) error {
	r := g.r
	blocks := n / g.block
	if _, err := r.adm.Admit(ctx, 0, uint64(z), blocks); err != nil {
		return err
	}
	if len(r.buf) < n {
		r.buf = make([]byte, n)
	}
	res, err := r.dev.Write(ctx, g.lba(z)+at, r.buf[:n], zns.Flags{})
	if err != nil {
		return err
	}
	r.adm.Complete(blocks, res.Latency())
	return nil
}

func fig27Run(ctx context.Context, dir string, c Fig27Config, tro time.Duration) (*Fig27Run, error) {
	d, err := subdir(dir)
	if err != nil {
		return nil, err
	}
	defer removeAll(d)
	drive := c.Drive
	drive.MaxOpenZones, drive.MaxActiveZones = 0, 0 // the arbiter's budget (DeviceMAR) is the limit
	r, err := newRig(d, drive, c.AdmissionControl)
	if err != nil {
		return nil, err
	}
	defer r.close()
	g := &gsim{r: r, zcap: r.geo.ZoneCap, block: r.geo.BlockSize, wp: map[uint32]uint64{}, stale: map[uint32]bool{}}
	arb, err := g.newArbiter(c.DeviceMAR, tro)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(c.Writers))
	for i := range c.Writers {
		names[i] = fmt.Sprintf("ns%d", i+1)
		if _, err := arb.CreateNamespace(ctx, arbiter.NamespaceSpec{Name: names[i], MARLogical: c.MARLogical, ZonesPerVZone: c.ZonesPerVZone}); err != nil {
			return nil, err
		}
	}
	bins := int(c.Run / c.Bin)
	bytes := make([][]uint64, len(names))
	spares := make([][]uint32, len(names))
	for i := range names {
		bytes[i] = make([]uint64, bins)
		spares[i] = make([]uint32, bins)
	}
	last := len(names) - 1 // the namespace that keeps writing (NS4)
	g.reclaimC = r.s.NewCond()
	var firstErr error
	fail := func(err error) {
		if err != nil && firstErr == nil && !errors.Is(err, context.Canceled) {
			firstErr = err
		}
	}
	out := &Fig27Run{TReadOnly: tro}
	for i, n := range c.Writers {
		for k := 0; k < n; k++ {
			w := &gwriter{g: g, ns: names[i]}
			r.s.Go(func(ctx context.Context) {
				for r.s.Now() < c.Run {
					if i != last && r.s.Now() >= c.IdleFrom && r.s.Now() < c.IdleTo {
						if err := r.s.WaitUntil(ctx, c.IdleTo); err != nil {
							return
						}
					}
					for w.lay.Groups != nil && w.reclaiming() {
						if err := g.reclaimC.Wait(ctx); err != nil {
							return
						}
					}
					if w.lay.Groups == nil {
						if err := w.open(ctx); err != nil {
							fail(err)
							return
						}
					} else if err := w.refresh(ctx); err != nil {
						fail(err)
						return
					}
					if err := arb.ReportWrite(ctx, w.ns); err != nil {
						fail(err)
						return
					}
					if err := w.write(ctx, c.IOBytes); err != nil {
						fail(err)
						return
					}
					if b := int(r.s.Now() / c.Bin); b < bins && r.s.Now() > 0 {
						bytes[i][b] += uint64(c.IOBytes)
					}
				}
			})
		}
	}
	// The paper's reclaim timing in this run: "no write activity for two
	// cycles of global overdrive" (§4.4.4), a cycle being the last
	// N_essential physical zone allocations (§4.4.3). The busy phase's
	// allocation rate gives the time of two cycles.
	r.s.Go(func(ctx context.Context) {
		from := c.IdleFrom / 2
		if err := r.s.WaitUntil(ctx, from); err != nil {
			return
		}
		s0, err := arb.Status(ctx)
		if err != nil {
			fail(err)
			return
		}
		if err := r.s.WaitUntil(ctx, c.IdleFrom); err != nil {
			return
		}
		s1, err := arb.Status(ctx)
		if err != nil {
			fail(err)
			return
		}
		if n := s1.AllocSeq - s0.AllocSeq; n > 0 {
			out.AllocationsPerSecondBusy = round(float64(n) / (c.IdleFrom - from).Seconds())
			out.TwoCycles = time.Duration(float64(2*s1.Essentials) / float64(n) * float64(c.IdleFrom-from))
		}
	})
	// Sampler: spares in use per namespace at the end of every bin.
	r.s.Go(func(ctx context.Context) {
		for b := 0; b < bins; b++ {
			if err := r.s.WaitUntil(ctx, time.Duration(b+1)*c.Bin-1); err != nil {
				return
			}
			for i, n := range names {
				info, err := arb.GetNamespace(ctx, n)
				if err != nil {
					fail(err)
					return
				}
				spares[i][b] = info.SparesInUse
			}
		}
	})
	// The leader's reclaim ticker.
	r.s.Go(func(ctx context.Context) {
		for t := c.ReclaimTick; t < c.Run; t += c.ReclaimTick {
			if err := r.s.WaitUntil(ctx, t); err != nil {
				return
			}
			rs, err := arb.CheckReclaim(ctx)
			g.setCopying(nil)
			if !onlyZoneState(err) {
				fail(err)
				return
			}
			out.Aborted += countErrs(err)
			out.Reclaims += len(rs)
		}
	})
	r.s.Run(c.Run)
	if firstErr != nil {
		return nil, firstErr
	}
	out.MovedBytes = g.moved
	for i, n := range names {
		s := Fig27Series{Namespace: n, Spares: spares[i]}
		for _, b := range bytes[i] {
			s.MBps = append(s.MBps, round(float64(b)/1e6/c.Bin.Seconds()))
		}
		out.Series = append(out.Series, s)
	}
	busy := [2]int{int(c.IdleFrom/c.Bin) / 2, int(c.IdleFrom / c.Bin)}
	idle := [2]int{int((c.IdleFrom + c.IdleTo) / 2 / c.Bin), int(c.IdleTo / c.Bin)}
	resumed := [2]int{int((c.IdleTo + c.Run) / 2 / c.Bin), bins}
	ns4 := out.Series[last]
	out.NS4MBpsBusy = round(meanF(ns4.MBps, busy))
	out.NS4MBpsIdle = round(meanF(ns4.MBps, idle))
	out.NS4SparesBusy = round(meanU(ns4.Spares, busy))
	out.NS4SparesResumed = round(meanU(ns4.Spares, resumed))
	for b := int(c.IdleFrom / c.Bin); b < idle[1]; b++ {
		out.NS4SparesIdleMax = max(out.NS4SparesIdleMax, ns4.Spares[b])
	}
	for _, s := range out.Series {
		out.TotalMBpsBusy += meanF(s.MBps, busy)
	}
	out.TotalMBpsBusy = round(out.TotalMBpsBusy)
	out.NS4SparesIdleOverBusy = ratio(float64(out.NS4SparesIdleMax), out.NS4SparesBusy)
	out.NS4MBpsIdleOverBusy = ratio(out.NS4MBpsIdle, out.NS4MBpsBusy)
	out.NS4IdleOverTotalBusy = ratio(out.NS4MBpsIdle, out.TotalMBpsBusy)
	out.NS4SparesResumedOverBusy = ratio(out.NS4SparesResumed, out.NS4SparesBusy)
	return out, nil
}

// onlyZoneState: nil, or only *zerr.ZoneStateError (a reclaim of a v-zone
// whose namespace wrote again is refused; the others go on).
func onlyZoneState(err error) bool {
	if err == nil {
		return true
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !onlyZoneState(e) {
				return false
			}
		}
		return true
	}
	if u := errors.Unwrap(err); u != nil {
		return onlyZoneState(u)
	}
	var zs *zerr.ZoneStateError
	return errors.As(err, &zs)
}

func countErrs(err error) int {
	if err == nil {
		return 0
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return len(j.Unwrap())
	}
	return 1
}

func meanF(v []float64, r [2]int) float64 {
	if r[1] <= r[0] {
		return 0
	}
	s := 0.0
	for _, x := range v[r[0]:r[1]] {
		s += x
	}
	return s / float64(r[1]-r[0])
}

func meanU(v []uint32, r [2]int) float64 {
	if r[1] <= r[0] {
		return 0
	}
	s := 0.0
	for _, x := range v[r[0]:r[1]] {
		s += float64(x)
	}
	return s / float64(r[1]-r[0])
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
