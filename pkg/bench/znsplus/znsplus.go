// Package znsplus is the deterministic ZNS+ benchmark (ZNS+ §4, Fig. 7-8,
// Table 5): the log-structured file system (pkg/lfs) over local emulated
// ZNS+ drives (pkg/lfs/devvol, pkg/zns) on the virtual clock, run in the
// three recycling modes — zns (host copy), izc (in-storage zone compaction)
// and zns+ (threaded logging + hybrid segment recycling + IZC) — on a
// fileserver-like, a varmail-like and an OLTP-like (tpcc: random page
// writes to table files, a commit's fsynced redo write) workload at several
// file system utilizations.
//
// Determinism. Everything runs on one goroutine. Each logical thread of a
// workload (Config.Threads; the paper's 50 for fileserver, 16 for varmail
// and tpcc)
// has its own modelled time on the harness's clock (threadClock): the
// thread whose time is earliest runs its next file system operation, and
// its requests book the drives' chips and host link at its time, so the
// threads' I/O overlaps as filebench's threads' does and contends for the
// same chips and link. A write that starts while a foreground compaction
// runs waits for it (F2FS's writers wait on its GC lock). Throughput is
// user bytes per modelled second from the start of the measured phase to
// the last thread's end; the same Config prints the same numbers on every
// run. The file system runs without background work (no idle recycling,
// no timer checkpoints): every recycling is foreground, every checkpoint
// caused by an operation, a pre-invalid threshold or recycling. P-GC
// (lfs.Options.PGCWorkers, seeds/004 Algorithm 1) is off unless
// Config.PGCWorkers sets it: the harness's clock is an lfs.TurnClock, so
// host copy's workers take turns on the one goroutine, each from the read
// phase's start at its own modelled time, and their reads overlap and
// contend for the chips, the link and the host's CPUs as concurrent
// requests do; the read phase ends with the last worker's.
//
// The host path is the paper's machine (ZNS+ §3.1, §4, Table 2; every
// constant is listed with its sentence by Calibrations and recorded in the
// bench's manifest): each request takes 8.4 us of one of the host's four
// CPUs for submission and completion, and 53 us of device-to-host transfer
// latency (the split of a 4 KiB read's latency the paper measured on its
// emulator: 7 % and 44 %, the flash part — page read and DMA, 35 + 24 us —
// being the other 49 %). The transfer latency is per request and overlaps
// across requests; the link's bandwidth is the paper's 1.2 GB/s (PCIe Gen2
// x2), booked on the drive's host link in both directions. Host copy reads
// a victim's valid blocks in runs (one request per run, all reads before
// any write, as F2FS does, Fig. 3a) and writes them back through the page
// cache. The drives' blocks are smaller than the paper's (4 pages instead
// of 128, so that a 76 MiB file system has 96 zones); a block's erase is
// charged per page as on the paper's blocks (Config.UnscaledErase is the
// ablation).
//
// Besides throughput, WAF and the TL share, every mode reports its average
// compaction time split into the phases of ZNS+ Fig. 6
// (compaction_phases_ms: init, read, copy, write, checkpoint; zone_compaction
// is asynchronous, so IZC's copy phase is its submission plus the wait of
// the closing checkpoint's Flush for the copies), and each utilization the
// copyback share of izc with copyback-aware allocation and, from an extra
// izc run without it, copyback_share_no_cab (Fig. 11; Config.NoCABRun skips
// that run). With Config.CopybackPagesPerBlock both shares come from a pair
// of izc runs on drives with larger zones (Default: 4 MiB, 16 chunks per
// chip), since 1 MiB zones leave copyback-aware allocation too few same-chip
// destination chunks to show what it does. Hybrid segment recycling is calibrated with the drive's costs:
// f_copy the copyback chip time per block, f_write a host write of a node
// block (its share of a request, the link transfer, its share of a program).
package znsplus

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/zonefleet/zonefleet/pkg/bench/paper/scratch"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// Workload names.
const (
	Fileserver = "fileserver" // 128 KiB files: whole-file rewrites, 16 KiB overwrites, reads (Table 3 scaled)
	Varmail    = "varmail"    // 28 KiB files: delete + create + fsync, append + fsync, reads
	// TPCC is an OLTP-like I/O pattern (the paper runs tpcc-mysql, Table 3):
	// a database of 1 MiB table files written in 16 KiB pages at random
	// places (the buffer pool's page flushes), a 1 MiB circular redo log
	// written 4 KiB at a time with an fsync per commit, an fsync of a table
	// file now and then (InnoDB's checkpoints) and 16 KiB page reads.
	TPCC = "tpcc"
)

// Config is one benchmark run.
type Config struct {
	Workload     string    // Fileserver or Varmail
	Utilizations []float64 // file system utilization to fill to (0.80, 0.85, 0.90, 0.95)
	Threads      int       // logical threads (0: the paper's, FileserverThreads, VarmailThreads or TPCCThreads)
	// Overwrite is how much is written in the measured phase, as a multiple
	// of the file system's user capacity.
	Overwrite float64
	Seed      int64
	Dir       string // names the drive files ("" = a temporary directory); they live in memory (package scratch)
	// Drive: Chips chips (channels x 2 ways), D_zone = Chips, ZoneMiB-sized
	// zones, Zones zones, MLC media (ZNS+ Table 3: 16 chips, 32 MiB zones).
	Chips         int
	PagesPerBlock int
	Zones         int
	// Modes to run (nil: zns, izc and zns+; the ratios need zns).
	Modes []lfs.Mode
	// HostIOOverhead is the modelled host I/O stack cost (submission and
	// completion) of one read or write request (0: HostSubmission, from
	// ZNS+ §3.1; negative: none).
	HostIOOverhead time.Duration
	// LinkBytesPerSec is the host link's bandwidth in both directions (0:
	// LinkBytesPerSec, the paper's 1.2 GB/s).
	LinkBytesPerSec int64
	// TransferLatency is the per-request device-to-host transfer latency
	// (0: TransferLatency, from ZNS+ §3.1; negative: none). Requests of
	// different threads overlap it.
	TransferLatency time.Duration
	// HostCPUs is the number of host CPUs that request submission and
	// completion take turns on (0: HostCPUs, ZNS+ §4).
	HostCPUs int
	// NoCABRun skips the extra izc run without copyback-aware allocation
	// (lfs.Options.NoCopybackAware) that copyback_share_no_cab comes from.
	NoCABRun bool
	// CopybackPagesPerBlock and CopybackZones, when set, give the copyback
	// measurement (ZNS+ Fig. 11) its own drive geometry: copyback_share_cab
	// and copyback_share_no_cab then come from a pair of izc runs (with and
	// without copyback-aware allocation) on drives with these pages per
	// chip per zone and this many zones, instead of from the main izc run.
	// Copyback-aware allocation matches a victim's fully valid chunks to
	// free destination chunks on the same chip; with 4 chunks per chip per
	// zone (1 MiB zones) a victim has about one such chunk per chip and a
	// same-chip slot is often taken, so the share measures the small zone,
	// not the technique (the paper's 32 MiB zones have 128 per chip).
	CopybackPagesPerBlock int
	CopybackZones         int
	// NoCopybackUtil, when set, is the utilization at which izc and zns+
	// also run on drives without copyback (flash.Config.DisableCopyback:
	// every in-storage copy is a read and a program), ZNS+ Fig. 7a's
	// "w/o cpbk" bars.
	NoCopybackUtil float64
	// LBAOrderedUtil, when set, is the utilization at which zns+ also runs
	// with LBA-ordered plugging (ZNS+ Fig. 9: chip utilization of LBA- vs
	// PPA-ordered plugging).
	LBAOrderedUtil float64
	// lbaOrdered makes runOne plug in LBA order (the Fig. 9 run).
	lbaOrdered bool
	// TunablesUtil, when set, is the utilization at which zns+ also runs
	// with θ_PI scaled by each of ThetaPIScales (lfs.Options.ThetaPIBlocks;
	// scale 1 is lfs's default, the paper's 128 MiB of 16 GiB scaled to
	// the file system) and, with NoHSRRun, once with hybrid segment
	// recycling's cost model off (lfs.Options.NoHSR): ZNS+ §3.3.2.
	TunablesUtil  float64   `json:",omitempty"`
	ThetaPIScales []float64 `json:",omitempty"`
	NoHSRRun      bool      `json:",omitempty"`
	// thetaScale and noHSR make runOne mount with them (the runs above).
	thetaScale float64
	noHSR      bool
	// MediaUtil, when set, is the utilization at which zns and izc also run
	// on each flash medium of Media (flash.Media names; nil: TLC, MLC and
	// ZNAND), izc once with each forced policy for clean cached chunks:
	// IZC-H (lfs.CachedChunksFromHost) and IZC-D (lfs.CachedChunksOnDevice)
	// — ZNS+ Table 4. The main runs' medium (MLC) reuses their zns run.
	MediaUtil float64  `json:",omitempty"`
	Media     []string `json:",omitempty"`
	// media and cachedChunks make flashConfig and runOne use them.
	media        string
	cachedChunks lfs.CachedChunkPolicy
	// UnscaledErase keeps the media's erase time per block on the
	// scaled-down blocks (an ablation; see flashConfig).
	UnscaledErase bool
	// PGCWorkers is lfs.Options.PGCWorkers (0 or 1: P-GC off; seeds/004
	// uses 2): host copy splits the reads of a victim more than half valid
	// across this many workers.
	PGCWorkers int `json:",omitempty"`
	// OPPercent is lfs.MkfsOptions.OPPercent, the over-provisioning (0:
	// lfs's default, 10 %; seeds/004 Fig. 4 sweeps it).
	OPPercent int `json:",omitempty"`
}

