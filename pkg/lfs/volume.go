package lfs

import (
	"context"
	"fmt"
)

// ZoneID names one v-zone of a namespace. IDs are chosen by the Volume; the
// file system never invents one. An ID stays valid until the v-zone is Reset.
type ZoneID uint32

// ZoneState is the state of a v-zone as the file system needs to know it.
type ZoneState uint8

const (
	// ZoneEmpty: nothing written, not handed out by OpenZone (or reset).
	ZoneEmpty ZoneState = iota
	// ZoneOpen: handed out by OpenZone (possibly with nothing written yet) or
	// partially written; writable at its write pointer.
	ZoneOpen
	// ZoneFull: written to capacity or finished; read-only until Reset.
	ZoneFull
)

func (s ZoneState) String() string {
	switch s {
	case ZoneEmpty:
		return "empty"
	case ZoneOpen:
		return "open"
	case ZoneFull:
		return "full"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// VolumeGeometry describes a namespace's v-zones. It never changes while a
// Volume is in use.
type VolumeGeometry struct {
	BlockSize   int    // bytes per logical block (every offset and count below is in blocks)
	ZoneBlocks  uint64 // writable capacity of one v-zone, in blocks
	ChunkBlocks int    // blocks per flash page (the copyback unit); 1 when unknown
	// SuperpageBlocks is the program unit of a zone's write buffer: a flash
	// page on each die of a zone's stripe (ChunkBlocks x the stripe width);
	// 0 when unknown (IOTailor is then off).
	SuperpageBlocks int
	MaxOpen         int // v-zones that may be open (written) at once: MAR_logical
	MaxZones        int // v-zones the namespace may hold at once (open + full)
}

// ZoneInfo is one v-zone in Zones.
type ZoneInfo struct {
	ID       ZoneID
	WP       uint64 // write pointer in blocks from the zone's start (0 for an empty zone)
	Capacity uint64 // writable blocks
	State    ZoneState
}

// Copy is one run of a device-side compaction: Blocks blocks from (Src, SrcOff)
// to (Dst, DstOff).
type Copy struct {
	Src    ZoneID
	SrcOff uint64
	Dst    ZoneID
	DstOff uint64
	Blocks uint64
}

// CompactStats says how a Compact moved its blocks (all counts in blocks).
type CompactStats struct {
	Copyback uint64 // moved by on-chip copyback
	Local    uint64 // read and programmed inside one drive
	Remote   uint64 // pushed from one node to a peer node (never through the client)
}

// Location is where one v-zone block physically lives.
type Location struct {
	Node   string // node name ("" for a local device)
	Device uint32 // device index on that node
	Zone   uint32 // physical zone index on that device
	Chip   uint32 // flash chip (die) holding the block, from identify_mapping
}

// Volume is one namespace's v-zones as the file system sees them. It is the
// ONLY way pkg/lfs reaches drives; pkg/client implements it over the network
// and pkg/lfs/devvol over local emulated drives.
//
// All offsets and counts are in blocks of Geometry().BlockSize; data lengths
// are whole blocks. Methods are safe for concurrent use. Errors are the typed
// errors of pkg/zerr (a transient failure is a zerr.UnavailableError, which
// the file system retries; anything else it turns into EIO or ENOSPC). A write
// that returns nil is durable against the loss of the client process; Flush
// and fua additionally make it durable against power loss of the drives.
type Volume interface {
	// Geometry returns the fixed geometry of the namespace.
	Geometry() VolumeGeometry

	// OpenZone returns a new, empty v-zone, open for writing at offset 0. It
	// returns a zerr.NoResourcesError when the namespace holds MaxZones
	// v-zones already, and zerr.TooManyOpenError when MaxOpen are open.
	OpenZone(ctx context.Context) (ZoneID, error)

	// Zones lists every v-zone the namespace holds that is not empty (open,
	// including opened-but-unwritten ones, and full), in any order. Mount uses it
	// to find the metadata zones and the write pointers after a crash.
	Zones(ctx context.Context) ([]ZoneInfo, error)

	// Write writes len(data)/BlockSize blocks to zone z starting at off, which
	// must equal the zone's write pointer (zerr.WritePointerError otherwise).
	// With fua the data is on stable media when Write returns. On failure the
	// error says how far the write got: it wraps a *PartialWriteError when some
	// leading blocks were written (the write pointer moved by Written blocks).
	// After a Write that returned nil the caller reuses data: a Volume
	// keeps no reference it still reads, or (over the network) only one
	// whose bytes can no longer be applied (the write pointer moved past).
	Write(ctx context.Context, z ZoneID, off uint64, data []byte, fua bool) error

	// Read fills buf (whole blocks) from zone z at off; the range must lie
	// below the write pointer (zerr.OutOfRangeError otherwise).
	Read(ctx context.Context, z ZoneID, off uint64, buf []byte) error

	// Finish moves zone z to full (releasing its open resource).
	Finish(ctx context.Context, z ZoneID) error

	// Reset empties zone z and gives it back to the namespace's pool; its ID
	// may be returned again by a later OpenZone.
	Reset(ctx context.Context, z ZoneID) error

	// Compact copies blocks inside the drives (ZNS+ zone_compaction, IZC):
	// each Copy's source must lie below its zone's write pointer and its
	// destination at or above its zone's write pointer. Destinations are
	// written in increasing DstOff order without gaps starting at the write
	// pointer; on return every destination zone's write pointer has advanced
	// past its copies and the copies read back. The copies may still be in
	// progress on the drives (zone_compaction is asynchronous, ZNS+ §3.2.1):
	// they are durable once a later Flush returns, which the checkpoint that
	// names them (and every fsync) issues before its record.
	Compact(ctx context.Context, copies []Copy) (CompactStats, error)

	// Locate tells where block off of zone z lives (for copyback-aware
	// allocation): two blocks of the same chunk index on the same Node, Device
	// and Chip can be moved by copyback.
	Locate(ctx context.Context, z ZoneID, off uint64) (Location, error)

	// Flush makes every acknowledged write durable against power loss.
	Flush(ctx context.Context) error

	// Threaded logging (ZNS+ §3.2.2) is the optional TLOpener interface.
}

// VectorWriter is implemented by a Volume that writes several buffers back
// to back in one call without gathering them first (fsvol: each stripe leg
// goes to its node as the parts of the buffers it covers; devvol: one
// pwritev). WriteV is Write of the buffers' bytes, with Write's errors. The
// write-back hands it the cached pages themselves, which never change once
// cached (setPage), so no copy of a batch is made; a Volume without it gets
// the pages gathered into one buffer.
type VectorWriter interface {
	WriteV(ctx context.Context, z ZoneID, off uint64, bufs [][]byte, fua bool) error
}

// TLOpener is implemented by a Volume whose drives support ZNS+ threaded
// logging (TL_open). It is optional: the file system checks for it with a type
// assertion and falls back to compaction when it is missing.
type TLOpener interface {
	// TLOpen reopens v-zone z, which holds data (open or full; a full v-zone
	// the file system recycles is allowed), for threaded logging. valid has one
	// bit per block of the zone's capacity (bit i%8 of byte i/8 is block i);
	// a set bit is a block that must be preserved. The write pointer goes back
	// to 0; afterwards Write(z, off, ...) accepts any off at or above the write
	// pointer whose blocks are all not valid (zerr.TLViolationError otherwise)
	// and the drives plug the valid blocks it skips. Read returns, for every
	// block below the zone's old write pointer, its valid data or what was
	// written to it since. Zones reports the zone Open with the write pointer
	// past the last block written or plugged. Finish ends threaded logging
	// (the rest is plugged) and makes the zone full. The open counts against
	// MaxOpen like OpenZone (zerr.TooManyOpenError).
	TLOpen(ctx context.Context, z ZoneID, valid []byte) error
}

// LikeOpener is implemented by a Volume that can place a new v-zone near an
// existing one (ZNS+ copyback-aware allocation across a cluster: the new
// zone's stripes on the same drives and dies as like's, so a compaction of
// like into it can move chunks by on-chip copyback). It is optional and a
// hint: the zone returned is a normal new open zone (as OpenZone), wherever
// the volume could place it. The file system uses it for the destination
// segments of IZC when copyback-aware allocation is on.
type LikeOpener interface {
	OpenZoneLike(ctx context.Context, like ZoneID) (ZoneID, error)
}

// ZoneClass is what a new v-zone will hold: one of the six logs (the
// node and data logs of three temperatures, see seg.go) or the metadata
// (superblock, checkpoint and snapshot records).
type ZoneClass uint8

// The classes, in the order of the file system's logs.
const (
	ClassHotNode ZoneClass = iota
	ClassWarmNode
	ClassColdNode
	ClassHotData
	ClassWarmData
	ClassColdData
	ClassMeta
	NumZoneClasses
)

// The log classes are the log indexes.
var _ [numTemps]struct{} = [ClassMeta]struct{}{}

func (c ZoneClass) String() string {
	if c < ClassMeta {
		return logNames[c]
	}
	if c == ClassMeta {
		return "meta"
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// ClassOpener is implemented by a Volume that places a zone's data by what
// it holds (an FDP namespace: each class's zones written through their own
// placement handle, as F2FS tags its logs with write hints). It is
// optional and a hint: OpenZoneFor returns a normal new open zone, as
// OpenZone, with OpenZone's errors. The file system uses it for every zone
// it opens, except the destinations of copyback-aware compaction
// (LikeOpener), which follow their source.
type ClassOpener interface {
	OpenZoneFor(ctx context.Context, class ZoneClass) (ZoneID, error)
}

// PartialWriteError is wrapped by a Volume.Write error when the first Written
// blocks of the write reached the zone before the failure.
type PartialWriteError struct {
	Zone    ZoneID
	Off     uint64
	Written uint64 // blocks written from Off
	Err     error  // the cause
}

func (e *PartialWriteError) Error() string {
	return fmt.Sprintf("zone %d: write at %d stopped after %d blocks: %v", e.Zone, e.Off, e.Written, e.Err)
}
func (e *PartialWriteError) Unwrap() error { return e.Err }

// ZonesResetter is implemented by a Volume that resets several zones at once
// more cheaply than one by one (fsvol: one arbiter state change for all of
// them). ResetZones resets each zone as Reset would and returns each zone's
// error (nil when reset), in the order given. The checkpoint uses it for the
// segments it frees.
type ZonesResetter interface {
	ResetZones(ctx context.Context, zs []ZoneID) []error
}
