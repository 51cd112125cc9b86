// Package fsbench is `zctl bench fs`: the FUSE file system over an in-process
// local cluster, measured two ways.
//
//  1. Throughput: sequential and random 4 KiB writes and reads through the
//     ZoneFleet mount and, in the same run, through go-fuse's loopback file
//     system over a plain host directory; vs_fuse_loopback is the ratio. The
//     cluster runs with the drive clock off, so this measures the software
//     path (kernel FUSE, lfs, gRPC to the nodes, backing files), not the
//     modelled flash.
//  2. Recycling (ZNS+ Fig. 6-7, ZNS vs IZC): a fileserver-style workload
//     (files replaced whole, 16 KiB overwrites, stats; 4 threads) at 80 % and
//     90 % utilization on a small namespace, with host-copy and IZC segment
//     compaction (host copy also with P-GC, seeds/004, unless
//     Options.NoPGC; and IZC-H with Options.IZCH), the drives on the realtime clock so that flash time is
//     charged. It reports throughput, write amplification and the average
//     compaction time split into phases. lfs times a whole recycling run
//     (zonefleet_fs_gc_duration_seconds: victim move + the checkpoint that
//     ends it) but not its phases, so the phases come from timing the
//     Volume calls under lfs: "read" is Volume.Read (the workload does not
//     read, so these are the victims' reads of host copy), "device copy" is
//     Volume.Compact (zone_compaction, IZC only), and "write+checkpoint" is
//     the rest of the run (moved blocks written from the host, metadata).
//
// It measures this machine's software path (wall time); only the ratios to
// its same-run baselines carry over to another machine. The deterministic
// paper figures are pkg/bench/paper.
package fsbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/bench/benchstat"
	"github.com/zonefleet/zonefleet/pkg/bench/hostenv"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/fusefs"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// MaxExtraChurn bounds a recycling run with Options.UntilRecycled: at most
// this many file system capacities written past Churn.
const MaxExtraChurn = 4

// fileserverCacheBlocks is the page cache of the fileserver runs (lfs's
// default before it grew).
const fileserverCacheBlocks = 4096

// Options of the benchmark.
type Options struct {
	Dir         string  // cluster files, mount points, the loopback's directory (default: a temporary one)
	SeqMiB      int     // sequential file size (default SeqMiBDefault: twice lfs's page cache)
	RandOps     int     // random 4 KiB operations (default 8192)
	Utils       []int   // utilizations of the fileserver runs in percent (default 80, 90)
	Churn       float64 // bytes written per fileserver run / file system capacity (default 2)
	Threads     int     // fileserver threads (default 4)
	FileKiB     int     // fileserver file size (default 128)
	TimeScale   float64 // realtime clock scale of the fileserver cluster (default 1)
	SkipLoopRef bool    // skip the loopback reference (tests)
	IZCH        bool    // also run IZC-H (host-cached blocks written from the host)
	NoPGC       bool    // skip host copy with P-GC ("host_copy_pgc"; "host_copy" runs without it)
	IZCSync     bool    // also run IZC with synchronous compaction (fsvol.Options.SyncCompaction): "izc_sync"
	Runs        int     // repetitions of the throughput part; medians are reported (default 3)
	Parallel    int     // threads of the parallel scaling workloads, one file each (default 4)
	// ScalingThreads are the fileserver thread counts compared at ScalingUtil
	// (default 1 and 16; nil with NoThreadScaling).
	ScalingThreads  []int
	ScalingUtil     int  // utilization of the thread-scaling fileserver runs (default 80)
	NoThreadScaling bool // skip the thread-scaling fileserver runs
	NoDevvol        bool // skip the same throughput workloads over local drives (devvol, no network)
	NoRecycling     bool // skip the recycling (host copy vs IZC) fileserver runs
	// TinySegments runs the throughput part on the recycling part's cluster
	// geometry (512 KiB zones, 4 per v-zone: 2 MiB segments) instead of
	// `zctl local up`'s (4 MiB zones, 8 per v-zone: 32 MiB segments).
	TinySegments bool
	// TCP: the mount reaches the in-process nodes over TCP with TLS, as a
	// mount on another host does (localcluster.Config.TCPOnly), instead of
	// their unix sockets as `zctl local up`'s mount does.
	TCP bool

	// SeqTotalMiB is what one sequential point moves: the SeqMiB file is
	// written (created, written, fsynced) and read in passes until this much
	// went through (default SeqMiB: one pass). Points of a second or less
	// move ±30 % between invocations; `zctl bench fs` uses 1024.
	SeqTotalMiB int
	// UntilRecycled keeps each recycling run going past Churn until its
	// method recycled a segment and moved blocks (host copy through the host,
	// IZC on the drives), at most MaxExtraChurn capacities more: short test
	// configurations on a loaded machine may not reach a GC otherwise.
	UntilRecycled bool

	syncCompaction bool // this fileserver run's fsvol.Options.SyncCompaction
	pgc            bool // this host-copy run splits victim reads (lfs.Options.PGCWorkers 2)
}

// SeqMiBDefault is the default size of the sequential file: twice lfs's
// default page cache, so that, as with fio's file sizes, neither a re-read
// nor a random read is served from the mount's own cache by its size alone
// (the kernel's cache of the file is dropped before each read point).
const SeqMiBDefault = 2 * lfs.DefaultCacheBlocks * 4096 >> 20

// RandFsyncEvery is how many random writes the random write point makes
// per fsync (fio --fsync=32).
const RandFsyncEvery = 32

func (o *Options) defaults() {
	if o.SeqMiB <= 0 {
		o.SeqMiB = SeqMiBDefault
	}
	if o.SeqTotalMiB < o.SeqMiB {
		o.SeqTotalMiB = o.SeqMiB
	}
	if o.RandOps <= 0 {
		o.RandOps = 8192
	}
	if len(o.Utils) == 0 {
		o.Utils = []int{80, 90}
	}
	if o.Churn <= 0 {
		o.Churn = 2
	}
	if o.Threads <= 0 {
		o.Threads = 4
	}
	if o.FileKiB <= 0 {
		o.FileKiB = 128
	}
	if o.TimeScale <= 0 {
		o.TimeScale = 1
	}
	if o.Runs <= 0 {
		o.Runs = 3
	}
	if o.Parallel <= 0 {
		o.Parallel = 4
	}
	if len(o.ScalingThreads) == 0 && !o.NoThreadScaling {
		o.ScalingThreads = []int{1, 16}
	}
	if o.ScalingUtil <= 0 {
		o.ScalingUtil = 80
	}
}

