// Package nodebench measures an ssdnode's data path (`zctl bench node`):
// loopback gRPC against raw TCP in the same run, write throughput against the
// number of concurrent clients, 4 KiB random reads, and the write admission
// scenario of eZNS Fig. 29b on the realtime clock.
package nodebench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/daemon"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/node"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const mib = 1 << 20

// Options of the benchmark. Zero values take the defaults.
type Options struct {
	Dir            string        // backing files; "" = a temporary directory
	WriteBytes     int64         // bytes per throughput measurement (default 128 MiB)
	TCPBytes       int64         // bytes of the raw TCP baseline (default 512 MiB)
	RandomReads    int           // 4 KiB reads (default 4000)
	Clients        []int         // default 1, 2, 4, 8, 16, 32
	Admission      bool          // run the admission scenario (default in DefaultOptions)
	AdmissionWall  time.Duration // wall time of each admission run (default 4s)
	TimeScale      float64       // realtime clock scale of the admission runs (default 4)
	RegularWriters int           // admission scenario: regular writers of width 4 (default 4)
}

// DefaultOptions is what `zctl bench node` runs.
func DefaultOptions() Options {
	return Options{WriteBytes: 128 * mib, TCPBytes: 512 * mib, RandomReads: 4000, Clients: []int{1, 2, 4, 8, 16, 32},
		Admission: true, AdmissionWall: 4 * time.Second, TimeScale: 4, RegularWriters: 4}
}

// Result of the benchmark; JSON keys are stable.
type Result struct {
	TCPMiBPerSecond       float64            `json:"tcp_mib_per_second"`
	GRPCWriteMiBPerSecond float64            `json:"grpc_write_mib_per_second"`
	GRPCvsTCPRatio        float64            `json:"grpc_vs_tcp_ratio"`
	RandomReadIOPS        float64            `json:"random_read_4k_iops"`
	RandomReadP50Micros   float64            `json:"random_read_4k_p50_us"`
	RandomReadP99Micros   float64            `json:"random_read_4k_p99_us"`
	WriteMiBPerSecond     map[int]float64    `json:"write_mib_per_second_by_clients"`
	Admission             *AdmissionScenario `json:"admission,omitempty"`
	Notes                 []string           `json:"notes,omitempty"`
	Config                map[string]string  `json:"config"`
}

// AdmissionScenario is eZNS Fig. 29b scaled to one emulated drive: regular
// writers on width-4 zone groups issue 512 KiB every 5 ms (modelled time);
// one busy writer on a width-2 group writes 512 KiB back to back on dies it
// shares with a regular writer. Bandwidths are in modelled time.
type AdmissionScenario struct {
	Off               WriterBandwidth `json:"off"`
	On                WriterBandwidth `json:"on"`
	RegularWriterGain float64         `json:"regular_writer_gain"` // On.Regular / Off.Regular
	TimeScale         float64         `json:"time_scale"`
}

// WriterBandwidth is per-writer bandwidth in MiB/s of modelled time.
type WriterBandwidth struct {
	Regular     float64 `json:"regular_mib_per_second"` // mean over regular writers
	RegularMin  float64 `json:"regular_min_mib_per_second"`
	Busy        float64 `json:"busy_mib_per_second"`
	CacheStalls int64   `json:"cache_stalls"`
	Paced       uint64  `json:"admission_stalls"`
}

type bench struct {
	dir  string
	log  *slog.Logger
	node *node.Service
	dm   *daemon.Daemon
	stop context.CancelFunc
	done chan error
	devs []*zns.Device
}

