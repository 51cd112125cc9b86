package zctl

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	fsbench "github.com/zonefleet/zonefleet/pkg/bench/fs"
	"github.com/zonefleet/zonefleet/pkg/buildinfo"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/fusefs"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// nsFlag adds --ns, the file-system commands' spelling of -n/--namespace.
func nsFlag(c *cobra.Command, ns *string) {
	c.Flags().StringVar(ns, "ns", "", "namespace holding the file system (same as -n/--namespace)")
}

func (g *Globals) useNS(ns string) {
	if ns != "" {
		g.Namespace = ns
	}
}

// fsClient connects to the namespace with the client's metrics in reg (nil: none).
func (g *Globals) fsClient(ctx context.Context, reg prometheus.Registerer) (*client.Client, error) {
	if err := g.resolved0(); err != nil {
		return nil, err
	}
	if g.Namespace == "" {
		return nil, usageErr(errors.New("no namespace: give --ns, --namespace (-n) or ZONEFLEET_NAMESPACE"))
	}
	if g.newClient != nil {
		return g.newClient(ctx, reg)
	}
	cfg, err := g.clientConfig(g.Namespace)
	if err != nil {
		return nil, err
	}
	cfg.RetryDeadline, cfg.Registerer = 15*time.Second, reg
	return client.New(ctx, cfg)
}