// Small is a configuration that runs in seconds per mode (tests, CI): the
// paper's 16 chips (8 channels x 2 ways, D_zone 16, ZNS+ Table 3) with
// 1 MiB zones (4 pages of 16 KiB per chip; the paper's 32 MiB zones have
// 128) and 32 of them (an 18 MiB file system).
func Small() Config {
	return Config{Workload: Fileserver, Utilizations: []float64{0.80, 0.85, 0.90, 0.95}, Threads: 8, Overwrite: 1,
		Seed: 1, Chips: 16, PagesPerBlock: 4, Zones: 32}
}

// Default is the configuration of `zctl bench paper zns_plus` (minutes):
// Small's drive with 96 zones (a 76 MiB file system of about 75 data
// segments, so that a segment does not come back every few rounds; the
// paper's 16 GiB file system has 512 zones) and 16 threads. The copyback
// share (Fig. 11) is measured on 32 zones of 4 MiB (16 chunks per chip, a
// 72 MiB file system).
func Default() Config {
	return Config{Workload: Fileserver, Utilizations: []float64{0.80, 0.85, 0.90, 0.95}, Overwrite: 1,
		Seed: 1, Chips: 16, PagesPerBlock: 4, Zones: 96, CopybackPagesPerBlock: 16, CopybackZones: 32}
}

// ModeResult is one mode at one utilization.
type ModeResult struct {
	Mode               string  `json:"mode"`
	ThroughputMBps     float64 `json:"throughput_mb_per_s"` // user bytes written / modelled seconds of the measured phase
	ModelledMillis     float64 `json:"modelled_millis"`
	UserMiB            float64 `json:"user_mib"`
	WAF                float64 `json:"waf"` // blocks the file system wrote or had the drives copy or plug / user blocks (ZNS+ §4.2)
	TLRecycledSegments uint64  `json:"tl_recycled_segments"`
	CompactedSegments  uint64  `json:"compacted_segments"`
	TLShare            float64 `json:"tl_share"`
	CopybackShare      float64 `json:"copyback_share"` // blocks moved by copyback / blocks the drives copied
	// CopybackEligible is the share of the blocks compaction copied inside
	// the drives that sat in fully valid source chunks (the most
	// copyback-aware allocation can place on the same chip), and
	// CopybackPlanned the share it did place there.
	CopybackEligible float64 `json:"copyback_eligible"`
	CopybackPlanned  float64 `json:"copyback_planned"`
	PluggedBlocks    uint64  `json:"plugged_blocks"`
	// PluggedBackground is the blocks the drives plugged in the background
	// (PPA-ordered plugging on idle chips), and BackgroundPlugShare their
	// share of all blocks copied (plugged or moved by compaction; ZNS+
	// Table 5's BP row).
	PluggedBackground   uint64  `json:"plugged_background"`
	BackgroundPlugShare float64 `json:"background_plug_share"`
	// PlugCopybackShare is the share of the plugged blocks the drives
	// copied by copyback (ZNS+ Fig. 11b, zns+).
	PlugCopybackShare float64 `json:"plug_copyback_share,omitempty"`
	HSRCompaction     uint64  `json:"hsr_chose_compaction"` // zns+: the cost model preferred compaction for the best TL victim
	TLOpenRefused     uint64  `json:"tl_open_refused"`      // zns+: the drives had no open zone or spare flash block group
	TLNoBudget        uint64  `json:"tl_open_no_budget"`    // zns+: no TL_open, the open zones for TL segments until the next checkpoint were used up
	TLNoCandidate     uint64  `json:"tl_no_candidate"`      // zns+: no TL_open, no segment had enough writable blocks
	Checkpoints       uint64  `json:"checkpoints"`
	// PreInvalidCheckpoints is the checkpoints periodic checkpointing took
	// (pre-invalid blocks reached θ_PI, ThetaPIBlocks; zns+).
	PreInvalidCheckpoints uint64 `json:"pre_invalid_checkpoints,omitempty"`
	ThetaPIBlocks         uint64 `json:"theta_pi_blocks,omitempty"`
	MovedHostCopy         uint64 `json:"moved_host_copy"`
	MovedIZC              uint64 `json:"moved_izc"`
	MovedHostCached       uint64 `json:"moved_host_cached"` // cached clean, written from the host (IZC-H by cost)
	MovedHostDirty        uint64 `json:"moved_host_dirty"`  // dirty on the host: written from the host in any mode
	// HostWrittenShare is the share of the blocks compaction moved that the
	// host wrote (read or cached on the host) rather than the drives copied.
	HostWrittenShare float64 `json:"host_written_share"`
	// PGCSplit is the compactions whose victim reads P-GC split across
	// workers (Config.PGCWorkers).
	PGCSplit uint64 `json:"pgc_split_compactions,omitempty"`
	// CompactionPhasesMs is the modelled time of one compaction on average
	// per phase (ZNS+ Fig. 6: init, read, write, checkpoint for host copy;
	// init, copy, checkpoint for IZC), in milliseconds.
	CompactionPhasesMs map[string]float64 `json:"compaction_phases_ms"`
	CompactionMs       float64            `json:"compaction_ms"` // their sum
	// ChipUtilization is the drives' chips' busy time over the measured
	// phase, averaged over the chips (ZNS+ Fig. 9).
	ChipUtilization float64 `json:"chip_utilization"`
	// NodeOverhead and MetaOverhead are the node blocks and the metadata
	// blocks (checkpoint records and snapshots) the file system wrote per
	// user data block in the measured phase (ZNS+ Fig. 7b).
	NodeOverhead float64 `json:"node_overhead"`
	MetaOverhead float64 `json:"meta_overhead"`
	Alpha        float64 `json:"hsr_alpha"` // zns+: profiled α at the end
	Beta         float64 `json:"hsr_beta"`  // zns+: profiled β at the end
}

