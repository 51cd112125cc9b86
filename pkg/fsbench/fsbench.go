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
//     compaction (and IZC-H with Options.IZCH), the drives on the realtime clock so that flash time is
//     charged. It reports throughput, write amplification and the average
//     compaction time split into phases. lfs times a whole recycling run
//     (zonefleet_fs_gc_duration_seconds: victim move + the checkpoint that
//     ends it) but not its phases, so the phases come from timing the
//     Volume calls under lfs: "read" is Volume.Read (the workload does not
//     read, so these are the victims' reads of host copy), "device copy" is
//     Volume.Compact (zone_compaction, IZC only), and "write+checkpoint" is
//     the rest of the run (moved blocks written from the host, metadata).
package fsbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
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
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/fusefs"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// Options of the benchmark.
type Options struct {
	Dir         string  // cluster files, mount points, the loopback's directory (default: a temporary one)
	SeqMiB      int     // sequential file size (default 64)
	RandOps     int     // random 4 KiB operations (default 8192)
	Utils       []int   // utilizations of the fileserver runs in percent (default 80, 90)
	Churn       float64 // bytes written per fileserver run / file system capacity (default 2)
	Threads     int     // fileserver threads (default 4)
	FileKiB     int     // fileserver file size (default 128)
	TimeScale   float64 // realtime clock scale of the fileserver cluster (default 1)
	SkipLoopRef bool    // skip the loopback reference (tests)
	IZCH        bool    // also run IZC-H (host-cached blocks written from the host)
}

func (o *Options) defaults() {
	if o.SeqMiB <= 0 {
		o.SeqMiB = 64
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
}

// Throughput is one workload on both file systems.
type Throughput struct {
	Workload     string  `json:"workload"`
	ZoneFleet    float64 `json:"mount_mib_per_second"`
	Loopback     float64 `json:"loopback_mib_per_second"`
	VsLoopback   float64 `json:"vs_fuse_loopback"`
	Bytes        int64   `json:"bytes"`
	ZoneFleetSec float64 `json:"mount_seconds"`
}

// Recycling is one fileserver run.
type Recycling struct {
	Method        string  `json:"method"`
	Util          int     `json:"utilization_percent"`
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
}

// Result of Run.
type Result struct {
	Throughput     []Throughput       `json:"throughput"`
	VsFuseLoopback map[string]float64 `json:"vs_fuse_loopback"`
	Recycling      []Recycling        `json:"recycling"`
	IZCvsHostCopy  map[string]float64 `json:"izc_vs_host_copy_throughput"`
	Notes          []string           `json:"notes"`
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
	res := &Result{VsFuseLoopback: map[string]float64{}, IZCvsHostCopy: map[string]float64{}}
	if err := throughput(ctx, o, dir, res); err != nil {
		return nil, fmt.Errorf("throughput: %w", err)
	}
	if err := recycling(ctx, o, dir, res); err != nil {
		return nil, fmt.Errorf("recycling: %w", err)
	}
	byKey := map[string]float64{}
	for _, r := range res.Recycling {
		byKey[fmt.Sprintf("%s/%d", r.Method, r.Util)] = r.MiBPerSecond
	}
	for _, u := range o.Utils {
		if h := byKey[fmt.Sprintf("host_copy/%d", u)]; h > 0 {
			res.IZCvsHostCopy[fmt.Sprintf("util_%d", u)] = byKey[fmt.Sprintf("izc/%d", u)] / h
		}
	}
	res.Notes = append(res.Notes,
		"throughput: drive clock off (software path); one thread; loopback = go-fuse fs.NewLoopbackRoot over a host directory, FUSE passthrough disabled; the kernel's FUSE page cache of the file is dropped (fadvise DONTNEED) before each read workload, the host file system under the loopback keeps its own",
		"recycling: drives on the realtime clock; phases from timing lfs's Volume calls (lfs does not time GC phases itself)")
	return res, nil
}

// cluster is an in-process cluster with one namespace.
type cluster struct {
	cl *localcluster.Cluster
	c  *client.Client
}

func startCluster(ctx context.Context, dir, clk string, scale float64, reg prometheus.Registerer) (*cluster, error) {
	cl, err := localcluster.Start(ctx, localcluster.Config{Dir: dir, Nodes: 3, Clock: clk, TimeScale: scale, Device: localcluster.TinyDevice(), AdminToken: "bench"})
	if err != nil {
		return nil, err
	}
	admin, err := client.New(ctx, client.Config{Arbiters: cl.ArbiterAddrs(), Token: "bench"})
	if err != nil {
		cl.Close()
		return nil, err
	}
	_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "bench", MaxActiveVzones: 8, ZonesPerVzone: 4})
	admin.Close()
	if err != nil {
		cl.Close()
		return nil, err
	}
	c, err := client.New(ctx, client.Config{Arbiters: cl.ArbiterAddrs(), Namespace: "bench", Registerer: reg})
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

func (m *mounted) unmount(ctx context.Context) error {
	err := m.srv.Unmount(true)
	if e := m.fs.Unmount(ctx); err == nil {
		err = e
	}
	return err
}

