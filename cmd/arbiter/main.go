// Command arbiter runs the eZNS zone arbiter of a ZoneFleet cluster.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/daemon"
)

func main() {
	cfg := &daemon.Config{Name: "arbiter", GRPCListen: ":7700", HTTPListen: ":7701"}
	var id, etcd string
	cmd := daemon.Command(cfg, "The eZNS zone arbiter: hands out active zones to tenant namespaces.",
		func(c *cobra.Command) {
			c.Flags().StringVar(&id, "id", "arbiter-1", "arbiter id, unique in the cluster")
			c.Flags().StringVar(&etcd, "etcd-endpoints", "127.0.0.1:2379", "comma-separated etcd endpoints")
		},
		func(ctx context.Context, log *slog.Logger) error {
			d, err := daemon.New(*cfg, log)
			if err != nil {
				return err
			}
			v1.RegisterArbiterServer(d.GRPC, v1.UnimplementedArbiterServer{})
			return d.Run(ctx)
		})
	os.Exit(daemon.Main(cmd))
}
