package paper

import (
	"context"
	"fmt"
	"time"

	"github.com/zonefleet/zonefleet/pkg/arbiter"
	"github.com/zonefleet/zonefleet/pkg/flash"
)

// Fig26Config is eZNS Fig. 26 (local overdrive): N writers in one
// namespace, each writing 512 KiB sequentially at QD 1 to its own logical
// zone. The static logical zones are striped at width 4 with 16 KiB stripes
// (placed by the arbiter's rule, §5's "static logical zone configured with
// stripe width and size of 4 and 16 KB"). The v-zones are the arbiter's:
// arbiter.NewInMemory with the paper's namespace of 32 essentials and 32
// spares (§5: "each of which is allocated 32 essential and 32 spare
// resources"), 16 active zones and 16 physical zones per v-zone. The
// paper's other three namespaces are left out (DeviceMAR 64 instead of
// 256): idle, they would lend their spares to this one by global overdrive
// (Fig. 27-28), which the paper's "within a namespace" comparison does not
// show (its 16 writers use 64 physical zones). Every stripe group
// is planned by local overdrive (planGroup: spares over the EWMA of active
// v-zones, rounded down to a power of two; the stripe halves when the width
// doubles), so the widths are the arbiter's choice, reported per run.
type Fig26Config struct {
	Writers      []int         `json:"writers"`
	IOBytes      int           `json:"io_bytes"`
	StaticWidth  int           `json:"static_width"`
	StaticStripe int           `json:"static_stripe_bytes"`
	Namespaces   int           `json:"namespaces"`
	DeviceMAR    uint32        `json:"device_mar"`
	MARLogical   uint32        `json:"mar_logical"`
	ZonesPerVZ   uint32        `json:"zones_per_vzone"`
	Warmup       time.Duration `json:"warmup_ns"`
	Run          time.Duration `json:"run_ns"`
	Drive        flash.Config  `json:"drive"`
}

// Fig26Drive is the single-die chip group drive of the eZNS figures (D_zone
// 1, MLC: about 42 MB/s of programs per die, the paper's "~40 MB/s" per
// physical zone), 16 MiB zones, 16 MiB write cache, 1.2 GB/s host link, no
// MAR limit (the arbiter's essentials/spares split is the experiments'
// variable, not the drive's): 32 dies (8 channels x 4 ways).
func Fig26Drive() flash.Config {
	c := flash.Defaults()
	c.Channels, c.Ways, c.DZone = 8, 4, 1
	c.PagesPerBlock, c.BlocksPerChip, c.SpareBlocksPerChip = 1024, 6, 1
	c.MaxOpenZones, c.MaxActiveZones = 0, 0
	return c
}

// Fig26PaperDrive is eZNS Table 1's drive for Fig. 26: 128 dies (16
// channels x 8 ways), PCIe Gen3 x4 (3.2 GB/s), 16 MiB physical zones (the
// paper's 96 MB: large enough that no writer leaves its dies in the run).
func Fig26PaperDrive() flash.Config {
	c := Fig26Drive()
	c.Channels, c.Ways = 16, 8
	c.HostLinkBytesPerSec = 3_200_000_000
	return c
}

// DefaultFig26 is the paper's configuration at a length that runs in seconds.
func DefaultFig26() Fig26Config {
	return Fig26Config{Writers: []int{4, 8, 16}, IOBytes: 512 << 10, StaticWidth: 4, StaticStripe: 16 << 10,
		Namespaces: 4, DeviceMAR: 256, MARLogical: 16, ZonesPerVZ: 16,
		Warmup: 50 * time.Millisecond, Run: 100 * time.Millisecond, Drive: Fig26PaperDrive()}
}

// Fig26Row is one writer count.
type Fig26Row struct {
	Writers         int     `json:"writers"`
	StaticMBps      float64 `json:"static_mb_per_second"`
	VZoneMBps       float64 `json:"vzone_mb_per_second"`
	VZoneOverStatic float64 `json:"vzone_over_static"`
	// VZoneWidth is the mean width of the stripe groups the v-zones wrote
	// in the measured window (weighted by bytes), as local overdrive chose
	// them; VZoneWidths counts the groups opened per width.
	VZoneWidth  float64        `json:"vzone_mean_width"`
	VZoneWidths map[string]int `json:"vzone_group_widths"`
	// SparesBorrowed is what the namespace held of the idle namespaces'
	// spares at the end (global overdrive lends them once they have not
	// allocated in the last N_essential allocations).
	SparesBorrowed uint32 `json:"spares_borrowed"`
}

// Fig26Result is the figure.
type Fig26Result struct {
	Config Fig26Config `json:"config"`
	Rows   []Fig26Row  `json:"rows"`
	// VZoneOverStatic per writer count (the ratio the paper quotes).
	VZoneOverStatic map[string]float64 `json:"vzone_over_static"`
}

// RunFig26 runs both layouts at every writer count.
func RunFig26(ctx context.Context, dir string, c Fig26Config) (*Fig26Result, error) {
	res := &Fig26Result{Config: c, VZoneOverStatic: map[string]float64{}}
	rows := make([]Fig26Row, len(c.Writers))
	if err := parallel(len(c.Writers), func(i int) error {
		n := c.Writers[i]
		st, err := fig26Run(ctx, dir, c, n, c.StaticWidth, c.StaticStripe)
		if err != nil {
			return fmt.Errorf("fig26 static, %d writers: %w", n, err)
		}
		vz, err := fig26VZones(ctx, dir, c, n)
		if err != nil {
			return fmt.Errorf("fig26 v-zones, %d writers: %w", n, err)
		}
		rows[i] = Fig26Row{Writers: n, StaticMBps: round(st), VZoneMBps: round(vz.mbps), VZoneOverStatic: ratio(vz.mbps, st),
			VZoneWidth: round(vz.width), VZoneWidths: vz.widths, SparesBorrowed: vz.borrowed}
		return nil
	}); err != nil {
		return nil, err
	}
	for _, row := range rows {
		res.Rows = append(res.Rows, row)
		res.VZoneOverStatic[fmt.Sprint(row.Writers)] = row.VZoneOverStatic
	}
	return res, nil
}

