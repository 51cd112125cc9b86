// Command arbiter runs the eZNS zone arbiter of a ZoneFleet cluster.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"github.com/zonefleet/zonefleet/pkg/arbiterd"
	"github.com/zonefleet/zonefleet/pkg/daemon"
	"github.com/zonefleet/zonefleet/pkg/pki"
)

func main() {
	cfg := &daemon.Config{Name: "arbiter", GRPCListen: ":7700", HTTPListen: "127.0.0.1:7701"}
	opts := arbiterd.DefaultOptions()
	cmd := daemon.Command(cfg, "The eZNS zone arbiter: hands out active zones to tenant namespaces.",
		func(c *cobra.Command) { arbiterd.AddFlags(c.Flags(), &opts) },
		func(ctx context.Context, log *slog.Logger) error {
			sec, err := daemon.LoadSecurity(cfg.Trust, pki.Role{Kind: pki.RoleArbiter}, true, nil, log)
			if err != nil {
				return err
			}
			cfg.Security = sec
			d, err := daemon.New(*cfg, log)
			if err != nil {
				return err
			}
			return arbiterd.Run(ctx, d, opts, log)
		})
	os.Exit(daemon.Main(cmd))
}