func throughput(ctx context.Context, o Options, dir string, res *Result) error {
	cl, err := startCluster(ctx, filepath.Join(dir, "tp-cluster"), "off", 1, nil)
	if err != nil {
		return err
	}
	defer cl.close()
	vol, err := fsvol.New(ctx, cl.c, fsvol.Options{})
	if err != nil {
		return err
	}
	if err := lfs.Mkfs(ctx, vol, lfs.MkfsOptions{}); err != nil {
		return err
	}
	m, err := mountLFS(ctx, vol, filepath.Join(dir, "tp-mnt"), lfs.Options{Move: lfs.Compact})
	if err != nil {
		return err
	}
	zf, err := workloads(ctx, m.dir, o)
	if e := m.unmount(ctx); err == nil {
		err = e
	}
	if err != nil {
		return err
	}
	var lb []Throughput
	if !o.SkipLoopRef {
		lb, err = loopback(ctx, dir, o)
		if err != nil {
			return fmt.Errorf("loopback: %w", err)
		}
	}
	for i, t := range zf {
		if i < len(lb) && lb[i].ZoneFleet > 0 {
			t.Loopback = lb[i].ZoneFleet
			t.VsLoopback = t.ZoneFleet / t.Loopback
			res.VsFuseLoopback[t.Workload] = t.VsLoopback
		}
		res.Throughput = append(res.Throughput, t)
	}
	return nil
}

func loopback(ctx context.Context, dir string, o Options) ([]Throughput, error) {
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
		// every byte through the FUSE daemon, as on the ZoneFleet mount: no kernel passthrough to the backing file
		DisabledCapabilities: fuse.CAP_PASSTHROUGH}})
	if err != nil {
		return nil, err
	}
	out, err := workloads(ctx, mnt, o)
	if e := srv.Unmount(); err == nil {
		err = e
	}
	return out, err
}

// workloads runs the four throughput workloads in dir (one thread).
func workloads(ctx context.Context, dir string, o Options) ([]Throughput, error) {
	const chunk = 1 << 20
	size := int64(o.SeqMiB) << 20
	buf := make([]byte, chunk)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	p := filepath.Join(dir, "bench.dat")
	var out []Throughput
	measure := func(name string, bytes int64, f func() error) error {
		t0 := time.Now()
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		d := time.Since(t0).Seconds()
		out = append(out, Throughput{Workload: name, ZoneFleet: float64(bytes) / (1 << 20) / d, Bytes: bytes, ZoneFleetSec: d})
		return nil
	}
	if err := measure("seq_write_1m", size, func() error {
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
	if err := dropCache(p); err != nil {
		return nil, err
	}
	if err := measure("seq_read_1m", size, func() error {
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
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}); err != nil {
		return nil, err
	}
	if err := dropCache(p); err != nil {
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
	return out, os.Remove(p)
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
	cl, err := startCluster(ctx, filepath.Join(dir, "gc-cluster"), "realtime", o.TimeScale, nil)
	if err != nil {
		return err
	}
	defer cl.close()
	type variant struct {
		move   lfs.MoveMethod
		cached bool
	}
	variants := []variant{{lfs.HostCopy, false}, {lfs.Compact, false}}
	if o.IZCH {
		variants = append(variants, variant{lfs.Compact, true})
	}
	for _, u := range o.Utils {
		for _, v := range variants {
			r, err := fileserver(ctx, o, cl, filepath.Join(dir, "gc-mnt"), v.move, v.cached, u)
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

func fileserver(ctx context.Context, o Options, cl *cluster, mnt string, method lfs.MoveMethod, cached bool, util int) (Recycling, error) {
	r := Recycling{Method: method.String(), Util: util}
	if cached {
		r.Method = "izc_h"
	}
	fv, err := fsvol.New(ctx, cl.c, fsvol.Options{MaxZones: 40})
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
	m, err := mountLFS(ctx, vol, mnt, lfs.Options{Clock: clk, Registry: reg, Move: method, CachedWrite: cached})
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
			for written.Load() < budget && ctx.Err() == nil {
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
	r.Copyback = after.CompactCopyback - before.CompactCopyback
	if du := after.UserBlocksWritten - before.UserBlocksWritten; du > 0 {
		r.WAF = float64(after.DriveBlocksWritten-before.DriveBlocksWritten) / float64(du)
	}
	return r, nil
}

// WriteTable prints the result.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "workload\tzonefleet MiB/s\tfuse loopback MiB/s\tvs_fuse_loopback")
	for _, t := range r.Throughput {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.2f\n", t.Workload, t.ZoneFleet, t.Loopback, t.VsLoopback)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "fileserver\tutil\tMiB/s\tWAF\tgc runs\tavg compaction ms\tread ms\tdevice copy ms\twrite+checkpoint ms\tmoved host\tmoved IZC (copyback)")
	for _, x := range r.Recycling {
		fmt.Fprintf(tw, "%s\t%d %%\t%.1f\t%.3f\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%d (%d)\n", x.Method, x.Util, x.MiBPerSecond, x.WAF, x.GCRuns,
			x.AvgGCMs, x.AvgReadMs, x.AvgCopyMs, x.AvgWriteCPMs, x.MovedHost, x.MovedIZC, x.Copyback)
	}
	keys := make([]string, 0, len(r.IZCvsHostCopy))
	for k := range r.IZCvsHostCopy {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(tw, "izc_vs_host_copy[%s]\t%.2f\n", k, r.IZCvsHostCopy[k])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "* %s\n", n)
	}
	return nil
}
