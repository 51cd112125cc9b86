// Command ssdnode serves emulated ZNS+ SSDs over gRPC.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"github.com/zonefleet/zonefleet/pkg/daemon"
	"github.com/zonefleet/zonefleet/pkg/node"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/wire"
)

func main() {
	cfg := &daemon.Config{Name: "ssdnode", GRPCListen: ":7800", HTTPListen: "127.0.0.1:7801"}
	opts := node.DefaultOptions()
	cmd := daemon.Command(cfg, "An SSD node: emulated ZNS+ drives served over gRPC.",
		func(c *cobra.Command) { node.AddFlags(c.Flags(), &opts) },
		func(ctx context.Context, log *slog.Logger) error {
			sec, err := daemon.LoadSecurity(cfg.Trust, pki.Role{Kind: pki.RoleNode, Name: opts.ID}, false, nil, log)
			if err != nil {
				return err
			}
			cfg.Security = sec
			d, err := daemon.New(*cfg, log, wire.ServerOptions()...) // bulk codec for the data path
			if err != nil {
				return err
			}
			return node.Run(ctx, d, opts, log)
		})
	os.Exit(daemon.Main(cmd))
}
