package zctl

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/zonefleet/zonefleet/pkg/buildinfo"
)

func versionCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print zctl's version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			bi := buildinfo.Get()
			if g.Output == "json" {
				enc := json.NewEncoder(g.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(bi)
			}
			_, err := fmt.Fprintf(g.Out, "zctl %s\n", bi)
			return err
		},
	}
}