func start(dir string, cfg flash.Config, clk clock.Clock, admission bool) (*bench, error) {
	b := &bench{dir: dir, log: slog.New(slog.NewTextHandler(io.Discard, nil)), done: make(chan error, 1)}
	d, err := zns.Create(filepath.Join(dir, "dev0.zns"), cfg, clk)
	if err != nil {
		return nil, err
	}
	b.devs = []*zns.Device{d}
	b.node, err = node.New(node.Config{ID: "bench", Standalone: true, Admission: node.AdmissionConfig{Enabled: admission}}, b.devs, nil, b.log)
	if err != nil {
		d.Close()
		return nil, err
	}
	b.dm, err = daemon.New(daemon.Config{Name: "ssdnode", GRPCListen: "127.0.0.1:0"}, b.log)
	if err != nil {
		b.close()
		return nil, err
	}
	v1.RegisterZonedDeviceServer(b.dm.GRPC, b.node)
	ctx, cancel := context.WithCancel(context.Background())
	b.stop = cancel
	go func() { b.done <- b.dm.Run(ctx) }()
	return b, nil
}

func (b *bench) close() {
	if b.stop != nil {
		b.stop()
		<-b.done
	}
	b.node.Close()
	for _, d := range b.devs {
		_ = d.Close()
		_ = os.Remove(filepath.Join(b.dir, "dev0.zns"))
		_ = os.Remove(filepath.Join(b.dir, "dev0.zns.journal"))
	}
}

func (b *bench) client() (v1.ZonedDeviceClient, func(), error) {
	conn, err := grpc.NewClient(b.dm.GRPCAddr(), append(rpcerr.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(daemon.MaxMessageBytes), grpc.MaxCallSendMsgSize(daemon.MaxMessageBytes)))...)
	if err != nil {
		return nil, nil, err
	}
	return v1.NewZonedDeviceClient(conn), func() { _ = conn.Close() }, nil
}

// throughputDrive: 16 chips, full-stripe 32 MiB zones, 32 zones, no limits.
func throughputDrive() flash.Config {
	c := flash.Defaults()
	c.BlocksPerChip, c.SpareBlocksPerChip = 36, 4
	c.MaxOpenZones, c.MaxActiveZones = 0, 0
	return c
}

// Run runs the benchmark.
func Run(ctx context.Context, o Options) (*Result, error) {
	def := DefaultOptions()
	if o.WriteBytes <= 0 {
		o.WriteBytes = def.WriteBytes
	}
	if o.TCPBytes <= 0 {
		o.TCPBytes = def.TCPBytes
	}
	if o.RandomReads <= 0 {
		o.RandomReads = def.RandomReads
	}
	if len(o.Clients) == 0 {
		o.Clients = def.Clients
	}
	if o.AdmissionWall <= 0 {
		o.AdmissionWall = def.AdmissionWall
	}
	if o.TimeScale <= 0 {
		o.TimeScale = def.TimeScale
	}
	if o.RegularWriters <= 0 {
		o.RegularWriters = def.RegularWriters
	}
	if o.RegularWriters > 4 {
		return nil, &zerr.InvalidArgumentError{Field: "regular writers", Reason: "at most 4 (16 dies / width 4)"}
	}
	for _, n := range o.Clients {
		if n < 1 || n > 32 {
			return nil, &zerr.InvalidArgumentError{Field: "clients", Reason: fmt.Sprintf("%d: want 1 to 32", n)}
		}
	}
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "zonefleet-nodebench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		o.Dir = dir
	}
	res := &Result{WriteMiBPerSecond: map[int]float64{}, Config: map[string]string{
		"write_bytes": fmt.Sprint(o.WriteBytes), "clock": "off (throughput), realtime (admission)",
		"drive": "16 chips MLC, D_zone 16, 32 MiB zones", "transport": "gRPC over loopback TCP, one connection per client",
	}}

	tcp, err := tcpBaseline(o.TCPBytes)
	if err != nil {
		return nil, fmt.Errorf("tcp baseline: %w", err)
	}
	res.TCPMiBPerSecond = tcp
	if err := throughput(ctx, o, res); err != nil {
		return nil, err
	}
	res.GRPCvsTCPRatio = res.GRPCWriteMiBPerSecond / res.TCPMiBPerSecond
	if o.Admission {
		adm, err := admission(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("admission scenario: %w", err)
		}
		res.Admission = adm
	}
	return res, nil
}