// Throughput is one workload on both file systems.
type Throughput struct {
	Workload     string  `json:"workload"`
	ZoneFleet    float64 `json:"mount_mib_per_second"`
	Loopback     float64 `json:"loopback_mib_per_second"`
	VsLoopback   float64 `json:"vs_fuse_loopback"`
	Bytes        int64   `json:"bytes"`
	ZoneFleetSec float64 `json:"mount_seconds"`
	// CPU seconds of the whole process (the FUSE server, the file system,
	// the client, the in-process nodes and arbiter, and the kernel work of
	// their threads: getrusage) per GiB moved, for the mount and for the
	// loopback. Steadier than MiB/s on a shared machine, and what bounds
	// throughput once the cores are busy.
	CPUPerGiB         float64 `json:"mount_cpu_seconds_per_gib,omitempty"`
	LoopbackCPUPerGiB float64 `json:"loopback_cpu_seconds_per_gib,omitempty"`
	// CPUCeiling, on the parallel_*_scaling rows: the CPUs the process may
	// run on over the cores the one-thread phase kept busy (the whole
	// process: getrusage over wall time). A CPU-bound workload cannot scale
	// past it at any thread count; kernel threads (write-back) are not
	// counted, so it is an upper bound.
	CPUCeiling float64 `json:"cpu_ceiling,omitempty"`
}

// cpuPerGiB is cpu spread over bytes, in seconds per GiB.
func cpuPerGiB(cpu time.Duration, bytes int64) float64 {
	if bytes <= 0 {
		return 0
	}
	return cpu.Seconds() / (float64(bytes) / (1 << 30))
}

// Recycling is one fileserver run.
type Recycling struct {
	Method        string  `json:"method"`
	Util          int     `json:"utilization_percent"`
	Threads       int     `json:"threads,omitempty"`
	MiBPerSecond  float64 `json:"mib_per_second"`
	Ops           int64   `json:"ops"`
	WrittenMiB    float64 `json:"written_mib"`
	GCRuns        uint64  `json:"gc_runs"`
	AvgGCMs       float64 `json:"avg_compaction_ms"`
	AvgReadMs     float64 `json:"avg_read_ms"`
	AvgCopyMs     float64 `json:"avg_device_copy_ms"`
	AvgWriteCPMs  float64 `json:"avg_write_checkpoint_ms"`
	MovedHost     uint64  `json:"moved_host_blocks"`
	MovedIZC      uint64  `json:"moved_izc_blocks"`
	Copyback      uint64  `json:"copyback_blocks"`
	WAF           float64 `json:"waf"`
	CheckpointsMs float64 `json:"checkpoint_ms_total"`
	// Host copy's read phase as lfs times it (Stats.CompactionPhases.Read:
	// the wall time of reading a victim's valid blocks, however many reads
	// overlap; AvgReadMs sums the Volume.Read calls), the victim blocks it
	// read over that time, and the victims P-GC split.
	AvgReadPhaseMs float64 `json:"avg_read_phase_ms"`
	ReadPhaseMiBps float64 `json:"read_phase_mib_per_second"`
	PGCSplits      uint64  `json:"pgc_split_migrations"`
}

// PGCCompare is host copy with P-GC over host copy without it at one
// utilization: throughput, read-phase time per compaction and read-phase
// throughput (with / without; below 1 is faster for the time).
type PGCCompare struct {
	Throughput     float64 `json:"throughput"`
	ReadPhaseMs    float64 `json:"read_phase_ms"`
	ReadPhaseMiBps float64 `json:"read_phase_mib_per_second"`
}

// Result of Run.
type Result struct {
	// SegmentBytes is the file system's segment (v-zone) size in the
	// throughput part's cluster (Options.TinySegments).
	SegmentBytes   int64              `json:"throughput_segment_bytes"`
	Throughput     []Throughput       `json:"throughput"`
	VsFuseLoopback map[string]float64 `json:"vs_fuse_loopback"`
	Recycling      []Recycling        `json:"recycling"`
	IZCvsHostCopy  map[string]float64 `json:"izc_vs_host_copy_throughput"`
	// PGCvsHostCopy compares host copy with P-GC (2 workers) to host copy
	// without it, per utilization (util_80, ...).
	PGCvsHostCopy map[string]PGCCompare `json:"pgc_vs_host_copy,omitempty"`
	// ParallelReadScaling is the aggregate read throughput of Parallel
	// threads reading one file each over one thread reading one file on the
	// mount (median of Runs); ParallelWriteScaling the same for writes
	// (each file written and fsynced). LoopbackScaling holds the loopback's.
	ParallelReadScaling  float64            `json:"parallel_read_scaling"`
	ParallelWriteScaling float64            `json:"parallel_write_scaling"`
	LoopbackScaling      map[string]float64 `json:"loopback_scaling,omitempty"`
	// ParallelCPUCeiling is, per scaling point, the most the mount's ratio
	// can reach on this machine when CPU-bound: the CPUs over the cores its
	// one-thread phase kept busy (Throughput.CPUCeiling, median of Runs).
	// LoopbackScaling and DevvolScaling carry theirs as
	// <point>_cpu_ceiling.
	ParallelCPUCeiling map[string]float64 `json:"parallel_scaling_cpu_ceiling,omitempty"`
	// VolumeWriteScaling is parallel_write_scaling's workload on the
	// mount's volume alone, in the same run (see VolumeScaling): the
	// cluster's own scaling, which the file system's cannot exceed.
	VolumeWriteScaling *VolumeScaling `json:"volume_write_scaling,omitempty"`
	// Devvol is the same workloads on lfs over local drives (devvol, no
	// network, drive clock off) through the same FUSE binding, in the same
	// run: the file system's own cost. DevvolVsFuseLoopback its ratios.
	Devvol               []Throughput       `json:"devvol_throughput,omitempty"`
	DevvolVsFuseLoopback map[string]float64 `json:"devvol_vs_fuse_loopback,omitempty"`
	DevvolScaling        map[string]float64 `json:"devvol_scaling,omitempty"`
	// FileserverThreads are the fileserver runs at ScalingUtil with
	// ScalingThreads threads, each count's median of Runs runs;
	// FileserverThreadSamples every run's MiB/s by count ("threads_16").
	// FileserverThreadScaling is the median over the Runs rounds of the
	// last count's throughput over the first's (16 vs 1 threads by default).
	FileserverThreads       []Recycling          `json:"fileserver_threads,omitempty"`
	FileserverThreadSamples map[string][]float64 `json:"fileserver_threads_samples_mib_per_second,omitempty"`
	FileserverThreadScaling float64              `json:"fileserver_16_vs_1_threads,omitempty"`
	// GOMAXPROCS is the Go processors the run had (zctl bench fs raises it
	// as a mount's process does: fusefs.ServingProcs); CPUs the machine's.
	GOMAXPROCS int `json:"gomaxprocs"`
	// NodeTransport is how the mounts reach the nodes: "unix" (their unix
	// sockets, as `zctl local up`'s mount) or "tcp+tls" (Options.TCP).
	NodeTransport string `json:"node_transport"`
	// HostPageReporting is whether the machine hands freed pages back to
	// its host (see pkg/bench/hostenv), which can slow a sample 3-5x.
	HostPageReporting string   `json:"host_page_reporting"`
	CPUs              int      `json:"cpus"`
	Notes             []string `json:"notes"`
}

