package fdpbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/fdp"
	"github.com/zonefleet/zonefleet/pkg/fdpvol"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/vfs"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// The lfs figure: the log-structured file system (pkg/lfs) running
// fileserver and varmail on one flash configuration behind three
// interfaces.
//
//   - zns: a ZNS drive (pkg/zns, pkg/lfs/devvol), recycling by host copy.
//   - zns+: the same drive with ZNS+'s threaded logging and in-storage zone
//     compaction (lfs.ModeZNSPlus).
//   - fdp-matched: an FDP drive (pkg/fdp, pkg/fdpvol) on the same chips,
//     its spare blocks as over-provisioning, each of the file system's six
//     logs and its metadata on its own initially isolated handle (as F2FS
//     passes its logs' write hints); recycling by host copy.
//   - fdp-one-handle: the same FDP drive with every write on handle 0.
//
// The drive: LFSChips chips (channels x 2 ways), MLC, 4 pages of 16 KiB per
// block, LFSZones blocks per chip for data plus 16 spare. On ZNS a zone is
// one block on every chip (1 MiB with 16 chips) and the spare blocks serve
// threaded logging; on FDP the spare blocks are the over-provisioning and
// the reclaim unit is one block on every chip, as the v-zone: the file
// system sees the same zones on both, each striped over every chip. (The
// spare flash must hold an open reclaim unit per handle plus garbage
// collection's reserve, pkg/fdp Config.Validate: 16 spare blocks per chip
// hold the eight units of seven handles and two more.) The workloads follow package znsplus's
// (ZNS+ Table 3, scaled), in one thread: fileserver 128 KiB files, 30 %
// whole-file rewrites, 50 % 16 KiB overwrites, 20 % whole-file reads;
// varmail 28 KiB files, 40 % delete and create with fsync, 40 % rewrite of
// the last 8 KiB with fsync, 20 % reads. The file system is filled to the
// utilization, then the measured phase writes LFSOverwrite x its user
// capacity.
//
// Figures per row (measured phase): throughput (user bytes per modelled
// second), fs WAF (blocks the file system had the drive write, with IZC
// copies and threaded logging's plugs, per user block), device WAF (FDP:
// media over host bytes; ZNS has no device-side garbage collection: 1),
// flash WAF (flash programs per user block: their product), chip
// utilization, and the file system's recycling counts. All on the virtual
// clock, one goroutine: the same options print the same figures.

// LFSVolumes are the rows' volume kinds, in order.
var LFSVolumes = []string{"zns", "zns+", "fdp-matched", "fdp-one-handle"}

const lfsSpareBlocks = 16

// LFSRow is one workload on one volume at one utilization.
type LFSRow struct {
	Workload       string  `json:"workload"`
	Utilization    float64 `json:"utilization"`
	Volume         string  `json:"volume"`
	Mode           string  `json:"lfs_mode"`
	UserMiB        float64 `json:"user_mib"`
	ModelledMs     float64 `json:"modelled_ms"`
	ThroughputMBps float64 `json:"throughput_mb_per_s"`
	FSWAF          float64 `json:"fs_waf"`
	DeviceWAF      float64 `json:"device_waf"`
	FlashWAF       float64 `json:"flash_waf"`
	ChipUtil       float64 `json:"chip_utilization"`
	DeviceGCCopies uint64  `json:"device_gc_copies"`
	HostMoved      uint64  `json:"fs_blocks_moved_by_host"`
	IZCMoved       uint64  `json:"fs_blocks_moved_in_storage"`
	TLSegments     uint64  `json:"fs_segments_threaded_logging"`
}

func (o Options) lfsFlash() flash.Config {
	f := flash.Defaults()
	f.Channels, f.Ways, f.DZone = o.LFSChips/2, 2, o.LFSChips
	f.PagesPerBlock = 4
	f.SpareBlocksPerChip = lfsSpareBlocks
	f.BlocksPerChip = o.LFSZones + lfsSpareBlocks
	f.MaxOpenZones, f.MaxActiveZones = 16, 16
	f.WriteCacheBytes = int64(o.LFSChips) * 2 * int64(f.PageSize)
	f.ZoneCapacity = 0
	return f
}

