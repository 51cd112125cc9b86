package zctl

import (
	"time"

	"github.com/spf13/cobra"

	arbiterbench "github.com/zonefleet/zonefleet/pkg/bench/arbiter"
)

// benchArbiterCmd is `zctl bench arbiter`: the control plane at cluster scale.
func benchArbiterCmd(g *Globals) *cobra.Command {
	var o arbiterbench.Options
	c := &cobra.Command{
		Use:   "arbiter",
		Short: "control plane at scale: allocation cycles/s and etcd bytes per mutation at 10/100/1000 simulated nodes, etcd size after N mutations",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g.progress("zctl bench arbiter: running %v nodes × %d cycles × %d repeats…", o.Nodes, o.Cycles, o.Repeats)
			res, err := arbiterbench.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			return g.emit(res, res.WriteTable)
		},
	}
	c.Flags().StringVar(&o.Dir, "dir", "", "directory for the embedded etcd data (default: a temporary one)")
	c.Flags().IntSliceVar(&o.Nodes, "nodes", []int{10, 100, 1000}, "simulated cluster sizes")
	c.Flags().IntVar(&o.ZonesPerNode, "zones-per-node", 100, "zones of each simulated node")
	c.Flags().IntVar(&o.Cycles, "cycles", 300, "measured allocation cycles (open + stripe group + finish + reset) per run")
	c.Flags().IntVar(&o.Repeats, "repeats", 3, "runs per size (the median is reported)")
	c.Flags().IntVar(&o.Workers, "workers", 4, "concurrent workers (distinct v-zones)")
	c.Flags().IntVar(&o.FillVZones, "fill-vzones", 0, "full v-zones (16 zones each) allocated before the measured cycles")
	c.Flags().IntVar(&o.DBMutations, "db-mutations", 0, "mutations of the etcd database-size run on the largest cluster (0 skips)")
	c.Flags().DurationVar(&o.CompactInterval, "compact-interval", 5*time.Second, "arbiter compaction interval in the database-size run")
	return c
}
