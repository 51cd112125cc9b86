package zctl

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
)

// fdpTarget selects one FDP drive of one node.
type fdpTarget struct {
	node, addr string
	device     uint32
}

func (ft *fdpTarget) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&ft.node, "node", "", "node id (default: the first registered node)")
	cmd.Flags().StringVar(&ft.addr, "addr", "", "node address, instead of --node (no arbiter needed)")
	cmd.Flags().Uint32VarP(&ft.device, "device", "d", 0, "FDP device index on the node")
}

// dial connects to the node's FDP service the way every drive-level call
// reaches a node (dialNode: by node id, the operator's certificate).
func (ft *fdpTarget) dial(ctx context.Context, g *Globals) (v1.FDPClient, context.Context, func(), error) {
	c, node, addr, cctx, err := dialNode(ctx, g, ft.node, ft.addr)
	if err != nil {
		return nil, nil, nil, err
	}
	cc, err := c.NodeConn(node, addr)
	if err != nil {
		c.Close()
		return nil, nil, nil, err
	}
	return v1.NewFDPClient(cc), cctx, c.Close, nil
}

// fdpCmd is `zctl fdp`: a node's FDP drives, in the style of nvme-cli's
// fdp plugin.
func fdpCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "fdp", Short: "flexible data placement drives: configuration, handle usage, statistics, events, status (nvme fdp)"}
	simple := func(use, short string, call func(context.Context, v1.FDPClient, uint32) (any, func(io.Writer) error, error)) *cobra.Command {
		var ft fdpTarget
		c := &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				cl, ctx, done, err := ft.dial(cmd.Context(), g)
				if err != nil {
					return err
				}
				defer done()
				v, tab, err := call(ctx, cl, ft.device)
				if err != nil {
					return err
				}
				return g.emit(v, tab)
			}}
		ft.flags(c)
		return c
	}
	configs := simple("configs", "the FDP configuration log page: reclaim groups, handles and their types, reclaim unit size", func(ctx context.Context, c v1.FDPClient, dev uint32) (any, func(io.Writer) error, error) {
		r, err := c.Configs(ctx, &v1.FDPDeviceRequest{Device: dev})
		if err != nil {
			return nil, nil, err
		}
		return r, func(w io.Writer) error {
			t := table(w)
			t.row("reclaim groups:\t%d (%d chips each)", r.GetReclaimGroups(), r.GetChipsPerGroup())
			t.row("reclaim unit handles:\t%d: %s", len(r.GetHandleTypes()), strings.Join(r.GetHandleTypes(), ", "))
			t.row("reclaim unit size:\t%s (%d chips)", bytesHuman(r.GetReclaimUnitNominalBytes()), r.GetRuChips())
			t.row("placement ids:\t%d", r.GetMaxPlacementIds())
			t.row("capacity:\t%d LBAs of %d bytes, %s of flash, %.0f%% over-provisioning", r.GetLbas(), r.GetBlockSize(), bytesHuman(r.GetPhysicalBytes()), r.GetOverProvision()*100)
			t.row("gc victim policy:\t%s", r.GetVictim())
			return t.flush()
		}, nil
	})
	usage := simple("usage", "the reclaim unit handle usage log page", func(ctx context.Context, c v1.FDPClient, dev uint32) (any, func(io.Writer) error, error) {
		r, err := c.Usage(ctx, &v1.FDPDeviceRequest{Device: dev})
		if err != nil {
			return nil, nil, err
		}
		return r, func(w io.Writer) error {
			t := table(w)
			t.row("GROUP\tHANDLE\tTYPE\tRU\tAVAILABLE\tHOST WRITTEN\tGC MOVED\tRUs USED\tVALID LBAs")
			for _, u := range r.GetHandles() {
				ru := "-"
				if u.GetReclaimUnit() >= 0 {
					ru = fmt.Sprint(u.GetReclaimUnit())
				}
				t.row("%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d", u.GetGroup(), u.GetHandle(), u.GetType(), ru, bytesHuman(u.GetAvailableBytes()),
					bytesHuman(u.GetHostBytesWritten()), bytesHuman(u.GetGcBytesMoved()), u.GetReclaimUnitsUsed(), u.GetValidLbas())
			}
			return t.flush()
		}, nil
	})
	stats := simple("stats", "the FDP statistics log page: host and media bytes written, media bytes erased, WAF", func(ctx context.Context, c v1.FDPClient, dev uint32) (any, func(io.Writer) error, error) {
		r, err := c.Stats(ctx, &v1.FDPDeviceRequest{Device: dev})
		if err != nil {
			return nil, nil, err
		}
		return r, func(w io.Writer) error {
			t := table(w)
			t.row("host bytes written:\t%d", r.GetHostBytesWithMetadataWritten())
			t.row("media bytes written:\t%d", r.GetMediaBytesWithMetadataWritten())
			t.row("media bytes erased:\t%d", r.GetMediaBytesErased())
			t.row("waf:\t%.3f", r.GetWaf())
			t.row("gc copies / copybacks:\t%d / %d", r.GetGcCopies(), r.GetCopybacks())
			t.row("reclaim units reclaimed:\t%d", r.GetReclaimUnitsReclaimed())
			return t.flush()
		}, nil
	})
	var after uint64
	events := simple("events", "FDP events: reclaim units not fully written, media reallocated", func(ctx context.Context, c v1.FDPClient, dev uint32) (any, func(io.Writer) error, error) {
		r, err := c.Events(ctx, &v1.FDPEventsRequest{Device: dev, AfterSeq: after})
		if err != nil {
			return nil, nil, err
		}
		return r, func(w io.Writer) error {
			t := table(w)
			t.row("SEQ\tTYPE\tGROUP\tHANDLE\tRU\tLBAs\tTIME (ms)")
			for _, e := range r.GetEvents() {
				h := fmt.Sprint(e.GetHandle())
				if e.GetHandle() < 0 {
					h = "gc"
				}
				t.row("%d\t%s\t%d\t%s\t%d\t%d\t%.3f", e.GetSeq(), e.GetType(), e.GetGroup(), h, e.GetReclaimUnit(), e.GetCount(), float64(e.GetTimeNs())/1e6)
			}
			return t.flush()
		}, nil
	})
	events.Flags().Uint64Var(&after, "after", 0, "only events with a sequence number above this")
	status := simple("status", "free reclaim units per group, mapped LBAs, WAF, read-only state", func(ctx context.Context, c v1.FDPClient, dev uint32) (any, func(io.Writer) error, error) {
		r, err := c.Status(ctx, &v1.FDPDeviceRequest{Device: dev})
		if err != nil {
			return nil, nil, err
		}
		return r, func(w io.Writer) error {
			t := table(w)
			t.row("fdp enabled:\t%v", r.GetEnabled())
			t.row("free reclaim units:\t%v (blocks %v)", r.GetFreeReclaimUnits(), r.GetFreeBlocks())
			t.row("closed reclaim units:\t%d", r.GetClosedReclaimUnits())
			t.row("mapped LBAs:\t%d", r.GetMappedLbas())
			t.row("waf:\t%.3f", r.GetWaf())
			t.row("read-only:\t%v", r.GetReadOnly())
			t.row("modelled time:\t%.3f ms", float64(r.GetModelledTimeNs())/1e6)
			return t.flush()
		}, nil
	})
	var victim string
	var ruChips int
	set := simple("set", "change the GC victim policy (--victim) or the reclaim unit size (--ru-chips) of units opened from now on", func(ctx context.Context, c v1.FDPClient, dev uint32) (any, func(io.Writer) error, error) {
		req := &v1.FDPSetConfigRequest{Device: dev, Victim: victim}
		if ruChips >= 0 {
			n := uint32(ruChips)
			req.RuChips = &n
		}
		r, err := c.SetConfig(ctx, req)
		if err != nil {
			return nil, nil, err
		}
		return r, func(w io.Writer) error {
			t := table(w)
			t.row("gc victim policy:\t%s", r.GetVictim())
			t.row("reclaim unit size:\t%s (%d chips)", bytesHuman(r.GetReclaimUnitNominalBytes()), r.GetRuChips())
			return t.flush()
		}, nil
	})
	set.Flags().StringVar(&victim, "victim", "", "greedy or cost-benefit (empty: unchanged)")
	set.Flags().IntVar(&ruChips, "ru-chips", -1, "reclaim unit size in chips, 0 = the whole group (negative: unchanged)")
	cmd.AddCommand(configs, usage, stats, events, status, set)
	return cmd
}
