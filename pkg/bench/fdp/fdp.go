// Package fdpbench measures device write amplification of the FDP drive
// (pkg/fdp) under placement policies (`zctl bench fdp`). Every run is a
// fresh drive on an in-memory file system (pkg/vfs) and the virtual clock,
// driven by one writer with a seeded generator: the same options give the
// same figures, byte for byte.
//
// Workloads (write unit one flash page; utilization Utilization of the
// LBAs; the drive is first filled, then Passes x the LBAs are written and
// only that measured phase counts):
//
//   - lifetime: two circular logs, a hot one over 20 % of the used LBAs
//     taking 80 % of the writes and a cold one over the rest. Data written
//     together dies together: with each log on its own handle
//     (lifetime-matched), a reclaim unit holds one log's consecutive writes
//     and is wholly invalid when garbage collection takes it (WAF 1).
//   - hotcold: the same split, random overwrites inside each region.
//   - three-stream: three streams of different lifetimes, in the spirit
//     of WARP's adversarial three-stream case (its exact parameters are
//     not reproduced here): a hot random stream (10 % of the used LBAs,
//     65 % of the writes), a warm circular log (30 %, 30 %) and a cold
//     stream (60 %, 5 %, random). Matched, each stream has its own handle;
//     with initially isolated handles garbage collection mixes the
//     survivors of all three in one reclaim unit per group, persistently
//     isolated handles keep them apart. Crossed, the hints say nothing of
//     lifetimes (the adversarial case for placement).
//   - fileserver and varmail: Filebench's personalities as the block I/O
//     a journaling file system with discard sends the drive (fs.go): file
//     data in extents of a next-fit allocator, inode and directory blocks
//     rewritten in place, a circular journal, a trim of every extent of a
//     deleted file. fileserver: files of 128 KiB mean (exponential), per
//     iteration a file created, one appended 16 KiB, one deleted, a
//     journal commit. varmail: 16 KiB files, one created, two appended
//     16 KiB with an fsync each, one deleted: three journal commits. The
//     file set is created up to the utilization (the fill), then
//     iterations run until the host has written Passes x the used
//     capacity, files deleted at random to stay at the utilization. Reads
//     are left out: they move no data on the flash.
//
// Placements: matched (each stream on its own handle; initially isolated
// unless the row says persistently isolated), crossed (each write on a
// random handle: hints that say nothing of lifetimes), one-handle (the same FDP
// drive, every write on handle 0) and no-fdp (a drive with one handle:
// a conventional page-mapped SSD); for the file-system workloads,
// fs-hints (the journal, the metadata and the file data each on its own
// handle, as F2FS tags its logs with write hints) in place of matched.
//
// Figures per row: host and media bytes of the measured phase, WAF =
// media/host, GC copies and copybacks, modelled host throughput and chip
// utilization (busy time over chips x modelled time).
//
// The workloads lfs-fileserver and lfs-varmail are a figure of their own
// (lfs.go, Result.LFS): the log-structured file system itself running
// fileserver and varmail over ZNS, ZNS+ and an FDP drive (pkg/fdpvol) on
// one flash configuration, at the utilizations LFSUtilizations.
package fdpbench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"text/tabwriter"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/fdp"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/vfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Options configure the benchmark.
type Options struct {
	Seed          uint64   `json:"seed"`
	Passes        float64  `json:"passes"`      // measured writes, in multiples of the used LBAs
	Utilization   float64  `json:"utilization"` // fraction of the LBAs the workload uses
	OverProvision float64  `json:"over_provision"`
	RUChips       int      `json:"ru_chips"`
	BlocksPerChip int      `json:"blocks_per_chip"`
	Victim        string   `json:"victim"`
	Workloads     []string `json:"workloads"`
	// The lfs figure (workloads lfs-fileserver and lfs-varmail, lfs.go):
	// file system utilizations, measured writes in multiples of the user
	// capacity, chips and data blocks per chip of its drive.
	LFSUtilizations []float64 `json:"lfs_utilizations,omitempty"`
	LFSOverwrite    float64   `json:"lfs_overwrite,omitempty"`
	LFSChips        int       `json:"lfs_chips,omitempty"`
	LFSZones        int       `json:"lfs_zones,omitempty"`
}

