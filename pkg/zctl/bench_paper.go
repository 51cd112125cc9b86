package zctl

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/zonefleet/zonefleet/pkg/bench/paper"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// benchPaperCmd is `zctl bench paper [FIGURE...]`: the eZNS figures on the
// deterministic simulation harness (pkg/bench/paper).
func benchPaperCmd(g *Globals) *cobra.Command {
	var (
		list bool
		out  string
		dir  string
		doc  string
		o    paper.Options
	)
	c := &cobra.Command{
		Use:   "paper [FIGURE...]",
		Short: "the papers' figures, reproduced deterministically on a simulated clock (same numbers every run)",
		Long: "Runs the eZNS figures (all, or the ids given; --list shows them) on the drive model and the node's\n" +
			"admission control with one deterministic virtual clock: two runs print identical numbers.\n" +
			"-o json prints one object per figure keyed by id; --out DIR writes a PNG per figure and manifest.json.",
		RunE: func(cmd *cobra.Command, args []string) error {
			if list {
				tw := tabwriter.NewWriter(g.Out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSTATUS\tFIGURE\tPAPER / WHY NOT")
				for _, f := range paper.Catalog() {
					why := f.Paper
					if f.Status != paper.Runs {
						why = f.Reason
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.ID, f.Status, f.Title, why)
				}
				return tw.Flush()
			}
			if doc != "" && (len(args) != 0 || o.Short) {
				return &zerr.InvalidArgumentError{Field: "doc", Reason: "needs the full run of every figure (no FIGURE arguments, no --short)"}
			}
			work := dir
			if work == "" {
				d, err := os.MkdirTemp("", "zonefleet-paper-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(d)
				work = d
			}
			done := g.timed("zctl bench paper", 0)
			res, err := paper.Run(cmd.Context(), work, args, o)
			done()
			if err != nil {
				return err
			}
			if doc != "" {
				if err := res.UpdateDoc(doc); err != nil {
					return err
				}
			}
			if out != "" {
				if _, err := res.WriteOut(out, o); err != nil {
					return err
				}
			}
			return g.emit(res.Figures, res.WriteTable)
		},
	}
	c.Flags().BoolVar(&list, "list", false, "list the figures and exit")
	c.Flags().StringVar(&out, "out", "", "directory for one PNG plot per figure and manifest.json")
	c.Flags().StringVar(&dir, "dir", "", "directory for the drives' backing files (default: a temporary one)")
	c.Flags().StringVar(&doc, "doc", "", "rewrite the fidelity table of this markdown file (docs/paper-figures.md) from the run")
	c.Flags().BoolVar(&o.Short, "short", false, "a reduced configuration (what the determinism test runs)")
	return c
}
