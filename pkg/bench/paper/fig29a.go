package paper

import (
	"context"
	"fmt"
	"time"

	"github.com/zonefleet/zonefleet/pkg/bench/paper/sim"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/node"
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
// Bandwidth is per thread, as the paper reports it: A/B is one A thread's
// MB/s over zone B's (its one QD-32 thread).
//
// CC on runs Algorithm 1 as the paper states it: a read I/O is admitted to
// the window as a whole (line 3) and completes once (line 5) with its
// latency, from its submission to the node (the paper's NVMe command
// latency, which includes the wait in the submission queue and the device's
// arbitration: here the node's WRR slots) to its slowest leg's completion;
// the window counts device commands, one per physical zone the I/O touches
// (its stripes there coalesced, §4.5.2), so that a window equal to the width
// is "one outstanding I/O per die in the sequential case" (§4.5.1).
// cc_on_zonefleet runs the product's own unit and latency instead of the
// harness's: client.ReadUnits (what pkg/client's admitRead charges) and
// node.FromSlotRequest (what pkg/node reports for a read) — the paper's
// unit and latency, so it matches cc_on. The ablations run the other
// choices: cc_on_stripe_units counts the window in stripes,
// cc_on_device_latency reports only the drive's modelled latency (without
// the WRR wait), cc_on_zonefleet_before both; cc_on_client_legs also admits
// every physical zone's leg on its own, as pkg/client did before admitRead:
// once zone B's window falls below one I/O, the legs of its 8-wide group go
// one at a time and B collapses.
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

// Fig29aDrive has 8 single-die chip groups (4 channels x 2 ways) and a
// 3.2 GB/s host link (PCIe Gen3 x4), with the page read time calibrated to
// the paper's drive: one 16 KiB page per 90 µs, 182 MB/s per die. The paper
// gives ~200 MB/s read per physical zone (Table 1), 88 µs for a 16 KiB read
// at QD 1 (Table 2), and in scenario 1 its 8 dies deliver 1,591 MB/s with
// CC off (199 per die: 76 x 4 + 1,287) and 1,450 with CC on (181 per die:
// 290 x 5). The MLC preset's 35 µs would make every read finish far below
// the paper's lat_thresh of 500 µs, which is tuned to that drive.
func Fig29aDrive() flash.Config {
	c := flash.Defaults()
	c.HostLinkBytesPerSec = 3_200_000_000
	c.ReadLatency = 90 * time.Microsecond
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

// fig29aMode is how a run admits and measures reads.
type fig29aMode struct {
	CC            bool `json:"congestion_control"`
	PerLeg        bool `json:"per_leg_admission,omitempty"`
	StripeUnits   bool `json:"window_in_stripes,omitempty"`
	DeviceLatency bool `json:"device_latency_only,omitempty"`
	// Product takes the window unit and the read latency from the product's
	// code (client.ReadUnits, node.FromSlotRequest) instead of the harness's.
	Product bool `json:"product_unit_and_latency,omitempty"`
}

// Fig29aRun is one scenario with congestion control off or on.
type Fig29aRun struct {
	fig29aMode
	AMBps  float64 `json:"a_mb_per_second_per_thread"`
	BMBps  float64 `json:"b_mb_per_second"`
	AOverB float64 `json:"a_over_b"`
	// BWindow is zone B's final congestion window (cap 4 x width) in the
	// run's unit: device commands (legs), or stripes.
	BWindow float64 `json:"b_window"`
	// BWindowMean is zone B's window averaged over its I/Os in the
	// measurement window.
	BWindowMean float64 `json:"b_window_mean"`
}

// Fig29aRow is one scenario.
type Fig29aRow struct {
	Scenario Fig29aScenario `json:"scenario"`
	Off      Fig29aRun      `json:"cc_off"`
	On       Fig29aRun      `json:"cc_on"`
	// OnZoneFleet is CC on with pkg/client's and pkg/node's own unit and
	// latency (client.ReadUnits, node.FromSlotRequest).
	OnZoneFleet Fig29aRun `json:"cc_on_zonefleet"`
	// The ablations: the window in stripes, the drive's latency without
	// the WRR wait, both, and admission per leg instead of per read.
	OnStripes         Fig29aRun `json:"cc_on_stripe_units"`
	OnDevLat          Fig29aRun `json:"cc_on_device_latency"`
	OnZoneFleetBefore Fig29aRun `json:"cc_on_zonefleet_before"`
	OnLegs            Fig29aRun `json:"cc_on_client_legs"`
}

// Fig29aResult is the figure.
type Fig29aResult struct {
	Config Fig29aConfig                  `json:"config"`
	Rows   []Fig29aRow                   `json:"rows"`
	AOverB map[string]map[string]float64 `json:"a_over_b"` // scenario -> cc_off|cc_on|<ablation> -> A/B
}

// RunFig29a runs every scenario with CC off and on.
func RunFig29a(ctx context.Context, dir string, c Fig29aConfig) (*Fig29aResult, error) {
	res := &Fig29aResult{Config: c, AOverB: map[string]map[string]float64{}}
	modes := []struct {
		name string
		mode fig29aMode
	}{
		{"cc_off", fig29aMode{}},
		{"cc_on", fig29aMode{CC: true}},
		{"cc_on_zonefleet", fig29aMode{CC: true, Product: true}},
		{"cc_on_stripe_units", fig29aMode{CC: true, StripeUnits: true}},
		{"cc_on_device_latency", fig29aMode{CC: true, DeviceLatency: true}},
		{"cc_on_zonefleet_before", fig29aMode{CC: true, StripeUnits: true, DeviceLatency: true}},
		{"cc_on_client_legs", fig29aMode{CC: true, PerLeg: true, StripeUnits: true, DeviceLatency: true}},
	}
	// every scenario in every mode: independent simulations, in parallel
	out := make([]Fig29aRun, len(c.Scenarios)*len(modes))
	if err := parallel(len(out), func(i int) error {
		sc, m := c.Scenarios[i/len(modes)], modes[i%len(modes)]
		r, err := fig29aRun(ctx, dir, c, sc, m.mode)
		if err != nil {
			return fmt.Errorf("fig29a %s, %s: %w", sc.Name, m.name, err)
		}
		out[i] = r
		return nil
	}); err != nil {
		return nil, err
	}
	for si, sc := range c.Scenarios {
		row := Fig29aRow{Scenario: sc}
		dst := []*Fig29aRun{&row.Off, &row.On, &row.OnZoneFleet, &row.OnStripes, &row.OnDevLat, &row.OnZoneFleetBefore, &row.OnLegs}
		res.AOverB[sc.Name] = map[string]float64{}
		for mi, m := range modes {
			r := out[si*len(modes)+mi]
			*dst[mi] = r
			res.AOverB[sc.Name][m.name] = r.AOverB
		}
		res.Rows = append(res.Rows, row)
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
	mode   fig29aMode
	// window sums B's window over its I/Os in the measurement window.
	windowSum float64
	windowN   int
}

func fig29aRun(ctx context.Context, dir string, c Fig29aConfig, sc Fig29aScenario, mode fig29aMode) (Fig29aRun, error) {
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
			cc: newCCWindow(r.s, width, mode.CC, mode.PerLeg, c.LatThreshold), mode: mode}
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
	r.slots = slots
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
				if now := r.s.Now(); now > from && now <= to {
					rz.windowSum += rz.cc.cwnd
					rz.windowN++
				}
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
	aPerThread := am.mbps() / float64(len(as))
	out := Fig29aRun{fig29aMode: mode, AMBps: round(aPerThread), BMBps: round(bm.mbps()), BWindow: round(b.cc.cwnd)}
	if b.windowN > 0 {
		out.BWindowMean = round(b.windowSum / float64(b.windowN))
	}
	out.AOverB = ratio(aPerThread, bm.mbps())
	return out, nil
}

// readIO reads n bytes (full rows) at logical offset off the way the
// client's readGroup does: one leg per physical zone, in parallel, admitted
// by the group's congestion window (the whole I/O, or each leg with
// PerLeg) in device commands (one per leg; client.ReadUnits with Product)
// or stripes, and reporting its latency: from the submission to the node
// (the WRR slot request) to the completion (node.FromSlotRequest with
// Product), or the drive's modelled latency alone (DeviceLatency).
func (r *rig) readIO(ctx context.Context, rz *readZone, off uint64, n int, slots *slotQueue) error {
	w := len(rz.zones)
	per := n / w
	zoneOff := off / uint64(w)
	units := 1.0 // one device command per physical zone (leg)
	if rz.mode.StripeUnits {
		units = float64((per + rz.stripe - 1) / rz.stripe)
	}
	ioUnits := units * float64(w)
	if rz.mode.Product {
		units, ioUnits = client.ReadUnits(1), client.ReadUnits(w)
	}
	lk := latFromSlotRequest
	switch {
	case rz.mode.DeviceLatency:
		lk = latDevice
	case rz.mode.Product:
		lk = latNode
	}
	left := w
	done := r.s.NewCond()
	var firstErr error
	perIO := !rz.cc.perLeg
	if perIO { // Algorithm 1 line 3: the read I/O is admitted as a whole
		if err := rz.cc.acquire(ctx, ioUnits); err != nil {
			return err
		}
	}
	var maxLat time.Duration
	for _, z := range rz.zones {
		r.s.Go(func(ctx context.Context) {
			err := func() error {
				if perIO {
					lat, err := r.physRead(ctx, z, zoneOff, per, slots, lk)
					maxLat = max(maxLat, lat)
					return err
				}
				if err := rz.cc.acquire(ctx, units); err != nil {
					return err
				}
				lat, err := r.physRead(ctx, z, zoneOff, per, slots, lk)
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
	if perIO { // line 5: one completion per read I/O, with its latency (the slowest leg)
		rz.cc.release(ioUnits, maxLat, firstErr == nil)
	}
	return firstErr
}

// latKind is which latency a read reports to the congestion window.
type latKind int

const (
	// latFromSlotRequest: the harness's clock from the slot request to the
	// completion (the NVMe command latency the paper measures: the device
	// arbitrates its queues itself).
	latFromSlotRequest latKind = iota
	// latNode: what pkg/node reports for a read (node.FromSlotRequest: the
	// same span, from the drive's result).
	latNode
	// latDevice: the drive's modelled latency alone, without the WRR wait
	// (an ablation: the paper's latency includes the device's arbitration).
	latDevice
)

// physRead is the node's read path: a device queue slot (node.WRR with one
// namespace: FIFO over QueueSlots), then the drive. It returns the latency
// of kind lk.
func (r *rig) physRead(ctx context.Context, z, off uint64, n int, slots *slotQueue, lk latKind) (time.Duration, error) {
	t0 := r.s.Now()
	if err := slots.acquire(ctx); err != nil {
		return 0, err
	}
	defer slots.release()
	bs := uint64(r.geo.BlockSize)
	_, res, err := r.dev.Read(ctx, z*r.geo.ZoneSize+off/bs, uint64(n)/bs)
	switch lk {
	case latDevice:
		return res.Latency(), err
	case latNode:
		return node.FromSlotRequest(t0, res).Latency(), err
	}
	return r.s.Now() - t0, err
}

// ccWindow is the client's per-stripe-group read congestion window (eZNS
// Algorithm 1 lines 1–10): the admission test and the window update are
// pkg/client's own (client.CongestionAdmits, client.CongestionUpdate); only
// the waiting differs (a sim.Cond instead of the client's channel, which the
// simulation cannot see). perLeg admits every physical zone's leg on its own,
// as pkg/client did before admitRead; otherwise the whole read I/O is
// admitted and completed at once, as Algorithm 1 and pkg/client do.
type ccWindow struct {
	enabled  bool
	perLeg   bool
	width    int
	cwnd     float64
	inflight float64
	thresh   time.Duration
	cond     *sim.Cond
}

func newCCWindow(s *sim.Sim, width int, enabled, perLeg bool, thresh time.Duration) *ccWindow {
	return &ccWindow{enabled: enabled, perLeg: perLeg, width: width, cwnd: float64(width), thresh: thresh, cond: s.NewCond()}
}

func (c *ccWindow) acquire(ctx context.Context, units float64) error {
	for {
		if !c.enabled || client.CongestionAdmits(c.cwnd, c.inflight, units) {
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
		c.cwnd = client.CongestionUpdate(c.cwnd, c.width, units, lat, c.thresh)
	}
	c.cond.Broadcast()
}

// slotQueue is the node's device slots: node.WRR itself (the node's code),
// driven through AcquireAsync so that a simulated actor waits on the
// simulation (a sim.Cond) rather than on the WRR's channel. All I/O of these
// figures is one namespace's, as in the paper's experiments (the WRR then
// grants in arrival order).
type slotQueue struct {
	s       *sim.Sim
	w       *node.WRR
	waiting []slotWaiter // queued tickets, in queue order
}

type slotWaiter struct {
	t *node.WRRTicket
	c *sim.Cond
}

const benchNS = "bench"

func newSlots(s *sim.Sim, n int) *slotQueue { return &slotQueue{s: s, w: node.NewWRR(n)} }

func (q *slotQueue) acquire(ctx context.Context) error {
	t := q.w.AcquireAsync(benchNS)
	if t == nil {
		return nil
	}
	c := q.s.NewCond()
	q.waiting = append(q.waiting, slotWaiter{t, c})
	for !t.Granted() {
		if err := c.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// release frees a slot; the WRR grants it to the next ticket in turn, whose
// actor is woken.
func (q *slotQueue) release() {
	q.w.Release()
	kept := q.waiting[:0]
	for _, sw := range q.waiting {
		if sw.t.Granted() {
			sw.c.Broadcast()
		} else {
			kept = append(kept, sw)
		}
	}
	q.waiting = kept
}
