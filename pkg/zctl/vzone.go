package zctl

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/spf13/cobra"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
)

func parseID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, usageErr(fmt.Errorf("v-zone id %q: want a number", s))
	}
	return id, nil
}

func vzoneCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "vzone", Short: "v-zones of a namespace: layout, state, data"}
	withVZone := func(use, short string, run func(cmd *cobra.Command, c *client.Client, vz *client.VZone) error) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return err
			}
			c, err := g.connect(cmd.Context(), true)
			if err != nil {
				return err
			}
			defer c.Close()
			return run(cmd, c, c.VZone(id))
		}}
	}
	show := func(cmd *cobra.Command, vz *client.VZone) error {
		info, err := vz.ReportZone(cmd.Context())
		if err != nil {
			return err
		}
		l, err := vz.Layout(cmd.Context())
		if err != nil {
			return err
		}
		out := struct {
			client.Info
			Layout any `json:"layout"`
		}{info, l}
		return g.emit(out, func(w io.Writer) error {
			t := table(w)
			t.row("v-zone:\t%d", info.ID)
			t.row("state:\t%s", info.State)
			t.row("write pointer:\t%d of %d blocks (%s)", info.WritePointer, info.Capacity, bytesHuman(info.WritePointer*info.BlockSize))
			t.row("generation:\t%d", info.Generation)
			t.row("threaded logging:\t%s", yesno(info.ThreadedLog))
			if err := t.flush(); err != nil {
				return err
			}
			t = table(w)
			t.row("GROUP\tSTART\tCAPACITY\tWIDTH\tSTRIPE\tZONES (node/device/zone)")
			for _, grp := range l.GetGroups() {
				zs := ""
				for i, z := range grp.GetZones() {
					if i > 0 {
						zs += " "
					}
					zs += fmt.Sprintf("%s/%d/%d", z.GetNode(), z.GetDevice(), z.GetZone())
					if !z.GetAvailable() {
						zs += "(down)"
					}
				}
				t.row("%d\t%d\t%d\t%d\t%s\t%s", grp.GetIndex(), grp.GetStart(), grp.GetCapacity(), grp.GetWidth(), bytesHuman(uint64(grp.GetStripeBlocks())*info.BlockSize), zs)
			}
			return t.flush()
		})
	}

	list := &cobra.Command{
		Use:   "list",
		Short: "the namespace's v-zones",
		Args:  cobra.NoArgs,
		RunE: g.run(true, func(cmd *cobra.Command, c *client.Client, _ []string) error {
			vzs, err := c.ListVZones(cmd.Context())
			if err != nil {
				return err
			}
			return g.emit(msgs(vzs), func(w io.Writer) error {
				t := table(w)
				t.row("VZONE\tSTATE\tCAPACITY\tZONES USED\tGROUPS\tWIDTH\tSTRIPE BLOCKS\tGENERATION")
				for _, v := range vzs {
					var width, stripe uint32
					if n := len(v.GetGroups()); n > 0 {
						width, stripe = v.GetGroups()[n-1].GetWidth(), v.GetGroups()[n-1].GetStripeBlocks()
					}
					t.row("%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d", v.GetId(), vzState(v.GetState()), v.GetCapacity(), v.GetZonesUsed(), len(v.GetGroups()), width, stripe, v.GetGeneration())
				}
				return t.flush()
			})
		}),
	}
	open := &cobra.Command{
		Use:   "open",
		Short: "open a new v-zone (the lowest empty id) and allocate its first stripe group",
		Args:  cobra.NoArgs,
		RunE: g.run(true, func(cmd *cobra.Command, c *client.Client, _ []string) error {
			vz, err := c.OpenVZone(cmd.Context())
			if err != nil {
				return err
			}
			return show(cmd, vz)
		}),
	}
	var offset int64
	var file, outFile string
	var blocks uint64
	write := withVZone("write ID [FILE]", "write FILE (or stdin) at the write pointer (or --offset); the last block is zero-padded", func(cmd *cobra.Command, c *client.Client, vz *client.VZone) error {
		return nil
	})
	write.Args = cobra.RangeArgs(1, 2)
	write.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := parseID(args[0])
		if err != nil {
			return err
		}
		var in io.Reader = os.Stdin
		if len(args) == 2 && args[1] != "-" {
			f, err := os.Open(args[1])
			if err != nil {
				return usageErr(err)
			}
			defer f.Close()
			in = f
		}
		data, err := io.ReadAll(in)
		if err != nil {
			return err
		}
		if len(data) == 0 {
			return usageErr(fmt.Errorf("no data to write"))
		}
		c, err := g.connect(cmd.Context(), true)
		if err != nil {
			return err
		}
		defer c.Close()
		vz := c.VZone(id)
		info, err := vz.ReportZone(cmd.Context())
		if err != nil {
			return err
		}
		bs := info.BlockSize
		if pad := uint64(len(data)) % bs; pad != 0 {
			data = append(data, make([]byte, bs-pad)...)
		}
		off := info.WritePointer
		if offset >= 0 {
			off = uint64(offset)
		}
		g.progress("writing %s to v-zone %d at block %d…", bytesHuman(uint64(len(data))), id, off)
		if err := vz.Write(cmd.Context(), off, data); err != nil {
			return err
		}
		res := map[string]uint64{"vzone": id, "offset": off, "blocks": uint64(len(data)) / bs, "write_pointer": off + uint64(len(data))/bs}
		return g.emit(res, func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "wrote %d blocks at %d; write pointer %d\n", res["blocks"], off, res["write_pointer"])
			return err
		})
	}
	write.Flags().Int64Var(&offset, "offset", -1, "block offset (default: the write pointer)")

	read := withVZone("read ID", "read blocks to stdout (or --out FILE)", func(cmd *cobra.Command, c *client.Client, vz *client.VZone) error {
		data, err := vz.Read(cmd.Context(), uint64(max(offset, 0)), blocks)
		if err != nil {
			return err
		}
		var out io.Writer = g.Out
		if outFile != "" && outFile != "-" {
			f, err := os.Create(outFile)
			if err != nil {
				return usageErr(err)
			}
			defer f.Close()
			out = f
		}
		_, err = out.Write(data)
		return err
	})
	read.Flags().Int64Var(&offset, "offset", 0, "first block")
	read.Flags().Uint64Var(&blocks, "blocks", 1, "blocks to read")
	read.Flags().StringVar(&outFile, "out", "", "file to write (default stdout)")
	_ = file

	cmd.AddCommand(list, open, write, read,
		withVZone("show ID", "layout (stripe groups → physical zones), width, stripe size, write pointer", func(cmd *cobra.Command, _ *client.Client, vz *client.VZone) error {
			return show(cmd, vz)
		}),
		withVZone("finish ID", "finish a v-zone: no more writes, its active zones return", func(cmd *cobra.Command, _ *client.Client, vz *client.VZone) error {
			if err := vz.Finish(cmd.Context()); err != nil {
				return err
			}
			return show(cmd, vz)
		}),
		withVZone("reset ID", "reset a v-zone: its physical zones return to the pool (data is gone)", func(cmd *cobra.Command, _ *client.Client, vz *client.VZone) error {
			if err := vz.Reset(cmd.Context()); err != nil {
				return err
			}
			return show(cmd, vz)
		}),
		withVZone("append ID", "append stdin at the write pointer and print the offset", func(cmd *cobra.Command, c *client.Client, vz *client.VZone) error {
			data, err := io.ReadAll(os.Stdin)
			if err != nil {
				return err
			}
			info, err := vz.ReportZone(cmd.Context())
			if err != nil {
				return err
			}
			if pad := uint64(len(data)) % info.BlockSize; pad != 0 || len(data) == 0 {
				data = append(data, make([]byte, info.BlockSize-pad)...)
			}
			off, err := vz.Append(cmd.Context(), data)
			if err != nil {
				return err
			}
			return g.emit(map[string]uint64{"offset": off}, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, off)
				return err
			})
		}),
	)
	return cmd
}

func vzState(s v1.VZoneState) string {
	switch s {
	case v1.VZoneState_VZONE_STATE_OPEN:
		return "open"
	case v1.VZoneState_VZONE_STATE_FULL:
		return "full"
	case v1.VZoneState_VZONE_STATE_EMPTY:
		return "empty"
	}
	return "unknown"
}