// tcpBaseline streams n bytes in 1 MiB writes over a loopback TCP connection.
func tcpBaseline(n int64) (float64, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- 0
			return
		}
		defer c.Close()
		k, _ := io.Copy(io.Discard, c)
		got <- k
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return 0, err
	}
	buf := make([]byte, mib)
	_, _ = rand.Read(buf)
	t0 := time.Now()
	for sent := int64(0); sent < n; sent += mib {
		if _, err := c.Write(buf); err != nil {
			c.Close()
			return 0, err
		}
	}
	c.Close()
	k := <-got
	if k != n {
		return 0, fmt.Errorf("tcp baseline received %d of %d bytes", k, n)
	}
	return float64(n) / mib / time.Since(t0).Seconds(), nil
}

func throughput(ctx context.Context, o Options, res *Result) error {
	b, err := start(o.Dir, throughputDrive(), clock.Off(), false)
	if err != nil {
		return err
	}
	defer b.close()
	c, closeC, err := b.client()
	if err != nil {
		return err
	}
	defer closeC()
	ctx = wire.WithNamespace(ctx, "bench")
	id, err := c.Identify(ctx, &v1.IdentifyRequest{})
	if err != nil {
		return err
	}
	zoneBytes := int64(id.GetZoneCapacity()) * int64(id.GetBlockSize())
	buf := make([]byte, mib)
	_, _ = rand.Read(buf)

	// One client, 1 MiB sequential unary writes across zones. Before each
	// measurement the page cache is flushed, so that the writeback of one
	// measurement does not slow the next.
	syscall.Sync()
	t0 := time.Now()
	written := int64(0)
	for written < o.WriteBytes {
		zone := written / zoneBytes
		off := written % zoneBytes
		lba := uint64(zone)*id.GetZoneSize() + uint64(off)/uint64(id.GetBlockSize())
		if _, err := c.Write(ctx, &v1.WriteRequest{Lba: lba, Data: buf}); err != nil {
			return fmt.Errorf("sequential write at LBA %d: %w", lba, err)
		}
		written += mib
	}
	res.GRPCWriteMiBPerSecond = float64(written) / mib / time.Since(t0).Seconds()

	// 4 KiB random reads of what was written, queue depth 1.
	maxLBA := uint64(written) / uint64(id.GetBlockSize())
	lats := make([]time.Duration, o.RandomReads)
	rng := mrand.New(mrand.NewPCG(1, 2))
	t0 = time.Now()
	for i := range lats {
		blk := rng.Uint64N(maxLBA)
		lba := (blk/id.GetZoneCapacity())*id.GetZoneSize() + blk%id.GetZoneCapacity()
		s := time.Now()
		if _, err := c.Read(ctx, &v1.ReadRequest{Lba: lba, Blocks: 1}); err != nil {
			return fmt.Errorf("random read at LBA %d: %w", lba, err)
		}
		lats[i] = time.Since(s)
	}
	res.RandomReadIOPS = float64(o.RandomReads) / time.Since(t0).Seconds()
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	res.RandomReadP50Micros = float64(lats[len(lats)/2].Microseconds())
	res.RandomReadP99Micros = float64(lats[len(lats)*99/100].Microseconds())

	// Concurrent clients, each on its own connection and zone.
	for _, n := range o.Clients {
		if _, err := c.ZoneManagement(ctx, &v1.ZoneManagementRequest{SelectAll: true, Action: v1.ZoneAction_ZONE_ACTION_RESET}); err != nil {
			return err
		}
		per := o.WriteBytes / int64(n) / mib * mib
		per = min(per, zoneBytes)
		if per < mib {
			per = mib
		}
		var wg sync.WaitGroup
		errs := make(chan error, n)
		syscall.Sync()
		t0 := time.Now()
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				cc, closeCC, err := b.client()
				if err != nil {
					errs <- err
					return
				}
				defer closeCC()
				base := uint64(i) * id.GetZoneSize()
				for off := int64(0); off < per; off += mib {
					if _, err := cc.Write(ctx, &v1.WriteRequest{Lba: base + uint64(off)/uint64(id.GetBlockSize()), Data: buf}); err != nil {
						errs <- err
						return
					}
				}
			}(i)
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return fmt.Errorf("%d clients: %w", n, err)
		}
		res.WriteMiBPerSecond[n] = float64(per*int64(n)) / mib / time.Since(t0).Seconds()
	}
	return nil
}

