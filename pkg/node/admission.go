package node

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
)

// Admission is the cache-aware write admission control of eZNS (§4.5.2,
// Algorithm 1 lines 11–27), run per device because the write cache is.
//
// Every active zone holds tokens, one per block it may write. Tokens refill
// lazily at each submission by (now − last refill) / block_admission_rate
// (Algorithm 1 line 27 with a width of one physical zone; a v-zone of width w
// has w zones and so w times the rate). A write that finds enough tokens
// passes at once: a small writer that idles accumulates up to BurstBlocks and
// is never delayed. A write that does not waits until the tokens it is short
// of have been generated, which paces busy writers to the admission rate.
// The latency monitor (lines 18–23) runs every MonitorPeriod of modelled time:
// avg_lat(t) is the mean per-block write latency over the window's writes, and
// block_admission_rate = (avg_lat(t−1) + avg_lat(t)) / 2. Latencies are the
// device's modelled latencies, so a narrow zone that fills the write cache
// raises the rate for everyone and stops monopolising the cache.
type Admission struct {
	clk     clock.Clock
	enabled atomic.Bool
	burst   float64
	period  time.Duration

	mu    sync.Mutex
	zones map[zoneKey]*tokens
	// The window's sum of per-block latency (ns, float64 bits) of each
	// write and its count: atomics, so that every write's Complete takes
	// no lock (see Complete).
	winLat   atomic.Uint64
	winIOs   atomic.Int64
	prevAvg  float64 // ns per block
	rate     float64 // ns per block; 0 = no pacing
	stopTick func() bool
	closed   bool

	stalls    atomic.Uint64
	stallTime atomic.Int64 // ns of modelled time writes waited
}

type zoneKey struct {
	dev  uint32
	zone uint64
}

type tokens struct {
	n          float64
	lastRefill time.Duration
}

// AdmissionConfig tunes the admission control.
type AdmissionConfig struct {
	Enabled       bool
	BurstBlocks   int           // tokens a zone may bank; default 256 (1 MiB of 4 KiB blocks)
	MonitorPeriod time.Duration // default 10 ms (Algorithm 1 line 19)
}

// NewAdmission starts the latency monitor on clk.
func NewAdmission(clk clock.Clock, cfg AdmissionConfig) *Admission {
	if cfg.BurstBlocks <= 0 {
		cfg.BurstBlocks = 256
	}
	if cfg.MonitorPeriod <= 0 {
		cfg.MonitorPeriod = 10 * time.Millisecond
	}
	a := &Admission{clk: clk, burst: float64(cfg.BurstBlocks), period: cfg.MonitorPeriod, zones: map[zoneKey]*tokens{}}
	a.enabled.Store(cfg.Enabled)
	if clk.Kind() != clock.KindOff {
		a.mu.Lock()
		a.arm()
		a.mu.Unlock()
	}
	return a
}

// SetEnabled switches pacing on or off (the latency monitor keeps running).
func (a *Admission) SetEnabled(on bool) { a.enabled.Store(on) }

// Enabled tells whether writes are paced.
func (a *Admission) Enabled() bool { return a.enabled.Load() }

// arm schedules the next monitor tick. Called with a.mu held.
func (a *Admission) arm() {
	if a.closed {
		return
	}
	a.stopTick = a.clk.AfterFunc(a.clk.Now()+a.period, a.tick)
}

func (a *Admission) tick() {
	a.mu.Lock()
	defer a.mu.Unlock()
	var avg float64
	ios := a.winIOs.Swap(0)
	lat := math.Float64frombits(a.winLat.Swap(0))
	if ios > 0 {
		avg = lat / float64(ios)
	}
	a.rate = (a.prevAvg + avg) / 2
	a.prevAvg = avg
	a.arm()
}

// Close stops the latency monitor.
func (a *Admission) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	if a.stopTick != nil {
		a.stopTick()
	}
}

// Rate is the current block admission rate (modelled time per block per zone).
func (a *Admission) Rate() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return time.Duration(a.rate)
}

// Stalls returns how many writes were paced and for how long in all (modelled time).
func (a *Admission) Stalls() (uint64, time.Duration) {
	return a.stalls.Load(), time.Duration(a.stallTime.Load())
}

// Admit waits, if pacing is on, until a write of blocks to (dev, zone) may be
// submitted. It returns how long it waited in modelled time.
func (a *Admission) Admit(ctx context.Context, dev uint32, zone uint64, blocks int) (time.Duration, error) {
	if !a.enabled.Load() || blocks <= 0 {
		return 0, nil
	}
	a.mu.Lock()
	now := a.clk.Now()
	k := zoneKey{dev, zone}
	t, ok := a.zones[k]
	if !ok {
		t = &tokens{n: a.burst, lastRefill: now}
		a.zones[k] = t
	}
	if a.rate > 0 && now > t.lastRefill {
		t.n += float64(now-t.lastRefill) / a.rate
	}
	t.lastRefill = now
	limit := a.burst
	if float64(blocks) > limit {
		limit = float64(blocks) // one batch always fits
	}
	if t.n > limit {
		t.n = limit
	}
	if a.rate == 0 && t.n < float64(blocks) {
		t.n = float64(blocks) // no pacing signal yet: admit
	}
	t.n -= float64(blocks)
	var wait time.Duration
	if t.n < 0 {
		wait = time.Duration(-t.n * a.rate)
	}
	a.mu.Unlock()
	if wait <= 0 {
		return 0, nil
	}
	a.stalls.Add(1)
	a.stallTime.Add(int64(wait))
	if err := a.clk.WaitUntil(ctx, now+wait); err != nil {
		a.mu.Lock()
		t.n += float64(blocks) // give the tokens back
		a.mu.Unlock()
		return 0, err
	}
	return wait, nil
}

// Complete records a finished write for the latency monitor (Algorithm 1
// lines 15–17). Every write of the device calls it, so it takes no lock:
// it adds to the window's sums with a compare-and-swap, in call order (a
// simulation's sequential calls sum exactly as under a lock). A write
// completing while the monitor closes the window may land its latency in
// one window and its count in the next, which moves each window's mean by
// at most that one write's share.
func (a *Admission) Complete(blocks int, lat time.Duration) {
	if blocks <= 0 {
		return
	}
	per := float64(lat) / float64(blocks)
	for {
		old := a.winLat.Load()
		if a.winLat.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+per)) {
			break
		}
	}
	a.winIOs.Add(1)
}

// Forget drops a zone's tokens (zone reset or finished).
func (a *Admission) Forget(dev uint32, zone uint64) {
	a.mu.Lock()
	delete(a.zones, zoneKey{dev, zone})
	a.mu.Unlock()
}
