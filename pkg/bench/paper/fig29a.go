package paper

import (
	"context"
	"fmt"
	"time"

	"github.com/zonefleet/zonefleet/pkg/bench/paper/sim"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// Fig29aScenario is one read-read fairness scenario of eZNS Fig. 29(a): zone
// A of the given width and stripe read at QD 1 by 8/width threads (one per
// logical zone, so A covers the same 8 dies as B), against zone B.
type Fig29aScenario struct {
	Name    string `json:"name"`
	AWidth  int    `json:"a_width"`
	AStripe int    `json:"a_stripe_bytes"`
}

// Fig29aConfig is eZNS Fig. 29(a): sequential 128 KiB reads of zones A and
// B on co-located dies, the client's read congestion control off and on.
type Fig29aConfig struct {
	Scenarios []Fig29aScenario `json:"scenarios"`
	IOBytes   int              `json:"io_bytes"`
	BWidth    int              `json:"b_width"`
	BStripe   int              `json:"b_stripe_bytes"`
	BQD       int              `json:"b_queue_depth"`
	// LatThreshold is the client's lat_thresh (client.Config.LatThreshold default).
	LatThreshold time.Duration `json:"lat_threshold_ns"`
	// QueueSlots is the node's WRR slots of the drive (node default: two per chip).
	QueueSlots int           `json:"queue_slots"`
	Prefill    int           `json:"prefill_bytes_per_zone"`
	Warmup     time.Duration `json:"warmup_ns"`
	Run        time.Duration `json:"run_ns"`
	Drive      flash.Config  `json:"drive"`
}

// Fig29aDrive has 8 single-die chip groups (4 channels x 2 ways, MLC) and a
// 3.2 GB/s host link (PCIe Gen3 x4, the paper's drive: its zone B alone reads
// 1,287 MB/s, more than the 1.2 GB/s default link carries).
func Fig29aDrive() flash.Config {
	c := flash.Defaults()
	c.HostLinkBytesPerSec = 3_200_000_000
	c.Channels, c.Ways, c.DZone = 4, 2, 1
	c.PagesPerBlock, c.BlocksPerChip, c.SpareBlocksPerChip = 256, 4, 1
	c.MaxOpenZones, c.MaxActiveZones = 0, 0
	return c
}

// DefaultFig29a is the paper's three scenarios.
func DefaultFig29a() Fig29aConfig {
	return Fig29aConfig{
		Scenarios: []Fig29aScenario{
			{Name: "1-a-w2-32k", AWidth: 2, AStripe: 32 << 10},
			{Name: "2-a-w4-16k", AWidth: 4, AStripe: 16 << 10},
			{Name: "3-a-w8-8k", AWidth: 8, AStripe: 8 << 10},
		},
		IOBytes: 128 << 10, BWidth: 8, BStripe: 8 << 10, BQD: 32, LatThreshold: 500 * time.Microsecond,
		QueueSlots: 16, Prefill: 1 << 20, Warmup: 10 * time.Millisecond, Run: 50 * time.Millisecond, Drive: Fig29aDrive(),
	}
}

// Fig29aRun is one scenario with congestion control off or on.
type Fig29aRun struct {
	CC     bool    `json:"congestion_control"`
	AMBps  float64 `json:"a_mb_per_second"`
	BMBps  float64 `json:"b_mb_per_second"`
	AOverB float64 `json:"a_over_b"`
	// BWindow is zone B's final congestion window in stripes (cap 4 x width).
	BWindow float64 `json:"b_window_stripes"`
}

// Fig29aRow is one scenario.
type Fig29aRow struct {
	Scenario Fig29aScenario `json:"scenario"`
	Off      Fig29aRun      `json:"cc_off"`
	On       Fig29aRun      `json:"cc_on"`
}

// Fig29aResult is the figure.
type Fig29aResult struct {
	Config Fig29aConfig                  `json:"config"`
	Rows   []Fig29aRow                   `json:"rows"`
	AOverB map[string]map[string]float64 `json:"a_over_b"` // scenario -> cc_off|cc_on -> A/B
}

// RunFig29a runs every scenario with CC off and on.
func RunFig29a(ctx context.Context, dir string, c Fig29aConfig) (*Fig29aResult, error) {
	res := &Fig29aResult{Config: c, AOverB: map[string]map[string]float64{}}
	for _, sc := range c.Scenarios {
		off, err := fig29aRun(ctx, dir, c, sc, false)
		if err != nil {
			return nil, fmt.Errorf("fig29a %s, CC off: %w", sc.Name, err)
		}
		on, err := fig29aRun(ctx, dir, c, sc, true)
		if err != nil {
			return nil, fmt.Errorf("fig29a %s, CC on: %w", sc.Name, err)
		}
		res.Rows = append(res.Rows, Fig29aRow{Scenario: sc, Off: off, On: on})
		res.AOverB[sc.Name] = map[string]float64{"cc_off": off.AOverB, "cc_on": on.AOverB}
	}
	return res, nil
}

// readZone is a logical zone read sequentially, wrapping at the prefilled end.
type readZone struct {
	zones  []uint64
	stripe int
	cc     *ccWindow
	next   uint64 // next logical byte offset
	size   uint64 // prefilled logical bytes
}

func fig29aRun(ctx context.Context, dir string, c Fig29aConfig, sc Fig29aScenario, cc bool) (Fig29aRun, error) {
	d, err := subdir(dir)
	if err != nil {
		return Fig29aRun{}, err
	}
	defer removeAll(d)
	r, err := newRig(d, c.Drive, false)
	if err != nil {
		return Fig29aRun{}, err
	}
	defer r.close()
	mk := func(width, stripe int) (*readZone, error) {
		zs, err := r.alloc(width)
		if err != nil {
			return nil, err
		}
		rz := &readZone{zones: zs, stripe: stripe, size: uint64(c.Prefill) * uint64(width),
			cc: newCCWindow(r.s, width, cc, c.LatThreshold)}
		buf := make([]byte, c.Prefill)
		for _, z := range zs { // set-up: the clock is not running yet
			if _, err := r.dev.Write(zns.NoWait(ctx), z*r.geo.ZoneSize, buf, zns.Flags{}); err != nil {
				return nil, err
			}
		}
		return rz, nil
	}
	b, err := mk(c.BWidth, c.BStripe)
	if err != nil {
		return Fig29aRun{}, err
	}
	var as []*readZone
	for i := 0; i < c.BWidth/sc.AWidth; i++ {
		a, err := mk(sc.AWidth, sc.AStripe)
		if err != nil {
			return Fig29aRun{}, err
		}
		as = append(as, a)
	}
	start := max(r.s.Now(), r.dev.Drained())
	if err := r.s.WaitUntil(ctx, start); err != nil {
		return Fig29aRun{}, err
	}
	from, to := start+c.Warmup, start+c.Warmup+c.Run
	am, bm := &meter{from: from, to: to}, &meter{from: from, to: to}
	slots := newSlots(r.s, c.QueueSlots)
	var firstErr error
	reader := func(rz *readZone, m *meter) func(ctx context.Context) {
		return func(ctx context.Context) {
			for r.s.Now() < to {
				off := rz.next
				rz.next = (rz.next + uint64(c.IOBytes)) % rz.size
				if err := r.readIO(ctx, rz, off, c.IOBytes, slots); err != nil {
					if firstErr == nil && ctx.Err() == nil {
						firstErr = err
					}
					return
				}
				m.add(r.s.Now(), c.IOBytes)
			}
		}
	}
	for i := 0; i < c.BQD; i++ {
		r.s.Go(reader(b, bm))
	}
	for _, a := range as {
		r.s.Go(reader(a, am))
	}
	r.s.Run(to)
	if firstErr != nil {
		return Fig29aRun{}, firstErr
	}
	out := Fig29aRun{CC: cc, AMBps: round(am.mbps()), BMBps: round(bm.mbps()), BWindow: round(b.cc.cwnd)}
	out.AOverB = ratio(am.mbps(), bm.mbps())
	return out, nil
}

// readIO reads n bytes (full rows) at logical offset off the way the
// client's readGroup does: one leg per physical zone, in parallel, each
// admitted by the group's congestion window in units of stripes and
// reporting its modelled device latency to it.
func (r *rig) readIO(ctx context.Context, rz *readZone, off uint64, n int, slots *slotQueue) error {
	w := len(rz.zones)
	per := n / w
	zoneOff := off / uint64(w)
	units := float64((per + rz.stripe - 1) / rz.stripe)
	left := w
	done := r.s.NewCond()
	var firstErr error
	for _, z := range rz.zones {
		r.s.Go(func(ctx context.Context) {
			err := func() error {
				if err := rz.cc.acquire(ctx, units); err != nil {
					return err
				}
				lat, err := r.physRead(ctx, z, zoneOff, per, slots)
				rz.cc.release(units, lat, err == nil)
				return err
			}()
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

// physRead is the node's read path: a device queue slot (node.WRR with one
// namespace: FIFO over QueueSlots), then the drive.
func (r *rig) physRead(ctx context.Context, z, off uint64, n int, slots *slotQueue) (time.Duration, error) {
	if err := slots.acquire(ctx); err != nil {
		return 0, err
	}
	defer slots.release()
	bs := uint64(r.geo.BlockSize)
	_, res, err := r.dev.Read(ctx, z*r.geo.ZoneSize+off/bs, uint64(n)/bs)
	return res.Latency(), err
}

// ccWindow is the client's per-stripe-group read congestion window (eZNS
// Algorithm 1 lines 1–10), ported line for line from pkg/client
// congestion.go, which is unexported and waits on a channel the simulation
// cannot see; it waits on a sim.Cond instead. Keep the two in step.
type ccWindow struct {
	enabled  bool
	width    int
	cwnd     float64
	inflight float64
	thresh   time.Duration
	cond     *sim.Cond
}

func newCCWindow(s *sim.Sim, width int, enabled bool, thresh time.Duration) *ccWindow {
	return &ccWindow{enabled: enabled, width: width, cwnd: float64(width), thresh: thresh, cond: s.NewCond()}
}

func (c *ccWindow) acquire(ctx context.Context, units float64) error {
	for {
		if !c.enabled || c.inflight == 0 || c.inflight+units <= c.cwnd {
			c.inflight += units
			return nil
		}
		if err := c.cond.Wait(ctx); err != nil {
			return err
		}
	}
}

func (c *ccWindow) release(units float64, lat time.Duration, ok bool) {
	c.inflight -= units
	if c.enabled && ok {
		if lat > c.thresh {
			c.cwnd = max(1, c.cwnd*float64(c.thresh)/(2*float64(lat)))
		} else {
			c.cwnd = min(float64(4*c.width), c.cwnd+units/c.cwnd)
		}
	}
	c.cond.Broadcast()
}

// slotQueue is a FIFO of n device slots on the simulation (node.WRR with a
// single namespace grants slots in arrival order).
type slotQueue struct {
	s       *sim.Sim
	n       int
	running int
	waiting []*sim.Cond
}

func newSlots(s *sim.Sim, n int) *slotQueue { return &slotQueue{s: s, n: max(n, 1)} }

func (q *slotQueue) acquire(ctx context.Context) error {
	if q.running < q.n && len(q.waiting) == 0 {
		q.running++
		return nil
	}
	c := q.s.NewCond()
	q.waiting = append(q.waiting, c)
	return c.Wait(ctx) // release hands its slot over before waking us
}

func (q *slotQueue) release() {
	if len(q.waiting) > 0 {
		c := q.waiting[0]
		q.waiting = q.waiting[1:]
		c.Broadcast()
		return
	}
	q.running--
}
