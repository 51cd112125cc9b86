package zctl

import (
	"fmt"
	"io"

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
			return g.emit(bi, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "zctl %s\n", bi)
				return err
			})
		},
	}
}
