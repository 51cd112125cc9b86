// Package nodebench measures an ssdnode's data path (`zctl bench node`).
//
// Throughput points write Options.WriteBytes (default 1 GiB) of 1 MiB
// messages into 32 MiB zones of a 16-chip drive with the clock off, so the
// drive costs what its backing-file writes cost. Every point runs Runs
// times (default 3) and reports the median; the runs are interleaved (each
// round runs every point once, after an untimed 64 MiB warm-up of each
// point and then a full-size write of each drive), so that the shared machine's
// slow spells do not all land on one point; all connections are dialed and
// ready before any timing; the page cache is synced and then the zones
// reset before every run (in that order: see grpcPoint). In the same run it measures two baselines with the same
// bytes and message size over loopback TCP: a receiver that discards them,
// and a receiver that writes them to an identical drive (pkg/zns, the same
// backing-file writes the node makes). The gRPC figure is one client with
// one WriteStream per zone and the bulk codec (wire.Codec); unary writes at
// one and four in flight and the stream with the standard protobuf codec
// are reported beside it. Client scaling runs 1..32 clients, each on its own
// connection and zones, and reports the aggregate at 8 clients over 1.
//
// It also measures 4 KiB random reads at queue depth 1, the write
// admission scenario of eZNS Fig. 29b on the realtime clock, and 4 KiB
// writes from 1..32 clients into one node with the write cache as one
// shared pool and as a multi-queue cache (SmallWrites): efficiency against
// the same run's CPU ceiling and lock wait on the write path per GiB,
// from the runtime's mutex profile.
//
// Profile: go test -run '^$' -bench BenchmarkDataPath -cpuprofile cpu.out ./pkg/node/
// (see pkg/node's data path benchmarks), or run `zctl bench node` under
// perf / pprof.
//
// Like every bench under pkg/bench except paper, it measures this machine's
// software path (wall time); only the ratios to its same-run baselines carry
// over to another machine.
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
	"runtime"
	"sort"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/bench/benchstat"
	"github.com/zonefleet/zonefleet/pkg/bench/hostenv"
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
	WriteBytes     int64         // bytes per throughput point (default 1 GiB; rounded down to MiB)
	Runs           int           // runs per throughput point, median reported (default 3)
	RandomReads    int           // 4 KiB reads (default 4000)
	Clients        []int         // default 1, 2, 4, 8, 16, 32 (1 and 8 are always measured)
	Admission      bool          // run the admission scenario (default in DefaultOptions)
	AdmissionWall  time.Duration // wall time of each admission run (default 4s)
	TimeScale      float64       // realtime clock scale of the admission runs (default 4)
	RegularWriters int           // admission scenario: regular writers of width 4 (default 4)
	// WritebackKickBytes is the drives' write-back kick (ssdnode
	// --writeback-kick-bytes; zns.WithWritebackKick): 0 = off (unlike the
	// other fields, zero is not "default"); DefaultOptions has ssdnode's
	// default. With it the drives start the write-back of what they write
	// every that many bytes, as ssdnode does, so on a host disk slower than
	// the stream the throughput points measure the disk as much as the data
	// path; with 0 the kernel's own write-back thresholds decide.
	WritebackKickBytes int64
	// SmallWrites runs the many-client 4 KiB write scaling (SmallWrites)
	// after the rest: DefaultSmallWriteOptions with this Dir, Clients and
	// Runs, and at most WriteBytes per point.
	SmallWrites bool
}

// DefaultOptions is what `zctl bench node` runs.
func DefaultOptions() Options {
	return Options{WriteBytes: 1 << 30, Runs: 3, RandomReads: 4000, Clients: []int{1, 2, 4, 8, 16, 32},
		Admission: true, AdmissionWall: 4 * time.Second, TimeScale: 4, RegularWriters: 4, WritebackKickBytes: zns.DefaultWritebackKick,
		SmallWrites: true}
}