// admissionDrive: small-zone drive of eZNS — 16 single-die zones per die
// group (D_zone 1), 8 MiB zones, a 4 MiB shared write cache.
func admissionDrive() flash.Config {
	c := flash.Defaults()
	c.DZone, c.PagesPerBlock, c.BlocksPerChip, c.SpareBlocksPerChip = 1, 512, 12, 2
	c.MaxOpenZones, c.MaxActiveZones = 0, 0
	c.WriteCacheBytes = 4 * mib
	return c
}

func admission(ctx context.Context, o Options) (*AdmissionScenario, error) {
	out := &AdmissionScenario{TimeScale: o.TimeScale}
	for _, on := range []bool{false, true} {
		bw, err := admissionRun(ctx, o, on)
		if err != nil {
			return nil, err
		}
		if on {
			out.On = bw
		} else {
			out.Off = bw
		}
	}
	if out.Off.Regular > 0 {
		out.RegularWriterGain = out.On.Regular / out.Off.Regular
	}
	return out, nil
}

// writer is one v-zone-like writer: width zones on distinct dies; each 512
// KiB I/O is split into one write per zone, issued concurrently (the client
// library's coalesced stripes).
type writer struct {
	zones    []uint64 // current zone per lane
	lanes    []uint64 // die of each lane
	interval time.Duration
	bytes    int64
}

func admissionRun(ctx context.Context, o Options, on bool) (WriterBandwidth, error) {
	clk := clock.Realtime(o.TimeScale)
	b, err := start(o.Dir, admissionDrive(), clk, on)
	if err != nil {
		return WriterBandwidth{}, err
	}
	defer b.close()
	id := b.devs[0].Identify()
	dies := uint64(id.Chips)
	zonesPerDie := id.Zones / dies
	ctx = wire.WithNamespace(ctx, "bench")
	const ioBytes = 512 << 10

	var writers []*writer
	for r := 0; r < o.RegularWriters; r++ {
		w := &writer{interval: 5 * time.Millisecond}
		for k := 0; k < 4; k++ {
			w.lanes = append(w.lanes, uint64(4*r+k))
		}
		writers = append(writers, w)
	}
	busy := &writer{lanes: []uint64{0, 1}}
	writers = append(writers, busy)
	// Zone j of die d is zone index j*dies+d (zone z sits on die z % dies).
	// Each lane of each writer takes its own set of zone slots on its die.
	slot := map[uint64]uint64{}
	laneZones := map[*writer][][]uint64{}
	for _, w := range writers {
		for _, d := range w.lanes {
			var zs []uint64
			for k := uint64(0); k < zonesPerDie/2; k++ {
				zs = append(zs, (slot[d]+k)*dies+d)
			}
			slot[d] += zonesPerDie / 2
			laneZones[w] = append(laneZones[w], zs)
		}
	}

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, len(writers))
	var mu sync.Mutex
	for _, w := range writers {
		wg.Add(1)
		go func(w *writer) {
			defer wg.Done()
			c, closeC, err := b.client()
			if err != nil {
				errc <- err
				return
			}
			defer closeC()
			width := len(w.lanes)
			piece := make([]byte, ioBytes/width)
			wp := make([]uint64, width) // blocks written in the lane's current zone
			cur := make([]int, width)   // index into the lane's zone list
			next := clk.Now()
			for rctx.Err() == nil {
				var lwg sync.WaitGroup
				var failed error
				for l := 0; l < width; l++ {
					zone := laneZones[w][l][cur[l]]
					if wp[l]+uint64(len(piece)/4096) > id.ZoneCapacity {
						// Zone full: recycle it (reset is cheap; the erase is lazy) and move on.
						cur[l] = (cur[l] + 1) % len(laneZones[w][l])
						zone = laneZones[w][l][cur[l]]
						if _, err := c.ZoneManagement(rctx, &v1.ZoneManagementRequest{Zone: uint32(zone), Action: v1.ZoneAction_ZONE_ACTION_RESET}); err != nil && rctx.Err() == nil {
							failed = err
						}
						wp[l] = 0
					}
					lba := zone*id.ZoneSize + wp[l]
					lwg.Add(1)
					go func() {
						defer lwg.Done()
						if _, err := c.Write(rctx, &v1.WriteRequest{Lba: lba, Data: piece}); err != nil && rctx.Err() == nil {
							mu.Lock()
							failed = err
							mu.Unlock()
						}
					}()
					wp[l] += uint64(len(piece) / 4096)
				}
				lwg.Wait()
				if failed != nil {
					errc <- failed
					return
				}
				if rctx.Err() != nil {
					return
				}
				mu.Lock()
				w.bytes += ioBytes
				mu.Unlock()
				if w.interval > 0 {
					next += w.interval
					if err := clk.WaitUntil(rctx, next); err != nil {
						return
					}
				}
			}
		}(w)
	}
	t0 := clk.Now()
	select {
	case <-time.After(o.AdmissionWall):
	case <-ctx.Done():
	}
	mu.Lock()
	elapsed := (clk.Now() - t0).Seconds()
	snap := make([]int64, len(writers))
	for i, w := range writers {
		snap[i] = w.bytes
	}
	mu.Unlock()
	cancel()
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		return WriterBandwidth{}, err
	}
	var bw WriterBandwidth
	bw.RegularMin = -1
	for i := 0; i < o.RegularWriters; i++ {
		v := float64(snap[i]) / mib / elapsed
		bw.Regular += v / float64(o.RegularWriters)
		if bw.RegularMin < 0 || v < bw.RegularMin {
			bw.RegularMin = v
		}
	}
	bw.Busy = float64(snap[len(snap)-1]) / mib / elapsed
	lg := b.devs[0].Log()
	bw.CacheStalls = lg.CacheStalls
	bw.Paced, _ = b.node.AdmissionStalls()
	return bw, nil
}

