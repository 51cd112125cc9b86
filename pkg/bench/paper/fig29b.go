package paper

import (
	"context"
	"fmt"
	"time"

	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/node"
)

// Fig29bScenario is one write-write fairness scenario of eZNS Fig. 29(b).
type Fig29bScenario struct {
	Name string `json:"name"`
	// Regular writers: width 8, 8 KiB stripes, one 512 KiB write every
	// Interval (0: back to back, i.e. busy writers: scenarios 2 and 3; the
	// paper's scenario 3 is scenario 2 with 15 writers, its device totals,
	// 2,403 and 2,997 MB/s, are out of reach of 15 writers at 5 ms).
	Regular  int           `json:"regular"`
	Interval time.Duration `json:"interval_ns"`
}

// Fig29bConfig is eZNS Fig. 29(b): regular writers and one busy writer
// (width 2, 32 KiB stripes, writes back to back) on co-located dies, 512 KiB
// sequential writes at QD 1, admission control off and on.
type Fig29bConfig struct {
	Scenarios     []Fig29bScenario `json:"scenarios"`
	IOBytes       int              `json:"io_bytes"`
	RegularWidth  int              `json:"regular_width"`
	RegularStripe int              `json:"regular_stripe_bytes"`
	BusyWidth     int              `json:"busy_width"`
	BusyStripe    int              `json:"busy_stripe_bytes"`
	Warmup        time.Duration    `json:"warmup_ns"`
	Run           time.Duration    `json:"run_ns"`
	Drive         flash.Config     `json:"drive"`
	// BurstSweep reruns the first scenario with AC on for each token cap
	// (node.AdmissionConfig.BurstBlocks: how many tokens an idle zone may
	// bank; the node's default is 256). 1 is the paper's generator, which
	// makes tokens only for zones with a pending write (Algorithm 1 line 26):
	// a zone never banks more than the write it is submitting.
	BurstSweep []int `json:"burst_sweep_blocks"`
	// DieBackpressure reruns every scenario, AC off and on, on the same
	// drive with the write cache's per-die back-pressure
	// (flash.Config.WriteCacheDieBytes) at each of these limits: an
	// ablation of the cache's admission policy (see docs/paper-figures.md).
	DieBackpressure []int64 `json:"die_backpressure_bytes,omitempty"`
	// DieWarmup is the ablation's warm-up (0: Warmup). With AC on, the
	// dies shared by the busy writer and zone A (sc. 2) take about a second
	// to fill their share of the cache: before that the cache absorbs their
	// excess and zone A runs faster than its dies (the paper's steady
	// state: zone A +7.6 %, the shared dies saturated).
	DieWarmup time.Duration `json:"die_warmup_ns,omitempty"`
}

// Fig29bDie is every scenario on a drive whose write cache applies per-die
// back-pressure at DieBytes.
type Fig29bDie struct {
	DieBytes    int64              `json:"die_bytes"`
	Rows        []Fig29bRow        `json:"rows"`
	RegularGain map[string]float64 `json:"regular_gain"`
	TotalGain   map[string]float64 `json:"total_gain"`
	OffTotal    map[string]float64 `json:"ac_off_total_mb_per_second"`
}

// Fig29bBurst is the first scenario with AC on at one token cap.
type Fig29bBurst struct {
	BurstBlocks int       `json:"burst_blocks"`
	RegularGain float64   `json:"regular_gain"` // over AC off
	BusyGain    float64   `json:"busy_gain"`
	TotalGain   float64   `json:"total_gain"`
	On          Fig29bRun `json:"ac_on"`
}

// Fig29bDrive has 128 single-die chip groups (16 channels x 8 ways, MLC:
// ~42 MB/s per die, as the paper's 42.6 MB/s physical zone), a 16 MiB write
// cache and the paper's 3.2 GB/s link (PCIe Gen3 x4, which 15 writers of
// width 8 max out: eZNS §3.5.2, Fig. 14). Zones hold 16 MiB per die; a
// writer that fills its stripe group continues on the same dies.
func Fig29bDrive() flash.Config {
	c := flash.Defaults()
	c.Channels, c.Ways, c.DZone = 16, 8, 1
	c.PagesPerBlock, c.BlocksPerChip, c.SpareBlocksPerChip = 1024, 8, 1
	c.MaxOpenZones, c.MaxActiveZones = 0, 0
	c.HostLinkBytesPerSec = 3_200_000_000
	return c
}