// UtilResult is the three modes at one utilization.
type UtilResult struct {
	Utilization   float64    `json:"utilization"`
	ZNS           ModeResult `json:"zns"`
	IZC           ModeResult `json:"izc"`
	ZNSPlus       ModeResult `json:"zns_plus"`
	IZCvsZNS      float64    `json:"izc_vs_zns"`      // throughput ratio (paper Fig. 7: 1.21-1.77)
	ZNSPlusVsZNS  float64    `json:"zns_plus_vs_zns"` // throughput ratio (paper Fig. 7: 1.33-2.91)
	TLShare       float64    `json:"tl_share"`        // zns+ segments recycled by threaded logging (paper Table 5: 85.8-94.8 %)
	CopybackShare float64    `json:"copyback_share"`  // izc
	// IZCHostWrittenShare is izc's HostWrittenShare: the blocks moved from
	// the host (dirty, or cached clean where the per-block IZC-H / IZC-D
	// choice found the host cheaper) over all blocks moved (paper §4.1:
	// IZC-H 10.4 %, IZC-D 0.6 %).
	IZCHostWrittenShare float64            `json:"izc_host_written_share"`
	WAF                 map[string]float64 `json:"waf"`
	// Copyback share of the blocks izc copies inside the drives with
	// copyback-aware allocation (ZNS+ §3.3.1, the default) and without it
	// (an extra izc run; paper Fig. 11: > 80 % with CAB).
	CopybackShareCAB   float64  `json:"copyback_share_cab"`
	CopybackShareNoCAB *float64 `json:"copyback_share_no_cab,omitempty"`
	IZCNoCABvsZNS      *float64 `json:"izc_no_cab_vs_zns,omitempty"` // throughput ratio of that run (main geometry only)
	// With Config.CopybackPagesPerBlock: the geometry of the copyback
	// runs, their izc runs (with and without copyback-aware allocation),
	// and the throughput of the one with over the one without (paper
	// Fig. 11a: IZC-CAB about 1.13x IZC-CUB at 32 chips).
	CopybackZoneMiB float64     `json:"copyback_zone_mib,omitempty"`
	CopybackCAB     *ModeResult `json:"copyback_izc_cab,omitempty"`
	CopybackNoCAB   *ModeResult `json:"copyback_izc_no_cab,omitempty"`
	CABOverNoCAB    *float64    `json:"izc_cab_over_no_cab,omitempty"`
	// With Config.NoCopybackUtil at this utilization: izc and zns+ on
	// drives without copyback, over zns (Fig. 7a's w/o cpbk bars).
	IZCNoCopybackVsZNS     *float64 `json:"izc_no_copyback_vs_zns,omitempty"`
	ZNSPlusNoCopybackVsZNS *float64 `json:"zns_plus_no_copyback_vs_zns,omitempty"`
	// With Config.LBAOrderedUtil at this utilization: zns+ with LBA-ordered
	// plugging (its chip utilization beside the PPA-ordered run's: Fig. 9).
	ZNSPlusLBAOrdered *ModeResult `json:"zns_plus_lba_ordered,omitempty"`
	// With Config.TunablesUtil at this utilization: zns+ at other θ_PI
	// (ZNS+ §3.3.2's sweep) and without hybrid segment recycling.
	ThetaPI    []ThetaPIPoint `json:"theta_pi,omitempty"`
	NoHSR      *ModeResult    `json:"zns_plus_no_hsr,omitempty"`
	NoHSRVsHSR *float64       `json:"zns_plus_no_hsr_vs_hsr,omitempty"` // throughput ratio
	// With Config.MediaUtil at this utilization: zns, IZC-H and IZC-D per
	// flash medium (ZNS+ Table 4).
	Media []MediaPoint `json:"media,omitempty"`
}

// MediaPoint is one flash medium of ZNS+ Table 4: zns and izc with each
// forced policy for the victim's chunks cached clean on the host.
type MediaPoint struct {
	Media     string     `json:"media"`
	ZNS       ModeResult `json:"zns"`
	IZCH      ModeResult `json:"izc_h"` // lfs.CachedChunksFromHost
	IZCD      ModeResult `json:"izc_d"` // lfs.CachedChunksOnDevice
	IZCHvsZNS float64    `json:"izc_h_vs_zns"`
	IZCDvsZNS float64    `json:"izc_d_vs_zns"`
	// IZCHvsIZCD is IZC-H's throughput over IZC-D's (paper: 1.18 TLC,
	// 1.04 MLC, 0.90 ZNAND).
	IZCHvsIZCD float64 `json:"izc_h_vs_izc_d"`
}

// ThetaPIPoint is zns+ at one θ_PI.
type ThetaPIPoint struct {
	Scale    float64 `json:"scale"`     // of lfs's default θ_PI
	PaperMiB float64 `json:"paper_mib"` // the same share of the paper's 16 GiB file system
	// VsDefault is the throughput over the default θ_PI's (the main zns+
	// run at this utilization).
	VsDefault float64    `json:"vs_default"`
	Run       ModeResult `json:"run"`
}

// Result is a whole run.
type Result struct {
	Workload string       `json:"workload"`
	Threads  int          `json:"threads"`
	Chips    int          `json:"chips"`
	ZoneMiB  float64      `json:"zone_mib"`
	FSMiB    float64      `json:"fs_mib"`
	Utils    []UtilResult `json:"utilizations"`
}

func (c Config) check() error {
	switch {
	case c.Workload != Fileserver && c.Workload != Varmail && c.Workload != TPCC:
		return &zerr.InvalidArgumentError{Field: "workload", Reason: fmt.Sprintf("%q is not %s, %s or %s", c.Workload, Fileserver, Varmail, TPCC)}
	case len(c.Utilizations) == 0:
		return &zerr.InvalidArgumentError{Field: "utilizations", Reason: "none given"}
	case c.Threads < 0 || c.Threads > 1024:
		return &zerr.InvalidArgumentError{Field: "threads", Reason: fmt.Sprintf("%d is not in [1, 1024]", c.Threads)}
	case c.Overwrite <= 0 || c.Overwrite > 100:
		return &zerr.InvalidArgumentError{Field: "overwrite", Reason: fmt.Sprintf("%g is not in (0, 100]", c.Overwrite)}
	case c.Chips < 2 || c.Chips%2 != 0 || c.Chips > 64:
		return &zerr.InvalidArgumentError{Field: "chips", Reason: fmt.Sprintf("%d is not an even number in [2, 64]", c.Chips)}
	case c.PagesPerBlock < 4 || c.PagesPerBlock > 512:
		return &zerr.InvalidArgumentError{Field: "pages_per_block", Reason: fmt.Sprintf("%d is not in [4, 512]", c.PagesPerBlock)}
	case c.Zones < 24 || c.Zones > 4096:
		return &zerr.InvalidArgumentError{Field: "zones", Reason: fmt.Sprintf("%d is not in [24, 4096]", c.Zones)}
	case c.CopybackPagesPerBlock != 0 && (c.CopybackPagesPerBlock < 4 || c.CopybackPagesPerBlock > 512):
		return &zerr.InvalidArgumentError{Field: "copyback_pages_per_block", Reason: fmt.Sprintf("%d is not 0 or in [4, 512]", c.CopybackPagesPerBlock)}
	case c.CopybackPagesPerBlock != 0 && (c.CopybackZones < 24 || c.CopybackZones > 4096):
		return &zerr.InvalidArgumentError{Field: "copyback_zones", Reason: fmt.Sprintf("%d is not in [24, 4096]", c.CopybackZones)}
	}
	for _, m := range c.Media {
		if _, ok := flash.Presets[m]; !ok {
			return &zerr.InvalidArgumentError{Field: "media", Reason: fmt.Sprintf("%q is not a flash medium (TLC, MLC or ZNAND)", m)}
		}
	}
	for _, u := range c.Utilizations {
		if u < 0.1 || u > 0.97 {
			return &zerr.InvalidArgumentError{Field: "utilizations", Reason: fmt.Sprintf("%g is not in [0.10, 0.97]", u)}
		}
	}
	return nil
}