type vzoneRun struct {
	borrowed uint32
	mbps     float64
	width    float64
	widths   map[string]int
}

// fig26HistoryRounds is how many times each writer opens a v-zone before
// the measured one: the EWMA (alpha 0.5) of active v-zones the measured
// opens see is then within 11 % of n (1, 2, ..., n, then n).
const fig26HistoryRounds = 2

// fig26VZones runs n writers on v-zones of the first of the namespaces, the
// arbiter planning every stripe group.
func fig26VZones(ctx context.Context, dir string, c Fig26Config, n int) (vzoneRun, error) {
	d, err := subdir(dir)
	if err != nil {
		return vzoneRun{}, err
	}
	defer removeAll(d)
	r, err := newRig(d, c.Drive, false)
	if err != nil {
		return vzoneRun{}, err
	}
	defer r.close()
	g := &gsim{r: r, zcap: r.geo.ZoneCap, block: r.geo.BlockSize, wp: map[uint32]uint64{}, stale: map[uint32]bool{}}
	g.reclaimC = r.s.NewCond()
	arb, err := g.newArbiter(c.DeviceMAR, 0)
	if err != nil {
		return vzoneRun{}, err
	}
	names := make([]string, c.Namespaces)
	for i := range names {
		names[i] = fmt.Sprintf("ns%d", i+1)
		if _, err := arb.CreateNamespace(ctx, arbiter.NamespaceSpec{Name: names[i], MARLogical: c.MARLogical, ZonesPerVZone: c.ZonesPerVZ}); err != nil {
			return vzoneRun{}, err
		}
	}
	// The namespace's history: the n writers have had n v-zones open
	// before (local overdrive sizes a stripe group by the EWMA of active
	// v-zones, which starts at the first open's count of 1). In each round
	// every writer finishes its v-zone and opens the next while the others
	// stay open, as writers turning over their v-zones do; the measured
	// v-zones are the last round's.
	ws := make([]*gwriter, n)
	for i := range ws {
		ws[i] = &gwriter{g: g, ns: names[0]}
	}
	for round := 0; round < fig26HistoryRounds; round++ {
		for _, w := range ws {
			if w.lay.Groups != nil {
				if _, err := arb.FinishVZone(ctx, w.ns, w.vz); err != nil {
					return vzoneRun{}, err
				}
				if err := arb.ResetVZone(ctx, w.ns, w.vz); err != nil {
					return vzoneRun{}, err
				}
			}
			if err := w.open(ctx); err != nil {
				return vzoneRun{}, err
			}
		}
	}
	m := &meter{from: c.Warmup, to: c.Warmup + c.Run}
	out := vzoneRun{widths: map[string]int{}}
	var wbytes, wsum float64
	var firstErr error
	for i := 0; i < n; i++ {
		w := ws[i]
		seen := map[string]bool{} // stripe groups counted in out.widths
		r.s.Go(func(ctx context.Context) {
			for r.s.Now() < m.to {
				if w.lay.Groups == nil {
					if err := w.open(ctx); err != nil {
						if firstErr == nil && ctx.Err() == nil {
							firstErr = err
						}
						return
					}
				}
				width := w.group().Width
				if err := w.write(ctx, c.IOBytes); err != nil {
					if firstErr == nil && ctx.Err() == nil {
						firstErr = err
					}
					return
				}
				now := r.s.Now()
				m.add(now, c.IOBytes)
				if now > m.from && now <= m.to {
					wbytes += float64(c.IOBytes)
					wsum += float64(c.IOBytes) * float64(width)
					if k := fmt.Sprintf("%d/%d", w.vz, len(w.lay.Groups)); !seen[k] {
						seen[k] = true
						out.widths[fmt.Sprint(w.group().Width)]++
					}
				}
			}
		})
	}
	r.s.Run(m.to)
	if firstErr != nil {
		return vzoneRun{}, firstErr
	}
	out.mbps = m.mbps()
	if info, err := arb.GetNamespace(ctx, names[0]); err == nil {
		out.borrowed = info.SparesBorrowed
	}
	if wbytes > 0 {
		out.width = wsum / wbytes
	}
	return out, nil
}

// fig26Run returns the aggregate MB/s of n writers on logical zones of the
// given width and stripe.
func fig26Run(ctx context.Context, dir string, c Fig26Config, n, width, stripe int) (float64, error) {
	d, err := subdir(dir)
	if err != nil {
		return 0, err
	}
	defer removeAll(d)
	r, err := newRig(d, c.Drive, false)
	if err != nil {
		return 0, err
	}
	defer r.close()
	m := &meter{from: c.Warmup, to: c.Warmup + c.Run}
	var firstErr error
	for i := 0; i < n; i++ {
		lz, err := r.newLZone(width, stripe)
		if err != nil {
			return 0, err
		}
		r.s.Go(func(ctx context.Context) {
			for r.s.Now() < m.to {
				if err := lz.write(ctx, c.IOBytes); err != nil {
					if firstErr == nil && ctx.Err() == nil {
						firstErr = err
					}
					return
				}
				m.add(r.s.Now(), c.IOBytes)
			}
		})
	}
	r.s.Run(m.to)
	if firstErr != nil {
		return 0, firstErr
	}
	return m.mbps(), nil
}
