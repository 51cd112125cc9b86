package zctl

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/cluster"
)

// redundancyFlag is --redundancy: parsed once, as the flag is set (a bad
// value is a usage error), sent in its canonical form.
type redundancyFlag struct{ r cluster.Redundancy }

func (f *redundancyFlag) String() string { return f.r.Normal().String() }
func (f *redundancyFlag) Set(s string) error {
	return f.r.UnmarshalText([]byte(s))
}
func (f *redundancyFlag) Type() string { return "redundancy" }

const redundancyHelp = "none (RAID-0 legs), mirror:N (N copies of every leg on distinct nodes, N in 2..4; takes N× the active zones) or raid5 (k data legs + 1 parity leg on k+1 distinct nodes, at least 2, + two partial-parity log zones per stripe group); redundant namespaces recycle by host copy"

func nsCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "ns", Aliases: []string{"namespace"}, Short: "tenant namespaces: zoned (essential and spare active zones) or fdp (FDP drive capacity)"}
	var req v1.CreateNamespaceRequest
	red := &redundancyFlag{r: cluster.None}
	kind := &kindFlag{}
	capBytes := &bytesFlag{}
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "create a namespace (fails if its essentials, or for --kind fdp its FDP capacity, cannot be provisioned)",
		Long: "create makes a zoned namespace (v-zones over physical zones; the default) or, with --kind fdp, an fdp\n" +
			"namespace: --capacity bytes of one FDP drive and --handles placement handles of its own (see docs/fdp.md).",
		Example: "  zctl ns create t1 --max-active-vzones 4 --zones-per-vzone 8\n  zctl ns create f1 --kind fdp --capacity 256MiB --handles 2",
		Args:    cobra.ExactArgs(1),
		RunE: g.run(false, func(cmd *cobra.Command, c *client.Client, args []string) error {
			req.Name = args[0]
			req.Redundancy = red.String()
			req.Kind = kind.k.String()
			if kind.k == cluster.KindFDP {
				if capBytes.n == 0 {
					return usageErr(errors.New("--kind fdp needs --capacity"))
				}
				f := cmd.Flags()
				if !f.Changed("max-active-vzones") {
					req.MaxActiveVzones = 0
				}
				if !f.Changed("zones-per-vzone") {
					req.ZonesPerVzone = 0
				}
				req.FdpCapacityBytes = capBytes.n
			} else if capBytes.n != 0 || req.FdpHandles != 0 {
				return usageErr(errors.New("--capacity and --handles are for --kind fdp"))
			}
			n, err := c.Namespaces().Create(cmd.Context(), &req)
			if err != nil {
				return err
			}
			return g.emit(n, func(w io.Writer) error { return nsTable(w, []*v1.Namespace{n}) })
		}),
	}
	create.Flags().Uint32Var(&req.MaxActiveVzones, "max-active-vzones", 4, "v-zones open at once (MAR_logical)")
	create.Flags().Uint32Var(&req.ZonesPerVzone, "zones-per-vzone", 8, "physical zones per v-zone (a power of two)")
	create.Flags().Uint32Var(&req.Weight, "weight", 1, "share of the essentials and spares")
	create.Flags().Uint64Var(&req.Vzones, "vzones", 0, "capacity quota: the v-zones the namespace may hold, their physical zones reserved now (refused when the cluster cannot reserve them; 0: no quota, the namespace shares what quotas leave)")
	create.Flags().Var(red, "redundancy", redundancyHelp)
	create.Flags().Var(kind, "kind", "zoned (v-zones over physical zones) or fdp (an LBA range of one FDP drive with placement handles of its own)")
	create.Flags().Var(capBytes, "capacity", "fdp: capacity quota in bytes (suffixes KiB, MiB, GiB, TiB), rounded up to whole LBAs")
	create.Flags().Uint32Var(&req.FdpHandles, "handles", 0, "fdp: placement handles, exclusive to the namespace (0: 1)")

	var force bool
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "delete a namespace and release its zones",
		Args:  cobra.ExactArgs(1),
		RunE: g.run(false, func(cmd *cobra.Command, c *client.Client, args []string) error {
			if err := c.Namespaces().Delete(cmd.Context(), args[0], force); err != nil {
				return err
			}
			return g.emit(map[string]string{"deleted": args[0]}, func(w io.Writer) error {
				_, err := io.WriteString(w, "deleted namespace "+args[0]+"\n")
				return err
			})
		}),
	}
	del.Flags().BoolVar(&force, "force", false, "delete even with open v-zones (their data is lost)")

	cmd.AddCommand(create, nsUpdateCmd(g), del, &cobra.Command{
		Use:   "list",
		Short: "every namespace with its active-zone shares",
		Args:  cobra.NoArgs,
		RunE: g.run(false, func(cmd *cobra.Command, c *client.Client, _ []string) error {
			list, err := c.Namespaces().List(cmd.Context())
			if err != nil {
				return err
			}
			return g.emit(msgs(list), func(w io.Writer) error { return nsTable(w, list) })
		}),
	}, &cobra.Command{
		Use:     "show NAME",
		Aliases: []string{"get"},
		Short:   "one namespace",
		Args:    cobra.ExactArgs(1),
		RunE: g.run(false, func(cmd *cobra.Command, c *client.Client, args []string) error {
			n, err := c.Namespaces().Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return g.emit(n, func(w io.Writer) error {
				if n.GetKind() == "fdp" {
					return fdpNSShow(w, n)
				}
				t := table(w)
				t.row("name:\t%s", n.GetName())
				t.row("kind:\t%s", nsKind(n))
				t.row("max active v-zones:\t%d", n.GetMaxActiveVzones())
				t.row("zones per v-zone:\t%d", n.GetZonesPerVzone())
				t.row("weight:\t%d", n.GetWeight())
				t.row("redundancy:\t%s", redundancy(n))
				t.row("capacity:\t%s", capacity(n))
				t.row("essentials:\t%d", n.GetEssentials())
				t.row("spares:\t%d (lent %d, borrowed %d)", n.GetSpares(), n.GetSparesLent(), n.GetSparesBorrowed())
				t.row("min stripe width:\t%d", n.GetMinStripeWidth())
				t.row("active v-zones:\t%d (%d physical zones)", n.GetActiveVzones(), n.GetActiveZones())
				t.row("state:\t%s", nsState(n))
				return t.flush()
			})
		}),
	})
	return cmd
}

