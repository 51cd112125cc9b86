// Package fairbench is `zctl bench fairness`: eZNS Fig. 29a, read-read
// fairness between two v-zones whose stripe groups share dies. Zone A has
// width 2 and 32 KiB stripes and one reader (QD 1); zone B has width 8 and 8
// KiB stripes and 32 readers (QD 32); both read 128 KiB at a time. Without
// congestion control B's queue dominates the shared dies; with it, each
// stripe group keeps about the same outstanding bytes and the two converge.
//
// It runs on a realtime cluster (gRPC, the shared machine's scheduler), so
// it measures this machine's software path and moves between runs; the
// paper's figure, deterministic and with all three scenarios, is `zctl bench
// paper fig29a` (pkg/bench/paper).
package fairbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/daemon"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/node"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// Options of the benchmark.
type Options struct {
	Dir       string
	Duration  time.Duration // wall time of each run (default 4s; longer until each zone has completed a read)
	TimeScale float64       // realtime clock scale (default 16: the model runs 16× slower than wall time)
	QDB       int           // zone B's readers (default 32)
}

// Result: bandwidths in MiB/s of modelled time.
type Result struct {
	Off       Pair    `json:"cc_off"`
	On        Pair    `json:"cc_on"`
	TimeScale float64 `json:"time_scale"`
}

// Pair is the two zones' bandwidth.
type Pair struct {
	A     float64 `json:"zone_a_mib_per_second"`
	B     float64 `json:"zone_b_mib_per_second"`
	Ratio float64 `json:"a_over_b"`
}

// drive: 8 chips (4 channels × 2 ways), single-die zones of 2 MiB.
func drive() flash.Config {
	c := flash.Defaults()
	c.Channels, c.Ways, c.DZone, c.PagesPerBlock, c.BlocksPerChip, c.SpareBlocksPerChip = 4, 2, 1, 128, 6, 2
	c.MaxOpenZones, c.MaxActiveZones = 0, 0
	return c
}

// Run runs CC off, then on.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Duration <= 0 {
		o.Duration = 4 * time.Second
	}
	if o.TimeScale <= 0 {
		o.TimeScale = 16
	}
	if o.QDB <= 0 {
		o.QDB = 32
	}
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "zonefleet-fairbench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		o.Dir = d
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	clk := clock.Realtime(o.TimeScale)
	dev, err := zns.Create(filepath.Join(o.Dir, "dev0.zns"), drive(), clk)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	svc, err := node.New(node.Config{ID: "fair", Standalone: true}, []*zns.Device{dev}, nil, quiet)
	if err != nil {
		return nil, err
	}
	defer svc.Close()
	d, err := daemon.New(daemon.Config{Name: "ssdnode", GRPCListen: "127.0.0.1:0"}, quiet)
	if err != nil {
		return nil, err
	}
	v1.RegisterZonedDeviceServer(d.GRPC, svc)
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(sctx) }()
	defer func() { stop(); <-done }()

	id := dev.Identify()
	zcap := id.ZoneCapacity
	dies := uint64(id.Chips)
	// Zone z sits on die z % dies. A: dies 0,1 (zones 0,1); B: dies 0..7 (zones 8..15).
	layout := func(vid uint64, width int, stripe uint32, first uint64) *v1.VZone {
		g := &v1.StripeGroup{Width: uint32(width), StripeBlocks: stripe, Capacity: uint64(width) * zcap}
		for i := 0; i < width; i++ {
			g.Zones = append(g.Zones, &v1.PhysicalZone{Node: "fair", Addr: d.GRPCAddr(), Zone: uint32(first + uint64(i)), Available: true})
		}
		return &v1.VZone{Id: vid, State: v1.VZoneState_VZONE_STATE_OPEN, Capacity: g.Capacity, Groups: []*v1.StripeGroup{g}}
	}
	la, lb := layout(1, 2, 8, 0), layout(2, 8, 2, dies)

	// Fill both v-zones once (writes go at the device's modelled speed).
	filler := client.NewDirect(client.Config{Namespace: "fair", Clock: clk})
	defer filler.Close()
	for _, l := range []*v1.VZone{la, lb} {
		vz := filler.StaticVZone(l)
		buf := make([]byte, 256*4096)
		for off := uint64(0); off < l.GetCapacity(); off += 256 {
			if err := vz.Write(ctx, off, buf[:min(256, l.GetCapacity()-off)*4096]); err != nil {
				return nil, fmt.Errorf("fill: %w", err)
			}
		}
	}

	// Let the fill's programs finish on the chips before reading.
	if err := clk.WaitUntil(ctx, dev.Drained()); err != nil {
		return nil, err
	}
	res := &Result{TimeScale: o.TimeScale}
	for _, on := range []bool{false, true} {
		p, err := run(ctx, o, clk, la, lb, on)
		if err != nil {
			return nil, err
		}
		if on {
			res.On = p
		} else {
			res.Off = p
		}
	}
	return res, nil
}