// Result of the benchmark; JSON keys are stable. Throughputs are medians in MiB/s.
type Result struct {
	TCPDiscardMiBPerSecond float64 `json:"tcp_discard_mib_per_second"`
	TCPFileMiBPerSecond    float64 `json:"tcp_file_mib_per_second"`
	GRPCWriteMiBPerSecond  float64 `json:"grpc_write_mib_per_second"` // one client, WriteStream, bulk codec
	GRPCvsTCPFileRatio     float64 `json:"grpc_vs_tcp_file_ratio"`
	GRPCvsTCPDiscardRatio  float64 `json:"grpc_vs_tcp_discard_ratio"`
	// TCPFilevsDiscardRatio is tcp_file over tcp_discard: the ceiling of
	// grpc_vs_tcp_discard_ratio for anything that writes the bytes into the
	// drive, as the node does (the discarding receiver writes nothing).
	TCPFilevsDiscardRatio   float64 `json:"tcp_file_vs_tcp_discard_ratio"`
	GRPCStandardCodecStream float64 `json:"grpc_standard_codec_stream_mib_per_second"`
	GRPCUnaryQD1            float64 `json:"grpc_unary_qd1_mib_per_second"`
	GRPCUnaryQD4            float64 `json:"grpc_unary_qd4_mib_per_second"` // four unary writes in flight on one connection
	RandomReadIOPS          float64 `json:"random_read_4k_iops"`
	RandomReadP50Micros     float64 `json:"random_read_4k_p50_us"`
	RandomReadP99Micros     float64 `json:"random_read_4k_p99_us"`
	// Aggregate write throughput by number of clients (one connection and
	// one WriteStream at a time each).
	WriteMiBPerSecond map[int]float64 `json:"write_mib_per_second_by_clients"`
	ClientScaling     float64         `json:"client_scaling_8_vs_1"`
	// The raw baseline of client scaling: eight TCP connections, each
	// received into its own zones of the drive (tcp_file's receiver, eight
	// at once), over one (TCPFileMiBPerSecond). What this host allows eight
	// streams into one drive, whatever the protocol: ClientScaling is
	// judged against it (ClientScalingVsTCP = ClientScaling /
	// TCPFileScaling).
	TCPFile8MiBPerSecond float64 `json:"tcp_file_8_streams_mib_per_second"`
	TCPFileScaling       float64 `json:"tcp_file_scaling_8_vs_1"`
	ClientScalingVsTCP   float64 `json:"client_scaling_vs_tcp_file_scaling"`
	// ClientScalingCPUCeiling is the most ClientScaling can reach once the
	// machine's cores are busy: the CPUs over the cores the one-client point
	// kept busy (client, transport and in-process node; median of the runs).
	ClientScalingCPUCeiling float64 `json:"client_scaling_cpu_ceiling"`
	// WritebackKicks is how many write-backs the throughput part's drives
	// started (Options.WritebackKickBytes; 0 when off).
	WritebackKicks uint64 `json:"drive_writeback_kicks"`
	// Every run of every point, in MiB/s, to judge the noise.
	Samples   map[string][]float64 `json:"samples_mib_per_second"`
	Admission *AdmissionScenario   `json:"admission,omitempty"`
	// SmallWrites: 4 KiB writes from 1..32 clients, efficiency against
	// the CPU ceiling and lock wait per GiB (Options.SmallWrites).
	SmallWrites *SmallWriteResult `json:"small_writes,omitempty"`
	Notes       []string          `json:"notes,omitempty"`
	Config      map[string]string `json:"config"`
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

func start(dir string, cfg flash.Config, clk clock.Clock, admission bool, kick int64) (*bench, error) {
	b := &bench{dir: dir, log: slog.New(slog.NewTextHandler(io.Discard, nil)), done: make(chan error, 1)}
	d, err := zns.Create(filepath.Join(dir, "dev0.zns"), cfg, clk, zns.WithWritebackKick(kick))
	if err != nil {
		return nil, err
	}
	b.devs = []*zns.Device{d}
	b.node, err = node.New(node.Config{ID: "bench", Standalone: true, Admission: node.AdmissionConfig{Enabled: admission}}, b.devs, nil, b.log)
	if err != nil {
		d.Close()
		return nil, err
	}
	b.dm, err = daemon.New(daemon.Config{Name: "ssdnode", GRPCListen: "127.0.0.1:0"}, b.log, wire.ServerOptions()...)
	if err != nil {
		b.close()
		return nil, err
	}
	node.RegisterGRPC(b.dm.GRPC, b.node)
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
		removeDrive(d.Path())
	}
}