// Defaults: 3 passes at 90 % utilization, 12 % over-provisioning, reclaim
// units of 2 chips, greedy victims, every workload.
func Defaults() Options {
	return Options{Seed: 1, Passes: 3, Utilization: 0.9, OverProvision: 0.12, RUChips: 2, BlocksPerChip: 64, Victim: "greedy",
		Workloads:       []string{"lifetime", "hotcold", "three-stream", "fileserver", "varmail", "lfs-fileserver", "lfs-varmail"},
		LFSUtilizations: []float64{0.80, 0.95}, LFSOverwrite: 1, LFSChips: 16, LFSZones: 32}
}

// Row is one workload under one placement.
type Row struct {
	Workload     string  `json:"workload"`
	Placement    string  `json:"placement"`
	Handles      string  `json:"handles"`
	HostBytes    uint64  `json:"host_bytes"`
	MediaBytes   uint64  `json:"media_bytes"`
	ErasedBytes  uint64  `json:"erased_bytes"`
	WAF          float64 `json:"waf"`
	GCCopies     uint64  `json:"gc_copies"`
	Copybacks    uint64  `json:"copybacks"`
	ModelledMs   float64 `json:"modelled_ms"`
	HostMBps     float64 `json:"host_mb_per_s"`
	ChipUtil     float64 `json:"chip_utilization"`
	RUsReclaimed uint64  `json:"rus_reclaimed"`
	MediaRealloc int     `json:"media_reallocated_events"`
}

// Reference is a figure measured elsewhere, on a different device.
type Reference struct {
	Device string  `json:"device"`
	WAF    float64 `json:"waf"`
	Note   string  `json:"note"`
}

// Result is the whole benchmark.
type Result struct {
	Options    Options     `json:"options"`
	Drive      string      `json:"drive"`
	Rows       []Row       `json:"rows"`
	References []Reference `json:"references"`
	LFSDrive   string      `json:"lfs_drive,omitempty"`
	LFS        []LFSRow    `json:"lfs,omitempty"`
}

// References: WARP (FAST'26) measured its adversarial three-stream
// workload on two commercial FDP drives. Different devices, firmware and
// geometry: context, not targets.
var references = []Reference{
	{Device: "commercial FDP drive A (WARP, FAST'26)", WAF: 4.49, Note: "adversarial three-stream workload, measured on hardware"},
	{Device: "commercial FDP drive B (WARP, FAST'26)", WAF: 2.58, Note: "adversarial three-stream workload, measured on hardware"},
}

func (o Options) config(handles []fdp.HandleType) (fdp.Config, error) {
	f := flash.Small()
	f.Channels, f.Ways = 4, 2
	f.BlocksPerChip = o.BlocksPerChip
	f.PagesPerBlock = 8
	f.SpareBlocksPerChip, f.DZone = 2, 8
	v, err := fdp.ParseVictimPolicy(o.Victim)
	if err != nil {
		return fdp.Config{}, err
	}
	c := fdp.Config{Flash: f, ReclaimGroups: 1, RUChips: o.RUChips, Handles: handles, OverProvision: o.OverProvision, Victim: v}
	return c, c.Validate()
}

type stream struct {
	base, size uint64 // LBAs, in write units
	weight     float64
	circular   bool
	next       uint64
	handle     uint16
}

type placement struct {
	name    string
	handles []fdp.HandleType
	matched bool
	crossed bool // each write on a random handle: hints that carry no lifetime
}

func ii(n int) []fdp.HandleType {
	out := make([]fdp.HandleType, n)
	for i := range out {
		out[i] = fdp.InitiallyIsolated
	}
	return out
}

