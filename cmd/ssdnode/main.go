// Command ssdnode serves emulated ZNS+ SSDs over gRPC.
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
	cfg := &daemon.Config{Name: "ssdnode", GRPCListen: ":7800", HTTPListen: ":7801"}
	var id, data, etcd string
	var devices int
	cmd := daemon.Command(cfg, "An SSD node: emulated ZNS+ drives served over gRPC.",
		func(c *cobra.Command) {
			c.Flags().StringVar(&id, "id", "node-1", "node id, unique in the cluster")
			c.Flags().StringVar(&data, "data", "./data", "directory of the backing files")
			c.Flags().StringVar(&etcd, "etcd-endpoints", "127.0.0.1:2379", "comma-separated etcd endpoints")
			c.Flags().IntVar(&devices, "devices", 1, "number of emulated drives")
		},
		func(ctx context.Context, log *slog.Logger) error {
			d, err := daemon.New(*cfg, log)
			if err != nil {
				return err
			}
			v1.RegisterZonedDeviceServer(d.GRPC, v1.UnimplementedZonedDeviceServer{})
			return d.Run(ctx)
		})
	os.Exit(daemon.Main(cmd))
}