func removeDrive(path string) {
	_ = os.Remove(path)
	_ = os.Remove(path + ".journal")
}

// client dials a connection and waits until it is ready (an Identify call).
// standard: the standard protobuf codec instead of the bulk codec.
func (b *bench) client(ctx context.Context, standard bool) (v1.ZonedDeviceClient, func(), error) {
	call := []grpc.CallOption{grpc.MaxCallRecvMsgSize(wire.MaxMessageBytes), grpc.MaxCallSendMsgSize(wire.MaxMessageBytes)}
	if !standard {
		call = append(call, wire.CallOptions()...)
	}
	conn, err := grpc.NewClient(b.dm.GRPCAddr(), append(append(rpcerr.DialOptions(), wire.TransportDialOptions(false)...), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(call...))...)
	if err != nil {
		return nil, nil, err
	}
	c := v1.NewZonedDeviceClient(conn)
	if _, err := c.Identify(ctx, &v1.IdentifyRequest{}); err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	return c, func() { _ = conn.Close() }, nil
}

const zoneBytes = 32 * mib

// throughputDrive: 16 chips, full-stripe 32 MiB zones, enough zones for
// bytes written by up to clients writers (each rounds up to whole zones),
// no open/active limits.
func throughputDrive(bytes int64, clients int) flash.Config {
	c := flash.Defaults()
	zones := int((bytes+zoneBytes-1)/zoneBytes) + clients + 1
	c.BlocksPerChip, c.SpareBlocksPerChip = zones+4, 4
	c.MaxOpenZones, c.MaxActiveZones = 0, 0
	return c
}

// plan: which zones writer i of n uses, and how many bytes it writes.
func plan(total int64, i, n int) (zones []uint64, bytes int64) {
	bytes = total / int64(n) / mib * mib
	bytes = max(bytes, mib)
	for k := int64(0); k*zoneBytes < bytes; k++ {
		zones = append(zones, uint64(i)+uint64(k)*uint64(n))
	}
	return zones, bytes
}

// zoneWriter writes bytes of payload into one zone, starting at its first LBA.
type zoneWriter func(ctx context.Context, zoneLBA uint64, bytes int64) error

// runWriters times n writers, each writing its share of total through its
// zones, and returns the aggregate MiB/s; with cores != nil it appends the
// cores the process kept busy meanwhile (getrusage over wall time: client
// and in-process node together).
func runWriters(ctx context.Context, writers []zoneWriter, total int64, zoneSize uint64, cores *[]float64) (float64, error) {
	n := len(writers)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	var sum int64
	for i := range writers {
		_, b := plan(total, i, n)
		sum += b
	}
	t0, c0 := time.Now(), benchstat.ProcessCPU()
	for i, w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			zones, bytes := plan(total, i, n)
			for _, z := range zones {
				k := min(bytes, zoneBytes)
				if err := w(ctx, z*zoneSize, k); err != nil {
					errs <- fmt.Errorf("writer %d zone %d: %w", i, z, err)
					return
				}
				bytes -= k
			}
		}()
	}
	wg.Wait()
	el, cpu := time.Since(t0), benchstat.ProcessCPU()-c0
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	if cores != nil {
		*cores = append(*cores, cpu.Seconds()/el.Seconds())
	}
	return float64(sum) / mib / el.Seconds(), nil
}

