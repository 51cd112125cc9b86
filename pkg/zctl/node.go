package zctl

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
)

func nodeCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "ssdnodes registered in the cluster"}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "every node with its address, availability and drives",
		Args:  cobra.NoArgs,
		RunE: g.run(false, func(cmd *cobra.Command, c *client.Client, _ []string) error {
			nodes, err := c.ListNodes(cmd.Context())
			if err != nil {
				return err
			}
			return g.emit(msgs(nodes), func(w io.Writer) error {
				t := table(w)
				t.row("NODE\tADDRESS\tAVAILABLE\tDEVICES\tZONES\tZONE SIZE\tMAR/MOR\tMEDIA\tSTARTED")
				for _, n := range nodes {
					var zones uint32
					var zs, mar, mor uint64
					media := "-"
					for _, d := range n.GetDevices() {
						zones += d.GetNumZones()
						zs = d.GetZoneSize() * uint64(d.GetBlockSize())
						mar, mor = uint64(d.GetMaxActiveZones()), uint64(d.GetMaxOpenZones())
						media = d.GetMedia()
					}
					t.row("%s\t%s\t%s\t%d\t%d\t%s\t%d/%d\t%s\t%s", n.GetId(), n.GetAddr(), yesno(n.GetAvailable()), len(n.GetDevices()), zones,
						bytesHuman(zs), mar, mor, media, n.GetStarted().AsTime().Format(time.RFC3339))
				}
				return t.flush()
			})
		}),
	}, &cobra.Command{
		Use:   "show ID",
		Short: "one node and its drives",
		Args:  cobra.ExactArgs(1),
		RunE: g.run(false, func(cmd *cobra.Command, c *client.Client, args []string) error {
			n, err := c.GetNode(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return g.emit(n, func(w io.Writer) error {
				t := table(w)
				t.row("node:\t%s", n.GetId())
				t.row("address:\t%s", n.GetAddr())
				t.row("available:\t%s", yesno(n.GetAvailable()))
				t.row("version:\t%s", n.GetVersion())
				t.row("started:\t%s", n.GetStarted().AsTime().Format(time.RFC3339))
				if err := t.flush(); err != nil {
					return err
				}
				t = table(w)
				t.row("DEVICE\tCHIPS\tDZONE\tFCGS\tZONES\tZONE SIZE\tCAPACITY\tMAR\tMOR\tACTIVE\tMEDIA")
				for _, d := range n.GetDevices() {
					t.row("%d\t%dx%d\t%d\t%d\t%d\t%d blocks\t%d blocks\t%d\t%d\t%d\t%s", d.GetIndex(), d.GetChannels(), d.GetWays(), d.GetDzone(), d.GetFcgs(),
						d.GetNumZones(), d.GetZoneSize(), d.GetZoneCapacity(), d.GetMaxActiveZones(), d.GetMaxOpenZones(), d.GetActiveZones(), d.GetMedia())
				}
				return t.flush()
			})
		}),
	}, &cobra.Command{
		Use:   "remove ID",
		Short: "forget a stopped node that holds no allocated zone (admin)",
		Args:  cobra.ExactArgs(1),
		RunE: g.run(false, func(cmd *cobra.Command, c *client.Client, args []string) error {
			if err := c.RemoveNode(cmd.Context(), args[0]); err != nil {
				return err
			}
			return g.emit(map[string]string{"removed": args[0]}, func(w io.Writer) error {
				_, err := io.WriteString(w, "removed node "+args[0]+"\n")
				return err
			})
		}),
	})
	return cmd
}

// nodeTarget is node id's registered address, or the first registered
// node's id and address when id is empty.
func nodeTarget(ctx context.Context, c *client.Client, id string) (string, string, error) {
	if id == "" {
		nodes, err := c.ListNodes(ctx)
		if err != nil {
			return "", "", err
		}
		if len(nodes) == 0 {
			return "", "", fmt.Errorf("no node is registered")
		}
		return nodes[0].GetId(), nodes[0].GetAddr(), nil
	}
	n, err := c.GetNode(ctx, id)
	if err != nil {
		return "", "", err
	}
	return n.GetId(), n.GetAddr(), nil
}

var _ = v1.ZoneState_ZONE_STATE_EMPTY
