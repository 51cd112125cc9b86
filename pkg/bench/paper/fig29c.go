package paper

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// Fig29cConfig is eZNS Fig. 29(c), read-write fairness: readers (zone A:
// width 2, 32 KiB stripes, 128 KiB random reads at QD 32, together covering
// every die), one busy writer (zone B: width 2, 32 KiB, 512 KiB writes back
// to back) and regular writers (zone C: width 8, 32 KiB, one 512 KiB write
// per interval), with neither scheduler, CC, AC, and CC+AC.
type Fig29cConfig struct {
	Readers       int           `json:"readers"`
	ReaderWidth   int           `json:"reader_width"`
	ReaderStripe  int           `json:"reader_stripe_bytes"`
	ReaderQD      int           `json:"reader_queue_depth"`
	ReadBytes     int           `json:"read_bytes"`
	BusyWidth     int           `json:"busy_width"`
	BusyStripe    int           `json:"busy_stripe_bytes"`
	Regular       int           `json:"regular"`
	RegularWidth  int           `json:"regular_width"`
	RegularStripe int           `json:"regular_stripe_bytes"`
	Interval      time.Duration `json:"interval_ns"`
	WriteBytes    int           `json:"write_bytes"`
	LatThreshold  time.Duration `json:"lat_threshold_ns"`
	QueueSlots    int           `json:"queue_slots"`
	// DeepQueueSlots reruns every mode with this many device slots (an
	// NVMe-deep queue like the paper's SPDK setup; 0: skip), to separate the
	// node's queue-slot limit from the schedulers.
	DeepQueueSlots int           `json:"deep_queue_slots"`
	Prefill        int           `json:"prefill_bytes_per_zone"`
	Warmup         time.Duration `json:"warmup_ns"`
	Run            time.Duration `json:"run_ns"`
	Drive          flash.Config  `json:"drive"`
}

// Fig29cDrive is the paper's drive (eZNS Table 1): 128 single-die chip
// groups (16 channels x 8 ways, MLC), a 16 MiB write cache and a 3.2 GB/s
// link, so that the writers' 130 zones (one busy writer of width 2, 16
// regular writers of width 8) take about one zone per die, as in the paper.
// Its dies serve reads ahead of the cached programs queued for them
// (flash.Config.ReadPriority): with no scheduler the paper's readers run at
// 199.6 MB/s each, their share of the link, while the writers on the same
// dies starve (19.3 % and 27.3 % of their maximum), which a die that made
// every read wait for its whole cached backlog would not give.
func Fig29cDrive() flash.Config {
	c := flash.Defaults()
	c.Channels, c.Ways, c.DZone = 16, 8, 1
	c.PagesPerBlock, c.BlocksPerChip, c.SpareBlocksPerChip = 1024, 8, 1
	c.MaxOpenZones, c.MaxActiveZones = 0, 0
	c.HostLinkBytesPerSec = 3_200_000_000
	c.ReadPriority = true
	return c
}

// DefaultFig29c is the paper's setup.
func DefaultFig29c() Fig29cConfig {
	return Fig29cConfig{
		Readers: 16, ReaderWidth: 2, ReaderStripe: 32 << 10, ReaderQD: 32, ReadBytes: 128 << 10,
		BusyWidth: 2, BusyStripe: 32 << 10, Regular: 16, RegularWidth: 8, RegularStripe: 32 << 10,
		Interval: 5 * time.Millisecond, WriteBytes: 512 << 10, LatThreshold: 500 * time.Microsecond,
		QueueSlots: 256, DeepQueueSlots: 1024, // QueueSlots: the node's default, two per chip
		// a 400 ms warm-up fills the write cache (steady state, as Fig. 29b):
		// before that it absorbs the busy writer's excess over its two dies
		Prefill: 1 << 20, Warmup: 400 * time.Millisecond, Run: 200 * time.Millisecond, Drive: Fig29cDrive(),
	}
}

// Fig29cRun is one mode.
type Fig29cRun struct {
	Mode        string  `json:"mode"`
	ReaderMBps  float64 `json:"reader_mb_per_second"`
	BusyMBps    float64 `json:"busy_mb_per_second"`
	RegularMBps float64 `json:"regular_mb_per_second"`
}

// Fig29cResult is the figure. Gains are per-thread bandwidth of a mode over
// neither scheduler.
type Fig29cResult struct {
	Config      Fig29cConfig       `json:"config"`
	Runs        []Fig29cRun        `json:"runs"`
	ReaderGain  map[string]float64 `json:"reader_gain"`
	BusyGain    map[string]float64 `json:"busy_gain"`
	RegularGain map[string]float64 `json:"regular_gain"`
	// The same with DeepQueueSlots device slots.
	DeepQueue *Fig29cResult `json:"deep_queue,omitempty"`
}

var fig29cModes = []struct {
	name   string
	cc, ac bool
}{{"none", false, false}, {"cc", true, false}, {"ac", false, true}, {"cc+ac", true, true}}

// RunFig29c runs the four modes with the node's queue slots, and again with
// DeepQueueSlots if set.
func RunFig29c(ctx context.Context, dir string, c Fig29cConfig) (*Fig29cResult, error) {
	cfgs := []Fig29cConfig{c}
	if c.DeepQueueSlots > 0 {
		dc := c
		dc.QueueSlots, dc.DeepQueueSlots = c.DeepQueueSlots, 0
		cfgs = append(cfgs, dc)
	}
	// every mode at each slot count: independent simulations, in parallel
	runs := make([]Fig29cRun, len(cfgs)*len(fig29cModes))
	if err := parallel(len(runs), func(i int) error {
		cc, m := cfgs[i/len(fig29cModes)], fig29cModes[i%len(fig29cModes)]
		r, err := fig29cRun(ctx, dir, cc, m.cc, m.ac)
		if err != nil {
			return fmt.Errorf("fig29c %s: %w", m.name, err)
		}
		r.Mode = m.name
		runs[i] = r
		return nil
	}); err != nil {
		return nil, err
	}
	res := fig29cGains(cfgs[0], runs[:len(fig29cModes)])
	if len(cfgs) > 1 {
		res.DeepQueue = fig29cGains(cfgs[1], runs[len(fig29cModes):])
	}
	return res, nil
}