// flashConfig is the drive: Chips chips (Chips/2 channels x 2 ways), one
// chip group (D_zone = Chips), MLC, 16 KiB pages of four 4 KiB blocks.
func (c Config) flashConfig() flash.Config {
	f := flash.Defaults()
	if c.media != "" {
		f.Media = c.media
	}
	f.Channels, f.Ways, f.DZone = c.Chips/2, 2, c.Chips
	f.PagesPerBlock = c.PagesPerBlock
	f.SpareBlocksPerChip = 8
	f.BlocksPerChip = c.Zones + f.SpareBlocksPerChip
	f.MaxOpenZones, f.MaxActiveZones = 16, 16
	f.WriteCacheBytes = int64(c.Chips) * 2 * int64(f.PageSize)
	f.ZoneCapacity = 0
	f.HostLinkBytesPerSec = c.LinkBytesPerSec
	if f.HostLinkBytesPerSec == 0 {
		f.HostLinkBytesPerSec = LinkBytesPerSec
	}
	if !c.UnscaledErase {
		// A block erase is charged per page as on the paper's 128-page
		// blocks (Table 2): the scaled-down blocks would otherwise cost
		// 128/PagesPerBlock times the paper's erase time per byte written.
		f.EraseLatency = f.Resolved().EraseLatency * time.Duration(c.PagesPerBlock) / PaperPagesPerBlock
	}
	return f
}

// Run runs cfg: for each utilization, the three modes on fresh drives.
func Run(ctx context.Context, cfg Config) (Result, error) {
	rs, err := RunAll(ctx, []Config{cfg})
	if err != nil {
		return Result{}, err
	}
	return rs[0], nil
}

// RunAll runs every configuration as Run does, all their runs in parallel
// (each its own clock, drive and file system), and returns the results in
// order.
func RunAll(ctx context.Context, cfgs []Config) ([]Result, error) {
	for i := range cfgs {
		if err := cfgs[i].check(); err != nil {
			return nil, err
		}
		if cfgs[i].Threads == 0 {
			cfgs[i].Threads = FileserverThreads
			switch cfgs[i].Workload {
			case Varmail:
				cfgs[i].Threads = VarmailThreads
			case TPCC:
				cfgs[i].Threads = TPCCThreads
			}
		}
	}
	dirs := make([]string, len(cfgs))
	for i, cfg := range cfgs {
		dir := cfg.Dir
		if dir == "" {
			d, err := os.MkdirTemp("", "zonefleet-znsplus-")
			if err != nil {
				return nil, err
			}
			defer os.RemoveAll(d)
			dir = d
		}
		if i > 0 {
			dir = filepath.Join(dir, fmt.Sprintf("set%d", i))
		}
		dirs[i] = dir
	}
	// The runs are independent (each its own clock, drive and file
	// system): assemble records them, they run in parallel, and assemble
	// runs again on their results, so the result does not depend on the
	// interleaving.
	type job struct {
		cfg   Config
		fc    flash.Config
		path  string
		u     float64
		m     lfs.Mode
		noCAB bool
	}
	type out struct {
		mr    ModeResult
		fsMiB float64
		err   error
	}
	var jobs []job
	record := func(cfg Config, fc flash.Config, path string, u float64, m lfs.Mode, noCAB bool) (ModeResult, float64, error) {
		jobs = append(jobs, job{cfg, fc, path, u, m, noCAB})
		return ModeResult{}, 0, nil
	}
	for i, cfg := range cfgs {
		if _, err := assemble(cfg, dirs[i], record); err != nil {
			return nil, err
		}
	}
	outs := make([]out, len(jobs))
	sem := make(chan struct{}, max(runtime.GOMAXPROCS(0), 1))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			mr, fsMiB, err := runOne(ctx, j.cfg, j.fc, j.path, j.u, j.m, j.noCAB)
			outs[i] = out{mr, fsMiB, err}
		}()
	}
	wg.Wait()
	next := 0
	replay := func(Config, flash.Config, string, float64, lfs.Mode, bool) (ModeResult, float64, error) {
		o := outs[next]
		next++
		return o.mr, o.fsMiB, o.err
	}
	res := make([]Result, len(cfgs))
	for i, cfg := range cfgs {
		r, err := assemble(cfg, dirs[i], replay)
		if err != nil {
			return nil, err
		}
		res[i] = r
	}
	return res, nil
}

// runner runs (or records, or replays) one mode at one utilization.
type runner func(cfg Config, fc flash.Config, path string, util float64, m lfs.Mode, noCAB bool) (ModeResult, float64, error)