// Run runs both parts.
func Run(ctx context.Context, o Options) (*Result, error) {
	o.defaults()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("bench fs needs FUSE: %w", err)
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "zonefleet-bench-fs-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	res := &Result{VsFuseLoopback: map[string]float64{}, IZCvsHostCopy: map[string]float64{}, PGCvsHostCopy: map[string]PGCCompare{}}
	if err := throughput(ctx, o, dir, res); err != nil {
		return nil, fmt.Errorf("throughput: %w", err)
	}
	if !o.NoRecycling {
		if err := recycling(ctx, o, dir, res); err != nil {
			return nil, fmt.Errorf("recycling: %w", err)
		}
	}
	if len(o.ScalingThreads) > 1 {
		if err := threadScaling(ctx, o, dir, res); err != nil {
			return nil, fmt.Errorf("fileserver thread scaling: %w", err)
		}
	}
	byKey := map[string]float64{}
	runs := map[string]Recycling{}
	for _, r := range res.Recycling {
		byKey[fmt.Sprintf("%s/%d", r.Method, r.Util)] = r.MiBPerSecond
		runs[fmt.Sprintf("%s/%d", r.Method, r.Util)] = r
	}
	ratio := func(a, b float64) float64 {
		if b <= 0 {
			return 0
		}
		return a / b
	}
	for _, u := range o.Utils {
		if h := byKey[fmt.Sprintf("host_copy/%d", u)]; h > 0 {
			res.IZCvsHostCopy[fmt.Sprintf("util_%d", u)] = byKey[fmt.Sprintf("izc/%d", u)] / h
		}
		h, okh := runs[fmt.Sprintf("host_copy/%d", u)]
		p, okp := runs[fmt.Sprintf("host_copy_pgc/%d", u)]
		if okh && okp {
			res.PGCvsHostCopy[fmt.Sprintf("util_%d", u)] = PGCCompare{Throughput: ratio(p.MiBPerSecond, h.MiBPerSecond),
				ReadPhaseMs: ratio(p.AvgReadPhaseMs, h.AvgReadPhaseMs), ReadPhaseMiBps: ratio(p.ReadPhaseMiBps, h.ReadPhaseMiBps)}
		}
	}
	res.GOMAXPROCS, res.CPUs = runtime.GOMAXPROCS(0), runtime.NumCPU()
	res.HostPageReporting, _ = hostenv.Describe()
	res.NodeTransport = "unix"
	if o.TCP {
		res.NodeTransport = "tcp+tls"
	}
	res.Notes = append(res.Notes,
		fmt.Sprintf("throughput: medians of %d runs, the mounts alternating within each run; parallel_*_scaling: %d threads on one file each (%d MiB) over one thread on one file; fileserver_16_vs_1_threads: fileserver at %d %% with IZC, median of %d rounds' ratios", o.Runs, o.Parallel, max(1, o.SeqMiB/o.Parallel), o.ScalingUtil, o.Runs),
		fmt.Sprintf("throughput: sequential points are passes over a %d MiB file until %d MiB moved (each write pass creates, writes and fsyncs it; each read pass first drops the kernel's cache of it), random points %d operations", o.SeqMiB, max(1, (o.SeqTotalMiB+o.SeqMiB-1)/o.SeqMiB)*o.SeqMiB, o.RandOps),
		"throughput: drive clock off (software path); one thread; loopback = go-fuse fs.NewLoopbackRoot over a host directory, FUSE passthrough disabled; fio semantics: the sequential file is twice lfs's page cache unless --seq-mib says otherwise, before each read point the kernel's FUSE page cache of the file is dropped (fadvise DONTNEED, fio's invalidate) and so is lfs's clean page cache (zctl fs drop-caches), the host page cache under both sides (the loopback's backing file, the drives' backing files) is kept; random writes fsync every 32 (fio --fsync=32)",
		"recycling: drives on the realtime clock; phases from timing lfs's Volume calls; the read phase also as lfs times it (host copy's victim reads, overlapped under P-GC); host_copy without P-GC, host_copy_pgc with 2 workers")
	return res, nil
}

// cluster is an in-process cluster with one namespace.
type cluster struct {
	cl *localcluster.Cluster
	c  *client.Client
}

// geometry is a benchmark cluster's drives and v-zone width: together the
// file system's segment size.
type geometry struct {
	dev           flash.Config
	zonesPerVzone uint32
}

// Segment is the file system's segment (one v-zone) in bytes.
func (g geometry) Segment() int64 {
	fg := g.dev.Geometry()
	return int64(fg.ZoneCap) * int64(fg.BlockSize) * int64(g.zonesPerVzone)
}

var (
	// localUp is `zctl local up`'s geometry: 4 MiB zones, 8 per v-zone
	// (32 MiB segments). The throughput part runs on it: what a user's
	// mount writes through.
	localUp = geometry{localcluster.LocalDevice(), 8}
	// tiny is a small file system that fills fast (512 KiB zones, 4 per
	// v-zone: 2 MiB segments, 168 MiB of drives): the recycling part's, so
	// that a few hundred MiB of churn recycle many segments.
	tiny = geometry{localcluster.TinyDevice(), 4}
)

func startCluster(ctx context.Context, dir, clk string, scale float64, reg prometheus.Registerer, geo geometry, tcp bool) (*cluster, error) {
	// as ssdnode and `zctl local up` run (with tcp, the mount reaches the
	// nodes over TCP with TLS as a remote one does, not their unix sockets)
	cl, err := localcluster.Start(ctx, localcluster.Config{Dir: dir, Nodes: 3, Clock: clk, TimeScale: scale, Device: geo.dev, Admission: true, TCPOnly: tcp})
	if err != nil {
		return nil, err
	}
	admin, err := client.New(ctx, cl.AdminClientConfig())
	if err != nil {
		cl.Close()
		return nil, err
	}
	// 9 active v-zones: mkfs formats the six logs (hot/warm/cold × node/data)
	_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "bench", MaxActiveVzones: 9, ZonesPerVzone: geo.zonesPerVzone})
	admin.Close()
	if err != nil {
		cl.Close()
		return nil, err
	}
	ccfg := cl.ClientConfig("bench")
	ccfg.Registerer = reg
	c, err := client.New(ctx, ccfg)
	if err != nil {
		cl.Close()
		return nil, err
	}
	return &cluster{cl: cl, c: c}, nil
}

func (c *cluster) close() {
	c.c.Close()
	_ = c.cl.Close()
}

// timedVol times the Volume calls lfs makes.
type timedVol struct {
	lfs.Volume
	read, compact atomic.Int64
}

func (v *timedVol) Read(ctx context.Context, z lfs.ZoneID, off uint64, buf []byte) error {
	t0 := time.Now()
	err := v.Volume.Read(ctx, z, off, buf)
	v.read.Add(int64(time.Since(t0)))
	return err
}

// OpenZoneLike passes the copyback-aware layout hint through (lfs.LikeOpener),
// as a mount over fsvol has it: IZC's destinations sit on the victims' dies.
// ResetZones passes batched resets through (lfs.ZonesResetter).
func (v *timedVol) ResetZones(ctx context.Context, zs []lfs.ZoneID) []error {
	if zr, ok := v.Volume.(lfs.ZonesResetter); ok {
		return zr.ResetZones(ctx, zs)
	}
	errs := make([]error, len(zs))
	for i, z := range zs {
		errs[i] = v.Volume.Reset(ctx, z)
	}
	return errs
}

