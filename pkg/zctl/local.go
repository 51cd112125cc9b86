package zctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/daemon"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/node"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func localCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "local", Short: "a whole cluster in this process, for a laptop"}
	cmd.AddCommand(localUpCmd(g))
	return cmd
}

func localUpCmd(g *Globals) *cobra.Command {
	var (
		dir, clockName, logLevel, ns, media string
		mountDir                            string
		writebackCache                      bool
		allowOther                          bool
		nodes, arbiters, devices, basePort  int
		scale                               float64
		admission                           bool
		rebuildRate                         float64
		blocksPerChip, zoneCapacity         int
	)
	c := &cobra.Command{
		Use:   "up",
		Short: "run embedded etcd, arbiters and ssdnodes in this process until Ctrl-C",
		Long: `Runs a local cluster: an embedded etcd, arbiters and ssdnodes, each a real gRPC
server on a loopback port, with their files under --data. It writes DATA/cluster.json
and DATA/admin-token, adds the cluster "local" to zctl's config file (zctl config) and
makes it current, so every other zctl command finds it. Running it again on the same
--data brings the same cluster and data back.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log, err := daemon.NewLogger(g.Err, "text", logLevel)
			if err != nil {
				return usageErr(err)
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			dev := localcluster.LocalDevice()
			have, existing, err := localcluster.ExistingDevice(abs, dev)
			switch {
			case err != nil:
				return fmt.Errorf("the drives in %s: %w", abs, err) // corrupt: exit 1
			case existing && cmd.Flags().Changed("blocks-per-chip") && have.BlocksPerChip != blocksPerChip:
				return &exitError{code: ExitConflict, err: fmt.Errorf("the drives in %s were created with --blocks-per-chip %d; an existing drive keeps its size (start a new cluster with another --data)", abs, have.BlocksPerChip)}
			case existing:
				dev = have // the cluster keeps the drives it was created with
			case cmd.Flags().Changed("blocks-per-chip"):
				if blocksPerChip <= dev.SpareBlocksPerChip || blocksPerChip > maxLocalBlocksPerChip {
					return usageErr(&zerr.InvalidArgumentError{Field: "blocks-per-chip", Reason: fmt.Sprintf(
						"%d: want %d..%d (%d blocks of each chip are kept spare; %d makes drives of %d GiB)", blocksPerChip,
						dev.SpareBlocksPerChip+1, maxLocalBlocksPerChip, dev.SpareBlocksPerChip, maxLocalBlocksPerChip, localDriveBytes(dev, maxLocalBlocksPerChip)>>30)})
				}
				dev.BlocksPerChip = blocksPerChip
				if err := dev.Validate(); err != nil {
					return usageErr(err)
				}
			}
			if cmd.Flags().Changed("zone-capacity") {
				if existing && have.ZoneCapacity != zoneCapacity {
					return &exitError{code: ExitConflict, err: fmt.Errorf("the drives in %s were created with --zone-capacity %d; an existing drive keeps its zones (start a new cluster with another --data)", abs, have.ZoneCapacity)}
				}
				dev.ZoneCapacity = zoneCapacity
				if err := dev.Validate(); err != nil {
					return usageErr(err)
				}
			}
			if media != "" {
				dev.Media = media
			}
			// Secure by default: the cluster creates DATA/pki at its first
			// start (CA, certificates, a random admin token; zctl cert init).
			cfg := localcluster.Config{Dir: abs, Nodes: nodes, Arbiters: arbiters, Devices: devices, Device: dev, Clock: clockName,
				TimeScale: scale, BasePort: basePort, Admission: admission, Logger: log, Insecure: g.Insecure,
				RebuildRate: rebuildRate, UnlimitedRebuild: rebuildRate == 0}
			g.progress("starting %d ssdnodes and %d arbiter(s) in %s…", nodes, arbiters, abs)
			cl, err := localcluster.Start(ctx, cfg)
			if err != nil {
				var inUse *localcluster.DirInUseError
				if errors.As(err, &inUse) {
					return &exitError{code: ExitConflict, err: err}
				}
				return &exitError{code: ExitUnavailable, err: err}
			}
			defer func() {
				g.progress("stopping…")
				if err := cl.Close(); err != nil {
					log.Error("stopping the local cluster", "err", err)
				}
			}()
			info := cl.Info()
			info.Namespace = ns
			if ns != "" {
				if err := ensureNamespace(ctx, cl, ns); err != nil {
					return err
				}
			}
			if err := localcluster.WriteInfo(info); err != nil {
				return err
			}
			if err := rememberCluster(abs); err != nil {
				log.Warn("cannot record the current cluster", "err", err)
			}
			if registerLocalWanted(g) {
				err := registerLocal(g.configPath(), info, cl.AdminTokenFile())
				if err != nil {
					log.Warn("cannot add the cluster to zctl's config", "config", g.configPath(), "err", err)
				} else {
					g.progress("cluster %q in %s is the current cluster (zctl config list)", LocalClusterName, g.configPath())
				}
			}
			if mountDir != "" {
				stopMount, err := localMount(ctx, g, cl, ns, mountDir, allowOther, writebackCache)
				if err != nil {
					return err
				}
				defer stopMount() // before the cluster stops
			}
			printLocal(g, info)
			<-ctx.Done()
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&dir, "data", "./zonefleet-data", "directory of the cluster's files (etcd, backing files, cluster.json)")
	f.IntVar(&nodes, "nodes", 3, "ssdnodes")
	f.IntVar(&arbiters, "arbiters", 1, "arbiters (one leads)")
	f.IntVar(&devices, "devices", 1, "drives per node")
	f.IntVar(&basePort, "base-port", 0, "etcd on BASE, arbiter i on BASE+10+2i, node i on BASE+30+2i (metrics +1); 0 picks free ports")
	f.StringVar(&clockName, "clock", "realtime", "drive timing clock: realtime, virtual or off")
	f.Float64Var(&scale, "time-scale", 1, "realtime clock scale")
	f.IntVar(&blocksPerChip, "blocks-per-chip", localcluster.LocalDevice().BlocksPerChip, "size of each drive on first start: 4 MiB flash blocks per chip (8 chips, 2 blocks each kept spare; 36 = 272 zones, 1088 MiB); later starts keep the drives' size")
	f.IntVar(&zoneCapacity, "zone-capacity", 0, "writable blocks of each zone on first start, below the zone size as on NVMe ZNS drives (0: the zone size, 1024 blocks); later starts keep it")
	f.StringVar(&media, "media", "", "media preset of the drives: TLC, MLC or ZNAND (default MLC)")
	f.StringVar(&ns, "default-namespace", "default", "namespace created at start (empty: none)")
	f.BoolVar(&admission, "admission-control", true, "write admission control on the nodes")
	f.Float64Var(&rebuildRate, "rebuild-rate", node.DefaultRebuildRate, "MiB/s each node's drives give to rebuilds (ssdnode --rebuild-rate); 0 = unlimited")
	f.StringVar(&logLevel, "log-level", "warn", "log level of the cluster's processes")
	f.StringVar(&mountDir, "mount", "", "format the default namespace if needed and mount its file system at this directory")
	f.BoolVar(&allowOther, "allow-other", false, "with --mount: let other users reach the mount (non-root needs user_allow_other in /etc/fuse.conf)")
	f.BoolVar(&writebackCache, "writeback-cache", false, "with --mount: "+writebackCacheHelp)
	return c
}

// maxLocalBlocksPerChip bounds --blocks-per-chip: the drives' state (zones,
// flash blocks) is in memory, and a laptop cluster needs no more.
const maxLocalBlocksPerChip = 4096

// localDriveBytes is the capacity of a drive of dev's geometry with bpc
// blocks per chip.
func localDriveBytes(dev flash.Config, bpc int) int64 {
	dev.BlocksPerChip = bpc
	g := dev.Geometry()
	return int64(g.Zones) * int64(g.ZoneCap) * int64(g.BlockSize)
}

// registerLocalWanted: `zctl local up` adds itself to the config file as
// "local" and makes it current, except when ZONEFLEET_CLUSTER names its
// cluster.json and no --config / ZONEFLEET_CONFIG is given (scripts and tests
// that address their cluster explicitly leave the user's config alone).
func registerLocalWanted(g *Globals) bool {
	return g.ConfigPath != "" || !strings.HasSuffix(os.Getenv("ZONEFLEET_CLUSTER"), ".json")
}

func ensureNamespace(ctx context.Context, cl *localcluster.Cluster, ns string) error {
	c, err := client.New(ctx, cl.AdminClientConfig())
	if err != nil {
		return err
	}
	defer c.Close()
	// Six active v-zones: the mounted file system's two logs, its metadata
	// zone (two during a rotation), the volume's spare opened ahead, and room
	// for threaded logging (zns+, the mount's default) to keep a recycled
	// segment open until a checkpoint records it. With four, every TL_open
	// would be over budget and zns+ would recycle by compaction only.
	_, err = c.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: ns, MaxActiveVzones: 6, ZonesPerVzone: 8})
	if err != nil && !errors.Is(err, zerr.ErrAlreadyExists) {
		return fmt.Errorf("default namespace %q: %w", ns, err)
	}
	return nil
}

func printLocal(g *Globals, in localcluster.Info) {
	_ = g.emit(in, func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "ZoneFleet local cluster in %s (pid %d)\n", in.Dir, in.PID)
		fmt.Fprintf(tw, "PROCESS\tGRPC\tMETRICS\n")
		fmt.Fprintf(tw, "etcd\t%s\t-\n", strings.Join(in.Etcd, ","))
		for _, a := range in.Arbiters {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", a.ID, a.GRPC, a.Metrics)
		}
		for _, n := range in.Nodes {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", n.ID, n.GRPC, n.Metrics)
		}
		if in.Namespace != "" {
			fmt.Fprintf(tw, "namespace\t%s\t\n", in.Namespace)
		}
		fmt.Fprintf(tw, "cluster.json\t%s\t\n", filepath.Join(in.Dir, "cluster.json"))
		if err := tw.Flush(); err != nil {
			return err
		}
		_, err := fmt.Fprintln(w, "Ready. Other zctl commands find this cluster; Ctrl-C stops it.")
		return err
	})
}