// assemble makes the result of cfg from the runs runOne makes, in order.
func assemble(cfg Config, dir string, runOne runner) (Result, error) {
	fc := cfg.flashConfig()
	g := fc.Resolved()
	res := Result{Workload: cfg.Workload, Threads: cfg.Threads, Chips: cfg.Chips,
		ZoneMiB: float64(g.DZone*g.PagesPerBlock*g.PageSize) / (1 << 20)}
	n := 0
	for _, u := range cfg.Utilizations {
		ur := UtilResult{Utilization: u, WAF: map[string]float64{}}
		modes := cfg.Modes
		if modes == nil {
			modes = []lfs.Mode{lfs.ModeZNS, lfs.ModeIZC, lfs.ModeZNSPlus}
		}
		for _, m := range modes {
			n++
			mr, fsMiB, err := runOne(cfg, fc, filepath.Join(dir, fmt.Sprintf("drive%d", n)), u, m, false)
			if err != nil {
				return res, fmt.Errorf("%s at %.0f %% in mode %s: %w", cfg.Workload, 100*u, m, err)
			}
			res.FSMiB = fsMiB
			ur.WAF[mr.Mode] = mr.WAF
			switch m {
			case lfs.ModeZNS:
				ur.ZNS = mr
			case lfs.ModeIZC:
				ur.IZC = mr
			default:
				ur.ZNSPlus = mr
			}
		}
		if ur.ZNS.ThroughputMBps > 0 {
			ur.IZCvsZNS = round3(ur.IZC.ThroughputMBps / ur.ZNS.ThroughputMBps)
			ur.ZNSPlusVsZNS = round3(ur.ZNSPlus.ThroughputMBps / ur.ZNS.ThroughputMBps)
		}
		if cfg.NoCopybackUtil == u {
			nc := fc
			nc.DisableCopyback = true
			for _, m := range []lfs.Mode{lfs.ModeIZC, lfs.ModeZNSPlus} {
				n++
				mr, _, err := runOne(cfg, nc, filepath.Join(dir, fmt.Sprintf("drive%d", n)), u, m, false)
				if err != nil {
					return res, fmt.Errorf("%s at %.0f %% in mode %s without copyback: %w", cfg.Workload, 100*u, m, err)
				}
				if ur.ZNS.ThroughputMBps > 0 {
					r := round3(mr.ThroughputMBps / ur.ZNS.ThroughputMBps)
					if m == lfs.ModeIZC {
						ur.IZCNoCopybackVsZNS = &r
					} else {
						ur.ZNSPlusNoCopybackVsZNS = &r
					}
				}
			}
		}
		if cfg.LBAOrderedUtil == u {
			lc := cfg
			lc.lbaOrdered = true
			n++
			mr, _, err := runOne(lc, fc, filepath.Join(dir, fmt.Sprintf("drive%d", n)), u, lfs.ModeZNSPlus, false)
			if err != nil {
				return res, fmt.Errorf("%s at %.0f %% in mode zns+ with LBA-ordered plugging: %w", cfg.Workload, 100*u, err)
			}
			ur.ZNSPlusLBAOrdered = &mr
		}
		if cfg.TunablesUtil == u {
			if err := tunables(cfg, fc, dir, u, &n, &ur, runOne); err != nil {
				return res, err
			}
		}
		if cfg.MediaUtil == u {
			if err := media(cfg, dir, u, &n, &ur, runOne); err != nil {
				return res, err
			}
		}
		ur.TLShare, ur.CopybackShare, ur.CopybackShareCAB = ur.ZNSPlus.TLShare, ur.IZC.CopybackShare, ur.IZC.CopybackShare
		ur.IZCHostWrittenShare = ur.IZC.HostWrittenShare
		if cfg.CopybackPagesPerBlock > 0 && slices.Contains(modes, lfs.ModeIZC) {
			cc := cfg
			cc.PagesPerBlock, cc.Zones = cfg.CopybackPagesPerBlock, cfg.CopybackZones
			cfc := cc.flashConfig()
			cg := cfc.Resolved()
			ur.CopybackZoneMiB = float64(cg.DZone*cg.PagesPerBlock*cg.PageSize) / (1 << 20)
			for _, noCAB := range []bool{false, true} {
				if noCAB && cfg.NoCABRun {
					continue
				}
				n++
				mr, _, err := runOne(cc, cfc, filepath.Join(dir, fmt.Sprintf("drive%d", n)), u, lfs.ModeIZC, noCAB)
				if err != nil {
					return res, fmt.Errorf("%s at %.0f %% in mode izc on %g MiB zones (copyback-aware allocation %t): %w", cfg.Workload, 100*u, ur.CopybackZoneMiB, !noCAB, err)
				}
				if noCAB {
					ur.CopybackNoCAB = &mr
					cb := mr.CopybackShare
					ur.CopybackShareNoCAB = &cb
				} else {
					ur.CopybackCAB = &mr
					ur.CopybackShareCAB = mr.CopybackShare
				}
			}
			if ur.CopybackCAB != nil && ur.CopybackNoCAB != nil && ur.CopybackNoCAB.ThroughputMBps > 0 {
				r := round3(ur.CopybackCAB.ThroughputMBps / ur.CopybackNoCAB.ThroughputMBps)
				ur.CABOverNoCAB = &r
			}
		} else if !cfg.NoCABRun && slices.Contains(modes, lfs.ModeIZC) {
			n++
			mr, _, err := runOne(cfg, fc, filepath.Join(dir, fmt.Sprintf("drive%d", n)), u, lfs.ModeIZC, true)
			if err != nil {
				return res, fmt.Errorf("%s at %.0f %% in mode izc without copyback-aware allocation: %w", cfg.Workload, 100*u, err)
			}
			cb := mr.CopybackShare
			ur.CopybackShareNoCAB = &cb
			if ur.ZNS.ThroughputMBps > 0 {
				r := round3(mr.ThroughputMBps / ur.ZNS.ThroughputMBps)
				ur.IZCNoCABvsZNS = &r
			}
		}
		res.Utils = append(res.Utils, ur)
	}
	return res, nil
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

// tunables makes the θ_PI and HSR runs of zns+ at utilization u into ur.
func tunables(cfg Config, fc flash.Config, dir string, u float64, n *int, ur *UtilResult, runOne runner) error {
	run := func(c Config, what string) (ModeResult, error) {
		*n++
		mr, _, err := runOne(c, fc, filepath.Join(dir, fmt.Sprintf("drive%d", *n)), u, lfs.ModeZNSPlus, false)
		if err != nil {
			return mr, fmt.Errorf("%s at %.0f %% in mode zns+ with %s: %w", cfg.Workload, 100*u, what, err)
		}
		return mr, nil
	}
	vs := func(mr ModeResult) float64 {
		if ur.ZNSPlus.ThroughputMBps == 0 {
			return 0
		}
		return round3(mr.ThroughputMBps / ur.ZNSPlus.ThroughputMBps)
	}
	for _, s := range cfg.ThetaPIScales {
		c := cfg
		c.thetaScale = s
		mr, err := run(c, fmt.Sprintf("θ_PI x%g", s))
		if err != nil {
			return err
		}
		ur.ThetaPI = append(ur.ThetaPI, ThetaPIPoint{Scale: s, PaperMiB: round3(128 * s), VsDefault: vs(mr), Run: mr})
	}
	if cfg.NoHSRRun {
		c := cfg
		c.noHSR = true
		mr, err := run(c, "hybrid segment recycling off")
		if err != nil {
			return err
		}
		r := vs(mr)
		ur.NoHSR, ur.NoHSRVsHSR = &mr, &r
	}
	return nil
}

// media makes the Table 4 runs at utilization u into ur: per medium, zns
// (the main run's on the default medium) and izc with IZC-H and IZC-D.
func media(cfg Config, dir string, u float64, n *int, ur *UtilResult, runOne runner) error {
	names := cfg.Media
	if names == nil {
		names = []string{"TLC", "MLC", "ZNAND"}
	}
	def := flash.Defaults().Media
	for _, name := range names {
		mc := cfg
		mc.media = name
		fc := mc.flashConfig()
		p := MediaPoint{Media: name, ZNS: ur.ZNS}
		run := func(c Config, m lfs.Mode, what string) (ModeResult, error) {
			*n++
			mr, _, err := runOne(c, fc, filepath.Join(dir, fmt.Sprintf("drive%d", *n)), u, m, false)
			if err != nil {
				return mr, fmt.Errorf("%s at %.0f %% on %s in %s: %w", cfg.Workload, 100*u, name, what, err)
			}
			return mr, nil
		}
		if name != def || !slices.Contains(modesOf(cfg), lfs.ModeZNS) {
			mr, err := run(mc, lfs.ModeZNS, "mode zns")
			if err != nil {
				return err
			}
			p.ZNS = mr
		}
		for _, pol := range []lfs.CachedChunkPolicy{lfs.CachedChunksFromHost, lfs.CachedChunksOnDevice} {
			c := mc
			c.cachedChunks = pol
			mr, err := run(c, lfs.ModeIZC, "mode izc with "+pol.String())
			if err != nil {
				return err
			}
			if pol == lfs.CachedChunksFromHost {
				p.IZCH = mr
			} else {
				p.IZCD = mr
			}
		}
		if p.ZNS.ThroughputMBps > 0 {
			p.IZCHvsZNS = round3(p.IZCH.ThroughputMBps / p.ZNS.ThroughputMBps)
			p.IZCDvsZNS = round3(p.IZCD.ThroughputMBps / p.ZNS.ThroughputMBps)
		}
		if p.IZCD.ThroughputMBps > 0 {
			p.IZCHvsIZCD = round3(p.IZCH.ThroughputMBps / p.IZCD.ThroughputMBps)
		}
		ur.Media = append(ur.Media, p)
	}
	return nil
}

// modesOf is the modes the main runs use.
func modesOf(cfg Config) []lfs.Mode {
	if cfg.Modes == nil {
		return []lfs.Mode{lfs.ModeZNS, lfs.ModeIZC, lfs.ModeZNSPlus}
	}
	return cfg.Modes
}

// runOne fills a fresh file system to util and runs the measured phase in mode m.
func runOne(ctx context.Context, cfg Config, fc flash.Config, path string, util float64, m lfs.Mode, noCAB bool) (ModeResult, float64, error) {
	clk := &threadClock{}
	d, err := zns.Create(path, fc, clk, zns.WithFS(scratch.New()))
	if err != nil {
		return ModeResult{}, 0, err
	}
	defer func() {
		_ = d.Close()
		_ = os.Remove(path)
		_ = os.Remove(path + ".journal")
	}()
	dv, err := devvol.New(d)
	if err != nil {
		return ModeResult{}, 0, err
	}
	dv.SetAsyncCompaction(true)  // ZNS+ §3.2.1: the host overlaps its checkpoint with the copies
	dv.SetTLMode(zns.PPAOrdered) // ZNS+ §4.1: "PPA-ordered plugging was used by default"
	if cfg.lbaOrdered {
		dv.SetTLMode(zns.LBAOrdered)
	}
	ov := cfg.HostIOOverhead
	if ov == 0 {
		ov = HostSubmission
	}
	xfer := cfg.TransferLatency
	if xfer == 0 {
		xfer = TransferLatency
	}
	cpus := cfg.HostCPUs
	if cpus == 0 {
		cpus = HostCPUs
	}
	vol := &hostVol{Volume: dv, tl: dv, clk: clk, cpus: newPool(cpus), cost: max(ov, 0), xfer: max(xfer, 0)}
	if err := lfs.Mkfs(ctx, vol, lfs.MkfsOptions{OPPercent: cfg.OPPercent}); err != nil {
		return ModeResult{}, 0, err
	}
	// IZC-H / IZC-D per block by cost (the paper's MLC default is IZC-H):
	// a chunk's chip read and transfer vs a host write of it over the link
	r := fc.Resolved()
	readCost := r.ReadLatency + r.DMALatency
	hostCost := vol.cost + vol.xfer + time.Duration(float64(r.PageSize)/float64(r.HostLinkBytesPerSec)*float64(time.Second))
	// HSR costs per block (§3.3.2): f_copy an in-storage copy (copyback
	// chip time of a chunk, per block: the paper assumes copies run inside
	// the drive, most by copyback); f_write a node or metadata block from
	// the host (its request handling, shared by a chunk's blocks, the link
	// transfer and its share of a page program).
	cb := time.Duration(max(r.PageSize/r.BlockSize, 1))
	hsrCopy := time.Duration(float64(r.ReadLatency+r.ProgramLatency)*r.CopybackRatio) / cb
	hsrWrite := (vol.cost+vol.xfer)/cb + time.Duration(float64(r.BlockSize)/float64(r.HostLinkBytesPerSec)*float64(time.Second)) + r.ProgramLatency/cb
	// P-GC off unless asked for (its workers then take turns on clk, an
	// lfs.TurnClock)
	opts := lfs.Options{Mode: m, Clock: clk, CacheBlocks: 1024, ReadAheadBlocks: -1,
		FlashReadCost: readCost, HostWriteCost: hostCost, NoCopybackAware: noCAB,
		HSRCopyCost: hsrCopy, HSRWriteCost: hsrWrite, PGCWorkers: max(cfg.PGCWorkers, 1), NoHSR: cfg.noHSR,
		CachedChunks: cfg.cachedChunks}
	fs, err := lfs.Mount(ctx, vol, opts)
	if err != nil {
		return ModeResult{}, 0, err
	}
	if cfg.thetaScale > 0 {
		// θ_PI as a multiple of the default this file system computes
		def := fs.Stats().PreInvalidThreshold
		if err := fs.Unmount(ctx); err != nil {
			return ModeResult{}, 0, err
		}
		opts.ThetaPIBlocks = max(uint64(math.Round(float64(def)*cfg.thetaScale)), 1)
		if fs, err = lfs.Mount(ctx, vol, opts); err != nil {
			return ModeResult{}, 0, err
		}
	}
	defer func() { _ = fs.Unmount(ctx) }()
	st, err := fs.Statfs(ctx)
	if err != nil {
		return ModeResult{}, 0, err
	}
	fsMiB := float64(st.Blocks) * float64(st.Bsize) / (1 << 20)
	w := newWorkload(cfg, fs, st)
	if err := w.fill(ctx, util); err != nil {
		return ModeResult{}, 0, fmt.Errorf("fill: %w", err)
	}
	s0 := fs.Stats()
	t0 := clk.Now()
	busy0, log0 := chipBusy(d), d.Log()
	budget := uint64(cfg.Overwrite * float64(st.Blocks) * float64(st.Bsize))
	written, err := w.measure(ctx, clk, t0, budget)
	if err != nil {
		return ModeResult{}, 0, err
	}
	if err := fs.Sync(ctx); err != nil {
		return ModeResult{}, 0, err
	}
	el := clk.Now() - t0
	s := fs.Stats()
	mr := ModeResult{Mode: m.String(), ModelledMillis: round3(float64(el) / float64(time.Millisecond)), UserMiB: round3(float64(written) / (1 << 20)),
		TLRecycledSegments: s.TLRecycledSegments - s0.TLRecycledSegments, CompactedSegments: s.CompactedSegments - s0.CompactedSegments,
		PluggedBlocks: s.PluggedOnDemand + s.PluggedBackground - s0.PluggedOnDemand - s0.PluggedBackground,
		HSRCompaction: s.HSRCompaction - s0.HSRCompaction, TLOpenRefused: s.TLRefused - s0.TLRefused,
		TLNoBudget: s.TLNoBudget - s0.TLNoBudget, TLNoCandidate: s.TLNoCandidate - s0.TLNoCandidate,
		Checkpoints: s.Checkpoints - s0.Checkpoints, MovedHostCopy: s.MovedHostCopy - s0.MovedHostCopy, MovedIZC: s.MovedIZC - s0.MovedIZC,
		MovedHostCached: s.MovedHostCached - s0.MovedHostCached, MovedHostDirty: s.MovedHostDirty - s0.MovedHostDirty}
	mr.PluggedBackground = s.PluggedBackground - s0.PluggedBackground
	if m == lfs.ModeZNSPlus {
		mr.PreInvalidCheckpoints = s.CheckpointsByCause["pre_invalid"] - s0.CheckpointsByCause["pre_invalid"]
		mr.ThetaPIBlocks = s.PreInvalidThreshold
	}
	mr.PGCSplit = s.PGCSplitMigrations - s0.PGCSplitMigrations
	if l := d.Log(); l.PluggedOnDemand+l.PluggedBackground > log0.PluggedOnDemand+log0.PluggedBackground {
		mr.PlugCopybackShare = round3(float64(l.PluggedCopyback-log0.PluggedCopyback) /
			float64(l.PluggedOnDemand+l.PluggedBackground-log0.PluggedOnDemand-log0.PluggedBackground))
	}
	if all := mr.PluggedBlocks + mr.MovedHostCopy + mr.MovedHostCached + mr.MovedHostDirty + mr.MovedIZC; all > 0 {
		mr.BackgroundPlugShare = round3(float64(mr.PluggedBackground) / float64(all))
	}
	if host := mr.MovedHostCopy + mr.MovedHostCached + mr.MovedHostDirty; host+mr.MovedIZC > 0 {
		mr.HostWrittenShare = round3(float64(host) / float64(host+mr.MovedIZC))
	}
	if n := mr.CompactedSegments; n > 0 {
		p, p0 := s.CompactionPhases, s0.CompactionPhases
		ms := func(d, d0 time.Duration) float64 {
			return round3(float64(d-d0) / float64(n) / float64(time.Millisecond))
		}
		mr.CompactionPhasesMs = map[string]float64{"init": ms(p.Init, p0.Init), "read": ms(p.Read, p0.Read),
			"copy": ms(p.Copy, p0.Copy), "write": ms(p.Write, p0.Write), "checkpoint": ms(p.Checkpoint, p0.Checkpoint)}
		tot := (p.Init + p.Read + p.Copy + p.Write + p.Checkpoint) - (p0.Init + p0.Read + p0.Copy + p0.Write + p0.Checkpoint)
		mr.CompactionMs = round3(float64(tot) / float64(n) / float64(time.Millisecond))
	}
	mr.Alpha, mr.Beta = round3(s.Alpha), round3(s.Beta)
	if el > 0 {
		mr.ChipUtilization = round3(float64(chipBusy(d)-busy0) / float64(cfg.Chips) / float64(el))
	}
	if el > 0 {
		mr.ThroughputMBps = round3(float64(written) / (1 << 20) / el.Seconds())
	}
	if u := s.UserBlocksWritten - s0.UserBlocksWritten; u > 0 {
		// ZNS+ §4.2: "data block writes, node block writes, metadata
		// updates, segment compaction, and internal plugging"
		mr.WAF = round3(float64(s.DriveBlocksWritten-s0.DriveBlocksWritten+mr.PluggedBlocks) / float64(u))
	}
	if u := s.UserDataBlocksWritten - s0.UserDataBlocksWritten; u > 0 {
		mr.NodeOverhead = round3(float64(s.NodeBlocksWritten-s0.NodeBlocksWritten) / float64(u))
		mr.MetaOverhead = round3(float64(s.MetaBlocksWritten-s0.MetaBlocksWritten) / float64(u))
	}
	if n := mr.TLRecycledSegments + mr.CompactedSegments; n > 0 {
		mr.TLShare = round3(float64(mr.TLRecycledSegments) / float64(n))
	}
	if n := (s.CompactCopyback + s.CompactLocal + s.CompactRemote) - (s0.CompactCopyback + s0.CompactLocal + s0.CompactRemote); n > 0 {
		mr.CopybackShare = round3(float64(s.CompactCopyback-s0.CompactCopyback) / float64(n))
	}
	if n := s.MovedIZC - s0.MovedIZC; n > 0 {
		mr.CopybackEligible = round3(float64(s.CopybackEligible-s0.CopybackEligible) / float64(n))
		mr.CopybackPlanned = round3(float64(s.CopybackPlanned-s0.CopybackPlanned) / float64(n))
	}
	return mr, fsMiB, nil
}

// chipBusy is the drive's chips' total busy time so far.
func chipBusy(d *zns.Device) time.Duration {
	var t time.Duration
	for _, b := range d.Log().ChipBusy {
		t += b
	}
	return t
}

// workload is a set of logical threads, each with its own directory of
// files, taking turns.
type workload struct {
	cfg      Config
	fs       *lfs.FS
	rng      *rand.Rand
	fileSize int
	blocks   uint64 // user blocks of the file system
	threads  []*thread
	gcUntil  time.Duration // a write starting earlier waits for the running compaction
	buf      []byte
	logAt    int // tpcc: the redo log's cursor
}

type thread struct {
	dir   uint64
	files []string
	next  int
}

// The tpcc database's geometry.
const (
	tpccPage    = 16 << 10 // InnoDB's page
	tpccLogRec  = 4 << 10  // a commit's redo write
	tpccLogSize = 1 << 20  // the circular redo log
)

func newWorkload(cfg Config, fs *lfs.FS, st lfs.StatfsOut) *workload {
	w := &workload{cfg: cfg, fs: fs, rng: rand.New(rand.NewSource(cfg.Seed)), blocks: st.Blocks}
	w.fileSize = 128 << 10
	switch cfg.Workload {
	case Varmail:
		w.fileSize = 28 << 10
	case TPCC:
		w.fileSize = 1 << 20 // a table file; the threads share them
	}
	w.buf = make([]byte, w.fileSize+16<<10)
	return w
}

// fill creates the threads' directories and files until util of the user
// blocks is used.
func (w *workload) fill(ctx context.Context, util float64) error {
	if w.cfg.Workload == TPCC {
		return w.fillTPCC(ctx, util)
	}
	for i := 0; i < w.cfg.Threads; i++ {
		a, err := w.fs.Mkdir(ctx, lfs.RootIno, fmt.Sprintf("t%03d", i), 0o755, 0, 0)
		if err != nil {
			return err
		}
		w.threads = append(w.threads, &thread{dir: a.Ino})
	}
	// per file: its blocks, an inode and a direct node
	per := uint64(w.fileSize/4096 + 2)
	n := int(util * float64(w.blocks) / float64(per))
	for i := 0; i < n; i++ {
		t := w.threads[i%len(w.threads)]
		name := fmt.Sprintf("f%06d", t.next)
		t.next++
		if err := w.create(ctx, t, name, w.fileSize); err != nil {
			return err
		}
		t.files = append(t.files, name)
	}
	return w.fs.Sync(ctx)
}

// fillTPCC creates the database: the redo log and table files until util
// of the user blocks is used. Every thread (connection) works on all of
// them: the threads share one directory and one file list.
func (w *workload) fillTPCC(ctx context.Context, util float64) error {
	a, err := w.fs.Mkdir(ctx, lfs.RootIno, "db", 0o755, 0, 0)
	if err != nil {
		return err
	}
	db := &thread{dir: a.Ino}
	if err := w.create(ctx, db, "redo", tpccLogSize); err != nil {
		return err
	}
	per := uint64(w.fileSize/4096 + 2) // blocks, an inode and a direct node
	n := int((util*float64(w.blocks) - float64(tpccLogSize/4096)) / float64(per))
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("t%04d", i)
		if err := w.create(ctx, db, name, w.fileSize); err != nil {
			return err
		}
		db.files = append(db.files, name)
	}
	for i := 0; i < w.cfg.Threads; i++ {
		w.threads = append(w.threads, db)
	}
	return w.fs.Sync(ctx)
}