func (v *timedVol) OpenZoneLike(ctx context.Context, like lfs.ZoneID) (lfs.ZoneID, error) {
	if lo, ok := v.Volume.(lfs.LikeOpener); ok {
		return lo.OpenZoneLike(ctx, like)
	}
	return v.Volume.OpenZone(ctx)
}

func (v *timedVol) Compact(ctx context.Context, copies []lfs.Copy) (lfs.CompactStats, error) {
	t0 := time.Now()
	st, err := v.Volume.Compact(ctx, copies)
	v.compact.Add(int64(time.Since(t0)))
	return st, err
}

// mounted is lfs over the cluster mounted through fusefs.
type mounted struct {
	fs  *lfs.FS
	srv *fusefs.Server
	dir string
}

func mountLFS(ctx context.Context, vol lfs.Volume, dir string, opts lfs.Options) (*mounted, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	fs, err := lfs.Mount(ctx, vol, opts)
	if err != nil {
		return nil, err
	}
	srv, err := fusefs.Mount(fusefs.New(fs, fusefs.Config{}), dir, fusefs.MountOptions{Direct: os.Geteuid() == 0, FsName: "zonefleet:bench"})
	if err != nil {
		_ = fs.Unmount(ctx)
		return nil, err
	}
	return &mounted{fs: fs, srv: srv, dir: dir}, nil
}

// unmountGrace bounds how long unmount waits for the FUSE server to stop
// once a busy mount was aborted and detached.
var unmountGrace = 10 * time.Second

// ErrMountBusy is what unmount returns (wrapped) when a file of the mount
// was still open: the mount was aborted and detached, and the file system
// unmounted all the same.
var ErrMountBusy = errors.New("mount still in use")

// unmount ends the FUSE mount and unmounts the file system; it never waits
// for a file of the mount to be closed. A mount still busy (a file left
// open, typically by a workload that failed part-way: the handle may be the
// calling goroutine's own, closed only after unmount returns) is aborted
// (a forced unmount, as root: the kernel ends the FUSE connection, so the
// lingering handles fail with ENOTCONN instead of waiting on this process)
// and detached, and the file system is unmounted all the same; the result
// wraps ErrMountBusy. A lazy fusefs.Server.Unmount would wait for the last
// user instead: a benchmark that failed with its file open (ENOSPC on a
// small namespace) hung there, silently, because go test prints a
// benchmark's failure only when the benchmark ends and its -timeout does
// not cover benchmarks; and had unmount only detached, the process could
// not exit (closing that handle at exit flushes it to the FUSE server of
// the exiting process itself).
func (m *mounted) unmount(ctx context.Context) error {
	err := m.srv.Unmount(false)
	if err != nil {
		err = fmt.Errorf("unmount %s: %w (a file left open?): %w", m.dir, ErrMountBusy, err)
		if os.Geteuid() == 0 {
			_ = syscall.Unmount(m.dir, syscall.MNT_FORCE) // aborts the connection; EBUSY while the file is open
		}
		if lerr := fusefs.LazyUnmount(m.dir); lerr != nil {
			err = errors.Join(err, lerr)
		} else {
			t := time.NewTimer(unmountGrace)
			select {
			case <-m.srv.Done():
			case <-t.C:
				err = errors.Join(err, fmt.Errorf("FUSE server of %s still serving %v after the abort", m.dir, unmountGrace))
			case <-ctx.Done():
				err = errors.Join(err, ctx.Err())
			}
			t.Stop()
		}
	}
	if e := m.fs.Unmount(ctx); err == nil {
		err = e
	}
	return err
}

// target is one file system under test in the throughput part.
type target struct {
	name    string
	dir     string
	close   func() error
	drop    func(p string) error // empties every cache of the file at p above the drives (see dropper)
	results [][]Throughput       // per run
}

// dropper returns the cold-read preparation of a target: the kernel's page
// cache of the FUSE file at p (as fio's invalidate=1 does) and, on an lfs
// mount, lfs's own page cache (`zctl fs drop-caches`). The storage under
// each side keeps its host page cache: the loopback's backing file and the
// drives' backing files alike.
func dropper(fs *lfs.FS) func(p string) error {
	return func(p string) error {
		if err := dropCache(p); err != nil {
			return err
		}
		if fs != nil {
			fs.DropCleanCache()
		}
		return nil
	}
}

func throughput(ctx context.Context, o Options, dir string, res *Result) error {
	geo := localUp
	if o.TinySegments {
		geo = tiny
	}
	res.SegmentBytes = geo.Segment()
	cl, err := startCluster(ctx, filepath.Join(dir, "tp-cluster"), "off", 1, nil, geo, o.TCP)
	if err != nil {
		return err
	}
	defer cl.close()
	vol, err := fsvol.New(ctx, cl.c, fsvol.Options{})
	if err != nil {
		return err
	}
	// the volume alone first, with the parallel write point's workload
	// (it resets what it wrote; mkfs then starts on an empty volume)
	if res.VolumeWriteScaling, err = volumeScaling(ctx, vol, o); err != nil {
		return err
	}
	if err := lfs.Mkfs(ctx, vol, lfs.MkfsOptions{}); err != nil {
		return err
	}
	m, err := mountLFS(ctx, vol, filepath.Join(dir, "tp-mnt"), lfs.Options{Move: lfs.Compact})
	if err != nil {
		return err
	}
	targets := []*target{{name: "mount", dir: m.dir, close: func() error { return m.unmount(ctx) }, drop: dropper(m.fs)}}
	defer func() {
		for _, t := range targets {
			_ = t.close()
		}
	}()
	if !o.SkipLoopRef {
		t, err := loopbackTarget(dir)
		if err != nil {
			return fmt.Errorf("loopback: %w", err)
		}
		targets = append(targets, t)
	}
	if !o.NoDevvol {
		t, err := devvolTarget(ctx, dir, o)
		if err != nil {
			return fmt.Errorf("devvol: %w", err)
		}
		targets = append(targets, t)
	}
	for r := 0; r < o.Runs; r++ {
		for _, t := range targets {
			tp, err := workloads(ctx, t.dir, t.drop, o)
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			t.results = append(t.results, tp)
		}
	}
	med := func(t *target) []Throughput {
		var out []Throughput
		for i := range t.results[0] {
			var xs, secs, cpus, ceils []float64
			for _, run := range t.results {
				xs = append(xs, run[i].ZoneFleet)
				secs = append(secs, run[i].ZoneFleetSec)
				cpus = append(cpus, run[i].CPUPerGiB)
				ceils = append(ceils, run[i].CPUCeiling)
			}
			x := t.results[0][i]
			x.ZoneFleet, x.ZoneFleetSec, x.CPUPerGiB = benchstat.Median(xs), benchstat.Median(secs), benchstat.Median(cpus)
			x.CPUCeiling = benchstat.Median(ceils)
			out = append(out, x)
		}
		return out
	}
	byName := map[string][]Throughput{}
	for _, t := range targets {
		byName[t.name] = med(t)
	}
	ratios := func(name string) ([]Throughput, map[string]float64) {
		var out []Throughput
		rat := map[string]float64{}
		lb := byName["loopback"]
		for i, t := range byName[name] {
			if i < len(lb) && lb[i].ZoneFleet > 0 {
				t.Loopback, t.LoopbackCPUPerGiB = lb[i].ZoneFleet, lb[i].CPUPerGiB
				t.VsLoopback = t.ZoneFleet / t.Loopback
				rat[t.Workload] = t.VsLoopback
			}
			out = append(out, t)
		}
		return out, rat
	}
	scaling := func(name string) map[string]float64 {
		sc := map[string]float64{}
		for _, t := range byName[name] {
			switch t.Workload {
			case "parallel_read_scaling", "parallel_write_scaling":
				sc[t.Workload] = t.ZoneFleet
				if t.CPUCeiling > 0 {
					sc[t.Workload+"_cpu_ceiling"] = t.CPUCeiling
				}
			}
		}
		return sc
	}
	all, rat := ratios("mount")
	for _, t := range all {
		if strings.HasPrefix(t.Workload, "parallel_") {
			continue
		}
		res.Throughput = append(res.Throughput, t)
		if v, ok := rat[t.Workload]; ok {
			res.VsFuseLoopback[t.Workload] = v
		}
	}
	sc := scaling("mount")
	res.ParallelReadScaling, res.ParallelWriteScaling = sc["parallel_read_scaling"], sc["parallel_write_scaling"]
	res.ParallelCPUCeiling = map[string]float64{}
	for _, k := range []string{"parallel_read_scaling", "parallel_write_scaling"} {
		if v, ok := sc[k+"_cpu_ceiling"]; ok {
			res.ParallelCPUCeiling[k] = v
		}
	}
	if !o.SkipLoopRef {
		res.LoopbackScaling = scaling("loopback")
	}
	if !o.NoDevvol {
		dv, drat := ratios("devvol")
		for _, t := range dv {
			if !strings.HasPrefix(t.Workload, "parallel_") {
				res.Devvol = append(res.Devvol, t)
			}
		}
		res.DevvolVsFuseLoopback = map[string]float64{}
		for k, v := range drat {
			if !strings.HasPrefix(k, "parallel_") {
				res.DevvolVsFuseLoopback[k] = v
			}
		}
		res.DevvolScaling = scaling("devvol")
	}
	return nil
}