// fig29cGains is the result of one slot count's runs (one per mode, in
// fig29cModes' order; the first is neither scheduler).
func fig29cGains(c Fig29cConfig, runs []Fig29cRun) *Fig29cResult {
	res := &Fig29cResult{Config: c, ReaderGain: map[string]float64{}, BusyGain: map[string]float64{}, RegularGain: map[string]float64{}}
	res.Runs = append(res.Runs, runs...)
	base := res.Runs[0]
	for _, r := range res.Runs[1:] {
		res.ReaderGain[r.Mode] = ratio(r.ReaderMBps, base.ReaderMBps)
		res.BusyGain[r.Mode] = ratio(r.BusyMBps, base.BusyMBps)
		res.RegularGain[r.Mode] = ratio(r.RegularMBps, base.RegularMBps)
	}
	return res
}

func fig29cRun(ctx context.Context, dir string, c Fig29cConfig, cc, ac bool) (Fig29cRun, error) {
	d, err := subdir(dir)
	if err != nil {
		return Fig29cRun{}, err
	}
	defer removeAll(d)
	r, err := newRig(d, c.Drive, ac)
	if err != nil {
		return Fig29cRun{}, err
	}
	defer r.close()
	// Readers first (they cover the dies), prefilled during set-up.
	buf := make([]byte, c.Prefill)
	readers := make([]*readZone, c.Readers)
	for i := range readers {
		zs, err := r.alloc(c.ReaderWidth)
		if err != nil {
			return Fig29cRun{}, err
		}
		for _, z := range zs {
			if _, err := r.dev.Write(zns.NoWait(ctx), z*r.geo.ZoneSize, buf, zns.Flags{}); err != nil {
				return Fig29cRun{}, err
			}
			r.wp[z] = uint64(c.Prefill / r.geo.BlockSize)
		}
		readers[i] = &readZone{zones: zs, stripe: c.ReaderStripe, size: uint64(c.Prefill) * uint64(c.ReaderWidth),
			cc: newCCWindow(r.s, c.ReaderWidth, cc, false, c.LatThreshold), mode: fig29aMode{CC: cc, Product: true}} // the client's unit, the node's latency
	}
	start := max(r.s.Now(), r.dev.Drained())
	if err := r.s.WaitUntil(ctx, start); err != nil {
		return Fig29cRun{}, err
	}
	from, to := start+c.Warmup, start+c.Warmup+c.Run
	slots := newSlots(r.s, c.QueueSlots)
	r.slots = slots // reads and writes take the node's device slots
	var firstErr error
	fail := func(ctx context.Context, err error) {
		if firstErr == nil && ctx.Err() == nil {
			firstErr = err
		}
	}
	rm := make([]*meter, c.Readers)
	for i, rz := range readers {
		rm[i] = &meter{from: from, to: to}
		rng := rand.New(rand.NewPCG(uint64(Seed), uint64(i)))
		ios := rz.size / uint64(c.ReadBytes)
		for q := 0; q < c.ReaderQD; q++ {
			r.s.Go(func(ctx context.Context) {
				for r.s.Now() < to {
					off := rng.Uint64N(ios) * uint64(c.ReadBytes)
					if err := r.readIO(ctx, rz, off, c.ReadBytes, slots); err != nil {
						fail(ctx, err)
						return
					}
					rm[i].add(r.s.Now(), c.ReadBytes)
				}
			})
		}
	}
	writer := func(lz *lzone, m *meter, every time.Duration) func(ctx context.Context) {
		return func(ctx context.Context) {
			next := r.s.Now()
			for r.s.Now() < to {
				if every > 0 {
					if err := r.s.WaitUntil(ctx, next); err != nil {
						return
					}
					next = max(next, r.s.Now()) + every
				}
				if err := lz.write(ctx, c.WriteBytes); err != nil {
					fail(ctx, err)
					return
				}
				m.add(r.s.Now(), c.WriteBytes)
			}
		}
	}
	bm := &meter{from: from, to: to}
	if c.BusyWidth > 0 {
		busy, err := r.newLZone(c.BusyWidth, c.BusyStripe)
		if err != nil {
			return Fig29cRun{}, err
		}
		busy.sameDies = true
		r.s.Go(writer(busy, bm, 0))
	}
	wm := make([]*meter, c.Regular)
	for i := range wm {
		lz, err := r.newLZone(c.RegularWidth, c.RegularStripe)
		if err != nil {
			return Fig29cRun{}, err
		}
		lz.sameDies = true
		wm[i] = &meter{from: from, to: to}
		r.s.Go(writer(lz, wm[i], c.Interval))
	}
	r.s.Run(to)
	if firstErr != nil {
		return Fig29cRun{}, firstErr
	}
	return Fig29cRun{ReaderMBps: round(meanMBps(rm)), BusyMBps: round(bm.mbps()), RegularMBps: round(meanMBps(wm))}, nil
}

func meanMBps(ms []*meter) float64 {
	if len(ms) == 0 {
		return 0
	}
	var s float64
	for _, m := range ms {
		s += m.mbps()
	}
	return s / float64(len(ms))
}