// DefaultFig29b is the paper's three scenarios.
func DefaultFig29b() Fig29bConfig {
	return Fig29bConfig{
		Scenarios: []Fig29bScenario{
			{Name: "1-regular", Regular: 16, Interval: 5 * time.Millisecond},
			{Name: "2-all-busy", Regular: 16, Interval: 0},
			{Name: "3-collision-free", Regular: 15, Interval: 0},
		},
		IOBytes: 512 << 10, RegularWidth: 8, RegularStripe: 8 << 10, BusyWidth: 2, BusyStripe: 32 << 10,
		Warmup: 400 * time.Millisecond, Run: 200 * time.Millisecond, Drive: Fig29bDrive(),
		BurstSweep: []int{1, 256, 1 << 20}, DieBackpressure: []int64{6912 << 10}, DieWarmup: 1500 * time.Millisecond,
	}
}

// Fig29bRun is one scenario with admission control off or on.
type Fig29bRun struct {
	AC bool `json:"admission_control"`
	// Per-thread MB/s: mean of the regular writers, the regular writer that
	// shares dies with the busy writer (Zone A of the figure), the busy writer.
	RegularMBps float64 `json:"regular_mb_per_second"`
	ColocMBps   float64 `json:"colocated_regular_mb_per_second"`
	BusyMBps    float64 `json:"busy_mb_per_second"`
	TotalMBps   float64 `json:"total_mb_per_second"`
	Stalls      uint64  `json:"admission_stalls"`
	AdmissionNs int64   `json:"admission_rate_ns_per_block"`
}

// Fig29bRow is one scenario.
type Fig29bRow struct {
	Scenario Fig29bScenario `json:"scenario"`
	Off      Fig29bRun      `json:"ac_off"`
	On       Fig29bRun      `json:"ac_on"`
	// RegularGain is the regular writers' per-thread bandwidth with AC over without.
	RegularGain float64 `json:"regular_gain"`
	ColocGain   float64 `json:"colocated_regular_gain"`
	TotalGain   float64 `json:"total_gain"`
}

// Fig29bResult is the figure.
type Fig29bResult struct {
	Config      Fig29bConfig       `json:"config"`
	Rows        []Fig29bRow        `json:"rows"`
	RegularGain map[string]float64 `json:"regular_gain"`
	TotalGain   map[string]float64 `json:"total_gain"`
	Bursts      []Fig29bBurst      `json:"burst_sweep,omitempty"`
	Die         []Fig29bDie        `json:"die_backpressure,omitempty"`
}

// RunFig29b runs every scenario with AC off and on. The runs are
// independent simulations; they run in parallel (see parallel).
func RunFig29b(ctx context.Context, dir string, c Fig29bConfig) (*Fig29bResult, error) {
	res := &Fig29bResult{Config: c, RegularGain: map[string]float64{}, TotalGain: map[string]float64{}}
	// Every run up front: each scenario AC off and on on the default
	// cache, then on each per-die limit, then the first scenario with AC on
	// at each token cap.
	type job struct {
		c    Fig29bConfig
		sc   Fig29bScenario
		acfg node.AdmissionConfig
		what string
	}
	var jobs []job
	scenarioJobs := func(c Fig29bConfig, what string) {
		for _, sc := range c.Scenarios {
			jobs = append(jobs, job{c, sc, node.AdmissionConfig{}, fmt.Sprintf("%sfig29b %s, AC off", what, sc.Name)},
				job{c, sc, node.AdmissionConfig{Enabled: true}, fmt.Sprintf("%sfig29b %s, AC on", what, sc.Name)})
		}
	}
	scenarioJobs(c, "")
	for _, db := range c.DieBackpressure {
		dc := c
		dc.Drive.WriteCacheDieBytes = db
		if c.DieWarmup > 0 {
			dc.Warmup = c.DieWarmup
		}
		scenarioJobs(dc, fmt.Sprintf("die back-pressure %d: ", db))
	}
	bursts := len(c.Scenarios) > 0 && len(c.BurstSweep) > 0
	if bursts {
		for _, b := range c.BurstSweep {
			sc := c.Scenarios[0]
			jobs = append(jobs, job{c, sc, node.AdmissionConfig{Enabled: true, BurstBlocks: b}, fmt.Sprintf("fig29b %s, AC on, burst %d", sc.Name, b)})
		}
	}
	out := make([]Fig29bRun, len(jobs))
	if err := parallel(len(jobs), func(i int) error {
		j := jobs[i]
		r, err := fig29bRun(ctx, dir, j.c, j.sc, j.acfg)
		if err != nil {
			return fmt.Errorf("%s: %w", j.what, err)
		}
		out[i] = r
		return nil
	}); err != nil {
		return nil, err
	}
	rowsAt := func(k int) []Fig29bRow { // the scenarios' rows from job k on
		var rows []Fig29bRow
		for i, sc := range c.Scenarios {
			off, on := out[k+2*i], out[k+2*i+1]
			rows = append(rows, Fig29bRow{Scenario: sc, Off: off, On: on, RegularGain: ratio(on.RegularMBps, off.RegularMBps),
				ColocGain: ratio(on.ColocMBps, off.ColocMBps), TotalGain: ratio(on.TotalMBps, off.TotalMBps)})
		}
		return rows
	}
	res.Rows = rowsAt(0)
	for _, row := range res.Rows {
		res.RegularGain[row.Scenario.Name] = row.RegularGain
		res.TotalGain[row.Scenario.Name] = row.TotalGain
	}
	k := 2 * len(c.Scenarios)
	for _, db := range c.DieBackpressure {
		rows := rowsAt(k)
		k += 2 * len(c.Scenarios)
		d := Fig29bDie{DieBytes: db, Rows: rows, RegularGain: map[string]float64{}, TotalGain: map[string]float64{}, OffTotal: map[string]float64{}}
		for _, row := range rows {
			d.RegularGain[row.Scenario.Name] = row.RegularGain
			d.TotalGain[row.Scenario.Name] = row.TotalGain
			d.OffTotal[row.Scenario.Name] = row.Off.TotalMBps
		}
		res.Die = append(res.Die, d)
	}
	if bursts {
		off := res.Rows[0].Off
		for _, b := range c.BurstSweep {
			on := out[k]
			k++
			res.Bursts = append(res.Bursts, Fig29bBurst{BurstBlocks: b, RegularGain: ratio(on.RegularMBps, off.RegularMBps),
				BusyGain: ratio(on.BusyMBps, off.BusyMBps), TotalGain: ratio(on.TotalMBps, off.TotalMBps), On: on})
		}
	}
	return res, nil
}