// loopbackTarget mounts go-fuse's loopback file system over a host directory.
func loopbackTarget(dir string) (*target, error) {
	back, mnt := filepath.Join(dir, "loop-back"), filepath.Join(dir, "loop-mnt")
	for _, d := range []string{back, mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	root, err := gofs.NewLoopbackRoot(back)
	if err != nil {
		return nil, err
	}
	srv, err := gofs.Mount(mnt, root, &gofs.Options{MountOptions: fuse.MountOptions{DirectMount: os.Geteuid() == 0, MaxWrite: 1 << 20, FsName: "loopback",
		MaxBackground: 64,
		// every byte through the FUSE daemon, as on the ZoneFleet mount: no kernel passthrough to the backing file
		DisabledCapabilities: fuse.CAP_PASSTHROUGH,
		// go-fuse logs every 1 MiB read whose splice does not fit the 1 MiB
		// pipe limit (it then copies, as the ZoneFleet mount always does)
		Logger: log.New(io.Discard, "", 0)}})
	if err != nil {
		return nil, err
	}
	// the same kernel read-ahead as the ZoneFleet mount
	_ = fusefs.SetReadAhead(mnt, 1024)
	return &target{name: "loopback", dir: mnt, close: srv.Unmount, drop: dropper(nil)}, nil
}

// devvolTarget mounts lfs over one local emulated drive (devvol, drive clock
// off) through the same FUSE binding: the file system without the network.
func devvolTarget(ctx context.Context, dir string, o Options) (*target, error) {
	zones := 2 * (o.SeqMiB*3/2 + 48) // 2 MiB zones: room for the big file, the parallel files and churn
	d, err := zns.Create(filepath.Join(dir, "devvol-dev0"), devvol.TestConfig(zones, 64), clock.Off())
	if err != nil {
		return nil, err
	}
	vol, err := devvol.New(d)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	if err := lfs.Mkfs(ctx, vol, lfs.MkfsOptions{}); err != nil {
		_ = d.Close()
		return nil, err
	}
	m, err := mountLFS(ctx, vol, filepath.Join(dir, "devvol-mnt"), lfs.Options{Move: lfs.Compact})
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	return &target{name: "devvol", dir: m.dir, close: func() error {
		err := m.unmount(ctx)
		if e := d.Close(); err == nil {
			err = e
		}
		return err
	}, drop: dropper(m.fs)}, nil
}

// workloads runs the four throughput workloads in dir (one thread).
func workloads(ctx context.Context, dir string, drop func(string) error, o Options) ([]Throughput, error) {
	const chunk = 1 << 20
	size := int64(o.SeqMiB) << 20
	buf := make([]byte, chunk)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	p := filepath.Join(dir, "bench.dat")
	var out []Throughput
	measure := func(name string, bytes int64, f func() error) error {
		t0, c0 := time.Now(), benchstat.ProcessCPU()
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		d := time.Since(t0).Seconds()
		out = append(out, Throughput{Workload: name, ZoneFleet: float64(bytes) / (1 << 20) / d, Bytes: bytes, ZoneFleetSec: d,
			CPUPerGiB: cpuPerGiB(benchstat.ProcessCPU()-c0, bytes)})
		return nil
	}
	// A sequential point is passes over the file until SeqTotalMiB moved;
	// only the passes are timed (not the cache drops between reads).
	passes := max(1, (o.SeqTotalMiB+o.SeqMiB-1)/o.SeqMiB)
	measurePasses := func(name string, before func() error, f func() error) error {
		var d, cpu time.Duration
		for i := 0; i < passes; i++ {
			if before != nil {
				if err := before(); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
			}
			t0, c0 := time.Now(), benchstat.ProcessCPU()
			if err := f(); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			d += time.Since(t0)
			cpu += benchstat.ProcessCPU() - c0
		}
		bytes := int64(passes) * size
		out = append(out, Throughput{Workload: name, ZoneFleet: float64(bytes) / (1 << 20) / d.Seconds(), Bytes: bytes, ZoneFleetSec: d.Seconds(),
			CPUPerGiB: cpuPerGiB(cpu, bytes)})
		return nil
	}
	if err := measurePasses("seq_write_1m", nil, func() error {
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		for off := int64(0); off < size; off += chunk {
			if err := ctx.Err(); err != nil {
				f.Close()
				return err
			}
			if _, err := f.Write(buf); err != nil {
				f.Close()
				return err
			}
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}); err != nil {
		return nil, err
	}
	if err := measurePasses("seq_read_1m", func() error { return drop(p) }, func() error {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			_, err := f.Read(buf)
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
		}
	}); err != nil {
		return nil, err
	}
	blocks := size / 4096
	rng := rand.New(rand.NewPCG(1, 2))
	small := buf[:4096]
	if err := measure("rand_write_4k", int64(o.RandOps)*4096, func() error {
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		for i := 0; i < o.RandOps && ctx.Err() == nil; i++ {
			if _, err := f.WriteAt(small, rng.Int64N(blocks)*4096); err != nil {
				f.Close()
				return err
			}
			if (i+1)%RandFsyncEvery == 0 {
				if err := f.Sync(); err != nil {
					f.Close()
					return err
				}
			}
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}); err != nil {
		return nil, err
	}
	if err := drop(p); err != nil {
		return nil, err
	}
	if err := measure("rand_read_4k", int64(o.RandOps)*4096, func() error {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		for i := 0; i < o.RandOps && ctx.Err() == nil; i++ {
			if _, err := f.ReadAt(small, rng.Int64N(blocks)*4096); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := os.Remove(p); err != nil {
		return nil, err
	}
	par, err := parallel(ctx, dir, drop, o)
	return append(out, par...), err
}

// parallel measures the aggregate throughput of o.Parallel threads on one
// file each against one thread on one file, for writes (each file written
// and fsynced) and reads (the kernel's cache of the file dropped first),
// each thread making as many passes over its file as the sequential points
// (SeqTotalMiB / SeqMiB; the drops are timed, cheap beside a pass).
// The results are the two ratios, as Throughput rows named
// parallel_write_scaling and parallel_read_scaling (MiB/s fields hold the
// ratio).
func parallel(ctx context.Context, dir string, drop func(string) error, o Options) ([]Throughput, error) {
	const chunk = 1 << 20
	size := int64(max(1, o.SeqMiB/o.Parallel)) << 20
	names := make([]string, o.Parallel)
	for i := range names {
		names[i] = filepath.Join(dir, fmt.Sprintf("par%d.dat", i))
	}
	write := func(p string) error {
		buf := make([]byte, chunk)
		for i := range buf {
			buf[i] = byte(i * 13)
		}
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		for off := int64(0); off < size && ctx.Err() == nil; off += chunk {
			if _, err := f.Write(buf); err != nil {
				f.Close()
				return err
			}
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	read := func(p string) error {
		buf := make([]byte, chunk)
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		for ctx.Err() == nil {
			_, err := f.Read(buf)
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
		}
		return ctx.Err()
	}
	// as many passes over each file as the sequential points make
	passes := max(1, (o.SeqTotalMiB+o.SeqMiB-1)/o.SeqMiB)
	run := func(n int, f func(string) error) (mibps, cores float64, err error) {
		errs := make([]error, n)
		var wg sync.WaitGroup
		c0, t0 := benchstat.ProcessCPU(), time.Now()
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				for k := 0; k < passes && errs[i] == nil; k++ {
					if _, err := os.Stat(names[i]); err == nil {
						// the kernel's cache of the file (a read pass reads from the file system)
						if errs[i] = drop(names[i]); errs[i] != nil {
							return
						}
					}
					errs[i] = f(names[i])
				}
			}(i)
		}
		wg.Wait()
		d, cpu := time.Since(t0).Seconds(), benchstat.ProcessCPU()-c0
		for _, err := range errs {
			if err != nil {
				return 0, 0, err
			}
		}
		return float64(n*passes) * float64(size) / (1 << 20) / d, cpu.Seconds() / d, nil
	}
	var out []Throughput
	for _, w := range []struct {
		name string
		f    func(string) error
	}{{"parallel_write_scaling", write}, {"parallel_read_scaling", read}} {
		one, cores, err := run(1, w.f)
		if err != nil {
			return nil, fmt.Errorf("%s (1 thread): %w", w.name, err)
		}
		if w.name == "parallel_write_scaling" {
			// all files exist before the timed parallel write (same work as the single one: rewrite)
			for _, p := range names[1:] {
				if err := write(p); err != nil {
					return nil, err
				}
			}
		}
		many, _, err := run(o.Parallel, w.f)
		if err != nil {
			return nil, fmt.Errorf("%s (%d threads): %w", w.name, o.Parallel, err)
		}
		t := Throughput{Workload: w.name, ZoneFleet: many / one, Bytes: size * int64(o.Parallel*passes)}
		if cores > 0 {
			t.CPUCeiling = float64(runtime.NumCPU()) / cores
		}
		out = append(out, t)
	}
	for _, p := range names {
		if err := os.Remove(p); err != nil {
			return nil, err
		}
	}
	return out, ctx.Err()
}

// dropCache drops the kernel's page cache of the FUSE file at p, so that
// reads reach the file system (the loopback's own host file system keeps its
// cache: that is part of what it is).
func dropCache(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

func recycling(ctx context.Context, o Options, dir string, res *Result) error {
	cl, err := startCluster(ctx, filepath.Join(dir, "gc-cluster"), "realtime", o.TimeScale, nil, tiny, o.TCP)
	if err != nil {
		return err
	}
	defer cl.close()
	type variant struct {
		move              lfs.MoveMethod
		cached, sync, pgc bool
	}
	variants := []variant{{lfs.HostCopy, false, false, false}}
	if !o.NoPGC {
		variants = append(variants, variant{lfs.HostCopy, false, false, true})
	}
	variants = append(variants, variant{lfs.Compact, false, false, false})
	if o.IZCH {
		variants = append(variants, variant{lfs.Compact, true, false, false})
	}
	if o.IZCSync {
		variants = append(variants, variant{lfs.Compact, false, true, false})
	}
	for _, u := range o.Utils {
		for _, v := range variants {
			oo := o
			oo.syncCompaction, oo.pgc = v.sync, v.pgc
			r, err := fileserver(ctx, oo, cl, filepath.Join(dir, "gc-mnt"), v.move, v.cached, u)
			if err != nil {
				return fmt.Errorf("%s at %d %%: %w", r.Method, u, err)
			}
			res.Recycling = append(res.Recycling, r)
		}
	}
	return nil
}

func histSum(reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetHistogram().GetSampleSum()
		}
	}
	return sum
}

// threadScaling runs the fileserver at o.ScalingUtil with each of
// o.ScalingThreads thread counts (IZC) on the realtime clock, o.Runs rounds
// of every count (each run on a freshly made file system), the order
// reversed every other round so that a slow spell of the machine or the
// cluster's growing state does not always land on the same count. Each
// count reports its median run; the scaling is the median of the rounds'
// ratios, each taken between runs that ran next to each other.
func threadScaling(ctx context.Context, o Options, dir string, res *Result) error {
	cl, err := startCluster(ctx, filepath.Join(dir, "ts-cluster"), "realtime", o.TimeScale, nil, tiny, o.TCP)
	if err != nil {
		return err
	}
	defer cl.close()
	runs := make([][]Recycling, len(o.ScalingThreads)) // [count][round]
	for r := 0; r < o.Runs; r++ {
		for k := range o.ScalingThreads {
			if r%2 == 1 {
				k = len(o.ScalingThreads) - 1 - k
			}
			n := o.ScalingThreads[k]
			oo := o
			oo.Threads = n
			x, err := fileserver(ctx, oo, cl, filepath.Join(dir, "ts-mnt"), lfs.Compact, false, o.ScalingUtil)
			if err != nil {
				return fmt.Errorf("%d threads: %w", n, err)
			}
			x.Threads = n
			runs[k] = append(runs[k], x)
		}
	}
	res.FileserverThreadSamples = map[string][]float64{}
	for k, n := range o.ScalingThreads {
		var mibs []float64
		for _, x := range runs[k] {
			mibs = append(mibs, x.MiBPerSecond)
		}
		res.FileserverThreadSamples[fmt.Sprintf("threads_%d", n)] = mibs
		res.FileserverThreads = append(res.FileserverThreads, medianRun(runs[k]))
	}
	var ratios []float64
	last := len(o.ScalingThreads) - 1
	for r := 0; r < o.Runs; r++ {
		if first := runs[0][r].MiBPerSecond; first > 0 {
			ratios = append(ratios, runs[last][r].MiBPerSecond/first)
		}
	}
	res.FileserverThreadScaling = benchstat.Median(ratios)
	return nil
}

// formatSamples: "12.0 15.2 13.9".
func formatSamples(xs []float64) string {
	var b strings.Builder
	for i, x := range xs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.1f", x)
	}
	return b.String()
}

// medianRun is the run of median throughput (the lower middle one of an
// even count), whole: its GC figures are those of the run it reports.
func medianRun(xs []Recycling) Recycling {
	s := append([]Recycling(nil), xs...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].MiBPerSecond < s[j].MiBPerSecond })
	return s[(len(s)-1)/2]
}

func fileserver(ctx context.Context, o Options, cl *cluster, mnt string, method lfs.MoveMethod, cached bool, util int) (Recycling, error) {
	r := Recycling{Method: method.String(), Util: util}
	if cached {
		r.Method = "izc_h"
	}
	if o.syncCompaction {
		r.Method = "izc_sync"
	}
	pgcWorkers := 1 // host_copy stays the baseline of the earlier runs: no P-GC
	if o.pgc {
		r.Method, pgcWorkers = "host_copy_pgc", lfs.DefaultPGCWorkers
	}
	fv, err := fsvol.New(ctx, cl.c, fsvol.Options{MaxZones: 40, SyncCompaction: o.syncCompaction})
	if err != nil {
		return r, err
	}
	if err := lfs.Mkfs(ctx, fv, lfs.MkfsOptions{Force: true, OPPercent: 10}); err != nil {
		return r, err
	}
	vol := &timedVol{Volume: fv}
	reg := prometheus.NewRegistry()
	clk := clock.Realtime(o.TimeScale)
	defer clk.Stop()
	// the page cache of the earlier measurements (lfs's default grew to
	// 256 MiB): host copy takes a victim's blocks cached on the host instead
	// of reading them, so a bigger cache would change what is compared
	m, err := mountLFS(ctx, vol, mnt, lfs.Options{Clock: clk, Registry: reg, Move: method, CachedWrite: cached, CacheBlocks: fileserverCacheBlocks, PGCWorkers: pgcWorkers})
	if err != nil {
		return r, err
	}
	defer func() { _ = m.unmount(ctx) }()

	// fill to the utilization with files of FileKiB
	fileSize := o.FileKiB << 10
	st := m.fs.Stats()
	target := st.UserBlocks * uint64(util) / 100
	var names []string
	content := func(rng *rand.Rand) []byte {
		b := make([]byte, fileSize)
		seed := rng.Uint64()
		for i := 0; i < len(b); i += 8 {
			v := seed + uint64(i)*0x9e3779b97f4a7c15
			for k := 0; k < 8 && i+k < len(b); k++ {
				b[i+k] = byte(v >> (8 * k))
			}
		}
		return b
	}
	rng := rand.New(rand.NewPCG(3, uint64(util)))
	for i := 0; m.fs.Stats().UsedBlocks+uint64(fileSize/4096) < target; i++ {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		d := filepath.Join(mnt, fmt.Sprintf("d%02d", i%16))
		if i < 16 {
			if err := os.Mkdir(d, 0o755); err != nil {
				return r, err
			}
		}
		name := filepath.Join(d, fmt.Sprintf("f%05d", i))
		if err := os.WriteFile(name, content(rng), 0o644); err != nil {
			return r, fmt.Errorf("fill to %d %%: %w", util, err)
		}
		names = append(names, name)
	}
	if err := m.fs.Sync(ctx); err != nil {
		return r, err
	}
	before := m.fs.Stats()
	gc0, cp0 := histSum(reg, "zonefleet_fs_gc_duration_seconds"), histSum(reg, "zonefleet_fs_checkpoint_duration_seconds")
	read0, copy0 := vol.read.Load(), vol.compact.Load()

	budget := int64(o.Churn * float64(st.UserBlocks*4096))
	extra := int64(MaxExtraChurn * st.UserBlocks * 4096)
	// recycled reports whether the run recycled a segment and moved blocks
	// the way of its method (UntilRecycled).
	recycled := func() bool {
		now := m.fs.Stats()
		if now.GCForeground+now.GCBackground == before.GCForeground+before.GCBackground {
			return false
		}
		if method == lfs.HostCopy {
			return now.MovedHostCopy+now.MovedHostDirty+now.MovedHostCached > before.MovedHostCopy+before.MovedHostDirty+before.MovedHostCached
		}
		return now.MovedIZC > before.MovedIZC
	}
	more := func(w int64) bool {
		if w < budget {
			return true
		}
		return o.UntilRecycled && w < budget+extra && !recycled()
	}
	var written, ops atomic.Int64
	var firstErr error
	var emu sync.Mutex
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := 0; w < o.Threads; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(util)))
			fail := func(err error) {
				emu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				emu.Unlock()
			}
			for more(written.Load()) && ctx.Err() == nil {
				i := w + o.Threads*rng.IntN(max(1, len(names)/o.Threads))
				if i >= len(names) {
					continue
				}
				name := names[i]
				switch k := rng.IntN(10); {
				case k < 6: // replace the file whole
					if err := os.Remove(name); err != nil {
						fail(err)
						return
					}
					if err := os.WriteFile(name, content(rng), 0o644); err != nil {
						fail(err)
						return
					}
					written.Add(int64(fileSize))
				case k < 9: // overwrite 16 KiB inside
					f, err := os.OpenFile(name, os.O_WRONLY, 0)
					if err != nil {
						fail(err)
						return
					}
					b := content(rng)[:16<<10]
					_, err = f.WriteAt(b, int64(rng.IntN(fileSize/(16<<10)))*(16<<10))
					f.Close()
					if err != nil {
						fail(err)
						return
					}
					written.Add(16 << 10)
				default:
					var s syscall.Stat_t
					if err := syscall.Stat(name, &s); err != nil {
						fail(err)
						return
					}
				}
				ops.Add(1)
			}
		}(w)
	}
	wg.Wait()
	if firstErr != nil {
		return r, firstErr
	}
	if err := ctx.Err(); err != nil {
		return r, err
	}
	if err := m.fs.Sync(ctx); err != nil {
		return r, err
	}
	wall := time.Since(t0).Seconds()
	after := m.fs.Stats()
	r.Ops = ops.Load()
	r.WrittenMiB = float64(written.Load()) / (1 << 20)
	r.MiBPerSecond = r.WrittenMiB / wall
	r.GCRuns = (after.GCForeground + after.GCBackground) - (before.GCForeground + before.GCBackground)
	gcSec := histSum(reg, "zonefleet_fs_gc_duration_seconds") - gc0
	r.CheckpointsMs = (histSum(reg, "zonefleet_fs_checkpoint_duration_seconds") - cp0) * 1e3
	readSec := float64(vol.read.Load()-read0) / 1e9
	copySec := float64(vol.compact.Load()-copy0) / 1e9
	if r.GCRuns > 0 {
		n := float64(r.GCRuns)
		r.AvgGCMs = gcSec * 1e3 / n
		r.AvgReadMs = readSec * 1e3 / n
		r.AvgCopyMs = copySec * 1e3 / n
		r.AvgWriteCPMs = max(0, gcSec-readSec-copySec) * 1e3 / n
	}
	r.MovedHost = (after.MovedHostCopy + after.MovedHostDirty + after.MovedHostCached) - (before.MovedHostCopy + before.MovedHostDirty + before.MovedHostCached)
	r.MovedIZC = after.MovedIZC - before.MovedIZC
	r.PGCSplits = after.PGCSplitMigrations - before.PGCSplitMigrations
	if n := after.CompactedSegments - before.CompactedSegments; n > 0 {
		ph := after.CompactionPhases.Read - before.CompactionPhases.Read
		r.AvgReadPhaseMs = float64(ph) / 1e6 / float64(n)
		if ph > 0 {
			r.ReadPhaseMiBps = float64((after.GCVictimBlocksRead-before.GCVictimBlocksRead)*4096) / (1 << 20) / ph.Seconds()
		}
	}
	r.Copyback = after.CompactCopyback - before.CompactCopyback
	if du := after.UserBlocksWritten - before.UserBlocksWritten; du > 0 {
		r.WAF = float64(after.DriveBlocksWritten-before.DriveBlocksWritten) / float64(du)
	}
	return r, nil
}

