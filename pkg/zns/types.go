package zns

import (
	"fmt"
	"time"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// ZoneState is the NVMe ZNS zone state.
type ZoneState uint8

const (
	StateEmpty ZoneState = iota
	StateImplicitOpen
	StateExplicitOpen
	StateClosed
	StateFull
	StateReadOnly
	StateOffline
	// StateAny is a ReportZones filter matching every state.
	StateAny ZoneState = 255
)

func (s ZoneState) String() string {
	switch s {
	case StateEmpty:
		return "empty"
	case StateImplicitOpen:
		return "implicitly-open"
	case StateExplicitOpen:
		return "explicitly-open"
	case StateClosed:
		return "closed"
	case StateFull:
		return "full"
	case StateReadOnly:
		return "read-only"
	case StateOffline:
		return "offline"
	case StateAny:
		return "any"
	}
	return "unknown"
}

func (s ZoneState) open() bool   { return s == StateImplicitOpen || s == StateExplicitOpen }
func (s ZoneState) active() bool { return s.open() || s == StateClosed }

// Action is a zone management action.
type Action uint8

const (
	ActionOpen Action = iota
	ActionClose
	ActionFinish
	ActionReset
	ActionOffline
	// ActionReadOnly is an emulator fault injection: the zone becomes read-only.
	ActionReadOnly
)

func (a Action) String() string {
	if a > ActionReadOnly {
		return fmt.Sprintf("action(%d)", uint8(a))
	}
	return [...]string{"open", "close", "finish", "reset", "offline", "set read-only"}[a]
}

// Zone is one zone descriptor of ReportZones.
type Zone struct {
	Index    uint64    `json:"index"`
	Start    uint64    `json:"start"`    // first LBA
	Size     uint64    `json:"size"`     // LBAs
	Capacity uint64    `json:"capacity"` // writable LBAs
	WP       uint64    `json:"wp"`       // write pointer as an absolute LBA
	State    ZoneState `json:"state"`
	TL       bool      `json:"tl"` // TL_opened (threaded logging)
}

// Flags of a write.
type Flags struct {
	FUA       bool // force unit access: fdatasync before completing; completes at program time
	Overwrite bool // in-place update of already written blocks (ZMS budget-based IPU)
}

// Range is a run of LBAs.
type Range struct {
	LBA   uint64 `json:"lba"`
	Count uint64 `json:"count"`
}

// Copy is one zone_compaction entry: Count blocks from Src to Dst.
type Copy struct {
	Src   uint64 `json:"src"`
	Dst   uint64 `json:"dst"`
	Count uint64 `json:"count"`
}

// TLMode selects the internal plugging order of a TL_opened zone.
type TLMode uint8

const (
	LBAOrdered TLMode = iota
	PPAOrdered
)

func (m TLMode) String() string {
	if m == PPAOrdered {
		return "ppa-ordered"
	}
	return "lba-ordered"
}

// IOResult is the modelled timing of one request: it was submitted at
// Submitted and completes at Completed (modelled clock times). With the off
// clock both are zero.
type IOResult struct {
	Submitted time.Duration
	Completed time.Duration
}

// Latency is the modelled latency.
func (r IOResult) Latency() time.Duration { return r.Completed - r.Submitted }

// CompactionResult is what WaitCompaction reports.
type CompactionResult struct {
	ID             uint64
	Blocks         uint64 // blocks copied
	CopybackBlocks uint64 // blocks moved by on-chip copyback (whole chunks)
	CopybackChunks uint64
	ReadProgBlocks uint64 // blocks moved by read-and-program
	Submitted      time.Duration
	Completed      time.Duration
	Err            error
}

// Duration is the modelled duration of the compaction.
func (r CompactionResult) Duration() time.Duration { return r.Completed - r.Submitted }

// Identify describes the device.
type Identify struct {
	Zones        uint64 `json:"zones"`
	ZoneSize     uint64 `json:"zone_size"`     // LBAs
	ZoneCapacity uint64 `json:"zone_capacity"` // LBAs
	BlockSize    int    `json:"block_size"`
	TotalLBAs    uint64 `json:"total_lbas"`
	MaxOpen      int    `json:"max_open_zones"`   // 0 = no limit
	MaxActive    int    `json:"max_active_zones"` // 0 = no limit
	Chips        int    `json:"chips"`
	Channels     int    `json:"channels"`
	DZone        int    `json:"d_zone"`
	PageSize     int    `json:"page_size"`
	Media        string `json:"media"`
	IPUBudget    int    `json:"ipu_budget_blocks"`
	UUID         string `json:"uuid"`
}

// Log is the device statistics (GetLog).
type Log struct {
	Now                 time.Duration `json:"now_ns"`
	HostBlocksWritten   uint64        `json:"host_blocks_written"`
	HostBlocksRead      uint64        `json:"host_blocks_read"`
	NANDPagesProgrammed uint64        `json:"nand_pages_programmed"`
	NANDPagesRead       uint64        `json:"nand_pages_read"`
	WAF                 float64       `json:"waf"` // NAND blocks programmed / host blocks written
	CopybackChunks      uint64        `json:"copyback_chunks"`
	ReadProgramBlocks   uint64        `json:"read_program_blocks"`
	PluggedOnDemand     uint64        `json:"plugged_blocks_on_demand"`
	PluggedBackground   uint64        `json:"plugged_blocks_background"`
	// PluggedCopyback is the plugged blocks (on demand and in the
	// background) copied by copyback, whole chunks on their own chip.
	PluggedCopyback uint64          `json:"plugged_blocks_copyback"`
	Erases          uint64          `json:"erases"`
	CacheBytes      int64           `json:"cache_bytes"`
	CacheCapacity   int64           `json:"cache_capacity"`
	CacheHighWater  int64           `json:"cache_high_water"`
	CacheStalls     int64           `json:"cache_stalls"`
	CacheStallTime  time.Duration   `json:"cache_stall_ns"`
	ChipBusy        []time.Duration `json:"chip_busy_ns"`
	ChipUtilization []float64       `json:"chip_utilization"`
	ZonesPerState   map[string]int  `json:"zones_per_state"`
	OpenZones       int             `json:"open_zones"`
	ActiveZones     int             `json:"active_zones"`
	IPUBudget       uint64          `json:"ipu_budget_blocks"`
	IPUUsed         uint64          `json:"ipu_used_blocks"`
	IPUPageEntries  uint64          `json:"ipu_page_entries"`
	IPUChunkEntries uint64          `json:"ipu_chunk_entries"`
	// L2PLookups and L2PMisses count the map-page lookups of reads and
	// SLCBufferedBlocks counts the blocks unaligned write-buffer flushes
	// programmed to SLC, and WriteBufferSwitches the buffers taken from
	// another zone (WithWriteBuffers; 0 without it).
	SLCBufferedBlocks   uint64 `json:"slc_buffered_blocks,omitempty"`
	WriteBufferSwitches uint64 `json:"write_buffer_switches,omitempty"`
	// those that missed the L2P cache model (WithL2P; 0 without it).
	L2PLookups         uint64 `json:"l2p_lookups,omitempty"`
	L2PMisses          uint64 `json:"l2p_misses,omitempty"`
	EraseCountMin      uint64 `json:"erase_count_min"`
	EraseCountMax      uint64 `json:"erase_count_max"`
	JournalCheckpoints uint64 `json:"journal_checkpoints"`
	// JournalCheckpointFailures counts checkpoints that failed (the old
	// journal stayed in use).
	JournalCheckpointFailures uint64 `json:"journal_checkpoint_failures"`
	// JournalTailsDropped is 1 when Open dropped a torn, zeroed or garbage
	// journal tail (unflushed records lost at a power loss).
	JournalTailsDropped uint64 `json:"journal_tails_dropped"`
	// DataSyncs and JournalSyncs count the fdatasyncs of the data file and
	// of the journal (concurrent callers share one: see syncFile).
	DataSyncs    uint64 `json:"data_syncs"`
	JournalSyncs uint64 `json:"journal_syncs"`
	// WritebackKicks counts the write-backs of the data file's dirty pages
	// started without waiting (WithWritebackKick).
	WritebackKicks uint64 `json:"writeback_kicks"`
	// IOErrors counts failed reads, writes and syncs of the backing files.
	IOErrors uint64 `json:"io_errors"`
	// ZonesFailed counts zones made read-only by a write I/O error.
	ZonesFailed uint64 `json:"zones_failed"`
	// ReadOnly is true once an I/O error made the whole device read-only.
	ReadOnly bool `json:"read_only"`
}

// ParseZoneState accepts the String form of a state (and "any").
func ParseZoneState(s string) (ZoneState, error) {
	for _, st := range []ZoneState{StateEmpty, StateImplicitOpen, StateExplicitOpen, StateClosed, StateFull, StateReadOnly, StateOffline, StateAny} {
		if st.String() == s {
			return st, nil
		}
	}
	return 0, &zerr.InvalidArgumentError{Field: "state", Reason: fmt.Sprintf("unknown zone state %q", s)}
}

// ParseAction accepts open, close, finish, reset, offline, read-only.
func ParseAction(s string) (Action, error) {
	switch s {
	case "open":
		return ActionOpen, nil
	case "close":
		return ActionClose, nil
	case "finish":
		return ActionFinish, nil
	case "reset":
		return ActionReset, nil
	case "offline":
		return ActionOffline, nil
	case "read-only", "readonly":
		return ActionReadOnly, nil
	}
	return 0, &zerr.InvalidArgumentError{Field: "action", Reason: fmt.Sprintf("unknown zone action %q", s)}
}

// ParseTLMode accepts lba-ordered or ppa-ordered.
func ParseTLMode(s string) (TLMode, error) {
	switch s {
	case "lba-ordered", "lba":
		return LBAOrdered, nil
	case "ppa-ordered", "ppa":
		return PPAOrdered, nil
	}
	return 0, &zerr.InvalidArgumentError{Field: "mode", Reason: fmt.Sprintf("unknown TL mode %q", s)}
}

// FormatName names the backing-file format this build writes and reads.
var FormatName = fmt.Sprintf("zns-%d", formatVersion)

// CopyCosts are the modelled unloaded costs a host's copy policies compare
// (ZNS+ §3.2.1: write a cached block from the host (IZC-H) or copy it in
// the device (IZC-D); §3.3.2: f_copy, f_plugging). All zero with the off
// clock.
type CopyCosts struct {
	ChunkBlocks int // blocks per chunk (the copyback unit)
	// FlashReadBlock is a flash page read and the DMA of one block.
	FlashReadBlock time.Duration
	// HostTransferBlock is one block over the host link.
	HostTransferBlock time.Duration
	// CopybackChunk is the chip time of one copyback (no channel).
	CopybackChunk time.Duration
	// ReadProgramChunk is the unloaded latency of a read-and-program copy
	// of one chunk; ReadProgramChipChunk the chip time it holds.
	ReadProgramChunk     time.Duration
	ReadProgramChipChunk time.Duration
}