// nsUpdateCmd is `zctl ns update`: the flags given replace the namespace's.
func nsUpdateCmd(g *Globals) *cobra.Command {
	var (
		mar, weight uint32
		vzones      uint64
	)
	red := &redundancyFlag{r: cluster.None}
	c := &cobra.Command{
		Use:   "update NAME",
		Short: "change an existing namespace's quota, share, active v-zones or redundancy (admin)",
		Long: "update changes the namespace's settings given as flags, all or nothing, and reprovisions the essentials and spares.\n" +
			"--vzones 0 removes the quota; a quota is refused below the v-zones the namespace holds or when the cluster cannot\n" +
			"reserve it; --redundancy only while the namespace holds no v-zone.",
		Example: "  zctl ns update t1 --vzones 64 --weight 2\n  zctl ns update t2 --redundancy mirror:2 -o json",
		Args:    cobra.ExactArgs(1),
		RunE: g.run(false, func(cmd *cobra.Command, c *client.Client, args []string) error {
			req := &v1.UpdateNamespaceRequest{Name: args[0]}
			f := cmd.Flags()
			if f.Changed("max-active-vzones") {
				req.MaxActiveVzones = &mar
			}
			if f.Changed("weight") {
				req.Weight = &weight
			}
			if f.Changed("vzones") {
				req.Vzones = &vzones
			}
			if f.Changed("redundancy") {
				s := red.String()
				req.Redundancy = &s
			}
			if req.MaxActiveVzones == nil && req.Weight == nil && req.Vzones == nil && req.Redundancy == nil {
				return usageErr(errors.New("nothing to change: give --max-active-vzones, --weight, --vzones or --redundancy"))
			}
			n, err := c.Namespaces().Update(cmd.Context(), req)
			if err != nil {
				return err
			}
			return g.emit(n, func(w io.Writer) error { return nsTable(w, []*v1.Namespace{n}) })
		}),
	}
	c.Flags().Uint32Var(&mar, "max-active-vzones", 0, "v-zones open at once (MAR_logical)")
	c.Flags().Uint32Var(&weight, "weight", 0, "share of the essentials and spares (0: 1)")
	c.Flags().Uint64Var(&vzones, "vzones", 0, "capacity quota in v-zones (0: no quota)")
	c.Flags().Var(red, "redundancy", redundancyHelp)
	return c
}

func redundancy(n *v1.Namespace) string {
	if r := n.GetRedundancy(); r != "" {
		return r
	}
	return "none"
}

// capacity is what a namespace holds against its quota.
func capacity(n *v1.Namespace) string {
	if n.GetVzones() == 0 {
		return fmt.Sprintf("%d physical zones held, no quota", n.GetAllocatedZones())
	}
	return fmt.Sprintf("%d of %d physical zones reserved by its quota of %d v-zones", n.GetAllocatedZones(), n.GetQuotaZones(), n.GetVzones())
}

// quota is the QUOTA column: an fdp namespace's capacity, a zoned one's
// v-zones, or "-".
func quota(n *v1.Namespace) string {
	if g := n.GetFdp(); g != nil {
		return iec(g.GetLbas() * uint64(g.GetBlockSize()))
	}
	if n.GetVzones() == 0 {
		return "-"
	}
	return fmt.Sprint(n.GetVzones()) + " vzones"
}

func nsState(n *v1.Namespace) string {
	if n.GetKind() == "fdp" { // no v-zones: granted, or degraded while its node is away
		if n.GetDegraded() {
			return "degraded"
		}
		return "granted"
	}
	s := "idle"
	if n.GetActive() {
		s = "active"
	}
	if n.GetFrozen() {
		s = "frozen"
	}
	if n.GetDegraded() {
		s += ",degraded"
	}
	return s
}

func nsTable(w io.Writer, list []*v1.Namespace) error {
	t := table(w)
	t.row("NAMESPACE\tKIND\tMAX ACTIVE\tZONES/VZONE\tREDUNDANCY\tQUOTA\tZONES HELD\tESSENTIALS\tSPARES\tLENT\tBORROWED\tACTIVE VZONES\tSTATE")
	for _, n := range list {
		t.row("%s\t%s\t%d\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s", n.GetName(), nsKind(n), n.GetMaxActiveVzones(), n.GetZonesPerVzone(), redundancy(n), quota(n), n.GetAllocatedZones(),
			n.GetEssentials(), n.GetSpares(), n.GetSparesLent(), n.GetSparesBorrowed(), n.GetActiveVzones(), nsState(n))
	}
	return t.flush()
}