// WriteTable prints the result.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if r.SegmentBytes > 0 {
		fmt.Fprintf(tw, "throughput part: %d MiB segments\n", r.SegmentBytes>>20)
	}
	if r.GOMAXPROCS > 0 {
		fmt.Fprintf(tw, "GOMAXPROCS %d on %d CPUs\n", r.GOMAXPROCS, r.CPUs)
		if r.NodeTransport != "" {
			fmt.Fprintf(tw, "nodes reached over %s\n", r.NodeTransport)
		}
		if hostenv.ActiveDescription(r.HostPageReporting) {
			fmt.Fprintf(tw, "host free page reporting: %s\n", r.HostPageReporting)
		}
	}
	fmt.Fprintln(tw, "workload\tzonefleet MiB/s\tfuse loopback MiB/s\tvs_fuse_loopback\tcpu s/GiB zonefleet\tcpu s/GiB loopback")
	for _, t := range r.Throughput {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.2f\t%.2f\t%.2f\n", t.Workload, t.ZoneFleet, t.Loopback, t.VsLoopback, t.CPUPerGiB, t.LoopbackCPUPerGiB)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "fileserver\tutil\tMiB/s\tWAF\tgc runs\tavg compaction ms\tread ms\tread phase ms (MiB/s)\tdevice copy ms\twrite+checkpoint ms\tmoved host\tmoved IZC (copyback)")
	for _, x := range r.Recycling {
		fmt.Fprintf(tw, "%s\t%d %%\t%.1f\t%.3f\t%d\t%.1f\t%.1f\t%.1f (%.1f)\t%.1f\t%.1f\t%d\t%d (%d)\n", x.Method, x.Util, x.MiBPerSecond, x.WAF, x.GCRuns,
			x.AvgGCMs, x.AvgReadMs, x.AvgReadPhaseMs, x.ReadPhaseMiBps, x.AvgCopyMs, x.AvgWriteCPMs, x.MovedHost, x.MovedIZC, x.Copyback)
	}
	fmt.Fprintf(tw, "parallel_read_scaling\t%.2f\t(cpu ceiling %.2f)\n", r.ParallelReadScaling, r.ParallelCPUCeiling["parallel_read_scaling"])
	fmt.Fprintf(tw, "parallel_write_scaling\t%.2f\t(cpu ceiling %.2f)\n", r.ParallelWriteScaling, r.ParallelCPUCeiling["parallel_write_scaling"])
	if v := r.VolumeWriteScaling; v != nil {
		fmt.Fprintf(tw, "volume_write_scaling (the volume alone, %d streams)\t%.2f\t(cpu ceiling %.2f; %.0f vs %.0f MiB/s)\n", v.Streams, v.Scaling, v.CPUCeiling, v.ManyMiBPerSecond, v.OneMiBPerSecond)
	}
	for _, k := range []string{"parallel_read_scaling", "parallel_write_scaling"} {
		if v, ok := r.LoopbackScaling[k]; ok {
			fmt.Fprintf(tw, "loopback %s\t%.2f\t(cpu ceiling %.2f)\n", k, v, r.LoopbackScaling[k+"_cpu_ceiling"])
		}
		if v, ok := r.DevvolScaling[k]; ok {
			fmt.Fprintf(tw, "devvol %s\t%.2f\t(cpu ceiling %.2f)\n", k, v, r.DevvolScaling[k+"_cpu_ceiling"])
		}
	}
	for _, t := range r.Devvol {
		fmt.Fprintf(tw, "devvol %s\t%.1f\t%.1f\t%.2f\n", t.Workload, t.ZoneFleet, t.Loopback, t.VsLoopback)
	}
	for _, x := range r.FileserverThreads {
		fmt.Fprintf(tw, "fileserver %d threads at %d %% (median run)\t%.1f MiB/s\t(runs %s; %d gc runs, WAF %.3f)\n", x.Threads, x.Util, x.MiBPerSecond,
			formatSamples(r.FileserverThreadSamples[fmt.Sprintf("threads_%d", x.Threads)]), x.GCRuns, x.WAF)
	}
	if r.FileserverThreadScaling > 0 {
		fmt.Fprintf(tw, "fileserver_16_vs_1_threads\t%.2f\n", r.FileserverThreadScaling)
	}
	keys := make([]string, 0, len(r.IZCvsHostCopy))
	for k := range r.IZCvsHostCopy {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(tw, "izc_vs_host_copy[%s]\t%.2f\n", k, r.IZCvsHostCopy[k])
	}
	keys = keys[:0]
	for k := range r.PGCvsHostCopy {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c := r.PGCvsHostCopy[k]
		fmt.Fprintf(tw, "pgc_vs_host_copy[%s]\tthroughput %.2f, read phase ms %.2f, read phase MiB/s %.2f\n", k, c.Throughput, c.ReadPhaseMs, c.ReadPhaseMiBps)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "* %s\n", n)
	}
	return nil
}