func mkfsCmd(g *Globals) *cobra.Command {
	var (
		ns                     string
		op, segVZones, maxZone int
		force                  bool
		rootPct                float64
	)
	c := &cobra.Command{
		Use:   "mkfs",
		Short: "format a namespace with the log-structured file system",
		Long: `Formats the namespace's v-zones with the log-structured file system: a
superblock and an empty root directory in a metadata v-zone. A namespace that holds
a file system (or any data) is refused unless --force, which resets every v-zone.

Segments are v-zones: --segment-vzones is fixed to 1 (lfs maps one segment to one
v-zone; a v-zone's size is the namespace's --zones-per-vzone times the drives' zone).

--reserved-root-percent keeps a share of the space from everyone but root (ext4's
mkfs -m): when users have filled the rest, root can still write, open a WAL-mode
SQLite database, and repair. df counts the share free but not available.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g.useNS(ns)
			if segVZones != 1 {
				return usageErr(fmt.Errorf("--segment-vzones %d: segments are exactly one v-zone (give 1, or size v-zones with `zctl ns create --zones-per-vzone`)", segVZones))
			}
			if op < 1 || op > 50 {
				return usageErr(fmt.Errorf("--overprovision %d: want a percentage in [1, 50]", op))
			}
			if !(rootPct >= 0 && rootPct <= 50) {
				return usageErr(fmt.Errorf("--reserved-root-percent %g: want a percentage in [0, 50]", rootPct))
			}
			ctx := cmd.Context()
			c, err := g.fsClient(ctx, nil)
			if err != nil {
				return err
			}
			defer c.Close()
			vol, _, err := openFSVolume(ctx, c, fsvol.Options{MaxZones: maxZone}, []fdpOption{maxZonesNotFDP(maxZone)})
			if err != nil {
				return err
			}
			// The long part of mkfs is --force resetting every v-zone in use.
			var p *Progress
			if force {
				if zones, err := vol.Zones(ctx); err == nil && len(zones) > 0 {
					p = g.startProgress(fmt.Sprintf("mkfs %s: resetting v-zones", g.Namespace), int64(len(zones)), Unit{Name: "v-zones"})
				}
			}
			err = lfs.Mkfs(ctx, counting(vol, nil, p), lfs.MkfsOptions{OPPercent: op, Force: force, ReservedRootPercent: rootPct})
			p.Done()
			if err != nil {
				if errors.Is(err, zerr.ErrAlreadyExists) {
					return fmt.Errorf("mkfs %s: %w; --force formats it anyway (everything in it is lost)", g.Namespace, err)
				}
				return fmt.Errorf("mkfs %s: %w", g.Namespace, err)
			}
			geo := vol.Geometry()
			out := struct {
				Namespace     string  `json:"namespace"`
				BlockSize     int     `json:"block_size"`
				SegmentBlocks uint64  `json:"segment_blocks"`
				Segments      int     `json:"segments"`
				MaxOpen       int     `json:"max_open_segments"`
				Overprovision int     `json:"overprovision_percent"`
				ReservedRoot  float64 `json:"reserved_root_percent"`
			}{g.Namespace, geo.BlockSize, geo.ZoneBlocks, geo.MaxZones, geo.MaxOpen, op, rootPct}
			return g.emit(out, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "formatted namespace %s: %d segments (v-zones) of %s, %d open at once, %d %% over-provisioning, %g %% reserved for root\n",
					out.Namespace, out.Segments, bytesHuman(out.SegmentBlocks*uint64(out.BlockSize)), out.MaxOpen, out.Overprovision, out.ReservedRoot)
				return err
			})
		},
	}
	nsFlag(c, &ns)
	c.Flags().IntVar(&op, "overprovision", 10, "over-provisioning: percent of the data segments users can never fill")
	c.Flags().IntVar(&segVZones, "segment-vzones", 1, "v-zones per segment (only 1 is supported)")
	c.Flags().IntVar(&maxZone, "max-zones", 0, "v-zones the file system may hold (0: the namespace's share of the cluster); give the same to mount")
	c.Flags().BoolVar(&force, "force", false, "format even when the namespace holds a file system or data")
	c.Flags().Float64Var(&rootPct, "reserved-root-percent", lfs.DefaultReservedRootPercent, "percent of the user space only root may fill (ext4's -m; 0: none; a non-zero share is at least 4 MiB so root's recovery fits on small file systems)")
	return c
}

func fsckCmd(g *Globals) *cobra.Command {
	var (
		ns      string
		repair  bool
		maxZone int
	)
	c := &cobra.Command{
		Use:   "fsck",
		Short: "check the file system of a namespace (and repair it)",
		Long: `Checks every invariant of the file system at its last checkpoint: segment
valid counts against bitmaps, every valid block owned exactly once (SIT, SSA, NAT,
direct nodes), every node reachable from the root, directory types, parents and
link counts, no block past EOF, used-space accounting. Prints each problem.

With --repair it mounts (rolling forward fsynced files), fixes what it can (SIT and
summaries rebuilt from the tree, link counts, dangling names, unreachable inodes
moved to /lost+found), checkpoints and checks again. Do not repair a mounted file
system. Exit code 0 when clean, 1 when problems remain.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g.useNS(ns)
			ctx := cmd.Context()
			c, err := g.fsClient(ctx, nil)
			if err != nil {
				return err
			}
			defer c.Close()
			vol, _, err := openFSVolume(ctx, c, fsvol.Options{MaxZones: maxZone}, []fdpOption{maxZonesNotFDP(maxZone)})
			if err != nil {
				return err
			}
			p := g.startProgress(fmt.Sprintf("fsck %s: read", g.Namespace), 0, unitBytes)
			rep, err := lfs.Fsck(ctx, counting(vol, p, nil), repair)
			p.Done()
			if err != nil {
				return fmt.Errorf("fsck %s: %w", g.Namespace, err)
			}
			type problem struct {
				Kind string `json:"kind"`
				Msg  string `json:"msg"`
			}
			out := struct {
				Namespace   string    `json:"namespace"`
				Clean       bool      `json:"clean"`
				Problems    []problem `json:"problems"`
				Inodes      int       `json:"inodes"`
				Dirs        int       `json:"dirs"`
				ValidBlocks uint64    `json:"valid_blocks"`
				Segments    int       `json:"segments"`
				Repaired    int       `json:"repaired"`
			}{Namespace: g.Namespace, Clean: len(rep.Problems) == 0, Problems: []problem{}, Inodes: rep.Inodes, Dirs: rep.Dirs,
				ValidBlocks: rep.ValidBlocks, Segments: rep.Segments, Repaired: rep.Repaired}
			for _, p := range rep.Problems {
				out.Problems = append(out.Problems, problem{p.Kind, p.Msg})
			}
			if err := g.emit(out, func(w io.Writer) error {
				for _, p := range rep.Problems {
					fmt.Fprintf(w, "%s: %s\n", p.Kind, p.Msg)
				}
				state := "clean"
				if !out.Clean {
					state = fmt.Sprintf("%d problems", len(rep.Problems))
				}
				_, err := fmt.Fprintf(w, "%s: %s; %d inodes (%d directories), %d valid blocks in %d segments; %d repaired\n",
					g.Namespace, state, rep.Inodes, rep.Dirs, rep.ValidBlocks, rep.Segments, rep.Repaired)
				return err
			}); err != nil {
				return err
			}
			if !out.Clean {
				return &exitError{code: ExitFailed, err: fmt.Errorf("fsck %s: %d problems (first: %s)", g.Namespace, len(rep.Problems), rep.Problems[0])}
			}
			return nil
		},
	}
	nsFlag(c, &ns)
	c.Flags().BoolVar(&repair, "repair", false, "fix what can be fixed")
	c.Flags().IntVar(&maxZone, "max-zones", 0, "v-zones the file system may hold (as given to mkfs)")
	return c
}

// counting wraps vol to count bytes read and v-zones reset for progress
// lines; with no progress line (quiet) it returns vol itself, so a quiet run
// sees the volume exactly as without zctl (the wrapper would hide optional
// interfaces of the volume, which mkfs and fsck do not use today).
func counting(vol lfs.Volume, read, resets *Progress) lfs.Volume {
	if read == nil && resets == nil {
		return vol
	}
	return &countingVolume{Volume: vol, read: read, resets: resets}
}

// countingVolume counts what mkfs and fsck do on their volume for their
// progress line: bytes read (read), v-zones reset (resets); a nil Progress
// counts nothing.
type countingVolume struct {
	lfs.Volume
	read, resets *Progress
}

func (v *countingVolume) Read(ctx context.Context, z lfs.ZoneID, off uint64, buf []byte) error {
	err := v.Volume.Read(ctx, z, off, buf)
	if err == nil {
		v.read.Add(int64(len(buf)))
	}
	return err
}