func run(ctx context.Context, o Options, clk clock.Clock, la, lb *v1.VZone, cc bool) (Pair, error) {
	c := client.NewDirect(client.Config{Namespace: "fair", Clock: clk, DisableCongestionControl: !cc})
	defer c.Close()
	a, b := c.StaticVZone(la), c.StaticVZone(lb)
	const io = 32 // blocks = 128 KiB
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var bytesA, bytesB atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, 1+o.QDB)
	progress := make(chan struct{}, 1) // a read completed
	reader := func(vz *client.VZone, capacity uint64, seq bool, seed uint64, counter *atomic.Int64) {
		defer wg.Done()
		rng := mrand.New(mrand.NewPCG(seed, 1))
		off := uint64(0)
		for rctx.Err() == nil {
			if !seq {
				off = rng.Uint64N(capacity/io) * io
			}
			if _, err := vz.Read(rctx, off, io); err != nil {
				if rctx.Err() == nil {
					errc <- err
				}
				return
			}
			counter.Add(io * 4096)
			select {
			case progress <- struct{}{}:
			default:
			}
			off = (off + io) % (capacity / io * io)
		}
	}
	t0 := clk.Now()
	wg.Add(1 + o.QDB)
	go reader(a, la.GetCapacity(), true, 1, &bytesA)
	for i := 0; i < o.QDB; i++ {
		go reader(b, lb.GetCapacity(), false, uint64(i+2), &bytesB)
	}
	// The run lasts Duration and, beyond it, until each zone has completed a
	// read: on a machine too busy to complete one in Duration the figure is
	// still a bandwidth over the time taken, never a zero.
	window := time.After(o.Duration)
wait:
	for over := false; !over || bytesA.Load() == 0 || bytesB.Load() == 0; {
		select {
		case <-window:
			over, window = true, nil
		case <-progress:
		case <-ctx.Done():
			break wait
		case err := <-errc:
			cancel()
			wg.Wait()
			return Pair{}, err
		}
	}
	elapsed := (clk.Now() - t0).Seconds()
	ba, bb := bytesA.Load(), bytesB.Load()
	cancel()
	wg.Wait()
	p := Pair{A: float64(ba) / (1 << 20) / elapsed, B: float64(bb) / (1 << 20) / elapsed}
	if p.B > 0 {
		p.Ratio = p.A / p.B
	}
	return p, nil
}

// WriteTable prints the result.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "eZNS Fig. 29a (time scale %.0f)\tzone A MiB/s (w2, 32K, QD1)\tzone B MiB/s (w8, 8K, QD32)\tA/B\n", r.TimeScale)
	fmt.Fprintf(tw, "congestion control off\t%.1f\t%.1f\t%.2f\n", r.Off.A, r.Off.B, r.Off.Ratio)
	fmt.Fprintf(tw, "congestion control on\t%.1f\t%.1f\t%.2f\n", r.On.A, r.On.B, r.On.Ratio)
	return tw.Flush()
}