func pi(n int) []fdp.HandleType {
	out := make([]fdp.HandleType, n)
	for i := range out {
		out[i] = fdp.PersistentlyIsolated
	}
	return out
}

// workload returns the streams (fractions of the used LBAs and of the
// writes) and the placements to compare.
func workload(name string) ([]stream, []placement, error) {
	type s struct {
		frac, weight float64
		circular     bool
	}
	var ss []s
	var pl []placement
	switch name {
	case "lifetime":
		ss = []s{{0.2, 0.8, true}, {0.8, 0.2, true}}
		pl = []placement{{"matched", ii(2), true, false}, {"one-handle", ii(2), false, false}, {"no-fdp", ii(1), false, false}}
	case "hotcold":
		ss = []s{{0.2, 0.8, false}, {0.8, 0.2, false}}
		pl = []placement{{"matched", ii(2), true, false}, {"one-handle", ii(2), false, false}, {"no-fdp", ii(1), false, false}}
	case "three-stream":
		ss = []s{{0.1, 0.65, false}, {0.3, 0.3, true}, {0.6, 0.05, false}}
		pl = []placement{{"matched", ii(3), true, false}, {"matched", pi(3), true, false}, {"crossed", ii(3), false, true}, {"one-handle", ii(3), false, false}, {"no-fdp", ii(1), false, false}}
	default:
		if _, ok := fsProfiles[name]; ok {
			return nil, fsPlacements(), nil
		}
		return nil, nil, &zerr.InvalidArgumentError{Field: "workloads", Reason: fmt.Sprintf("unknown workload %q (want lifetime, hotcold, three-stream, fileserver or varmail)", name)}
	}
	out := make([]stream, len(ss))
	for i, x := range ss {
		out[i] = stream{size: uint64(x.frac * 1e6), weight: x.weight, circular: x.circular, handle: uint16(i)}
	}
	return out, pl, nil
}

// Run runs every workload under every placement.
func Run(ctx context.Context, o Options) (*Result, error) {
	d := Defaults()
	if o.Passes <= 0 {
		o.Passes = d.Passes
	}
	if o.Utilization <= 0 || o.Utilization > 1 {
		o.Utilization = d.Utilization
	}
	if o.OverProvision <= 0 {
		o.OverProvision = d.OverProvision
	}
	if o.BlocksPerChip <= 0 {
		o.BlocksPerChip = d.BlocksPerChip
	}
	if o.Victim == "" {
		o.Victim = d.Victim
	}
	if len(o.Workloads) == 0 {
		o.Workloads = d.Workloads
	}
	if len(o.LFSUtilizations) == 0 {
		o.LFSUtilizations = d.LFSUtilizations
	}
	if o.LFSOverwrite <= 0 {
		o.LFSOverwrite = d.LFSOverwrite
	}
	if o.LFSChips == 0 {
		o.LFSChips = d.LFSChips
	}
	if o.LFSZones == 0 {
		o.LFSZones = d.LFSZones
	}
	if o.LFSChips < 2 || o.LFSChips%2 != 0 {
		return nil, bad("lfs_chips", "must be a positive even number (channels x 2 ways), got %d", o.LFSChips)
	}
	if o.LFSZones < 8 {
		return nil, bad("lfs_zones", "the file system needs at least 8 zones, got %d", o.LFSZones)
	}
	for _, u := range o.LFSUtilizations {
		if !(u > 0 && u < 1) {
			return nil, bad("lfs_utilizations", "each must be in (0, 1), got %v", u)
		}
	}
	res := &Result{Options: o, References: references}
	var lfsWls []string
	for _, w := range o.Workloads {
		if wl, ok := lfsWorkloads[w]; ok {
			lfsWls = append(lfsWls, wl)
			continue
		}
		streams, pls, err := workload(w)
		if err != nil {
			return nil, err
		}
		for _, p := range pls {
			cfg, err := o.config(p.handles)
			if err != nil {
				return nil, err
			}
			if res.Drive == "" {
				lbas, phys := describe(cfg)
				res.Drive = fmt.Sprintf("%d chips, %d blocks/chip, %d pages/block, %d KiB pages, 4 KiB LBAs: %d MiB flash, %d MiB of LBAs; reclaim unit %d chips (%d KiB)",
					cfg.Flash.Channels*cfg.Flash.Ways, cfg.Flash.BlocksPerChip, cfg.Flash.PagesPerBlock, cfg.Flash.PageSize>>10, phys>>20, lbas>>20,
					cfg.RUChips, cfg.RUChips*cfg.Flash.PagesPerBlock*cfg.Flash.PageSize>>10)
			}
			var row Row
			if _, fs := fsProfiles[w]; fs {
				row, err = runFS(ctx, o, cfg, w, p)
			} else {
				row, err = runOne(ctx, o, cfg, w, streams, p)
			}
			if err != nil {
				return nil, err
			}
			res.Rows = append(res.Rows, row)
		}
	}
	if len(lfsWls) > 0 {
		rows, drive, err := runLFSFigure(ctx, o, lfsWls)
		if err != nil {
			return nil, err
		}
		res.LFS, res.LFSDrive = rows, drive
	}
	return res, nil
}

