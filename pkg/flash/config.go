// Package flash holds the geometry, media timings and the FEMU-style timing
// model (per-chip and per-channel next-free times, host link, shared write
// cache, optionally with per-die back-pressure: Config.WriteCacheDieBytes,
// or split into queues: Config.WriteCacheQueues) of an emulated ZNS+ SSD. It knows nothing about zones' contents.
//
// # Timing model
//
// Every chip, every channel (chip c is on channel c mod channels) and the
// host link is a serially used resource with a next-free time; an operation
// booked at time t on a resource starts at max(t, next-free) and moves
// next-free to its end (a lock-free compare-and-swap, so bookings made in
// submission order form a FIFO queue per resource). The primitives are:
//
//	ReadArray    chip     t_read      page sensing into the page register
//	Transfer     channel  t_dma x n/chunk   page register <-> controller
//	ProgramArray chip     t_prog      page register into the array
//	Copyback     chip     ratio x (t_read + t_prog), never the channel
//	Erase        chip     t_erase
//	SLCProgram   channel DMA, then chip t_slc
//
// Read = ReadArray then Transfer out; Program = Transfer in then
// ProgramArray. A read-and-program copy of a chunk is therefore chip read,
// channel DMA out, channel DMA in, chip program: unloaded latency
// t_read + 2 t_dma + t_prog, but it holds the chips only t_read + t_prog (the
// DMAs overlap other chips' work). A copyback moves the page inside the chip
// with no off-chip transfer; ZNS+ Table 2 gives its latency normalized to the
// read-and-program copy (MLC 0.90, TLC and Z-NAND 0.94, "6-10 % faster"). We
// apply that ratio to the chip-side cost, copyback = ratio x (t_read +
// t_prog), so a copyback always holds the chip for less time than the read
// and program it replaces and saves exactly 1 - ratio of the chip time when
// compaction is chip-bound (plus the channel time, which it never uses).
// Table 2 constants (flash page 16 KiB, 128 pages per block):
//
//	media  t_read  t_prog  t_dma   ratio  copyback chip time  R/P unloaded
//	TLC    60 us   700 us  24 us   0.94   714.4 us            808 us
//	MLC    35 us   390 us  24 us   0.90   382.5 us            473 us
//	ZNAND   3 us   100 us  3.4 us  0.94    96.82 us           109.8 us
//
// Erase and SLC program latencies are not in Table 2 (datasheet values).
// DisableCopyback turns every copyback into a read and program (the paper's
// "copyback-disabled" configurations). Long operations (zone compaction,
// plugging) are not booked here all at once: pkg/zns books them piece by
// piece as the clock advances, so user I/O interleaves with them.
//
// # Write cache and concurrency
//
// The chip, channel and link bookings take no lock. The write cache does:
// by default it is one pool (WriteCacheBytes) admitted in arrival order,
// whose occupancy and drain queue (a heap of release times) sit under one
// mutex, so every write of every writer of a drive takes that mutex once
// to be admitted and once per chunk program to release its bytes. With
// many writers on a host with few cores that mutex is the write path's
// contention point: the holder is descheduled or preempted while the
// others park on it (`zctl bench node`, SmallWrites, measures the wait).
//
// WriteCacheQueues > 1 is QBLK's multi-queue write buffer in the model:
// the cache is split into that many queues, each a small struct on its
// own cache lines with its own mutex, occupancy and drain heap, holding
// WriteCacheBytes/queues. CacheAdmitQueue and CacheReleaseQueue touch only
// their queue; the counters (stalls, stall time, the occupancy total for
// the high water) are atomics. Each queue is the single pool's algorithm
// on its share, so a queue drains in its release-time order and its
// writers are admitted in arrival order, exactly as the pool was; what
// changes is that a queue filled by a busy writer holds back only the
// writes that map to it (in pkg/zns the zones with that index mod
// queues), not every writer of the drive. That is a modelling choice,
// not only a lock change: a drive built with queues reports different
// times for bursts larger than a queue's share. With 0 or 1 queues the
// queue calls are the pool's calls, unchanged, so every figure and test
// made without the option gives the same numbers. The queue count is
// fixed when the model is built. Nothing here is persisted: the cache is
// modelled time only, and its queues change neither what a write stores
// nor when it is durable.
package flash