// Run runs the benchmark.
func Run(ctx context.Context, o Options) (*Result, error) {
	def := DefaultOptions()
	if o.WriteBytes <= 0 {
		o.WriteBytes = def.WriteBytes
	}
	o.WriteBytes = max(o.WriteBytes/mib*mib, mib)
	if o.Runs <= 0 {
		o.Runs = def.Runs
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
	if o.WritebackKickBytes < 0 {
		return nil, &zerr.InvalidArgumentError{Field: "writeback-kick-bytes", Reason: fmt.Sprintf("%d: want 0 (off) or a positive number of bytes", o.WritebackKickBytes)}
	}
	if o.RegularWriters > 4 {
		return nil, &zerr.InvalidArgumentError{Field: "regular writers", Reason: "at most 4 (16 dies / width 4)"}
	}
	for _, n := range o.Clients {
		if n < 1 || n > 32 {
			return nil, &zerr.InvalidArgumentError{Field: "clients", Reason: fmt.Sprintf("%d: want 1 to 32", n)}
		}
	}
	clients := map[int]bool{1: true, 8: true}
	for _, n := range o.Clients {
		clients[n] = true
	}
	o.Clients = o.Clients[:0:0]
	for n := range clients {
		o.Clients = append(o.Clients, n)
	}
	sort.Ints(o.Clients)
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "zonefleet-nodebench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		o.Dir = dir
	}
	res := &Result{WriteMiBPerSecond: map[int]float64{}, Samples: map[string][]float64{}, Config: map[string]string{
		"write_bytes": fmt.Sprint(o.WriteBytes), "runs": fmt.Sprint(o.Runs), "message_bytes": fmt.Sprint(mib),
		"clock": "off (throughput), realtime (admission)", "drive": "16 chips MLC, D_zone 16, 32 MiB zones",
		"transport":            "loopback TCP; gRPC: one connection per client, dialed before timing",
		"writeback_kick_bytes": fmt.Sprint(o.WritebackKickBytes),
	}}
	res.Config["host_page_reporting"], _ = hostenv.Describe()
	payload := make([]byte, mib)
	_, _ = rand.Read(payload)

	if err := throughput(ctx, o, res, payload); err != nil {
		return nil, err
	}
	res.GRPCvsTCPFileRatio = res.GRPCWriteMiBPerSecond / res.TCPFileMiBPerSecond
	res.GRPCvsTCPDiscardRatio = res.GRPCWriteMiBPerSecond / res.TCPDiscardMiBPerSecond
	res.TCPFilevsDiscardRatio = res.TCPFileMiBPerSecond / res.TCPDiscardMiBPerSecond
	if one := res.WriteMiBPerSecond[1]; one > 0 {
		res.ClientScaling = res.WriteMiBPerSecond[8] / one
	}
	if res.TCPFileMiBPerSecond > 0 {
		res.TCPFileScaling = res.TCPFile8MiBPerSecond / res.TCPFileMiBPerSecond
	}
	if res.TCPFileScaling > 0 {
		res.ClientScalingVsTCP = res.ClientScaling / res.TCPFileScaling
	}
	if o.Admission {
		adm, err := admission(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("admission scenario: %w", err)
		}
		res.Admission = adm
	}
	if o.SmallWrites {
		so := DefaultSmallWriteOptions()
		so.Dir, so.Clients, so.Runs = o.Dir, o.Clients, o.Runs
		so.Writes = int(min(int64(so.Writes), max(o.WriteBytes/4096, 64)))
		sw, err := SmallWrites(ctx, so)
		if err != nil {
			return nil, fmt.Errorf("small writes: %w", err)
		}
		res.SmallWrites = sw
	}
	return res, nil
}

