package zctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
)

// zoneTarget selects one drive of one node.
type zoneTarget struct {
	node, addr string
	device     uint32
}

func (zt *zoneTarget) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&zt.node, "node", "", "node id (default: the first registered node)")
	cmd.Flags().StringVar(&zt.addr, "addr", "", "node address, instead of --node (no arbiter needed)")
	cmd.Flags().Uint32VarP(&zt.device, "device", "d", 0, "device index on the node")
}

// dial returns the drive's client and a context carrying the namespace.
func (zt *zoneTarget) dial(ctx context.Context, g *Globals) (v1.ZonedDeviceClient, context.Context, func(), error) {
	c, node, addr, cctx, err := dialNode(ctx, g, zt.node, zt.addr)
	if err != nil {
		return nil, nil, nil, err
	}
	dev, _, err := c.Device(node, addr)
	if err != nil {
		c.Close()
		return nil, nil, nil, err
	}
	return dev, cctx, c.Close, nil
}

// dialNode returns a client that reaches node (the first registered one
// when empty; at addr when given, else at its registered address) and the
// context its calls carry. The node is dialled by its id: over TLS its
// certificate must name node:<id> whatever address is given or registered,
// so --addr needs --node there. The admin token is never sent to a node;
// the operator is identified by its client certificate (only an --insecure
// cluster, which has no identities, gets the token).
func dialNode(ctx context.Context, g *Globals, node, addr string) (*client.Client, string, string, context.Context, error) {
	g.resolve()
	var c *client.Client
	if addr == "" {
		var err error
		if c, err = g.connect(ctx, false); err != nil {
			return nil, "", "", nil, err
		}
		if node, addr, err = nodeTarget(ctx, c, node); err != nil {
			c.Close()
			return nil, "", "", nil, err
		}
	} else {
		if node == "" && !g.Insecure {
			return nil, "", "", nil, usageErr(fmt.Errorf("--addr needs --node: the node's certificate must name the node dialled"))
		}
		cfg, err := g.clientConfig(g.Namespace)
		if err != nil {
			return nil, "", "", nil, err
		}
		c = client.NewDirect(cfg)
	}
	cctx := ctx
	if g.Namespace != "" {
		cctx = withNS(cctx, g.Namespace)
	}
	if g.Insecure {
		cctx = withAdminToken(cctx, g.Token)
	}
	return c, node, addr, cctx, nil
}

var stateNames = map[v1.ZoneState]string{
	v1.ZoneState_ZONE_STATE_EMPTY: "EMPTY", v1.ZoneState_ZONE_STATE_IMPLICIT_OPEN: "IMP_OPENED",
	v1.ZoneState_ZONE_STATE_EXPLICIT_OPEN: "EXP_OPENED", v1.ZoneState_ZONE_STATE_CLOSED: "CLOSED",
	v1.ZoneState_ZONE_STATE_FULL: "FULL", v1.ZoneState_ZONE_STATE_READ_ONLY: "READ_ONLY", v1.ZoneState_ZONE_STATE_OFFLINE: "OFFLINE",
}

func parseState(s string) (v1.ZoneState, error) {
	if s == "" || s == "all" {
		return v1.ZoneState_ZONE_STATE_UNSPECIFIED, nil
	}
	want := strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
	aliases := map[string]string{"OPEN": "IMP_OPENED", "IMPLICIT_OPEN": "IMP_OPENED", "EXPLICIT_OPEN": "EXP_OPENED", "IMPLICITLY_OPEN": "IMP_OPENED", "EXPLICITLY_OPEN": "EXP_OPENED"}
	if a, ok := aliases[want]; ok {
		want = a
	}
	for st, n := range stateNames {
		if n == want {
			return st, nil
		}
	}
	return 0, usageErr(fmt.Errorf("--state %q: want empty, imp_opened, exp_opened, closed, full, read_only, offline or all", s))
}

func zoneCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "zone", Short: "zones of one drive (nvme zns style): report, manage, identify, log, ZNS+ commands"}

	var rt zoneTarget
	var state string
	var start, maxZones uint32
	report := &cobra.Command{
		Use:   "report",
		Short: "report zones (like nvme zns report-zones / blkzone report)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := parseState(state)
			if err != nil {
				return err
			}
			dev, ctx, done, err := rt.dial(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer done()
			resp, err := dev.ReportZones(ctx, &v1.ReportZonesRequest{Device: rt.device, StartZone: start, MaxZones: maxZones, State: st})
			if err != nil {
				return err
			}
			return g.emit(resp, func(w io.Writer) error {
				fmt.Fprintf(w, "nr_zones: %d\n", len(resp.GetZones()))
				for _, z := range resp.GetZones() {
					tl := ""
					if z.GetThreadedLogging() {
						tl = " TL"
					}
					fmt.Fprintf(w, "SLBA: %-#10x WP: %-#10x Cap: %-#8x State: %-11s Type: SEQWRITE_REQ   Attrs: 0x0  (zone %d, fcg %d%s)\n",
						z.GetStartLba(), z.GetWritePointer(), z.GetCapacity(), stateNames[z.GetState()], z.GetIndex(), z.GetFcg(), tl)
				}
				return nil
			})
		},
	}
	rt.flags(report)
	report.Flags().StringVar(&state, "state", "all", "only zones in this state")
	report.Flags().Uint32Var(&start, "start", 0, "first zone index")
	report.Flags().Uint32Var(&maxZones, "max", 0, "at most this many zones (0: all)")
	cmd.AddCommand(report)

	for _, a := range []struct {
		name  string
		act   v1.ZoneAction
		short string
	}{
		{"open", v1.ZoneAction_ZONE_ACTION_OPEN, "open a zone explicitly"},
		{"close", v1.ZoneAction_ZONE_ACTION_CLOSE, "close an open zone"},
		{"finish", v1.ZoneAction_ZONE_ACTION_FINISH, "finish a zone (it becomes full)"},
		{"reset", v1.ZoneAction_ZONE_ACTION_RESET, "reset a zone (its data is gone)"},
		{"offline", v1.ZoneAction_ZONE_ACTION_OFFLINE, "take a zone offline (admin)"},
	} {
		var zt zoneTarget
		var all bool
		c := &cobra.Command{
			Use:   a.name + " [ZONE]",
			Short: a.short,
			Args:  cobra.RangeArgs(0, 1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if len(args) == 0 && !all {
					return usageErr(fmt.Errorf("give a zone index or --all"))
				}
				var zone uint64
				if len(args) == 1 {
					var err error
					if zone, err = strconv.ParseUint(args[0], 0, 32); err != nil {
						return usageErr(fmt.Errorf("zone %q: want an index", args[0]))
					}
				}
				dev, ctx, done, err := zt.dial(cmd.Context(), g)
				if err != nil {
					return err
				}
				defer done()
				resp, err := dev.ZoneManagement(ctx, &v1.ZoneManagementRequest{Device: zt.device, Zone: uint32(zone), Action: a.act, SelectAll: all})
				if err != nil {
					return err
				}
				return g.emit(resp, func(w io.Writer) error {
					if all {
						_, err := fmt.Fprintf(w, "%s: all zones\n", a.name)
						return err
					}
					_, err := fmt.Fprintf(w, "%s: zone %d\n", a.name, zone)
					return err
				})
			},
		}
		zt.flags(c)
		c.Flags().BoolVar(&all, "all", false, "every zone (select all; admin)")
		cmd.AddCommand(c)
	}

	var it zoneTarget
	id := &cobra.Command{
		Use:   "id",
		Short: "identify the drive: geometry, zone size and capacity, MAR/MOR (like nvme zns id-ns)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dev, ctx, done, err := it.dial(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer done()
			r, err := dev.Identify(ctx, &v1.IdentifyRequest{Device: it.device})
			if err != nil {
				return err
			}
			return g.emit(r, func(w io.Writer) error {
				t := table(w)
				t.row("node:\t%s\tdevice: %d", r.GetNodeId(), r.GetDevice())
				t.row("zsze (zone size):\t%d blocks\t(%s)", r.GetZoneSize(), bytesHuman(r.GetZoneSize()*uint64(r.GetBlockSize())))
				t.row("zcap (zone capacity):\t%d blocks", r.GetZoneCapacity())
				t.row("nr_zones:\t%d", r.GetNumZones())
				t.row("mar (max active):\t%d\t(0: no limit)", r.GetMaxActiveZones())
				t.row("mor (max open):\t%d", r.GetMaxOpenZones())
				t.row("lbaf:\t%d bytes", r.GetBlockSize())
				t.row("flash:\t%d channels x %d ways, %d pages/block of %d bytes, %d blocks/chip, dzone %d", r.GetChannels(), r.GetWays(), r.GetPagesPerBlock(), r.GetPageSize(), r.GetBlocksPerChip(), r.GetDzone())
				tm := r.GetTiming()
				t.row("media:\t%s\tread %dns program %dns dma %dns erase %dns copyback %.2f", strings.TrimPrefix(r.GetMedia().String(), "MEDIA_"), tm.GetReadNs(), tm.GetProgramNs(), tm.GetDmaNs(), tm.GetEraseNs(), tm.GetCopybackRatio())
				t.row("write cache:\t%s", bytesHuman(r.GetWriteCacheBytes()))
				t.row("ipu budget:\t%d blocks", r.GetIpuBudgetBlocks())
				t.row("clock:\t%s\tscale %.1f", strings.TrimPrefix(r.GetClock().String(), "CLOCK_KIND_"), r.GetTimeScale())
				return t.flush()
			})
		},
	}
	it.flags(id)

	var mt zoneTarget
	mapping := &cobra.Command{
		Use:   "mapping",
		Short: "ZNS+ identify_mapping: the chunk-address bits that select chip group and chip",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dev, ctx, done, err := mt.dial(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer done()
			r, err := dev.IdentifyMapping(ctx, &v1.IdentifyMappingRequest{Device: mt.device})
			if err != nil {
				return err
			}
			return g.emit(r, func(w io.Writer) error {
				t := table(w)
				t.row("blocks per chunk:\t%d", r.GetBlocksPerChunk())
				t.row("chunks per zone:\t%d", r.GetChunksPerZone())
				t.row("dzone / fcgs:\t%d / %d", r.GetDzone(), r.GetFcgs())
				for _, f := range r.GetFields() {
					t.row("%s:\tbits %d..%d\t%s", f.GetName(), f.GetLsb(), f.GetLsb()+f.GetWidth(), f.GetDescription())
				}
				t.row("formula:\t%s", r.GetFormula())
				return t.flush()
			})
		},
	}
	mt.flags(mapping)

	var lt zoneTarget
	logCmd := &cobra.Command{
		Use:   "log",
		Short: "the drive's statistics page (WAF, copyback, plugging, cache, chips, erases)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dev, ctx, done, err := lt.dial(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer done()
			r, err := dev.GetLog(ctx, &v1.GetLogRequest{Device: lt.device})
			if err != nil {
				return err
			}
			return g.emit(r, func(w io.Writer) error {
				t := table(w)
				t.row("host blocks written / read:\t%d / %d", r.GetHostBlocksWritten(), r.GetHostBlocksRead())
				t.row("nand pages programmed / read:\t%d / %d", r.GetNandPagesProgrammed(), r.GetNandPagesRead())
				t.row("waf:\t%.3f", r.GetWaf())
				t.row("copies (blocks):\tcopyback %d, read-and-program %d", r.GetCopybackBlocks(), r.GetReadProgramBlocks())
				t.row("plugged blocks:\ton demand %d, background %d", r.GetPluggedOnDemand(), r.GetPluggedBackground())
				t.row("write cache:\t%s of %s, %d stalls (%.3f ms)", bytesHuman(r.GetCacheBytes()), bytesHuman(r.GetCacheCapacityBytes()), r.GetCacheStalls(), float64(r.GetCacheStallNs())/1e6)
				t.row("erases:\t%d (erase count %d..%d)", r.GetErases(), r.GetMinEraseCount(), r.GetMaxEraseCount())
				t.row("zones open / active:\t%d / %d", r.GetOpenZones(), r.GetActiveZones())
				var states []string
				for k, v := range r.GetZonesByState() {
					states = append(states, fmt.Sprintf("%s %d", k, v))
				}
				sort.Strings(states)
				t.row("zones by state:\t%s", strings.Join(states, ", "))
				t.row("ipu:\t%d of %d blocks", r.GetIpuUsedBlocks(), r.GetIpuBudgetBlocks())
				var chips []string
				for _, c := range r.GetChips() {
					chips = append(chips, fmt.Sprintf("%.2f", c.GetUtilization()))
				}
				if len(chips) > 0 {
					t.row("chip utilization:\t%s", strings.Join(chips, " "))
				}
				t.row("modelled time:\t%.3f ms", float64(r.GetElapsedNs())/1e6)
				return t.flush()
			})
		},
	}
	lt.flags(logCmd)

	var ct zoneTarget
	var peer, peerAddr string
	var peerDev uint32
	compact := &cobra.Command{
		Use:   "compact SRC_LBA:BLOCKS:DST_LBA...",
		Short: "ZNS+ zone_compaction by hand: copy ranges inside the drive (or --peer to another node) and wait",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &v1.ZoneCompactionRequest{Device: ct.device}
			for _, a := range args {
				p := strings.Split(a, ":")
				if len(p) != 3 {
					return usageErr(fmt.Errorf("%q: want SRC_LBA:BLOCKS:DST_LBA", a))
				}
				var n [3]uint64
				for i, s := range p {
					v, err := strconv.ParseUint(s, 0, 64)
					if err != nil {
						return usageErr(fmt.Errorf("%q: %q is not a number", a, s))
					}
					n[i] = v
				}
				c := &v1.CompactionCopy{SrcLba: n[0], Blocks: uint32(n[1]), DstLba: n[2]}
				if peer != "" {
					c.Peer = &v1.PeerTarget{NodeId: peer, Addr: peerAddr, Device: peerDev}
				}
				req.Copies = append(req.Copies, c)
			}
			dev, ctx, done, err := ct.dial(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer done()
			op, err := dev.ZoneCompaction(ctx, req)
			if err != nil {
				return err
			}
			g.progress("compaction %s started; waiting…", op.GetOperationId())
			res, err := dev.WaitCompaction(ctx, &v1.WaitCompactionRequest{Device: ct.device, OperationId: op.GetOperationId()})
			if err != nil {
				return err
			}
			return g.emit(res, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "compaction %s: copyback %d, read-and-program %d, remote %d blocks; modelled %.3f ms\n",
					res.GetOperationId(), res.GetCopybackBlocks(), res.GetReadProgramBlocks(), res.GetRemoteBlocks(), float64(res.GetLatencyNs())/1e6)
				return err
			})
		},
	}
	ct.flags(compact)
	compact.Flags().StringVar(&peer, "peer", "", "destination node id (cross-node compaction)")
	compact.Flags().StringVar(&peerAddr, "peer-addr", "", "destination node address")
	compact.Flags().Uint32Var(&peerDev, "peer-device", 0, "destination device on the peer")

	var tt zoneTarget
	var bitmapFile, valid, mode string
	tlOpen := &cobra.Command{
		Use:   "tl-open ZONE",
		Short: "ZNS+ TL_open by hand: open a zone for threaded logging with a valid-block bitmap",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			zone, err := strconv.ParseUint(args[0], 0, 32)
			if err != nil {
				return usageErr(fmt.Errorf("zone %q: want an index", args[0]))
			}
			var pm v1.PlugMode
			switch mode {
			case "lba":
				pm = v1.PlugMode_PLUG_MODE_LBA_ORDERED
			case "ppa":
				pm = v1.PlugMode_PLUG_MODE_PPA_ORDERED
			default:
				return usageErr(fmt.Errorf("--mode %q: want lba or ppa", mode))
			}
			dev, ctx, done, err := tt.dial(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer done()
			var bm []byte
			if bitmapFile != "" {
				if bm, err = os.ReadFile(bitmapFile); err != nil {
					return usageErr(err)
				}
			} else {
				id, err := dev.Identify(ctx, &v1.IdentifyRequest{Device: tt.device})
				if err != nil {
					return err
				}
				if bm, err = rangesBitmap(valid, id.GetZoneCapacity()); err != nil {
					return usageErr(err)
				}
			}
			if _, err := dev.TLOpen(ctx, &v1.TLOpenRequest{Device: tt.device, Zone: uint32(zone), ValidBitmap: bm, Mode: pm}); err != nil {
				return err
			}
			return g.emit(map[string]any{"zone": zone, "mode": mode}, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "zone %d opened for threaded logging (%s-ordered plugging)\n", zone, mode)
				return err
			})
		},
	}
	tt.flags(tlOpen)
	tlOpen.Flags().StringVar(&bitmapFile, "bitmap-file", "", "file with the valid bitmap (one bit per block, LSB first)")
	tlOpen.Flags().StringVar(&valid, "valid", "", "valid blocks as ranges of zone offsets, e.g. 0-15,32,40-47")
	tlOpen.Flags().StringVar(&mode, "mode", "lba", "plugging order: lba or ppa")

	cmd.AddCommand(id, mapping, logCmd, compact, tlOpen)
	return cmd
}

// rangesBitmap turns "0-15,32" into a bitmap of capacity bits.
func rangesBitmap(spec string, capacity uint64) ([]byte, error) {
	bm := make([]byte, (capacity+7)/8)
	if strings.TrimSpace(spec) == "" {
		return bm, nil
	}
	for _, part := range strings.Split(spec, ",") {
		lo, hi, found := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.ParseUint(lo, 0, 64)
		if err != nil {
			return nil, fmt.Errorf("--valid %q: %q is not a number", spec, lo)
		}
		b := a
		if found {
			if b, err = strconv.ParseUint(hi, 0, 64); err != nil {
				return nil, fmt.Errorf("--valid %q: %q is not a number", spec, hi)
			}
		}
		if b < a || b >= capacity {
			return nil, fmt.Errorf("--valid %q: range %d-%d is outside the zone's %d blocks", spec, a, b, capacity)
		}
		for i := a; i <= b; i++ {
			bm[i/8] |= 1 << (i % 8)
		}
	}
	return bm, nil
}