// stepTPCC runs one operation of a tpcc connection: a page flush, a
// commit (a redo write and an fsync of the log), a table file's fsync or a
// page read.
func (w *workload) stepTPCC(ctx context.Context, t *thread, name string, r int) (uint64, error) {
	switch {
	case r < 5: // the buffer pool flushes a page
		off := w.rng.Intn(w.fileSize/tpccPage) * tpccPage
		return tpccPage, w.overwrite(ctx, t, name, off, tpccPage, false)
	case r < 8: // a commit: the redo record at the log's cursor, fsynced
		off := w.logAt
		w.logAt = (w.logAt + tpccLogRec) % tpccLogSize
		return tpccLogRec, w.overwrite(ctx, t, "redo", off, tpccLogRec, true)
	case r < 9: // a checkpoint makes a table file durable
		return 0, w.fsync(ctx, t, name)
	default: // a page read
		h, err := w.open(ctx, t, name, syscall.O_RDONLY)
		if err != nil {
			return 0, err
		}
		defer w.fs.Release(ctx, h)
		off := w.rng.Intn(w.fileSize/tpccPage) * tpccPage
		_, err = w.fs.Read(ctx, h, int64(off), w.buf[:tpccPage])
		return 0, err
	}
}

func (w *workload) create(ctx context.Context, t *thread, name string, size int) error {
	_, h, err := w.fs.Create(ctx, t.dir, name, 0o644, 0, 0, syscall.O_RDWR)
	if err != nil {
		return err
	}
	defer w.fs.Release(ctx, h)
	w.rng.Read(w.buf[:size])
	_, err = w.fs.Write(ctx, h, 0, w.buf[:size])
	return err
}