// WriteTable prints the result for people.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "measure\tvalue\n")
	fmt.Fprintf(tw, "raw TCP loopback\t%.0f MiB/s\n", r.TCPMiBPerSecond)
	fmt.Fprintf(tw, "gRPC 1 MiB sequential writes (1 client)\t%.0f MiB/s\n", r.GRPCWriteMiBPerSecond)
	fmt.Fprintf(tw, "grpc_vs_tcp_ratio\t%.2f\n", r.GRPCvsTCPRatio)
	fmt.Fprintf(tw, "4 KiB random reads, QD1\t%.0f IOPS (p50 %.0f µs, p99 %.0f µs)\n", r.RandomReadIOPS, r.RandomReadP50Micros, r.RandomReadP99Micros)
	var ns []int
	for n := range r.WriteMiBPerSecond {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	for _, n := range ns {
		fmt.Fprintf(tw, "1 MiB writes, %d clients\t%.0f MiB/s\n", n, r.WriteMiBPerSecond[n])
	}
	if a := r.Admission; a != nil {
		fmt.Fprintf(tw, "\nadmission (eZNS Fig. 29b, time scale %.0f)\tregular writer MiB/s (min)\tbusy writer MiB/s\tcache stalls\tpaced writes\n", a.TimeScale)
		fmt.Fprintf(tw, "admission control off\t%.1f (%.1f)\t%.1f\t%d\t%d\n", a.Off.Regular, a.Off.RegularMin, a.Off.Busy, a.Off.CacheStalls, a.Off.Paced)
		fmt.Fprintf(tw, "admission control on\t%.1f (%.1f)\t%.1f\t%d\t%d\n", a.On.Regular, a.On.RegularMin, a.On.Busy, a.On.CacheStalls, a.On.Paced)
		fmt.Fprintf(tw, "regular_writer_gain\t%.2f\n", a.RegularWriterGain)
	}
	return tw.Flush()
}