import (
	"fmt"
	"math/bits"
	"strings"
	"time"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Media is a NAND preset of ZNS+ Table 2.
type Media struct {
	Name          string
	Read          time.Duration // flash page read
	Program       time.Duration // flash page program
	DMA           time.Duration // one page between chip and controller
	CopybackRatio float64       // normalized copyback latency (Table 2): copyback chip time / (read + program)
	Erase         time.Duration // block erase (not in Table 2; typical values)
	SLCProgram    time.Duration // program into the SLC in-place-update region
}

// Presets are the media of ZNS+ Table 2 (erase latency from datasheets).
var Presets = map[string]Media{
	"TLC":   {Name: "TLC", Read: 60 * time.Microsecond, Program: 700 * time.Microsecond, DMA: 24 * time.Microsecond, CopybackRatio: 0.94, Erase: 3500 * time.Microsecond, SLCProgram: 200 * time.Microsecond},
	"MLC":   {Name: "MLC", Read: 35 * time.Microsecond, Program: 390 * time.Microsecond, DMA: 24 * time.Microsecond, CopybackRatio: 0.90, Erase: 3000 * time.Microsecond, SLCProgram: 150 * time.Microsecond},
	"ZNAND": {Name: "ZNAND", Read: 3 * time.Microsecond, Program: 100 * time.Microsecond, DMA: 3400 * time.Nanosecond, CopybackRatio: 0.94, Erase: 1000 * time.Microsecond, SLCProgram: 50 * time.Microsecond},
}

// Config is the whole device configuration: flat, JSON-tagged, one field per
// CLI flag. Zero timing fields take the value of the Media preset.
type Config struct {
	Channels           int   `json:"channels"`
	Ways               int   `json:"ways"`
	PagesPerBlock      int   `json:"pages_per_block"`
	PageSize           int   `json:"page_size"`  // bytes; a chunk, the copyback unit
	BlockSize          int   `json:"block_size"` // bytes; the logical block (LBA unit)
	BlocksPerChip      int   `json:"blocks_per_chip"`
	SpareBlocksPerChip int   `json:"spare_blocks_per_chip"` // FBGs per FCG not exposed as zones (LogFBGs, lazy erase)
	DZone              int   `json:"d_zone"`                // zone interleaving degree (chips per zone)
	ZoneCapacity       int   `json:"zone_capacity"`         // blocks; 0 = zone size
	MaxOpenZones       int   `json:"max_open_zones"`        // MOR; 0 = no limit
	MaxActiveZones     int   `json:"max_active_zones"`      // MAR; 0 = no limit
	WriteCacheBytes    int64 `json:"write_cache_bytes"`     // 0 = no write cache (writes wait for program)
	// WriteCacheDieBytes selects the cache's admission policy. 0 (the
	// default): one pool admitted in arrival order, so once a slow die's
	// backlog fills it every writer waits behind it. > 0: per-die
	// back-pressure as well, a write is admitted only once each die it
	// writes holds at most this many cached, unprogrammed bytes with it, so
	// a write to a congested die waits for that die while the others keep
	// the rest of the pool (see Model.CacheAdmitDies). Set it when the
	// drive is created: a model switched to it by SetConfig starts from an
	// empty view of what is cached.
	WriteCacheDieBytes int64 `json:"write_cache_die_bytes,omitempty"`
	// WriteCacheQueues splits the write cache into that many queues
	// (QBLK's multi-queue buffer). 0 or 1 (the default): one pool shared
	// by every write, admitted in arrival order under one lock. > 1: each
	// queue holds WriteCacheBytes/queues and has its own lock and drain
	// queue; a write is admitted into its queue only (pkg/zns: the queue of
	// its zone, zone mod queues) and waits only for that queue to drain,
	// so writers of different queues never wait for each other, in
	// modelled or in host time. Not with WriteCacheDieBytes. Fixed when
	// the model is built (a drive's Create or Open).
	WriteCacheQueues int `json:"write_cache_queues,omitempty"`
	// ReadPriority selects the chip's scheduling. false (the default): one
	// queue per chip, operations in booking order, so a read waits behind
	// every program booked before it (a die's whole cached backlog). true:
	// a page read waits for the chip operation in progress when it arrives
	// (and earlier reads) but goes ahead of the programs queued behind it,
	// which start later by the read's time (see Model.ReadArray).
	ReadPriority      bool `json:"read_priority,omitempty"`
	IPUBudgetBlocks   int  `json:"ipu_budget_blocks"`  // max valid blocks in the in-place-update region
	IPURegionBlocks   int  `json:"ipu_region_blocks"`  // size of the SLC region; 0 = 2 x budget
	CopybackThreshold int  `json:"copyback_threshold"` // max consecutive copybacks of a page; 0 = unlimited
	DisableCopyback   bool `json:"disable_copyback"`   // copy every chunk by read and program (no copyback)

	Media               string        `json:"media"` // TLC | MLC | ZNAND
	ReadLatency         time.Duration `json:"read_latency_ns"`
	ProgramLatency      time.Duration `json:"program_latency_ns"`
	DMALatency          time.Duration `json:"dma_latency_ns"`
	EraseLatency        time.Duration `json:"erase_latency_ns"`
	SLCProgramLatency   time.Duration `json:"slc_program_latency_ns"`
	CopybackRatio       float64       `json:"copyback_ratio"`
	ResetLatency        time.Duration `json:"reset_latency_ns"` // host-visible reset (the erase is lazy)
	HostLinkBytesPerSec int64         `json:"host_link_bytes_per_sec"`
	// DuplexLink gives each direction of the host link its own
	// HostLinkBytesPerSec (PCIe is full duplex): reads' transfers to the
	// host and writes' from it do not queue behind each other. false (the
	// default): one link both directions share.
	DuplexLink bool `json:"duplex_link,omitempty"`
}

// Defaults is the ZNS+ evaluation drive: 8 channels x 2 ways, MLC, 16 KiB
// pages, 128 pages per block, D_zone = 16 (32 MiB zones), 1.2 GB/s link.
func Defaults() Config {
	return Config{
		Channels: 8, Ways: 2, PagesPerBlock: 128, PageSize: 16384, BlockSize: 4096,
		BlocksPerChip: 64, SpareBlocksPerChip: 4, DZone: 16,
		MaxOpenZones: 14, MaxActiveZones: 14, WriteCacheBytes: 16 << 20,
		IPUBudgetBlocks: 256, CopybackThreshold: 4,
		Media: "MLC", ResetLatency: 200 * time.Microsecond, HostLinkBytesPerSec: 1_200_000_000,
	}
}

// Small is a tiny geometry for tests: 2 channels x 2 ways, 4 KiB blocks,
// 16 KiB pages, 8 pages per block, D_zone 2 => 64-block (256 KiB) zones,
// 16 zones, about 4 MiB of flash.
func Small() Config {
	c := Defaults()
	c.Channels, c.Ways, c.PagesPerBlock, c.BlocksPerChip, c.SpareBlocksPerChip, c.DZone = 2, 2, 8, 10, 2, 2
	c.MaxOpenZones, c.MaxActiveZones = 4, 6
	c.WriteCacheBytes = 256 << 10
	c.IPUBudgetBlocks = 32
	return c
}

// Resolved returns c with media timings filled from the preset.
func (c Config) Resolved() Config {
	m, ok := Presets[strings.ToUpper(c.Media)]
	if !ok {
		return c
	}
	c.Media = m.Name
	if c.ReadLatency == 0 {
		c.ReadLatency = m.Read
	}
	if c.ProgramLatency == 0 {
		c.ProgramLatency = m.Program
	}
	if c.DMALatency == 0 {
		c.DMALatency = m.DMA
	}
	if c.EraseLatency == 0 {
		c.EraseLatency = m.Erase
	}
	if c.SLCProgramLatency == 0 {
		c.SLCProgramLatency = m.SLCProgram
	}
	if c.CopybackRatio == 0 {
		c.CopybackRatio = m.CopybackRatio
	}
	if c.IPURegionBlocks == 0 {
		c.IPURegionBlocks = 2 * c.IPUBudgetBlocks
	}
	return c
}

func isPow2(n int) bool { return n > 0 && n&(n-1) == 0 }

// Bounds of Validate: write-cache queues, chips per drive and bytes of
// flash per drive (64 TiB).
const (
	MaxCacheQueues = 1 << 10
	maxChips       = 1 << 12
	MaxDeviceBytes = 1 << 46
)

func bad(field, format string, a ...any) error {
	return &zerr.InvalidArgumentError{Field: field, Reason: fmt.Sprintf(format, a...)}
}

// Validate checks c (after Resolved) and returns a zerr.InvalidArgumentError
// naming the first bad field.
func (c Config) Validate() error {
	c = c.Resolved()
	pos := []struct {
		n string
		v int
	}{{"channels", c.Channels}, {"ways", c.Ways}, {"pages_per_block", c.PagesPerBlock}, {"page_size", c.PageSize},
		{"block_size", c.BlockSize}, {"blocks_per_chip", c.BlocksPerChip}, {"d_zone", c.DZone}}
	for _, p := range pos {
		if p.v <= 0 {
			return bad(p.n, "must be > 0, got %d", p.v)
		}
	}
	// Upper bounds: a drive's zone and flash-block state is held in memory
	// and its backing file is one sparse file; values past these are typos
	// (a drive of 1e9 blocks per chip), not drives.
	for _, p := range []struct {
		n   string
		v   int
		max int
	}{{"channels", c.Channels, maxChips}, {"ways", c.Ways, maxChips}, {"pages_per_block", c.PagesPerBlock, 1 << 16},
		{"page_size", c.PageSize, 1 << 24}, {"block_size", c.BlockSize, 1 << 20}, {"blocks_per_chip", c.BlocksPerChip, 1 << 20}} {
		if p.v > p.max {
			return bad(p.n, "must be at most %d, got %d", p.max, p.v)
		}
	}
	if chips := c.Channels * c.Ways; chips > maxChips {
		return bad("ways", "channels*ways must be at most %d, got %d", maxChips, chips)
	}
	if b := int64(c.Channels*c.Ways) * int64(c.BlocksPerChip) * int64(c.PagesPerBlock) * int64(c.PageSize); b > MaxDeviceBytes {
		return bad("blocks_per_chip", "a drive of %d bytes of flash is more than %d", b, int64(MaxDeviceBytes))
	}
	if _, ok := Presets[c.Media]; !ok {
		return bad("media", "unknown media %q (want TLC, MLC or ZNAND)", c.Media)
	}
	if c.BlockSize%512 != 0 {
		return bad("block_size", "must be a multiple of 512, got %d", c.BlockSize)
	}
	if c.PageSize%c.BlockSize != 0 || !isPow2(c.PageSize/c.BlockSize) {
		return bad("page_size", "must be a power-of-two multiple of block_size %d, got %d", c.BlockSize, c.PageSize)
	}
	if !isPow2(c.PagesPerBlock) {
		return bad("pages_per_block", "must be a power of two, got %d", c.PagesPerBlock)
	}
	chips := c.Channels * c.Ways
	if !isPow2(c.DZone) || chips%c.DZone != 0 || !isPow2(chips/c.DZone) {
		return bad("d_zone", "must be a power of two dividing channels*ways=%d into a power-of-two number of chip groups, got %d", chips, c.DZone)
	}
	if c.SpareBlocksPerChip < 1 || c.SpareBlocksPerChip >= c.BlocksPerChip {
		return bad("spare_blocks_per_chip", "must be in [1, blocks_per_chip=%d), got %d", c.BlocksPerChip, c.SpareBlocksPerChip)
	}
	zs := c.DZone * c.PagesPerBlock * (c.PageSize / c.BlockSize)
	if c.ZoneCapacity < 0 || c.ZoneCapacity > zs {
		return bad("zone_capacity", "must be in [0, zone size %d blocks], got %d", zs, c.ZoneCapacity)
	}
	if c.MaxOpenZones < 0 || c.MaxActiveZones < 0 {
		return bad("max_open_zones", "limits must be >= 0")
	}
	if c.MaxActiveZones > 0 && c.MaxOpenZones > c.MaxActiveZones {
		return bad("max_open_zones", "MOR %d exceeds MAR %d", c.MaxOpenZones, c.MaxActiveZones)
	}
	if c.WriteCacheBytes < 0 {
		return bad("write_cache_bytes", "must be >= 0, got %d", c.WriteCacheBytes)
	}
	if c.WriteCacheDieBytes < 0 || (c.WriteCacheDieBytes > 0 && c.WriteCacheDieBytes < int64(c.PageSize)) {
		return bad("write_cache_die_bytes", "must be 0 or at least a page (%d), got %d", c.PageSize, c.WriteCacheDieBytes)
	}
	if c.WriteCacheQueues < 0 || c.WriteCacheQueues > MaxCacheQueues {
		return bad("write_cache_queues", "must be in [0, %d], got %d", MaxCacheQueues, c.WriteCacheQueues)
	}
	if c.WriteCacheQueues > 1 {
		if c.WriteCacheDieBytes > 0 {
			return bad("write_cache_queues", "cannot be combined with write_cache_die_bytes")
		}
		if c.WriteCacheBytes/int64(c.WriteCacheQueues) < int64(c.PageSize) {
			return bad("write_cache_queues", "%d queues of a %d-byte cache hold less than a page (%d) each", c.WriteCacheQueues, c.WriteCacheBytes, c.PageSize)
		}
	}
	if c.IPUBudgetBlocks < 0 || c.IPURegionBlocks < c.IPUBudgetBlocks {
		return bad("ipu_region_blocks", "must be >= ipu_budget_blocks %d (and budget >= 0), got %d", c.IPUBudgetBlocks, c.IPURegionBlocks)
	}
	if c.CopybackThreshold < 0 {
		return bad("copyback_threshold", "must be >= 0, got %d", c.CopybackThreshold)
	}
	for _, d := range []struct {
		n string
		v time.Duration
	}{{"read_latency_ns", c.ReadLatency}, {"program_latency_ns", c.ProgramLatency}, {"dma_latency_ns", c.DMALatency},
		{"erase_latency_ns", c.EraseLatency}, {"slc_program_latency_ns", c.SLCProgramLatency}, {"reset_latency_ns", c.ResetLatency}} {
		if d.v < 0 {
			return bad(d.n, "must be >= 0, got %v", d.v)
		}
	}
	if c.CopybackRatio <= 0 || c.CopybackRatio > 1 {
		return bad("copyback_ratio", "must be in (0, 1], got %v", c.CopybackRatio)
	}
	if c.HostLinkBytesPerSec <= 0 {
		return bad("host_link_bytes_per_sec", "must be > 0, got %d", c.HostLinkBytesPerSec)
	}
	return nil
}

// Geometry is derived from a valid Config.
type Geometry struct {
	Chips         int    // channels * ways (D_max)
	Channels      int    // chip c is on channel c % Channels
	BlockSize     int    // bytes per LBA
	ChunkBlocks   int    // LBAs per chunk (flash page)
	PageSize      int    // bytes per chunk
	PagesPerBlock int    // chunks per flash block
	DZone         int    // chips per zone
	NFCG          int    // chip groups
	FBGsPerFCG    int    // flash block groups per chip group (= blocks per chip)
	ZonesPerFCG   int    // FBGsPerFCG - spares
	Zones         uint64 // total zones
	ZoneSize      uint64 // LBAs per zone
	ZoneCap       uint64 // writable LBAs per zone
	TotalLBAs     uint64 // Zones * ZoneSize
}

// Geometry derives the geometry; c must be valid.
func (c Config) Geometry() Geometry {
	c = c.Resolved()
	g := Geometry{
		Chips: c.Channels * c.Ways, Channels: c.Channels, BlockSize: c.BlockSize,
		ChunkBlocks: c.PageSize / c.BlockSize, PageSize: c.PageSize, PagesPerBlock: c.PagesPerBlock,
		DZone: c.DZone, FBGsPerFCG: c.BlocksPerChip, ZonesPerFCG: c.BlocksPerChip - c.SpareBlocksPerChip,
	}
	g.NFCG = g.Chips / g.DZone
	g.Zones = uint64(g.NFCG * g.ZonesPerFCG)
	g.ZoneSize = uint64(g.DZone * g.PagesPerBlock * g.ChunkBlocks)
	g.ZoneCap = g.ZoneSize
	if c.ZoneCapacity > 0 {
		g.ZoneCap = uint64(c.ZoneCapacity)
	}
	g.TotalLBAs = g.Zones * g.ZoneSize
	return g
}

// FCG of a zone (ZNS+ §2.2: the low log2(NFCG) bits of the zone address).
func (g Geometry) FCG(zone uint64) int { return int(zone % uint64(g.NFCG)) }

// Loc is the physical place of one LBA inside an FBG.
type Loc struct {
	Chip int // global chip index
	Page int // page offset inside the flash block
	Sub  int // block offset inside the page (chunk)
}

// Locate maps a zone-relative block offset of a zone in FCG fcg to its chip,
// page and sub-block: chunk j goes to chip j mod D_zone of the FCG, page j div D_zone.
func (g Geometry) Locate(fcg int, off uint64) Loc {
	j := int(off) / g.ChunkBlocks
	return Loc{Chip: fcg*g.DZone + j%g.DZone, Page: j / g.DZone, Sub: int(off) % g.ChunkBlocks}
}

// ChipOfLBA is the chip an LBA is mapped to (independent of the FBG).
func (g Geometry) ChipOfLBA(lba uint64) int {
	z := lba / g.ZoneSize
	return g.Locate(g.FCG(z), lba%g.ZoneSize).Chip
}

// Mapping is what identify_mapping returns: the bit fields of a logical chunk
// address (LBA >> log2(ChunkBlocks)) that select the chip inside the FCG and
// the FCG. chip = FCGID*DZone + ChipID.
type Mapping struct {
	BlockSize   int    `json:"block_size"`
	ChunkBlocks int    `json:"chunk_blocks"`
	ChunkShift  uint   `json:"chunk_shift"` // LBA >> ChunkShift = chunk address
	ZoneBlocks  uint64 `json:"zone_blocks"`
	DZone       int    `json:"d_zone"`
	NFCG        int    `json:"n_fcg"`
	Chips       int    `json:"chips"`
	ChipIDShift uint   `json:"chip_id_shift"` // in the chunk address
	ChipIDBits  uint   `json:"chip_id_bits"`
	FCGIDShift  uint   `json:"fcg_id_shift"` // in the chunk address
	FCGIDBits   uint   `json:"fcg_id_bits"`
}

// Mapping returns the identify_mapping bit fields.
func (g Geometry) Mapping() Mapping {
	chunksPerZone := int(g.ZoneSize) / g.ChunkBlocks
	return Mapping{
		BlockSize: g.BlockSize, ChunkBlocks: g.ChunkBlocks, ChunkShift: uint(bits.TrailingZeros(uint(g.ChunkBlocks))),
		ZoneBlocks: g.ZoneSize, DZone: g.DZone, NFCG: g.NFCG, Chips: g.Chips,
		ChipIDShift: 0, ChipIDBits: uint(bits.TrailingZeros(uint(g.DZone))),
		FCGIDShift: uint(bits.TrailingZeros(uint(chunksPerZone))), FCGIDBits: uint(bits.TrailingZeros(uint(g.NFCG))),
	}
}

// Chip computes the chip of an LBA from the bit fields only.
func (m Mapping) Chip(lba uint64) int {
	ca := lba >> m.ChunkShift
	chipID := (ca >> m.ChipIDShift) & (1<<m.ChipIDBits - 1)
	fcg := (ca >> m.FCGIDShift) & (1<<m.FCGIDBits - 1)
	return int(fcg)*m.DZone + int(chipID)
}