// tcpRun measures the raw TCP baseline once: n connections (dialed and
// accepted before timing), 1 MiB writes each; the receivers discard the
// bytes (dev nil) or write them, 1 MiB at a time, through the same zone plan
// as n gRPC clients into dev, a drive identical to the node's.
func tcpRun(ctx context.Context, total int64, payload []byte, dev *zns.Device, n int) (float64, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	conns := make([]net.Conn, 0, 2*n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	senders, receivers := make([]net.Conn, n), make([]net.Conn, n)
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			return 0, err
		}
		conns = append(conns, c)
		sc, err := l.Accept()
		if err != nil {
			return 0, err
		}
		conns = append(conns, sc)
		senders[i], receivers[i] = c, sc
	}
	var sum int64
	for i := 0; i < n; i++ {
		_, b := plan(total, i, n)
		sum += b
	}
	receive := func(i int, sc net.Conn) error {
		zones, bytes := plan(total, i, n)
		if dev == nil {
			// reads of up to 1 MiB, as tcp_file's receiver makes (io.Copy
			// into io.Discard would read 8 KiB at a time: its ReadFrom)
			k, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, io.LimitReader(sc, bytes), make([]byte, mib))
			if err == nil && k != bytes {
				err = fmt.Errorf("received %d of %d bytes", k, bytes)
			}
			return err
		}
		zs := uint64(dev.Identify().ZoneSize)
		buf := make([]byte, mib)
		left := bytes
		for _, z := range zones {
			for off := int64(0); off < zoneBytes && left > 0; off += mib {
				if _, err := io.ReadFull(sc, buf); err != nil {
					return err
				}
				if _, err := dev.Write(ctx, z*zs+uint64(off)/4096, buf, zns.Flags{}); err != nil {
					return err
				}
				left -= mib
			}
		}
		return nil
	}
	got := make(chan error, 2*n)
	t0 := time.Now()
	for i := 0; i < n; i++ {
		go func() { got <- receive(i, receivers[i]) }()
		go func() {
			_, bytes := plan(total, i, n)
			for sent := int64(0); sent < bytes; sent += mib {
				if _, err := senders[i].Write(payload); err != nil {
					got <- err
					return
				}
			}
			got <- nil
		}()
	}
	var first error
	for i := 0; i < 2*n; i++ {
		if err := <-got; err != nil && first == nil {
			first = err
			for _, c := range conns { // unblock the others
				_ = c.Close()
			}
		}
	}
	if first != nil {
		return 0, first
	}
	return float64(sum) / mib / time.Since(t0).Seconds(), nil
}

// streamWriter writes a zone with one WriteStream of 1 MiB messages.
func streamWriter(c v1.ZonedDeviceClient, payload []byte) zoneWriter {
	return func(ctx context.Context, lba uint64, bytes int64) error {
		ws, err := c.WriteStream(ctx)
		if err != nil {
			return err
		}
		for off := int64(0); off < bytes; off += mib {
			req := &v1.WriteRequest{Data: payload}
			if off == 0 {
				req.Lba, req.TotalBlocks = lba, uint32(bytes/4096)
			}
			if err := ws.Send(req); err != nil {
				_, err = ws.CloseAndRecv() // the server's error
				return err
			}
		}
		_, err = ws.CloseAndRecv()
		return err
	}
}

// unaryWriter writes a zone with 1 MiB unary writes, one at a time.
func unaryWriter(c v1.ZonedDeviceClient, payload []byte) zoneWriter {
	return func(ctx context.Context, lba uint64, bytes int64) error {
		for off := int64(0); off < bytes; off += mib {
			if _, err := c.Write(ctx, &v1.WriteRequest{Lba: lba + uint64(off)/4096, Data: payload}); err != nil {
				return err
			}
		}
		return nil
	}
}

const warmupBytes = 64 * mib

// measure is one throughput point: run runs it once (timed), warm runs it
// untimed on a small size first.
type measure struct {
	name string
	run  func(bytes int64) (float64, error)
	out  *float64
}