// measure runs the measured phase from t0 until budget bytes are written:
// the thread whose modelled time is earliest runs its next operation (ties
// by thread index), so the threads' I/O overlaps in modelled time. A write
// that starts while a foreground compaction runs waits for its end (F2FS's
// writers wait on the GC lock in balance_fs). It returns the bytes written,
// with the running time at the latest thread's.
func (w *workload) measure(ctx context.Context, clk *threadClock, t0 time.Duration, budget uint64) (uint64, error) {
	at := make([]time.Duration, len(w.threads))
	for i := range at {
		at[i] = t0
	}
	var written uint64
	var gcUntil time.Duration
	compacted := w.fs.Stats().CompactedSegments
	for written < budget {
		i := 0
		for j := range at {
			if at[j] < at[i] {
				i = j
			}
		}
		clk.switchTo(at[i])
		w.gcUntil = gcUntil
		n, err := w.step(ctx, clk, w.threads[i])
		if err != nil {
			return written, fmt.Errorf("measured phase after %d bytes: %w", written, err)
		}
		if c := w.fs.Stats().CompactedSegments; c != compacted {
			compacted, gcUntil = c, max(gcUntil, clk.Now())
		}
		at[i] = clk.Now()
		written += n
	}
	clk.switchTo(slices.Max(at))
	return written, nil
}

