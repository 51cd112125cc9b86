package zctl

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	devbench "github.com/zonefleet/zonefleet/pkg/bench/device"
	fairbench "github.com/zonefleet/zonefleet/pkg/bench/fairness"
	"github.com/zonefleet/zonefleet/pkg/bench/hostenv"
	nodebench "github.com/zonefleet/zonefleet/pkg/bench/node"
	overbench "github.com/zonefleet/zonefleet/pkg/bench/overdrive"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func benchCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "run the benchmarks that check ZoneFleet against the papers",
		Long:  "Each scenario prints a table (-o json for the machine-readable keys). They run in this process on temporary backing files.",
	}
	cmd.AddCommand(benchDeviceCmd(g), benchNodeCmd(g), benchFairnessCmd(g), benchOverdriveCmd(g), benchFSCmd(g), benchArbiterCmd(g), benchPaperCmd(g), benchRedundancyCmd(g), benchFDPCmd(g), benchZMSCmd(g))
	return cmd
}

func benchDeviceCmd(g *Globals) *cobra.Command {
	var o devbench.Options
	c := &cobra.Command{
		Use:   "device",
		Short: "drive emulator: copyback vs read-and-program, IZC vs host copy, chip utilization, TL plugging, write scaling",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g.warnHostPageReporting() // its write rows are wall time through the page cache
			done := g.timed("zctl bench device ("+o.Media+")", 0)
			res, err := devbench.Run(cmd.Context(), o)
			done()
			if err != nil {
				return err
			}
			return g.emit(res, res.WriteTable)
		},
	}
	c.Flags().StringVar(&o.Media, "media", "MLC", "media preset: TLC, MLC or ZNAND")
	c.Flags().StringVar(&o.Dir, "dir", "", "directory for the backing files (default: a temporary one)")
	c.Flags().DurationVar(&o.WriteDuration, "write-duration", time.Second, "duration of each write-scaling measurement")
	c.Flags().IntSliceVar(&o.WriterCounts, "writers", []int{1, 2, 4, 8}, "concurrent writer counts")
	return c
}

func benchNodeCmd(g *Globals) *cobra.Command {
	o := nodebench.DefaultOptions()
	c := &cobra.Command{
		Use:   "node",
		Short: "ssdnode data path: gRPC vs raw TCP, client scaling, random reads, write admission (eZNS Fig. 29b)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkRuns(o.Runs); err != nil {
				return err
			}
			g.warnHostPageReporting()
			done := g.timed("zctl bench node", 2*o.AdmissionWall+10*time.Second)
			res, err := nodebench.Run(cmd.Context(), o)
			done()
			if err != nil {
				return err
			}
			return g.emit(res, res.WriteTable)
		},
	}
	c.Flags().StringVar(&o.Dir, "dir", "", "directory for the backing files (default: a temporary one)")
	c.Flags().Int64Var(&o.WriteBytes, "write-bytes", o.WriteBytes, "bytes per throughput measurement")
	c.Flags().IntVar(&o.Runs, "runs", o.Runs, "timed runs of each throughput point, in interleaved rounds; the median is reported (more runs: steadier medians on a noisy machine)")
	c.Flags().IntSliceVar(&o.Clients, "clients", o.Clients, "concurrent client counts")
	c.Flags().BoolVar(&o.Admission, "admission", o.Admission, "run the write admission scenario")
	c.Flags().BoolVar(&o.SmallWrites, "small-writes", o.SmallWrites, "run the many-client 4 KiB write scaling (shared vs multi-queue write cache; --clients, --runs, up to 64 MiB per point within --write-bytes)")
	c.Flags().DurationVar(&o.AdmissionWall, "admission-duration", o.AdmissionWall, "wall time of each admission run")
	c.Flags().Float64Var(&o.TimeScale, "time-scale", o.TimeScale, "realtime clock scale of the admission runs")
	c.Flags().Int64Var(&o.WritebackKickBytes, "writeback-kick-bytes", o.WritebackKickBytes, "the drives' write-back kick, as ssdnode --writeback-kick-bytes (0 = off: the points then measure the data path rather than the host disk; see docs/benchmarks.md)")
	return c
}

func benchFairnessCmd(g *Globals) *cobra.Command {
	var o fairbench.Options
	c := &cobra.Command{
		Use:   "fairness",
		Short: "client read congestion control: eZNS Fig. 29a, two readers on co-located dies",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			done := g.timed("zctl bench fairness", 2*o.Duration+5*time.Second)
			res, err := fairbench.Run(cmd.Context(), o)
			done()
			if err != nil {
				return err
			}
			return g.emit(res, res.WriteTable)
		},
	}
	c.Flags().StringVar(&o.Dir, "dir", "", "directory for the backing files (default: a temporary one)")
	c.Flags().DurationVar(&o.Duration, "duration", 4*time.Second, "wall time of each run")
	c.Flags().Float64Var(&o.TimeScale, "time-scale", 16, "realtime clock scale (wall time per modelled time)")
	c.Flags().IntVar(&o.QDB, "qd-b", 32, "queue depth of zone B")
	return c
}

func benchOverdriveCmd(g *Globals) *cobra.Command {
	var o overbench.Options
	c := &cobra.Command{
		Use:   "overdrive",
		Short: "arbiter: v-zones vs static zones (eZNS Fig. 26) and the global-overdrive timeline (Fig. 27-28)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			done := g.timed("zctl bench overdrive (about a minute)", 0)
			res, err := overbench.Run(cmd.Context(), o)
			done()
			if err != nil {
				return err
			}
			return g.emit(res, res.WriteTable)
		},
	}
	c.Flags().StringVar(&o.Dir, "dir", "", "directory for the clusters' files (default: a temporary one)")
	c.Flags().Float64Var(&o.TimeScale, "time-scale", 8, "realtime clock scale")
	c.Flags().DurationVar(&o.Run, "run", 250*time.Millisecond, "modelled time of each Fig. 26 run")
	c.Flags().DurationVar(&o.Phase, "phase", 300*time.Millisecond, "modelled time of each timeline phase")
	c.Flags().IntSliceVar(&o.Writers, "writers", []int{4, 8, 16}, "writer counts")
	c.Flags().IntVar(&o.StaticWidth, "static-width", 1, "width of the static zones (writers × width must fit the drives' MAR)")
	c.Flags().BoolVar(&o.SkipTimeline, "skip-timeline", false, "only Fig. 26")
	return c
}

// warnHostPageReporting says on stderr, before a throughput benchmark
// starts, that this machine hands freed pages back to its host (the result
// carries the same line: host_page_reporting).
func (g *Globals) warnHostPageReporting() {
	if desc, active := hostenv.Describe(); active {
		fmt.Fprintf(g.Err, "zctl: warning: host free page reporting is %s\n", desc)
	}
}

// checkRuns refuses a --runs below 1 (the benches would otherwise take
// their default silently).
func checkRuns(n int) error {
	if n < 1 {
		return usageErr(&zerr.InvalidArgumentError{Field: "runs", Reason: fmt.Sprintf("%d: want at least 1", n)})
	}
	return nil
}
