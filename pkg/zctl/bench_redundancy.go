package zctl

import (
	"github.com/spf13/cobra"

	redbench "github.com/zonefleet/zonefleet/pkg/bench/redundancy"
)

// benchRedundancyCmd is `zctl bench redundancy`: what mirror:2 and raid5 cost and buy.
func benchRedundancyCmd(g *Globals) *cobra.Command {
	var o redbench.Options
	c := &cobra.Command{
		Use:   "redundancy",
		Short: "write/read throughput of none vs mirror:2 vs raid5 on one local cluster, degraded reads with a node stopped, mirror:2 and raid5 rebuild time per GiB, tenant throughput during a throttled and an unthrottled rebuild",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g.warnHostPageReporting() // wall-time throughput and rebuild rates
			g.progress("zctl bench redundancy: %d MiB per point, %d runs…", max(o.MiB, 1), max(o.Runs, 1))
			res, err := redbench.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			return g.emit(res, res.WriteTable)
		},
	}
	c.Flags().StringVar(&o.Dir, "dir", "", "directory for the cluster's files (default: a temporary one)")
	c.Flags().IntVar(&o.Nodes, "nodes", 4, "ssdnodes of the local cluster (at least 3)")
	c.Flags().IntVar(&o.MiB, "mib", 64, "MiB written and read per point")
	c.Flags().IntVar(&o.Runs, "runs", 3, "runs per point (the median is reported)")
	c.Flags().IntVar(&o.LoadMiB, "load-mib", 128, "MiB of mirror:2 data whose rebuild the tenant runs against (tenant throughput during a rebuild)")
	c.Flags().IntVar(&o.LoadOps, "load-ops", 32, "tenant operations (1 MiB append + read-back) measured with no rebuild")
	c.Flags().Float64Var(&o.RebuildRate, "rebuild-rate", 0, "the throttled point's rebuild rate in MiB/s (0: the ssdnode default)")
	c.Flags().BoolVar(&o.NoLoad, "no-load", false, "skip the tenant-during-rebuild points (two more clusters)")
	return c
}