func fig29bRun(ctx context.Context, dir string, c Fig29bConfig, sc Fig29bScenario, acfg node.AdmissionConfig) (Fig29bRun, error) {
	ac := acfg.Enabled
	d, err := subdir(dir)
	if err != nil {
		return Fig29bRun{}, err
	}
	defer removeAll(d)
	r, err := newRigAC(d, c.Drive, acfg)
	if err != nil {
		return Fig29bRun{}, err
	}
	defer r.close()
	from, to := c.Warmup, c.Warmup+c.Run
	// The busy writer is placed first (dies 0..w-1); the regular writers fill
	// the dies after it, the last ones wrapping onto the busy writer's dies
	// when there are more zones than dies.
	busy, err := r.newLZone(c.BusyWidth, c.BusyStripe)
	if err != nil {
		return Fig29bRun{}, err
	}
	busy.sameDies = true
	busyM := &meter{from: from, to: to}
	var firstErr error
	writer := func(lz *lzone, m *meter, every time.Duration) func(ctx context.Context) {
		return func(ctx context.Context) {
			next := r.s.Now()
			for r.s.Now() < to {
				if every > 0 {
					if err := r.s.WaitUntil(ctx, next); err != nil {
						return
					}
					next = max(next, r.s.Now()) + every // an interval, no catching up
				}
				if err := lz.write(ctx, c.IOBytes); err != nil {
					if firstErr == nil && ctx.Err() == nil {
						firstErr = err
					}
					return
				}
				m.add(r.s.Now(), c.IOBytes)
			}
		}
	}
	busyZones := map[int]bool{}
	for _, z := range busy.zones {
		busyZones[r.geo.FCG(z)] = true
	}
	regs := make([]*meter, sc.Regular)
	coloc := -1
	for i := range regs {
		lz, err := r.newLZone(c.RegularWidth, c.RegularStripe)
		if err != nil {
			return Fig29bRun{}, err
		}
		lz.sameDies = true
		for _, z := range lz.zones {
			if busyZones[r.geo.FCG(z)] && coloc < 0 {
				coloc = i
			}
		}
		regs[i] = &meter{from: from, to: to}
		r.s.Go(writer(lz, regs[i], sc.Interval))
	}
	r.s.Go(writer(busy, busyM, 0))
	r.s.Run(to)
	if firstErr != nil {
		return Fig29bRun{}, firstErr
	}
	out := Fig29bRun{AC: ac, BusyMBps: round(busyM.mbps())}
	var sum float64
	for _, m := range regs {
		sum += m.mbps()
	}
	if len(regs) > 0 {
		out.RegularMBps = round(sum / float64(len(regs)))
	}
	if coloc >= 0 {
		out.ColocMBps = round(regs[coloc].mbps())
	}
	out.TotalMBps = round(sum + busyM.mbps())
	out.Stalls, _ = r.adm.Stalls()
	out.AdmissionNs = int64(r.adm.Rate())
	return out, nil
}