// throughput runs every point Runs times in interleaved rounds (round r runs
// each point once), so that the machine's slow spells spread over all points
// instead of biasing one, and records each point's median.
func throughput(ctx context.Context, o Options, res *Result, payload []byte) error {
	maxClients := o.Clients[len(o.Clients)-1]
	b, err := start(o.Dir, throughputDrive(o.WriteBytes, maxClients), clock.Off(), false, o.WritebackKickBytes)
	if err != nil {
		return err
	}
	defer b.close()
	tdev, err := zns.Create(filepath.Join(o.Dir, "tcp.zns"), throughputDrive(o.WriteBytes, 8), clock.Off(), zns.WithWritebackKick(o.WritebackKickBytes))
	if err != nil {
		return err
	}
	defer func() {
		_ = tdev.Close()
		removeDrive(tdev.Path())
	}()
	ctx = wire.WithNamespace(ctx, "bench")
	var closers []func()
	defer func() {
		for _, f := range closers {
			f()
		}
	}()
	dial := func(standard bool) (v1.ZonedDeviceClient, error) {
		c, closeC, err := b.client(ctx, standard)
		if err != nil {
			return nil, err
		}
		closers = append(closers, closeC)
		return c, nil
	}
	c, err := dial(false)
	if err != nil {
		return err
	}
	std, err := dial(true)
	if err != nil {
		return err
	}
	// Every client connection is dialed (and ready) before any timing.
	var pool []v1.ZonedDeviceClient
	for len(pool) < maxClients {
		cc, err := dial(false)
		if err != nil {
			return err
		}
		pool = append(pool, cc)
	}
	id, err := c.Identify(ctx, &v1.IdentifyRequest{})
	if err != nil {
		return err
	}
	zs := id.GetZoneSize()

	// grpcPoint syncs the page cache (so that one run's writeback does not
	// slow the next), resets the node's zones and times the writers. The
	// drive zeroes a flash block group (FALLOC_FL_ZERO_RANGE, which frees
	// its page cache) when a zone's first write allocates one, so the timed
	// writes take the freed pages straight back; on a VM with free page
	// reporting (hostenv), pages freed at the reset instead had gone back
	// to the host by then and cost several times the copy: 11-17 of 39
	// samples ran 300-800 MiB/s (tcp_file's as well as grpc's) before the
	// drive moved the zeroing (docs/benchmarks.md, "Virtual machines: free page reporting").
	grpcPointCores := func(cores *[]float64, writers ...zoneWriter) func(int64) (float64, error) {
		return func(bytes int64) (float64, error) {
			syscall.Sync()
			if _, err := c.ZoneManagement(ctx, &v1.ZoneManagementRequest{SelectAll: true, Action: v1.ZoneAction_ZONE_ACTION_RESET}); err != nil {
				return 0, err
			}
			return runWriters(ctx, writers, bytes, zs, cores)
		}
	}
	grpcPoint := func(writers ...zoneWriter) func(int64) (float64, error) { return grpcPointCores(nil, writers...) }
	tcpFile := func(n int) func(int64) (float64, error) {
		return func(bytes int64) (float64, error) {
			syscall.Sync()
			if _, err := tdev.ZoneMgmt(ctx, 0, zns.ActionReset, true); err != nil {
				return 0, err
			}
			return tcpRun(ctx, bytes, payload, tdev, n)
		}
	}
	points := []measure{
		{"tcp_discard", func(bytes int64) (float64, error) {
			syscall.Sync()
			return tcpRun(ctx, bytes, payload, nil, 1)
		}, &res.TCPDiscardMiBPerSecond},
		{"tcp_file", tcpFile(1), &res.TCPFileMiBPerSecond},
		{"tcp_file_8_streams", tcpFile(8), &res.TCPFile8MiBPerSecond},
		{"grpc_stream", grpcPoint(streamWriter(c, payload)), &res.GRPCWriteMiBPerSecond},
		{"grpc_stream_standard_codec", grpcPoint(streamWriter(std, payload)), &res.GRPCStandardCodecStream},
		{"grpc_unary_qd1", grpcPoint(unaryWriter(c, payload)), &res.GRPCUnaryQD1},
		{"grpc_unary_qd4", grpcPoint(unaryWriter(c, payload), unaryWriter(c, payload), unaryWriter(c, payload), unaryWriter(c, payload)), &res.GRPCUnaryQD4},
	}
	// Client scaling: each client its own connection and zones, one
	// WriteStream at a time.
	scaling := map[int]*float64{}
	var oneCores []float64 // the cores the 1-client point kept busy in its timed runs
	timedRuns := false
	for _, n := range o.Clients {
		ws := make([]zoneWriter, n)
		for i := range ws {
			ws[i] = streamWriter(pool[i], payload)
		}
		scaling[n] = new(float64)
		run := grpcPoint(ws...)
		if n == 1 {
			timed := grpcPointCores(&oneCores, ws...)
			run = func(bytes int64) (float64, error) {
				if timedRuns {
					return timed(bytes)
				}
				return grpcPoint(ws...)(bytes) // the warm-up: not counted
			}
		}
		points = append(points, measure{fmt.Sprintf("clients_%d", n), run, scaling[n]})
	}
	// An untimed warm-up: each point on a small size (connections,
	// flow-control windows, buffer pools), then each drive written once at
	// full size, last, so that the first timed run of each drive finds as
	// much of its backing file's page cache to free at its reset as it will
	// write (see grpcPoint: on a VM that hands freed memory back to its
	// host, pages not just freed cost several times the copy; the first
	// timed gRPC run, whose reset freed only a 64 MiB warm-up's pages, ran
	// 450-520 MiB/s against 1300-1850).
	for _, p := range points {
		if _, err := p.run(min(o.WriteBytes, warmupBytes)); err != nil {
			return fmt.Errorf("%s warm-up: %w", p.name, err)
		}
	}
	if _, err := tcpFile(1)(o.WriteBytes); err != nil {
		return fmt.Errorf("tcp_file drive warm-up: %w", err)
	}
	if _, err := grpcPoint(streamWriter(c, payload))(o.WriteBytes); err != nil {
		return fmt.Errorf("node drive warm-up: %w", err)
	}
	timedRuns = true
	for r := 0; r < o.Runs; r++ {
		for _, p := range points {
			v, err := p.run(o.WriteBytes)
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			res.Samples[p.name] = append(res.Samples[p.name], v)
		}
	}
	for _, p := range points {
		*p.out = benchstat.Median(res.Samples[p.name])
	}
	for n, v := range scaling {
		res.WriteMiBPerSecond[n] = *v
	}
	if c := benchstat.Median(oneCores); c > 0 {
		res.ClientScalingCPUCeiling = float64(runtime.NumCPU()) / c
	}

	// 4 KiB random reads of what the last point wrote (client 0's zones),
	// queue depth 1.
	rzones, rbytes := plan(o.WriteBytes, 0, maxClients)
	written := func(k int) uint64 { return uint64(min(rbytes-int64(k)*zoneBytes, zoneBytes)) / 4096 }
	lats := make([]time.Duration, o.RandomReads)
	rng := mrand.New(mrand.NewPCG(1, 2))
	t0 := time.Now()
	for i := range lats {
		k := rng.IntN(len(rzones))
		lba := rzones[k]*zs + rng.Uint64N(written(k))
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
	res.WritebackKicks = b.devs[0].Log().WritebackKicks + tdev.Log().WritebackKicks
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
	b, err := start(o.Dir, admissionDrive(), clk, on, o.WritebackKickBytes)
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
			c, closeC, err := b.client(rctx, false)
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
	if pr := r.Config["host_page_reporting"]; hostenv.ActiveDescription(pr) {
		fmt.Fprintf(tw, "host free page reporting: %s\n\n", pr)
	}
	fmt.Fprintf(tw, "measure (1 MiB messages, median; drives' write-back kick %s bytes)\tvalue\n", r.Config["writeback_kick_bytes"])
	fmt.Fprintf(tw, "raw TCP, receiver discards\t%.0f MiB/s\n", r.TCPDiscardMiBPerSecond)
	fmt.Fprintf(tw, "raw TCP, receiver writes the drive\t%.0f MiB/s\n", r.TCPFileMiBPerSecond)
	fmt.Fprintf(tw, "gRPC WriteStream, bulk codec (1 client)\t%.0f MiB/s\n", r.GRPCWriteMiBPerSecond)
	fmt.Fprintf(tw, "grpc_vs_tcp_file_ratio\t%.2f\n", r.GRPCvsTCPFileRatio)
	fmt.Fprintf(tw, "grpc_vs_tcp_discard_ratio\t%.2f\n", r.GRPCvsTCPDiscardRatio)
	fmt.Fprintf(tw, "tcp_file_vs_tcp_discard_ratio (its ceiling)\t%.2f\n", r.TCPFilevsDiscardRatio)
	fmt.Fprintf(tw, "gRPC WriteStream, standard protobuf codec\t%.0f MiB/s\n", r.GRPCStandardCodecStream)
	fmt.Fprintf(tw, "gRPC unary writes, 1 in flight\t%.0f MiB/s\n", r.GRPCUnaryQD1)
	fmt.Fprintf(tw, "gRPC unary writes, 4 in flight\t%.0f MiB/s\n", r.GRPCUnaryQD4)
	fmt.Fprintf(tw, "4 KiB random reads, QD1\t%.0f IOPS (p50 %.0f µs, p99 %.0f µs)\n", r.RandomReadIOPS, r.RandomReadP50Micros, r.RandomReadP99Micros)
	var ns []int
	for n := range r.WriteMiBPerSecond {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	for _, n := range ns {
		fmt.Fprintf(tw, "WriteStream, %d clients (aggregate)\t%.0f MiB/s\n", n, r.WriteMiBPerSecond[n])
	}
	fmt.Fprintf(tw, "client_scaling_8_vs_1\t%.2f\t(cpu ceiling %.2f)\n", r.ClientScaling, r.ClientScalingCPUCeiling)
	fmt.Fprintf(tw, "raw TCP, 8 streams into the drive\t%.0f MiB/s\n", r.TCPFile8MiBPerSecond)
	fmt.Fprintf(tw, "tcp_file_scaling_8_vs_1\t%.2f\n", r.TCPFileScaling)
	fmt.Fprintf(tw, "client_scaling_vs_tcp_file_scaling\t%.2f\n", r.ClientScalingVsTCP)
	if a := r.Admission; a != nil {
		fmt.Fprintf(tw, "\nadmission (eZNS Fig. 29b, time scale %.0f)\tregular writer MiB/s (min)\tbusy writer MiB/s\tcache stalls\tpaced writes\n", a.TimeScale)
		fmt.Fprintf(tw, "admission control off\t%.1f (%.1f)\t%.1f\t%d\t%d\n", a.Off.Regular, a.Off.RegularMin, a.Off.Busy, a.Off.CacheStalls, a.Off.Paced)
		fmt.Fprintf(tw, "admission control on\t%.1f (%.1f)\t%.1f\t%d\t%d\n", a.On.Regular, a.On.RegularMin, a.On.Busy, a.On.CacheStalls, a.On.Paced)
		fmt.Fprintf(tw, "regular_writer_gain\t%.2f\n", a.RegularWriterGain)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.SmallWrites != nil {
		fmt.Fprintln(w)
		r.SmallWrites.WriteTable(w)
	}
	return nil
}