// step runs one operation of thread t and returns the bytes it wrote.
func (w *workload) step(ctx context.Context, clk *threadClock, t *thread) (uint64, error) {
	if len(t.files) == 0 {
		return 0, nil
	}
	i := w.rng.Intn(len(t.files))
	name := t.files[i]
	r := w.rng.Intn(10)
	if r < 8 && clk.Now() < w.gcUntil { // both workloads write in r < 8
		if err := clk.WaitUntil(ctx, w.gcUntil); err != nil {
			return 0, err
		}
	}
	if w.cfg.Workload == TPCC {
		return w.stepTPCC(ctx, t, name, r)
	}
	if w.cfg.Workload == Varmail {
		switch {
		case r < 4: // delete a mail, deliver a new one (fsync)
			if err := w.fs.Unlink(ctx, t.dir, name); err != nil {
				return 0, err
			}
			nn := fmt.Sprintf("f%06d", t.next)
			t.next++
			if err := w.create(ctx, t, nn, w.fileSize); err != nil {
				return 0, err
			}
			t.files[i] = nn
			return uint64(w.fileSize), w.fsync(ctx, t, nn)
		case r < 8: // rewrite the tail of a mailbox file (fsync)
			off := w.fileSize - 8<<10
			return 8 << 10, w.overwrite(ctx, t, name, off, 8<<10, true)
		default:
			return 0, w.read(ctx, t, name)
		}
	}
	switch {
	case r < 3: // whole-file rewrite
		return uint64(w.fileSize), w.overwrite(ctx, t, name, 0, w.fileSize, false)
	case r < 8: // 16 KiB overwrite at a random place
		off := w.rng.Intn(w.fileSize/(16<<10)) * (16 << 10)
		return 16 << 10, w.overwrite(ctx, t, name, off, 16<<10, false)
	default:
		return 0, w.read(ctx, t, name)
	}
}

func (w *workload) open(ctx context.Context, t *thread, name string, flags int) (lfs.Handle, error) {
	a, err := w.fs.Lookup(ctx, t.dir, name)
	if err != nil {
		return 0, err
	}
	return w.fs.Open(ctx, a.Ino, flags)
}

func (w *workload) overwrite(ctx context.Context, t *thread, name string, off, n int, fsync bool) error {
	h, err := w.open(ctx, t, name, syscall.O_RDWR)
	if err != nil {
		return err
	}
	defer w.fs.Release(ctx, h)
	w.rng.Read(w.buf[:n])
	if _, err := w.fs.Write(ctx, h, int64(off), w.buf[:n]); err != nil {
		return err
	}
	if fsync {
		return w.fs.Fsync(ctx, h, false)
	}
	return nil
}

func (w *workload) fsync(ctx context.Context, t *thread, name string) error {
	h, err := w.open(ctx, t, name, syscall.O_RDWR)
	if err != nil {
		return err
	}
	defer w.fs.Release(ctx, h)
	return w.fs.Fsync(ctx, h, false)
}

func (w *workload) read(ctx context.Context, t *thread, name string) error {
	h, err := w.open(ctx, t, name, syscall.O_RDONLY)
	if err != nil {
		return err
	}
	defer w.fs.Release(ctx, h)
	_, err = w.fs.Read(ctx, h, 0, w.buf[:w.fileSize])
	return err
}

// The host path of the paper's machine (ZNS+ §3.1 and §4, FEMU, MLC). Each
// constant is named in the bench's manifest with the sentence it comes from
// (Calibration).
const (
	// flashReadMLC is the flash part of a 4 KiB host read: a page read and
	// its DMA to the controller (Table 2: 35 + 24 us).
	flashReadMLC = 59 * time.Microsecond
	// HostSubmission is Config.HostIOOverhead's default: request
	// submission and completion, 7/49 of the flash part (§3.1: "about 7%"
	// of the read latency against the flash part's 49 %), 8.4 us of a host
	// CPU per request.
	HostSubmission = flashReadMLC * 7 / 49
	// TransferLatency is Config.TransferLatency's default: the emulator's
	// device-to-host transfer of a request, 44/49 of the flash part (§3.1:
	// "44%"), 53 us. It is a per-request latency, not a bandwidth: the
	// emulator moves the requests of different threads at once, and the
	// link's bandwidth is LinkBytesPerSec.
	TransferLatency = flashReadMLC * 44 / 49
	// LinkBytesPerSec is Config.LinkBytesPerSec's default: "PCIe Gen2 2x
	// lanes (max B/W: 1.2 GB/s)" (Table 2).
	LinkBytesPerSec = int64(1_200_000_000)
	// HostCPUs is Config.HostCPUs' default: "We allocated four CPU cores"
	// to the guest (§4).
	HostCPUs = 4
	// PaperPagesPerBlock is the paper's flash block: "Pages per flash
	// block: 128" (Table 2). The bench's blocks are smaller; erase time is
	// charged per page as on the paper's.
	PaperPagesPerBlock = 128
	// Threads of the paper's workloads (Table 3).
	FileserverThreads = 50
	VarmailThreads    = 16
	TPCCThreads       = 16 // tpcc's connections
)

// Calibration is one constant of the model and its source.
type Calibration struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source"`
}

// Calibrations lists the host-path model's constants with the sentences of
// the paper they come from (the bench's manifest records them).
func Calibrations() []Calibration {
	return []Calibration{
		{"flash read (MLC)", flashReadMLC.String(), "ZNS+ Table 2: flash page read latency 35 us, DMA from/to flash controller 24 us (MLC)"},
		{"host submission/completion per request", HostSubmission.String(), "ZNS+ §3.1: \"the request submission/completion handling and the device-to-host data transfer accounted for about 7% and 44% of the total read latency\" (7/49 of the flash part)"},
		{"device-to-host transfer latency per request", TransferLatency.String(), "ZNS+ §3.1: the same sentence, 44/49 of the flash part; a latency per request that overlaps across requests"},
		{"host link bandwidth", "1.2 GB/s", "ZNS+ Table 2: \"Host interface: PCIe Gen2 2x lanes (max B/W: 1.2 GB/s)\""},
		{"host CPUs", "4", "ZNS+ §4: \"We allocated four CPU cores ... to the guest virtual machine\""},
		{"erase time per block", "3 ms x PagesPerBlock/128", "ZNS+ Table 2: \"Pages per flash block: 128\" (MLC erase 3 ms, a datasheet value): the bench's smaller blocks pay the paper's erase time per page"},
		{"threads", "fileserver 50, varmail 16", "ZNS+ Table 3: fileserver ... 50 threads; varmail ... 16 threads"},
		{"chips", "16 (8 channels x 2 ways), D_zone 16", "ZNS+ §4: \"16 parallel flash chips by default ... eight channels and two ways per channel\""},
		{"foreground GC blocks writers", "a write waits for a running compaction", "ZNS+ §4: \"each workload generates write requests without idle intervals, no background compactions were invoked by F2FS\" (F2FS's foreground GC holds its GC lock; writers wait in balance_fs)"},
	}
}

// hostVol is the host's I/O path in front of the drives: every request takes
// HostSubmission of one of the host's CPUs, and the transfer latency
// (before the drive for a write, after it for a read); the drive books the
// link's bandwidth and the chips. Requests of different threads overlap.
type hostVol struct {
	lfs.Volume
	tl   lfs.TLOpener
	clk  *threadClock
	cpus *pool
	cost time.Duration
	xfer time.Duration
}

func (h *hostVol) submit(ctx context.Context) error {
	return h.clk.WaitUntil(ctx, h.cpus.book(h.clk.Now(), h.cost))
}

func (h *hostVol) Read(ctx context.Context, z lfs.ZoneID, off uint64, buf []byte) error {
	if err := h.submit(ctx); err != nil {
		return err
	}
	if err := h.Volume.Read(ctx, z, off, buf); err != nil {
		return err
	}
	return h.clk.WaitUntil(ctx, h.clk.Now()+h.xfer)
}

func (h *hostVol) Write(ctx context.Context, z lfs.ZoneID, off uint64, data []byte, fua bool) error {
	if err := h.submit(ctx); err != nil {
		return err
	}
	if err := h.clk.WaitUntil(ctx, h.clk.Now()+h.xfer); err != nil {
		return err
	}
	return h.Volume.Write(ctx, z, off, data, fua)
}

// TLOpen passes threaded logging through (a command, no data transfer).
func (h *hostVol) TLOpen(ctx context.Context, z lfs.ZoneID, valid []byte) error {
	return h.tl.TLOpen(ctx, z, valid)
}