// lfsFDPConfig is the FDP drive on the same flash: one handle per zone
// class, reclaim units of 4 chips, the spare blocks as over-provisioning.
func (o Options) lfsFDPConfig() fdp.Config {
	f := o.lfsFlash()
	hs := make([]fdp.HandleType, lfs.NumZoneClasses)
	for i := range hs {
		hs[i] = fdp.InitiallyIsolated
	}
	return fdp.Config{Flash: f, ReclaimGroups: 1, RUChips: 0, Handles: hs,
		OverProvision: float64(lfsSpareBlocks) / float64(f.BlocksPerChip), Victim: fdp.Greedy}
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// runLFS fills a fresh file system on a fresh drive of kind vk to util and
// runs the measured phase of workload wl.
func runLFS(ctx context.Context, o Options, wl string, util float64, vk string) (LFSRow, error) {
	clk := clock.NewVirtual()
	fc := o.lfsFlash()
	r := fc.Resolved()
	chips := o.LFSChips
	var (
		vol   lfs.Volume
		mode  = lfs.ModeZNS
		busy  func() time.Duration
		media func() (host, media, gc uint64)
	)
	switch vk {
	case "zns", "zns+":
		d, err := zns.Create("/lfs-zns", fc, clk, zns.WithFS(vfs.NewCrashableMem()), zns.WithLogger(quietLog))
		if err != nil {
			return LFSRow{}, err
		}
		defer d.Close()
		dv, err := devvol.New(d)
		if err != nil {
			return LFSRow{}, err
		}
		vol = dv
		if vk == "zns+" {
			mode = lfs.ModeZNSPlus
		}
		busy = func() time.Duration {
			var t time.Duration
			for _, b := range d.Log().ChipBusy {
				t += b
			}
			return t
		}
	case "fdp-matched", "fdp-one-handle":
		cfg := o.lfsFDPConfig()
		d, err := fdp.Create("/lfs-fdp", cfg, clk, fdp.WithFS(vfs.NewCrashableMem()), fdp.WithLogger(quietLog))
		if err != nil {
			return LFSRow{}, err
		}
		defer d.Close()
		var hs []uint16
		if vk == "fdp-one-handle" {
			hs = fdpvol.OneHandle()
		}
		fv, err := fdpvol.New(ctx, d, fdpvol.Options{ZoneRUs: 1, Handles: hs})
		if err != nil {
			return LFSRow{}, err
		}
		vol = fv
		busy = func() time.Duration {
			var t int64
			for _, b := range d.Status().ChipBusyNs {
				t += b
			}
			return time.Duration(t)
		}
		media = func() (uint64, uint64, uint64) {
			s := d.Stats()
			return s.HostBytesWritten, s.MediaBytesWritten, s.GCCopies
		}
	default:
		return LFSRow{}, bad("volume", "unknown volume kind %q", vk)
	}
	if err := lfs.Mkfs(ctx, vol, lfs.MkfsOptions{}); err != nil {
		return LFSRow{}, err
	}
	chunk := time.Duration(max(r.PageSize/r.BlockSize, 1))
	link := func(n int) time.Duration {
		return time.Duration(float64(n) / float64(r.HostLinkBytesPerSec) * float64(time.Second))
	}
	fs, err := lfs.Mount(ctx, vol, lfs.Options{Mode: mode, Clock: clk, CacheBlocks: 1024, ReadAheadBlocks: -1,
		FlashReadCost: r.ReadLatency + r.DMALatency, HostWriteCost: link(r.PageSize),
		HSRCopyCost:  time.Duration(float64(r.ReadLatency+r.ProgramLatency)*r.CopybackRatio) / chunk,
		HSRWriteCost: link(r.BlockSize) + r.ProgramLatency/chunk})
	if err != nil {
		return LFSRow{}, err
	}
	defer func() { _ = fs.Unmount(ctx) }()
	st, err := fs.Statfs(ctx)
	if err != nil {
		return LFSRow{}, err
	}
	w := &lfsWorkload{fs: fs, rng: rand.New(rand.NewPCG(o.Seed, 0x1f5)), varmail: wl == "varmail", fileSize: 128 << 10}
	if w.varmail {
		w.fileSize = 28 << 10
	}
	w.buf = make([]byte, w.fileSize)
	if err := w.fill(ctx, util, st.Blocks); err != nil {
		return LFSRow{}, fmt.Errorf("%s on %s at %.0f%%: fill: %w", wl, vk, util*100, err)
	}
	s0 := fs.Stats()
	t0, b0 := clk.Now(), busy()
	var h0, m0, g0 uint64
	if media != nil {
		h0, m0, g0 = media()
	}
	budget := uint64(o.LFSOverwrite * float64(st.Blocks) * float64(st.Bsize))
	written, err := w.measure(ctx, budget)
	if err != nil {
		return LFSRow{}, fmt.Errorf("%s on %s at %.0f%%: %w", wl, vk, util*100, err)
	}
	if err := fs.Sync(ctx); err != nil {
		return LFSRow{}, err
	}
	el := clk.Now() - t0
	s := fs.Stats()
	row := LFSRow{Workload: wl, Utilization: util, Volume: vk, Mode: mode.String(), UserMiB: round(float64(written)/(1<<20), 3),
		ModelledMs: round(float64(el)/float64(time.Millisecond), 3),
		HostMoved:  (s.MovedHostCopy + s.MovedHostCached + s.MovedHostDirty) - (s0.MovedHostCopy + s0.MovedHostCached + s0.MovedHostDirty),
		IZCMoved:   s.MovedIZC - s0.MovedIZC, TLSegments: s.TLRecycledSegments - s0.TLRecycledSegments, DeviceWAF: 1}
	plugged := s.PluggedOnDemand + s.PluggedBackground - s0.PluggedOnDemand - s0.PluggedBackground
	user := s.UserBlocksWritten - s0.UserBlocksWritten
	if user > 0 {
		row.FSWAF = round(float64(s.DriveBlocksWritten-s0.DriveBlocksWritten+plugged)/float64(user), 3)
		row.FlashWAF = row.FSWAF
	}
	if media != nil {
		h, m, g := media()
		row.DeviceGCCopies = g - g0
		if h > h0 {
			row.DeviceWAF = round(float64(m-m0)/float64(h-h0), 3)
		}
		if user > 0 {
			row.FlashWAF = round(float64(m-m0)/float64(user*uint64(st.Bsize)), 3)
		}
	}
	if el > 0 {
		row.ThroughputMBps = round(float64(written)/1e6/el.Seconds(), 3)
		row.ChipUtil = round(float64(busy()-b0)/float64(chips)/float64(el), 3)
	}
	return row, nil
}

// lfsWorkload is fileserver or varmail on one thread, in the root
// directory.
type lfsWorkload struct {
	fs       *lfs.FS
	rng      *rand.Rand
	varmail  bool
	fileSize int
	files    []string
	next     int
	buf      []byte
}

func (w *lfsWorkload) fill(ctx context.Context, util float64, blocks uint64) error {
	per := uint64(w.fileSize/4096 + 2) // its blocks, an inode and a direct node
	n := int(util * float64(blocks) / float64(per))
	for range n {
		name, err := w.create(ctx, false)
		if err != nil {
			return err
		}
		w.files = append(w.files, name)
	}
	return w.fs.Sync(ctx)
}

func (w *lfsWorkload) fillBuf(n int) []byte {
	b := w.buf[:n]
	for i := 0; i+8 <= n; i += 8 {
		v := w.rng.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	return b
}

func (w *lfsWorkload) create(ctx context.Context, fsync bool) (string, error) {
	name := fmt.Sprintf("f%07d", w.next)
	w.next++
	_, h, err := w.fs.Create(ctx, lfs.RootIno, name, 0o644, 0, 0, syscall.O_RDWR)
	if err != nil {
		return "", err
	}
	defer w.fs.Release(ctx, h)
	if _, err := w.fs.Write(ctx, h, 0, w.fillBuf(w.fileSize)); err != nil {
		return "", err
	}
	if fsync {
		return name, w.fs.Fsync(ctx, h, false)
	}
	return name, nil
}

func (w *lfsWorkload) open(ctx context.Context, name string, flags int) (lfs.Handle, error) {
	a, err := w.fs.Lookup(ctx, lfs.RootIno, name)
	if err != nil {
		return 0, err
	}
	return w.fs.Open(ctx, a.Ino, flags)
}

func (w *lfsWorkload) overwrite(ctx context.Context, name string, off, n int, fsync bool) error {
	h, err := w.open(ctx, name, syscall.O_RDWR)
	if err != nil {
		return err
	}
	defer w.fs.Release(ctx, h)
	if _, err := w.fs.Write(ctx, h, int64(off), w.fillBuf(n)); err != nil {
		return err
	}
	if fsync {
		return w.fs.Fsync(ctx, h, false)
	}
	return nil
}

func (w *lfsWorkload) read(ctx context.Context, name string) error {
	h, err := w.open(ctx, name, syscall.O_RDONLY)
	if err != nil {
		return err
	}
	defer w.fs.Release(ctx, h)
	_, err = w.fs.Read(ctx, h, 0, w.buf[:w.fileSize])
	return err
}

// measure runs operations until budget bytes are written and returns the
// bytes written.
func (w *lfsWorkload) measure(ctx context.Context, budget uint64) (uint64, error) {
	var written uint64
	for written < budget && len(w.files) > 0 {
		i := w.rng.IntN(len(w.files))
		name := w.files[i]
		r := w.rng.IntN(10)
		var err error
		switch {
		case w.varmail && r < 4: // delete a mail, deliver a new one
			if err = w.fs.Unlink(ctx, lfs.RootIno, name); err == nil {
				w.files[i], err = w.create(ctx, true)
				written += uint64(w.fileSize)
			}
		case w.varmail && r < 8: // rewrite a mailbox's tail
			err = w.overwrite(ctx, name, w.fileSize-8<<10, 8<<10, true)
			written += 8 << 10
		case r < 3: // whole-file rewrite
			err = w.overwrite(ctx, name, 0, w.fileSize, false)
			written += uint64(w.fileSize)
		case r < 8: // 16 KiB overwrite
			off := w.rng.IntN(w.fileSize/(16<<10)) * (16 << 10)
			err = w.overwrite(ctx, name, off, 16<<10, false)
			written += 16 << 10
		default:
			err = w.read(ctx, name)
		}
		if err != nil {
			return written, fmt.Errorf("measured phase after %d bytes: %w", written, err)
		}
	}
	return written, nil
}

// runLFSFigure runs every lfs workload of o at every utilization on every
// volume kind.
func runLFSFigure(ctx context.Context, o Options, wls []string) ([]LFSRow, string, error) {
	var rows []LFSRow
	for _, wl := range wls {
		for _, u := range o.LFSUtilizations {
			for _, vk := range LFSVolumes {
				row, err := runLFS(ctx, o, wl, u, vk)
				if err != nil {
					return nil, "", err
				}
				rows = append(rows, row)
			}
		}
	}
	f := o.lfsFlash()
	c := o.lfsFDPConfig()
	lbas, phys := describe(c)
	drive := fmt.Sprintf("%d chips, %d blocks/chip (%d spare), %d pages/block, %d KiB pages, MLC: %d MiB flash; ZNS: %d zones of %d KiB; FDP: %d MiB of LBAs (%.1f %% over-provisioning), reclaim unit %d chips (one v-zone), %d handles",
		o.LFSChips, f.BlocksPerChip, lfsSpareBlocks, f.PagesPerBlock, f.PageSize>>10, phys>>20, o.LFSZones, o.LFSChips*f.PagesPerBlock*f.PageSize>>10,
		lbas>>20, c.OverProvision*100, o.LFSChips, len(c.Handles))
	return rows, drive, nil
}

func writeLFSTable(w io.Writer, r *Result) error {
	fmt.Fprintf(w, "\nlfs on ZNS, ZNS+ and FDP, same flash: %s; %.1f x the user capacity written after the fill, seed %d\n\n", r.LFSDrive, r.Options.LFSOverwrite, r.Options.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tUTIL\tVOLUME\tLFS MODE\tMB/s\tFS WAF\tDEVICE WAF\tFLASH WAF\tCHIP UTIL\tDEVICE GC COPIES\tHOST MOVED\tIZC MOVED\tTL SEGS")
	for _, x := range r.LFS {
		fmt.Fprintf(tw, "%s\t%.0f%%\t%s\t%s\t%.1f\t%.3f\t%.3f\t%.3f\t%.3f\t%d\t%d\t%d\t%d\n", x.Workload, x.Utilization*100, x.Volume, x.Mode,
			x.ThroughputMBps, x.FSWAF, x.DeviceWAF, x.FlashWAF, x.ChipUtil, x.DeviceGCCopies, x.HostMoved, x.IZCMoved, x.TLSegments)
	}
	return tw.Flush()
}
