package zctl

import (
	"github.com/spf13/cobra"

	fdpbench "github.com/zonefleet/zonefleet/pkg/bench/fdp"
)

// benchFDPCmd is `zctl bench fdp`: device WAF of the FDP drive under
// placement policies, on the virtual clock (deterministic).
func benchFDPCmd(g *Globals) *cobra.Command {
	o := fdpbench.Defaults()
	var plotPath string
	c := &cobra.Command{
		Use:   "fdp",
		Short: "FDP drive WAF: lifetime-matched placement vs one handle vs no FDP, a three-stream mismatched-lifetime workload, fileserver and varmail; the file system on ZNS, ZNS+ and FDP on the same flash (deterministic)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g.progress("zctl bench fdp: %v, %.1f passes…", o.Workloads, o.Passes)
			res, err := fdpbench.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			if plotPath != "" {
				if err := res.Plot(plotPath); err != nil {
					return err
				}
			}
			return g.emit(res, res.WriteTable)
		},
	}
	c.Flags().Uint64Var(&o.Seed, "seed", o.Seed, "workload generator seed")
	c.Flags().Float64Var(&o.Passes, "passes", o.Passes, "measured writes after the fill, in multiples of the used LBAs")
	c.Flags().Float64Var(&o.Utilization, "utilization", o.Utilization, "fraction of the LBAs the workload uses")
	c.Flags().Float64Var(&o.OverProvision, "over-provision", o.OverProvision, "fraction of the flash not exposed as LBAs")
	c.Flags().IntVar(&o.RUChips, "ru-chips", o.RUChips, "reclaim unit size in chips (one flash block each)")
	c.Flags().IntVar(&o.BlocksPerChip, "blocks-per-chip", o.BlocksPerChip, "flash blocks per chip (drive size)")
	c.Flags().StringVar(&o.Victim, "victim", o.Victim, "garbage collection victim policy: greedy or cost-benefit")
	c.Flags().StringSliceVar(&o.Workloads, "workloads", o.Workloads, "workloads: lifetime, hotcold, three-stream, fileserver, varmail (block-level), lfs-fileserver, lfs-varmail (the file system on zns, zns+, fdp-matched and fdp-one-handle)")
	c.Flags().Float64SliceVar(&o.LFSUtilizations, "lfs-utilizations", o.LFSUtilizations, "file system utilizations of the lfs-* workloads")
	c.Flags().Float64Var(&o.LFSOverwrite, "lfs-overwrite", o.LFSOverwrite, "measured writes of the lfs-* workloads, in multiples of the file system's user capacity")
	c.Flags().StringVar(&plotPath, "plot", "", "also write a bar chart of the WAF per workload and placement to this file (.png, .svg or .pdf)")
	return c
}