// lfsWorkloads are the workload names of the lfs figure.
var lfsWorkloads = map[string]string{"lfs-fileserver": "fileserver", "lfs-varmail": "varmail"}

func describe(c fdp.Config) (lbas, phys uint64) {
	f := c.Flash
	slots := uint64(f.Channels*f.Ways*f.BlocksPerChip*f.PagesPerBlock) * uint64(f.PageSize/f.BlockSize)
	return uint64(float64(slots)*(1-c.OverProvision)) * uint64(f.BlockSize), slots * uint64(f.BlockSize)
}

func runOne(ctx context.Context, o Options, cfg fdp.Config, name string, proto []stream, p placement) (Row, error) {
	clk := clock.NewVirtual()
	dev, err := fdp.Create("/bench-fdp", cfg, clk, fdp.WithFS(vfs.NewCrashableMem()))
	if err != nil {
		return Row{}, err
	}
	defer dev.Close()
	unit := uint64(cfg.Flash.PageSize / cfg.Flash.BlockSize)
	units := uint64(float64(dev.Capacity())*o.Utilization) / unit
	streams := append([]stream(nil), proto...)
	var base uint64
	for i := range streams {
		sz := max(uint64(float64(units)*float64(streams[i].size)/1e6), 1)
		if i == len(streams)-1 {
			sz = units - base
		}
		streams[i].base, streams[i].size = base, sz
		base += sz
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	hrng := rand.New(rand.NewPCG(o.Seed, 0x4a4d)) // crossed hints: a stream of its own, so the workload is the same
	buf := make([]byte, int(unit)*cfg.Flash.BlockSize)
	write := func(s *stream, u uint64) error {
		h := uint16(0)
		switch {
		case p.matched:
			h = s.handle
		case p.crossed:
			h = uint16(hrng.IntN(len(p.handles)))
		}
		buf[0], buf[1] = byte(u), byte(u>>8)
		_, err := dev.Write(ctx, (s.base+u)*unit, buf, fdp.PlacementID{Handle: h}, fdp.Flags{})
		return err
	}
	// Fill: every stream's region once, in order.
	for i := range streams {
		for u := range streams[i].size {
			if err := write(&streams[i], u); err != nil {
				return Row{}, err
			}
		}
	}
	m := startMeasure(dev, clk)
	total := uint64(o.Passes * float64(units))
	for range total {
		x := rng.Float64()
		i := 0
		for ; i < len(streams)-1; i++ {
			if x < streams[i].weight {
				break
			}
			x -= streams[i].weight
		}
		s := &streams[i]
		var u uint64
		if s.circular {
			u = s.next
			s.next = (s.next + 1) % s.size
		} else {
			u = rng.Uint64N(s.size)
		}
		if err := write(s, u); err != nil {
			return Row{}, err
		}
	}
	return m.row(dev, clk, name, p), dev.Close()
}

// row is the figures of the measured phase that started at m.
func (m measure) row(dev *fdp.Device, clk clock.Clock, name string, p placement) Row {
	before := m.before
	after := dev.Stats()
	st := dev.Status()
	dt := clk.Now() - m.t0
	var busy int64
	for c, b := range st.ChipBusyNs {
		busy += b - m.busy0[c]
	}
	row := Row{Workload: name, Placement: p.name, Handles: handlesName(p.handles),
		HostBytes: after.HostBytesWritten - before.HostBytesWritten, MediaBytes: after.MediaBytesWritten - before.MediaBytesWritten,
		ErasedBytes: after.MediaBytesErased - before.MediaBytesErased, GCCopies: after.GCCopies - before.GCCopies,
		Copybacks: after.Copybacks - before.Copybacks, RUsReclaimed: after.RUsReclaimed - before.RUsReclaimed,
		ModelledMs: float64(dt) / float64(time.Millisecond)}
	evs := dev.Events(0)
	for _, e := range evs[min(m.ev0, len(evs)):] {
		if e.Type == fdp.EventMediaReallocated {
			row.MediaRealloc++
		}
	}
	if row.HostBytes > 0 {
		row.WAF = round(float64(row.MediaBytes)/float64(row.HostBytes), 3)
	}
	if dt > 0 {
		row.HostMBps = round(float64(row.HostBytes)/dt.Seconds()/1e6, 1)
		row.ChipUtil = round(float64(busy)/float64(int64(dt)*int64(len(st.ChipBusyNs))), 3)
	}
	row.ModelledMs = round(row.ModelledMs, 1)
	return row
}

func bad(field, format string, a ...any) error {
	return &zerr.InvalidArgumentError{Field: field, Reason: fmt.Sprintf(format, a...)}
}

func round(x float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	if x < 0 {
		return -float64(int64(-x*p+0.5)) / p
	}
	return float64(int64(x*p+0.5)) / p
}

func handlesName(h []fdp.HandleType) string {
	if len(h) == 1 {
		return "1"
	}
	kind := "ii"
	if h[0] == fdp.PersistentlyIsolated {
		kind = "pi"
	}
	return fmt.Sprintf("%d %s", len(h), kind)
}

// WriteTable writes the rows and the references.
func (r *Result) WriteTable(w io.Writer) error {
	if len(r.Rows) == 0 && len(r.LFS) > 0 {
		return writeLFSTable(w, r)
	}
	fmt.Fprintf(w, "drive: %s; %.0f%% utilization, %.1f passes measured after a fill, %s victims, seed %d\n\n",
		r.Drive, r.Options.Utilization*100, r.Options.Passes, r.Options.Victim, r.Options.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tPLACEMENT\tHANDLES\tWAF\tHOST MiB\tMEDIA MiB\tERASED MiB\tGC COPIES\tCOPYBACKS\tRUs RECLAIMED\tHOST MB/s\tCHIP UTIL")
	for _, x := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%d\t%.1f\t%.3f\n", x.Workload, x.Placement, x.Handles, x.WAF,
			float64(x.HostBytes)/(1<<20), float64(x.MediaBytes)/(1<<20), float64(x.ErasedBytes)/(1<<20), x.GCCopies, x.Copybacks, x.RUsReclaimed, x.HostMBps, x.ChipUtil)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nmeasured elsewhere, on different devices (context, not targets):")
	for _, ref := range r.References {
		fmt.Fprintf(w, "  %s: WAF %.2f (%s)\n", ref.Device, ref.WAF, ref.Note)
	}
	if len(r.LFS) > 0 {
		return writeLFSTable(w, r)
	}
	return nil
}