func (v *countingVolume) Reset(ctx context.Context, z lfs.ZoneID) error {
	err := v.Volume.Reset(ctx, z)
	if err == nil {
		v.resets.Add(1)
	}
	return err
}

// mountOptions are zctl mount's flags.
type mountOptions struct {
	ns, dir, gc, metrics, logFile string
	cachedWrite, allowOther       bool
	gcSet                         bool // --gc given
	writebackCache                bool
	dev, readOnly                 bool
	atime                         string
	daemon, debug                 bool
	asyncCompaction               bool
	forceMount                    bool
	bgGC, cpEvery, retryDeadline  time.Duration
	cacheBlocks, maxZones         int
	pgcWorkers                    int
	ipuFsyncBlocks                int
	rootPct                       float64
}

// readyFD is the descriptor a daemonized mount reports readiness on.
const readyEnv = "ZONEFLEET_MOUNT_READY_FD"

func mountCmd(g *Globals) *cobra.Command {
	var o mountOptions
	c := &cobra.Command{
		Use:   "mount DIR",
		Short: "mount a namespace's file system at DIR (FUSE)",
		Long: `Mounts the namespace's file system at DIR through FUSE and serves it until
SIGINT/SIGTERM or an unmount from outside (fusermount3 -u DIR, umount DIR); then it
writes everything back, takes a checkpoint and closes the connection to the cluster.
As root it mounts with mount(2), otherwise through fusermount3. The kernel checks
permissions (default_permissions).

--daemon returns once the file system is mounted and leaves it served by a
background process (its log in --log). The live counters of a mount are read with
` + "`zctl fs stat DIR`" + ` (the virtual attribute ` + fusefs.StatsXattr + ` of DIR), its
Prometheus metrics (zonefleet_fs_*, zonefleet_client_*) on --metrics-listen.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			g.useNS(o.ns)
			o.dir = args[0]
			o.gcSet = cmd.Flags().Changed("gc")
			if _, err := lfs.ParseMode(o.gc); err != nil {
				return usageErr(fmt.Errorf("--gc %q: want zns+, izc or host-copy (zns)", o.gc))
			}
			if _, err := lfs.ParseAtime(o.atime); err != nil {
				return usageErr(fmt.Errorf("--atime %q: want relatime, noatime or strictatime", o.atime))
			}
			if o.rootPct != -1 && !(o.rootPct >= 0 && o.rootPct <= 50) {
				return usageErr(fmt.Errorf("--reserved-root-percent %g: want a percentage in [0, 50], or -1", o.rootPct))
			}
			if o.dev && os.Geteuid() != 0 {
				return usageErr(fmt.Errorf("--dev needs root: device nodes on a mount reach the devices they name"))
			}
			if st, err := os.Stat(o.dir); err != nil || !st.IsDir() {
				return usageErr(fmt.Errorf("mount point %s: not a directory", o.dir))
			}
			if o.daemon {
				return daemonize(g, o)
			}
			return runMount(cmd.Context(), g, o)
		},
	}
	f := c.Flags()
	nsFlag(c, &o.ns)
	f.StringVar(&o.gc, "gc", "zns+", "segment recycling: zns+ (threaded logging and hybrid segment recycling with IZC; izc when the volume has no TL_open), izc (copy inside the drives, ZNS+ zone_compaction) or host-copy/zns (the ZNS baseline)")
	f.BoolVar(&o.forceMount, "force-mount", false, "take the namespace's mount lease even while another mount holds it (that mount stops writing and turns read-only); without it a second mount of a namespace is refused")
	f.BoolVar(&o.asyncCompaction, "async-compaction", false, "zone_compaction returns once submitted and overlaps the checkpoint (ZNS+ §3.2.1); a compaction that fails on the nodes and cannot be finished by host copy then fails every fsync until its nodes return (default: each compaction completes before the file system goes on)")
	f.BoolVar(&o.cachedWrite, "izc-cached-write", false, "IZC-H: write blocks cached on the host from the host instead of copying them on the drives")
	f.IntVar(&o.pgcWorkers, "pgc-workers", lfs.DefaultPGCWorkers, "P-GC: host copy reads a victim more than half valid with this many parallel workers (1: off; 0: the default)")
	f.IntVar(&o.ipuFsyncBlocks, "ipu-fsync-blocks", 0, "ZMS in-place update: an fsync of at most this many dirty blocks, all overwriting blocks the file has, rewrites them in the drives' in-place update region instead of appending to the log, while the drives' budget lasts (0: off; F2FS's min_fsync_blocks is 8; mirrored and parity namespaces always use the log)")
	f.DurationVar(&o.bgGC, "background-gc", 2*time.Second, "recycle one segment after this much idle time (0: off)")
	f.DurationVar(&o.cpEvery, "checkpoint-every", 5*time.Second, "checkpoint at this period when something changed (0: off)")
	f.IntVar(&o.cacheBlocks, "cache-blocks", 0, "host page cache in blocks (0: lfs default, 65536 = 256 MiB at 4 KiB blocks)")
	f.DurationVar(&o.retryDeadline, "retry-deadline", lfs.DefaultRetryDeadline, "how long a file system operation waits for an unavailable node before it fails with EIO")
	f.IntVar(&o.maxZones, "max-zones", 0, "v-zones the file system may hold (as given to mkfs)")
	f.StringVar(&o.metrics, "metrics-listen", "", "serve /metrics on this address (e.g. 127.0.0.1:7901)")
	f.BoolVar(&o.allowOther, "allow-other", false, "let other users reach the mount (needs user_allow_other for non-root)")
	f.BoolVar(&o.writebackCache, "writeback-cache", false, writebackCacheHelp)
	f.BoolVar(&o.dev, "dev", false, "allow opening device nodes on the mount (mount option dev; default nodev; root only)")
	f.BoolVar(&o.readOnly, "read-only", false, "mount read-only (ro): every change is refused with EROFS; the file system still rolls forward at mount")
	f.StringVar(&o.atime, "atime", "relatime", "when reads update the access time: relatime (when it is not after the last change or is a day old), noatime (never) or strictatime (every read)")
	f.Float64Var(&o.rootPct, "reserved-root-percent", -1, "override the root-reserved share for this mount, in percent of the user space (-1: as mkfs set it; 0: none)")
	f.BoolVar(&o.daemon, "daemon", false, "mount, then serve from a background process and return")
	f.StringVar(&o.logFile, "log", "", "log file of a --daemon mount, opened without following a symbolic link and created 0600 (default: mount-NAMESPACE.log in the state directory, $XDG_STATE_HOME/zonefleet or ~/.local/state/zonefleet)")
	f.BoolVar(&o.debug, "debug", false, "log every FUSE request")
	return c
}

// daemonize starts this command again without --daemon in a new session and
// waits until it reports the mount ready (or failed) on a pipe.
func daemonize(g *Globals, o mountOptions) error {
	g.resolve()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var args []string
	for _, a := range os.Args[1:] {
		if a == "--daemon" || strings.HasPrefix(a, "--daemon=") {
			continue
		}
		args = append(args, a)
	}
	if g.Namespace != "" {
		args = append(args, "--namespace", g.Namespace)
	}
	logPath := o.logFile
	if logPath == "" {
		dir, err := stateDir()
		if err != nil {
			return fmt.Errorf("log of the mount: %w (or give --log)", err)
		}
		logPath = filepath.Join(dir, "mount-"+safeName(g.Namespace)+".log")
	}
	logf, err := openLog(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), readyEnv+"=3", "ZONEFLEET_DAEMON=false")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, logf, logf
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return err
	}
	w.Close()
	line, _ := bufio.NewReader(r).ReadString('\n')
	line = strings.TrimSpace(line)
	if line != "ready" {
		_ = cmd.Wait()
		if line == "" {
			line = "the mount process exited; see " + logPath
		}
		return errors.New(line)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	abs, _ := filepath.Abs(o.dir)
	out := struct {
		Namespace string `json:"namespace"`
		Dir       string `json:"dir"`
		PID       int    `json:"pid"`
		Log       string `json:"log"`
	}{g.Namespace, abs, pid, logPath}
	return g.emit(out, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "mounted %s at %s (pid %d, log %s); unmount with `fusermount3 -u %s` or kill %d\n",
			out.Namespace, out.Dir, out.PID, out.Log, out.Dir, out.PID)
		return err
	})
}

// runMount mounts and serves until a signal or an outside unmount.
func runMount(ctx context.Context, g *Globals, o mountOptions) (err error) {
	var ready *os.File
	if fd, e := strconv.Atoi(os.Getenv(readyEnv)); e == nil && fd > 2 {
		ready = os.NewFile(uintptr(fd), "ready")
		_ = os.Unsetenv(readyEnv)
		defer func() {
			if err != nil {
				fmt.Fprintf(ready, "%s\n", errorLine(err))
			}
			ready.Close()
		}()
	}
	sigCtx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveMount(sigCtx, g, o, func(abs, metricsAddr string) {
		if ready != nil {
			fmt.Fprintln(ready, "ready")
			ready.Close()
			ready = nil
			return
		}
		m := ""
		if metricsAddr != "" {
			m = ", metrics on http://" + metricsAddr + "/metrics"
		}
		fmt.Fprintf(g.Out, "mounted %s at %s (pid %d%s); Ctrl-C or `fusermount3 -u %s` unmounts\n", g.Namespace, abs, os.Getpid(), m, abs)
	})
}

// serveMount mounts, calls mounted, and serves until ctx ends or an outside
// unmount; then it unmounts lfs (checkpoint) and closes the client.
func serveMount(sigCtx context.Context, g *Globals, o mountOptions, mounted func(abs, metricsAddr string)) error {
	fusefs.ServingProcs()
	reg := prometheus.NewRegistry()
	bi := buildinfo.Get()
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "zonefleet_build_info", Help: "Build of the running binary; always 1."},
		[]string{"version", "revision", "goversion", "component"})
	buildInfo.WithLabelValues(bi.Version, bi.Revision, bi.GoVersion, "mount").Set(1)
	reg.MustRegister(buildInfo, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	c, err := g.fsClient(sigCtx, reg)
	if err != nil {
		return err
	}
	defer c.Close()
	vol, isFDP, err := openFSVolume(sigCtx, c, fsvol.Options{MaxZones: o.maxZones, SyncCompaction: !o.asyncCompaction,
		MountHolder: mountHolder(), ForceMount: o.forceMount, Registerer: reg}, []fdpOption{
		maxZonesNotFDP(o.maxZones),
		{"gc", "FDP has no zone compaction or threaded logging: segments are recycled by host copy (--gc host-copy)", o.gcSet && o.gc != "host-copy" && o.gc != "zns"},
		{"async-compaction", "segments are recycled by host copy, never by zone_compaction", o.asyncCompaction},
		{"izc-cached-write", "segments are recycled by host copy, never by zone_compaction", o.cachedWrite},
		{"ipu-fsync-blocks", "an FDP drive has no in-place update region", o.ipuFsyncBlocks != 0},
	})
	if err != nil {
		var ae *zerr.AlreadyExistsError
		if errors.As(err, &ae) {
			return fmt.Errorf("%w: a namespace is mounted once at a time (unmount the other, wait for its lease to end if it died, or --force-mount)", err)
		}
		return err
	}
	volClosed := false
	defer func() { // an early return: the spare v-zones and the mount lease go back
		if !volClosed {
			_ = vol.Close(context.Background())
		}
	}()
	clk := clock.Realtime(1)
	defer clk.Stop()
	mode, err := lfs.ParseMode(o.gc)
	if err != nil {
		return usageErr(err)
	}
	if isFDP && mode != lfs.ModeZNS {
		// the default (zns+) on an fdp namespace: no in-drive copy to offload to
		mode, o.gc = lfs.ModeZNS, "host-copy"
	}
	if ns, err := c.GetNamespace(sigCtx); err == nil && ns.GetRedundancy() != "" && ns.GetRedundancy() != "none" && mode != lfs.ModeZNS {
		// zone_compaction and TL_open act on one physical zone: the copies
		// of a mirrored namespace would diverge (pkg/client mirror.go)
		slog.Warn("mirrored namespace: segments are recycled by host copy", "namespace", g.Namespace,
			"redundancy", ns.GetRedundancy(), "gc", o.gc)
		mode, o.gc = lfs.ModeZNS, "host-copy"
	}
	atime, err := lfs.ParseAtime(o.atime)
	if err != nil {
		return usageErr(err)
	}
	lfsAtime := atime
	if o.readOnly {
		lfsAtime = lfs.AtimeNever // a read-only mount writes no access times
	}
	fs, err := lfs.Mount(sigCtx, vol, lfs.Options{Clock: clk, Registry: reg, Mode: mode, CachedWrite: o.cachedWrite,
		PGCWorkers: o.pgcWorkers, BackgroundGC: o.bgGC, CheckpointEvery: o.cpEvery, CacheBlocks: o.cacheBlocks, RetryDeadline: o.retryDeadline,
		Atime: lfsAtime, IPUFsyncBlocks: o.ipuFsyncBlocks, ReservedRootPercent: mountRootPercent(o.rootPct)})
	if err != nil {
		return fmt.Errorf("mount %s: %w", g.Namespace, err)
	}
	unmounted := false
	defer func() {
		if !unmounted {
			_ = fs.Unmount(context.Background())
		}
	}()
	var metricsAddr string
	if o.metrics != "" {
		lis, err := net.Listen("tcp", o.metrics)
		if err != nil {
			return usageErr(fmt.Errorf("--metrics-listen %s: %w", o.metrics, err))
		}
		metricsAddr = lis.Addr().String()
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(lis) }()
		defer hs.Close()
	}
	abs, _ := filepath.Abs(o.dir)
	bfs := fusefs.New(fs, fusefs.Config{Info: fusefs.MountInfo{PID: os.Getpid(), Namespace: g.Namespace, Dir: abs, GC: o.gc,
		CachedWrite: o.cachedWrite, MetricsAddr: metricsAddr, BackgroundGC: o.bgGC.String(), CheckpointEach: o.cpEvery.String(),
		Started: time.Now().UTC().Format(time.RFC3339)}})
	srv, err := fusefs.Mount(bfs, o.dir, fusefs.MountOptions{FsName: "zonefleet:" + g.Namespace, AllowOther: o.allowOther,
		Debug: o.debug, Direct: os.Geteuid() == 0, WritebackCache: o.writebackCache, Dev: o.dev, ReadOnly: o.readOnly, Atime: atime})
	if err != nil {
		return err
	}
	mounted(abs, metricsAddr)
	select {
	case <-srv.Done():
	case <-sigCtx.Done():
		// A busy mount (open files, a shell inside) is detached: serving
		// ends when its last user leaves.
		if err := srv.Unmount(true); err != nil {
			fmt.Fprintf(g.Err, "zctl: unmount %s: %v\n", abs, err)
			srv.Wait()
		}
	}
	unmounted = true
	if err := fs.Unmount(context.Background()); err != nil {
		return fmt.Errorf("unmount %s: %w", g.Namespace, err)
	}
	// Give back the v-zone opened ahead of need and wait for background
	// finishes. The spare is reset only if it is still this mount's opening
	// (its incarnation): a next mount that already reset and reopened the
	// id keeps it (fsvol.Volume.Close).
	volClosed = true
	if err := vol.Close(context.Background()); err != nil {
		fmt.Fprintf(g.Err, "zctl: closing the volume of %s: %v\n", g.Namespace, err)
	}
	fmt.Fprintf(g.Err, "unmounted %s from %s\n", g.Namespace, abs)
	return nil
}

// localMount formats the namespace ns of an in-process cluster when it holds
// no file system yet and mounts it at dir (zctl local up --mount). The
// returned stop unmounts it.
// writebackCacheHelp is the help of --writeback-cache (mount, local up).
const writebackCacheHelp = "kernel write-back cache: small writes are gathered in the kernel and sent in pages (a SQLite database 2.2x faster); a full file system is then reported by fsync and close, not by write(2)"

func localMount(ctx context.Context, g *Globals, cl *localcluster.Cluster, ns, dir string, allowOther, writebackCache bool) (func(), error) {
	// The mount is the namespace's tenant: TLS and a namespace token the
	// cluster's signing key renews (never the operator's credentials on the
	// data path).
	lg := *g
	lg.Arbiter, lg.Etcd, lg.Namespace = strings.Join(cl.ArbiterAddrs(), ","), "", ns
	lg.newClient = func(ctx context.Context, reg prometheus.Registerer) (*client.Client, error) {
		cfg := cl.ClientConfig(ns)
		cfg.RetryDeadline, cfg.Registerer = 15*time.Second, reg
		return client.New(ctx, cfg)
	}
	c, err := lg.fsClient(ctx, nil)
	if err != nil {
		return nil, err
	}
	vol, _, err := openFSVolume(ctx, c, fsvol.Options{}, nil)
	if err == nil {
		// The same root-reserved share as zctl mkfs's default: a full
		// file system still lets root recover (a WAL-mode database, fsck).
		err = lfs.Mkfs(ctx, vol, lfs.MkfsOptions{ReservedRootPercent: lfs.DefaultReservedRootPercent})
		var ae *zerr.AlreadyExistsError
		if errors.As(err, &ae) && ae.Kind == "file system" {
			err = nil
		}
	}
	c.Close()
	if err != nil {
		return nil, fmt.Errorf("--mount: mkfs %s: %w", ns, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	mctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan string, 1), make(chan error, 1)
	o := mountOptions{dir: dir, gc: "zns+", bgGC: 2 * time.Second, cpEvery: 5 * time.Second, allowOther: allowOther, writebackCache: writebackCache}
	go func() {
		done <- serveMount(mctx, &lg, o, func(abs, _ string) { ready <- abs })
	}()
	select {
	case abs := <-ready:
		fmt.Fprintf(g.Out, "file system of namespace %s mounted at %s (try: ls %s; zctl fs stat %s)\n", ns, abs, abs, abs)
		return func() { cancel(); <-done }, nil
	case err := <-done:
		cancel()
		return nil, fmt.Errorf("--mount %s: %w", dir, err)
	}
}

func fsCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "fs", Short: "mounted file systems"}
	cmd.AddCommand(fsStatCmd(g), fsDropCachesCmd(g))
	return cmd
}

// ReadMountStats reads the live counters of the mount at dir.
func ReadMountStats(dir string) (fusefs.StatsInfo, error) {
	var si fusefs.StatsInfo
	buf := make([]byte, 64<<10)
	n, err := unix.Getxattr(dir, fusefs.StatsXattr, buf)
	if err != nil {
		return si, &exitError{code: ExitNotFound, err: fmt.Errorf("%s is not a ZoneFleet mount (%s: %v)", dir, fusefs.StatsXattr, err)}
	}
	if err := json.Unmarshal(buf[:n], &si); err != nil {
		return si, fmt.Errorf("%s: %w", fusefs.StatsXattr, err)
	}
	return si, nil
}

func fsStatCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "stat DIR",
		Short: "live counters of the file system mounted at DIR",
		Long: `Prints the live counters of the mount at DIR: space, segments (free, dirty,
log heads), caches, the write-back (background batches, time writes waited for room in
the dirty budget), checkpoints, recycling runs and blocks moved by each path (host
copy, IZC, host-dirty, host-cached), copyback, write amplification, the recycling mode
in effect and what hybrid segment recycling did (segments recycled by threaded logging vs
compaction, TL share, plugged blocks on demand and in the background, pre-invalid
blocks, checkpoints by cause), and whether the file system went read-only (and why);
-o json has them as tl_recycled_segments, compacted_segments, tl_share, ... They come from the
mount process through the virtual attribute ` + fusefs.StatsXattr + ` of DIR
(getfattr -n ` + fusefs.StatsXattr + ` DIR shows the JSON).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			si, err := ReadMountStats(args[0])
			if err != nil {
				return err
			}
			return g.emit(si, func(w io.Writer) error {
				s, m := si.Stats, si.Mount
				t := newTab(w)
				bs := uint64(max(s.BlockSize, 1))
				t.row("mount:\t%s at %s (pid %d, gc %s, in effect %s%s)", m.Namespace, m.Dir, m.PID, m.GC, s.Mode, map[bool]string{true: ", IZC-H", false: ""}[m.CachedWrite])
				if m.MetricsAddr != "" {
					t.row("metrics:\thttp://%s/metrics", m.MetricsAddr)
				}
				t.row("space:\t%s used of %s (%.1f %%)", bytesHuman(s.UsedBlocks*bs), bytesHuman(s.UserBlocks*bs), pct(s.UsedBlocks, s.UserBlocks))
				t.row("nodes:\t%d of %d", s.Nodes, s.MaxNodes)
				t.row("segments:\t%d total, %d free, %d dirty, %d log heads, %d reserved (%s each)", s.SegmentsTotal, s.SegmentsFree, s.SegmentsDirty, s.SegmentsActive, s.ReserveSegments, bytesHuman(s.ZoneBlocks*bs))
				t.row("valid blocks:\t%d", s.ValidBlocks)
				t.row("cache:\t%d inodes, %d pages (%d dirty), %d dirty nodes, %d open handles, %d orphans", s.CachedInodes, s.CachedPages, s.DirtyPages, s.DirtyNodes, s.OpenHandles, s.Orphans)
				t.row("write-back:\t%d batches in the background; writes waited %s for room in the dirty budget", s.WriteBacks, s.WriteThrottled.Round(time.Millisecond))
				t.row("checkpoints:\t%d (version %d, metadata v-zone %d epoch %d); %d requests shared one", s.Checkpoints, s.CheckpointVersion, s.MetaZone, s.MetaEpoch, s.CheckpointsShared)
				t.row("recycling:\t%d foreground, %d background runs", s.GCForeground, s.GCBackground)
				t.row("blocks moved:\t%d host copy, %d IZC, %d host dirty, %d host cached", s.MovedHostCopy, s.MovedIZC, s.MovedHostDirty, s.MovedHostCached)
				t.row("host copy reads:\t%d victim blocks, %d victims split by P-GC", s.GCVictimBlocksRead, s.PGCSplitMigrations)
				t.row("IZC on the drives:\t%d copyback, %d read-and-program, %d node to node (%d placed for copyback)", s.CompactCopyback, s.CompactLocal, s.CompactRemote, s.CopybackPlanned)
				t.row("written:\t%d user blocks, %d drive blocks, WAF %.3f", s.UserBlocksWritten, s.DriveBlocksWritten, s.WAF)
				t.row("recycled segments:\t%d by threaded logging, %d by compaction (TL share %.1f %%; HSR chose compaction %d times)", s.TLRecycledSegments, s.CompactedSegments, 100*s.TLShare, s.HSRCompaction)
				t.row("threaded logging:\t%d blocks plugged on demand, %d in the background; %d pre-invalid blocks (checkpoint at %d); alpha %.2f, beta %.2f", s.PluggedOnDemand, s.PluggedBackground, s.PreInvalidBlocks, s.PreInvalidThreshold, s.Alpha, s.Beta)
				t.row("checkpoints by cause:\t%s", causes(s.CheckpointsByCause))
				t.row("copyback share:\t%.1f %% of the blocks the drives copied", 100*s.CopybackShare)
				if s.ReadOnly {
					t.row("state:\tREAD-ONLY (%s); reads work, unmount and mount again once the fault is fixed", s.ReadOnlyReason)
				} else {
					t.row("state:\tread-write")
				}
				return t.flush()
			})
		},
	}
}

