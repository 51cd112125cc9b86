package zctl

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/zonefleet/zonefleet/pkg/bench/zms"
)

// benchZMSCmd is `zctl bench zms [FIGURE...]`: the ZMS mechanisms on the
// deterministic virtual clock (pkg/bench/zms).
func benchZMSCmd(g *Globals) *cobra.Command {
	var list, short bool
	c := &cobra.Command{
		Use:   "zms [FIGURE...]",
		Short: "ZMS's in-place fsync updates, L2P granularity and IOTailor on the drive model (same numbers every run)",
		Long: "Runs the ZMS figures (all, or the ids given; --list shows them) on the drive model and lfs with a\n" +
			"virtual clock: two runs print identical numbers. -o json prints one object per figure keyed by id.",
		RunE: func(cmd *cobra.Command, args []string) error {
			if list {
				tw := tabwriter.NewWriter(g.Out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tFIGURE\tPAPER")
				for _, f := range zms.Figures() {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", f.ID, f.Title, f.Paper)
				}
				return tw.Flush()
			}
			if len(args) == 0 {
				args = zms.IDs()
			}
			var figs []zms.Figure
			for _, id := range args {
				f, err := zms.Lookup(id)
				if err != nil {
					return err
				}
				figs = append(figs, f)
			}
			done := g.timed("zctl bench zms", 0)
			out := map[string]any{}
			lines := map[string][]zms.Line{}
			for _, f := range figs {
				r, l, err := f.Run(cmd.Context(), short)
				if err != nil {
					done()
					return fmt.Errorf("%s: %w", f.ID, err)
				}
				out[f.ID], lines[f.ID] = r, l
			}
			done()
			return g.emit(out, func(w io.Writer) error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				for _, f := range figs {
					fmt.Fprintf(tw, "%s\t%s\n", f.ID, f.Title)
					for _, l := range lines[f.ID] {
						fmt.Fprintf(tw, "  %s\t%.3f\tpaper: %s\n", l.Label, l.Ours, l.Paper)
					}
				}
				return tw.Flush()
			})
		},
	}
	c.Flags().BoolVar(&list, "list", false, "list the figures and exit")
	c.Flags().BoolVar(&short, "short", false, "a reduced configuration (what the determinism test runs)")
	return c
}
