package zctl

import (
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/zonefleet/zonefleet/pkg/client"
)

func clusterCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "the cluster as a whole"}
	cmd.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "leader, nodes, active-zone pool, namespaces, capacity",
		Args:  cobra.NoArgs,
		RunE: g.run(false, func(cmd *cobra.Command, c *client.Client, _ []string) error {
			st, err := c.ClusterStatus(cmd.Context())
			if err != nil {
				return err
			}
			return g.emit(st, func(w io.Writer) error {
				t := table(w)
				var arbs []string
				for _, a := range st.GetArbiters() {
					s := a.GetId() + " " + a.GetAddr()
					if a.GetLeader() {
						s += " (leader)"
					}
					arbs = append(arbs, s)
				}
				t.row("leader:\t%s", st.GetLeader())
				t.row("arbiters:\t%s", strings.Join(arbs, ", "))
				t.row("nodes:\t%d (%d available), %d devices, %d dies", st.GetNodes(), st.GetNodesAvailable(), st.GetDevices(), st.GetDies())
				t.row("active zones:\t%d slots: %d essential (%d free), %d spare (%d free)", st.GetActiveZoneSlots(), st.GetEssentials(), st.GetEssentialsFree(), st.GetSpares(), st.GetSparesFree())
				t.row("namespaces:\t%d", st.GetNamespaces())
				t.row("capacity:\t%d blocks, %d free", st.GetCapacityBlocks(), st.GetFreeBlocks())
				deg := "none"
				if len(st.GetDegradedNamespaces()) > 0 {
					deg = strings.Join(st.GetDegradedNamespaces(), ", ")
				}
				t.row("degraded:\t%s", deg)
				if st.GetLostCopies() > 0 || st.GetRebuilding() > 0 {
					t.row("rebuild:\t%d mirrored copies on down nodes waiting, %d copying", st.GetLostCopies(), st.GetRebuilding())
				}
				if st.GetLostParityZones() > 0 {
					t.row("parity:\t%d zones of raid5 groups on down nodes (degraded: reads reconstruct until they are rebuilt on another node)", st.GetLostParityZones())
				}
				return t.flush()
			})
		}),
	})
	return cmd
}