// causes prints checkpoint counts by cause, sorted by cause.
func causes(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

func pct(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func benchFSCmd(g *Globals) *cobra.Command {
	var o fsbench.Options
	var pgc bool
	c := &cobra.Command{
		Use:   "fs",
		Short: "FUSE file system: throughput vs go-fuse loopback; fileserver at 80/90 % utilization, host copy vs IZC (ZNS+ Fig. 6-7)",
		Long: `Runs in this process against in-process local clusters (needs /dev/fuse).

Throughput: sequential 1 MiB and random 4 KiB writes and reads on the ZoneFleet mount
and on go-fuse's loopback file system over a plain directory in the same run
(vs_fuse_loopback = ZoneFleet / loopback; drive clock off: the software path),
medians of 3 runs with the mounts alternating; each sequential point moves
--seq-total-mib in passes over the --seq-mib file. The points follow fio's
semantics: the file is twice lfs's page cache; before each read point the
kernel's cache of the file (fio's invalidate) and lfs's clean cache (zctl fs
drop-caches) are dropped, on both sides the storage under the FUSE daemon keeps
its host page cache; random writes fsync every 32 (fio --fsync=32). The
loopback runs without FUSE passthrough (every byte through its daemon).

Recycling: a fileserver-style workload (whole-file replacement, 16 KiB overwrites,
stat; --threads threads) at each --util on a small namespace, with host-copy (without
and, unless --pgc=false, with P-GC) and IZC segment compaction, drives on the realtime
clock: throughput, WAF, and the average compaction time split into read / device copy /
write+checkpoint.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Ctrl-C stops the workloads and unmounts (no mount is left behind).
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := checkRuns(o.Runs); err != nil {
				return err
			}
			o.NoPGC = !pgc
			fusefs.ServingProcs() // as zctl mount runs, for the mount and the loopback alike
			g.warnHostPageReporting()
			done := g.timed("zctl bench fs (a few minutes)", 0)
			res, err := fsbench.Run(ctx, o)
			done()
			if err != nil {
				return err
			}
			return g.emit(res, res.WriteTable)
		},
	}
	f := c.Flags()
	f.StringVar(&o.Dir, "dir", "", "directory for the clusters, mount points and the loopback's files (default: a temporary one)")
	f.IntVar(&o.SeqMiB, "seq-mib", fsbench.SeqMiBDefault, "size of the sequential file in MiB (default twice lfs's page cache: reads are not served from it by size alone)")
	f.IntVar(&o.SeqTotalMiB, "seq-total-mib", 1024, "MiB moved per sequential point (passes over the sequential file; long points are stable)")
	f.IntVar(&o.RandOps, "rand-ops", 8192, "random 4 KiB operations per random point")
	f.IntVar(&o.Runs, "runs", 3, "runs of the throughput and parallel points (mounts alternating) and rounds of the fileserver thread scaling; medians are reported")
	f.IntSliceVar(&o.Utils, "util", []int{80, 90}, "utilizations of the fileserver runs (percent)")
	f.Float64Var(&o.Churn, "churn", 2, "bytes written per fileserver run, in file system capacities")
	f.IntVar(&o.Threads, "threads", 4, "fileserver threads")
	f.IntVar(&o.FileKiB, "file-kib", 128, "fileserver file size in KiB")
	f.Float64Var(&o.TimeScale, "time-scale", 1, "realtime clock scale of the fileserver cluster")
	f.BoolVar(&o.IZCH, "izc-h", true, "also run IZC-H (blocks cached on the host written from the host)")
	f.BoolVar(&o.TinySegments, "tiny-segments", false, "run the throughput part on the recycling part's small cluster (2 MiB segments) instead of `zctl local up`'s geometry (32 MiB segments)")
	f.BoolVar(&o.TCP, "tcp", false, "the mount reaches the in-process nodes over TCP with TLS, as a mount on another host does, instead of their unix sockets as `zctl local up`'s mount does")
	f.BoolVar(&pgc, "pgc", true, "also run host copy with P-GC (victim reads split across 2 workers): host_copy_pgc, pgc_vs_host_copy")
	return c
}

// mountHolder names this mount in the namespace's mount lease: host, pid
// and a random id (a restarted process on the same host is another mount).
func mountHolder() string {
	host, _ := os.Hostname()
	var r [4]byte
	_, _ = rand.Read(r[:])
	return fmt.Sprintf("%s pid %d %x", host, os.Getpid(), r)
}

// stateDir is zctl's state directory, $XDG_STATE_HOME/zonefleet or
// ~/.local/state/zonefleet, created 0700: logs of background mounts live
// there, out of shared directories such as /tmp where another user could
// plant a symbolic link or a file of their own under the expected name.
func stateDir() (string, error) {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" || !filepath.IsAbs(base) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		base = filepath.Join(home, ".local", "state")
	}
	dir := filepath.Join(base, "zonefleet")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return dir, nil
}

// safeName keeps a namespace usable as a file name.
func safeName(ns string) string {
	if ns == "" {
		return "default"
	}
	return strings.Map(func(r rune) rune {
		if r == '/' || r == 0 || r == '\\' {
			return '_'
		}
		return r
	}, ns)
}

// openLog opens a log file for appending: never through a symbolic link
// (O_NOFOLLOW), created 0600, and only a regular file of this user with
// one name (not a device or FIFO, not a hard link to a file elsewhere);
// an existing file's mode is narrowed to 0600.
func openLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, &zerr.InvalidArgumentError{Field: "log", Reason: path + " is a symbolic link; a log file is not opened through one"}
		}
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	reason := ""
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		reason = "is not a regular file"
	case st.Uid != uint32(os.Geteuid()):
		reason = fmt.Sprintf("belongs to user %d, not to this user", st.Uid)
	case st.Nlink != 1:
		reason = fmt.Sprintf("has %d names (a hard link)", st.Nlink)
	}
	if reason != "" {
		f.Close()
		return nil, &zerr.InvalidArgumentError{Field: "log", Reason: path + " " + reason}
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// mountRootPercent is lfs.Options.ReservedRootPercent for the mount flag:
// -1 keeps the superblock's share (lfs 0), 0 drops it (lfs negative).
func mountRootPercent(p float64) float64 {
	switch {
	case p < 0:
		return 0
	case p == 0:
		return -1
	}
	return p
}
