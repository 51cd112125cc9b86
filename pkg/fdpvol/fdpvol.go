// Package fdpvol is an lfs.Volume over an FDP namespace: the
// log-structured file system on a conventional namespace whose writes
// carry placement identifiers, with each of its logs on its own reclaim
// unit handle, as F2FS tags its logs with write hints.
//
// # Drives
//
// The volume reaches the namespace through a Drive: Write with a
// placement identifier, Read, Trim, Flush, LBAStatus and the geometry.
// New runs on a drive in the process (pkg/fdp, through Local); Open on
// any Drive, such as package fdpnet's, a tenant's fdp namespace served by
// a node over gRPC (the node admits it to its grant only; its placement
// handles are the namespace's own). The volume behaves the same on both;
// this package links no gRPC.
//
// # Zones
//
// A v-zone is a fixed range of ZoneBlocks LBAs of the namespace (zone i is
// LBAs [i*ZoneBlocks, (i+1)*ZoneBlocks)); there are Capacity/ZoneBlocks of
// them. The drive knows nothing of zones: the write pointers and states are
// kept here, on the host, and the sequential-write rule is enforced here
// (a write at another offset is a zerr.WritePointerError). Reset trims the
// zone's range (the drive then holds no valid data there, so garbage
// collection moves none of it); Finish is bookkeeping; Flush is the
// drive's Flush. The default zone size is one reclaim unit, so a zone
// written by one log fills whole reclaim units of its handle and its
// Reset leaves them wholly invalid: garbage collection erases them without
// copying.
//
// # Placement
//
// The volume implements lfs.ClassOpener: a zone opened for a class (one of
// the file system's six logs, or its metadata) takes the placement handle
// Options.Handles gives that class, and every write into the zone carries
// it. A zone opened without a class takes Options.DefaultHandle. Zones
// are spread over the reclaim groups by index (zone i writes to group i
// mod groups).
//
// # No in-storage copies
//
// FDP has no zone compaction and no threaded logging: Compact is a host
// read of each source run and a write of it to its destination (counted
// as Local in lfs.CompactStats), and the volume does not implement
// lfs.TLOpener. Run the file system in lfs.ModeZNS (host copy) on it;
// ModeIZC works but moves the same data through the host.
//
// # Restart and power loss
//
// Nothing of the zones is stored apart from the data. Open derives each
// zone's write pointer from the drive's mapping (Drive.LBAStatus, NVMe Get
// LBA Status: fdp.Device.LBAStatus on a local drive, the FDP service's
// LBAStatus over the network, paged by the node): the end of the mapped
// prefix of its range; a zone with a mapped prefix is
// open (full when the prefix is the whole zone), else empty. A zone that
// was finished before its end comes back open at its write pointer. The
// drive makes every write acknowledged before a Flush (or with FUA)
// durable, so the recovered write pointer is at or past the last durable
// one: a power loss can lose only unflushed writes at a zone's tail, and
// can leave mapped blocks past a hole (a later unflushed write survived, an
// earlier one not). Nothing may read those blocks past the write pointer;
// the zone's next write or finish trims them first (garbage collection
// would otherwise move them). Open itself changes nothing on the drive, so
// opening a namespace with the wrong zone size (below) loses nothing. A
// write whose answer was lost (a node or the network failing after the
// drive took it) is the same case: the volume keeps the zone's write
// pointer, its next write there overwrites those blocks, and a later Open
// counts what is still mapped in the zone. A
// Reset not yet flushed may be lost: the zone then comes back with its old
// data. The file system is correct with both, as on a zoned drive: its
// checkpoint and fsync records are written after a Flush of everything
// they name, so what they name lies below the recovered write pointers;
// whatever lies past them (or in zones no checkpoint names) it never reads
// and writes over (a zone's writes resume at the recovered write pointer;
// a zone it does not hold it resets).
//
// The zone size is a number of reclaim units of the drive's current size
// (Options.ZoneRUs), and lfs records it in its superblock: a drive whose
// reclaim unit size changed since mkfs (fdp SetConfig) gives other zones,
// and lfs refuses the mount (a geometry mismatch) before it writes; Open
// changed nothing, so setting the old size back mounts the file system
// again.
//
// # Concurrency
//
// Methods are safe for concurrent use. One mutex guards the zone table; it
// is never held during a drive command (a local command or a network
// round trip). A write claims its zone for its duration: a second write
// into the same zone meanwhile is refused with a WritePointerError (the
// file system serializes each zone's appends). Writes to different zones,
// reads and trims run in parallel on the drive.
//
// # Failure
//
// A drive error comes back from the volume call unchanged (typed,
// pkg/zerr; over the network through pkg/rpcerr, UNAVAILABLE once the
// client's retry deadline passes) and changes no write pointer; the file
// system retries or turns read-only. One volume writes a namespace at a
// time: two volumes over one namespace would each believe they hold its
// zones. The volume does not arbitrate that itself; Options.Fence lets the
// caller stop it (zctl mount holds the namespace's mount lease,
// fdpnet.Lease, and fences the volume with it).
package fdpvol

import (
	"context"
	"fmt"
	"sync"

	"github.com/zonefleet/zonefleet/pkg/fdp"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Options configure a Volume.
type Options struct {
	// ZoneRUs is the zone size in reclaim units of the drive's current
	// size (0: 1).
	ZoneRUs int
	// MaxOpen is the number of zones that may be open at once (0: 16, at
	// most the number of zones).
	MaxOpen int
	// Handles gives each lfs.ZoneClass its placement handle (an index into
	// the drive's handles); nil: class i takes handle i mod the drive's
	// handles. OneHandle puts every class on handle 0.
	Handles []uint16
	// DefaultHandle is the handle of zones opened without a class.
	DefaultHandle uint16
	// Fence, when set, is asked before every command that changes the
	// namespace (opening a zone, Write, Compact, Finish,
	// Reset); its error refuses the command, unchanged. A mount lease
	// (fdpnet.Lease) stops a mount that lost the namespace to another.
	Fence func() error
}

// OneHandle is Options.Handles with every class on handle 0 (the file
// system's logs mixed in the drive's reclaim units).
func OneHandle() []uint16 { return make([]uint16, lfs.NumZoneClasses) }

type zstate uint8

const (
	zEmpty  zstate = iota
	zOpen          // opened (counted against MaxOpen) or written since
	zClosed        // recovered partially written, or not written since: writable, not counted
	zFull
)

type zone struct {
	wp      uint64
	st      zstate
	handle  uint16
	writing bool // a write is in flight
	// stale: Open found blocks mapped past the write pointer (past a hole);
	// they are trimmed before the zone's next write or finish.
	stale bool
}

// Volume is an lfs.Volume over one FDP namespace.
type Volume struct {
	drive  Drive
	dev    *fdp.Device // the local drive under a Volume made by New; nil otherwise
	geo    lfs.VolumeGeometry
	zb     uint64 // LBAs per zone
	groups int
	hs     []uint16 // class -> handle
	def    uint16
	fence  func() error

	mu    sync.Mutex
	zones []zone
	open  int
}

var (
	_ lfs.Volume      = (*Volume)(nil)
	_ lfs.ClassOpener = (*Volume)(nil)
)

// New makes a Volume over the local drive dev and recovers its zones from
// the drive's mapping (see the package doc).
func New(ctx context.Context, dev *fdp.Device, o Options) (*Volume, error) {
	v, err := Open(ctx, Local(dev), o)
	if err != nil {
		return nil, err
	}
	v.dev = dev
	return v, nil
}

// Open makes a Volume over d and recovers its zones from d's mapping (see
// the package doc).
func Open(ctx context.Context, d Drive, o Options) (*Volume, error) {
	info, err := d.Info(ctx)
	if err != nil {
		return nil, err
	}
	if err := info.check(); err != nil {
		return nil, err
	}
	if o.ZoneRUs < 0 {
		return nil, &zerr.InvalidArgumentError{Field: "zone_rus", Reason: fmt.Sprintf("must be >= 0, got %d", o.ZoneRUs)}
	}
	zb := uint64(max(o.ZoneRUs, 1)) * info.RUBlocks
	n := info.Capacity / zb
	if n < 1 {
		return nil, &zerr.InvalidArgumentError{Field: "zone_rus", Reason: fmt.Sprintf("a zone of %d blocks exceeds the namespace's %d", zb, info.Capacity)}
	}
	nh := info.Handles
	hs := o.Handles
	if hs == nil {
		hs = make([]uint16, lfs.NumZoneClasses)
		for i := range hs {
			hs[i] = uint16(i % nh)
		}
	}
	if len(hs) != int(lfs.NumZoneClasses) {
		return nil, &zerr.InvalidArgumentError{Field: "handles", Reason: fmt.Sprintf("need one handle per zone class (%d), got %d", lfs.NumZoneClasses, len(hs))}
	}
	for c, h := range append(append([]uint16(nil), hs...), o.DefaultHandle) {
		if int(h) >= nh {
			return nil, &zerr.InvalidArgumentError{Field: "handles", Reason: fmt.Sprintf("class %d: handle %d does not exist (%d handles)", c, h, nh)}
		}
	}
	maxOpen := o.MaxOpen
	if maxOpen == 0 {
		maxOpen = 16
	}
	if maxOpen < 0 {
		return nil, &zerr.InvalidArgumentError{Field: "max_open", Reason: fmt.Sprintf("must be >= 0, got %d", o.MaxOpen)}
	}
	maxOpen = min(maxOpen, int(n))
	v := &Volume{drive: d, zb: zb, groups: info.ReclaimGroups, hs: hs, def: o.DefaultHandle, fence: o.Fence, zones: make([]zone, n)}
	v.geo = lfs.VolumeGeometry{BlockSize: info.BlockSize, ZoneBlocks: zb, ChunkBlocks: info.ChunkBlocks,
		SuperpageBlocks: info.ChunkBlocks * info.RUChips, MaxOpen: maxOpen, MaxZones: int(n)}
	if err := v.recover(ctx); err != nil {
		return nil, err
	}
	return v, nil
}

// recover derives every zone's write pointer from the drive's mapping and
// marks the zones with blocks mapped past it. It changes nothing on the
// drive: a namespace opened with another zone size (the reclaim unit size
// changed since mkfs) is refused by the file system's mount before any
// write, and its data must still be there for a mount with the right one.
func (v *Volume) recover(ctx context.Context) error {
	runs, err := v.drive.LBAStatus(ctx, 0, uint64(len(v.zones))*v.zb)
	if err != nil {
		return err
	}
	// split the runs at zone boundaries
	for _, r := range runs {
		for l, end := r.LBA, r.LBA+r.Count; l < end; {
			zi := l / v.zb
			start := zi * v.zb
			stop := min(end, start+v.zb)
			z := &v.zones[zi]
			if l == start+z.wp && z.st != zFull { // the mapped prefix, or its continuation in a later run

				z.wp = stop - start
				z.st = zClosed
				if z.wp == v.zb {
					z.st = zFull
				}
			} else {
				z.stale = true // past a hole: unreadable leftovers of a lost write
			}
			l = stop
		}
	}
	return nil
}

func (v *Volume) fenced() error {
	if v.fence == nil {
		return nil
	}
	return v.fence()
}

// Geometry implements lfs.Volume.
func (v *Volume) Geometry() lfs.VolumeGeometry { return v.geo }

// Device is the local drive under a Volume made by New (nil for one made
// by Open).
func (v *Volume) Device() *fdp.Device { return v.dev }

// Drive is the namespace under the volume.
func (v *Volume) Drive() Drive { return v.drive }

// OpenZone implements lfs.Volume: the lowest empty zone, on DefaultHandle.
func (v *Volume) OpenZone(ctx context.Context) (lfs.ZoneID, error) {
	return v.openZone(v.def)
}

// OpenZoneFor implements lfs.ClassOpener: the lowest empty zone, on the
// class's handle.
func (v *Volume) OpenZoneFor(ctx context.Context, class lfs.ZoneClass) (lfs.ZoneID, error) {
	if class >= lfs.NumZoneClasses {
		return 0, &zerr.InvalidArgumentError{Field: "class", Reason: fmt.Sprintf("unknown zone class %d", class)}
	}
	return v.openZone(v.hs[class])
}

func (v *Volume) openZone(h uint16) (lfs.ZoneID, error) {
	if err := v.fenced(); err != nil {
		return 0, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.open >= v.geo.MaxOpen {
		return 0, &zerr.TooManyOpenError{Limit: uint32(v.geo.MaxOpen)}
	}
	for i := range v.zones {
		if z := &v.zones[i]; z.st == zEmpty && !z.writing {
			z.st, z.wp, z.handle = zOpen, 0, h
			v.open++
			return lfs.ZoneID(i), nil
		}
	}
	return 0, &zerr.NoResourcesError{Resource: "empty v-zones", Requested: 1, Available: 0}
}

func (v *Volume) zoneLocked(z lfs.ZoneID) (*zone, error) {
	if uint64(z) >= uint64(len(v.zones)) {
		return nil, &zerr.NotFoundError{Kind: "v-zone", Name: fmt.Sprint(z)}
	}
	return &v.zones[z], nil
}

// Zones implements lfs.Volume.
func (v *Volume) Zones(ctx context.Context) ([]lfs.ZoneInfo, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []lfs.ZoneInfo
	for i, z := range v.zones {
		st := lfs.ZoneOpen
		switch z.st {
		case zEmpty:
			continue
		case zFull:
			st = lfs.ZoneFull
		}
		out = append(out, lfs.ZoneInfo{ID: lfs.ZoneID(i), WP: z.wp, Capacity: v.zb, State: st})
	}
	return out, nil
}

func (v *Volume) pid(zi lfs.ZoneID, h uint16) fdp.PlacementID {
	return fdp.PlacementID{Group: uint16(int(zi) % v.groups), Handle: h}
}

// Write implements lfs.Volume (the drive writes all or nothing).
func (v *Volume) Write(ctx context.Context, zi lfs.ZoneID, off uint64, data []byte, fua bool) error {
	bs := uint64(v.geo.BlockSize)
	if len(data) == 0 || uint64(len(data))%bs != 0 {
		return &zerr.InvalidArgumentError{Field: "data", Reason: fmt.Sprintf("length %d is not a positive multiple of %d", len(data), bs)}
	}
	n := uint64(len(data)) / bs
	if err := v.fenced(); err != nil {
		return err
	}
	v.mu.Lock()
	z, err := v.zoneLocked(zi)
	if err != nil {
		v.mu.Unlock()
		return err
	}
	start := uint64(zi) * v.zb
	switch {
	case z.st == zEmpty || z.st == zFull:
		st := "empty"
		if z.st == zFull {
			st = "full"
		}
		v.mu.Unlock()
		return &zerr.ZoneStateError{Zone: uint64(zi), State: st, Op: "write"}
	case z.writing || off != z.wp:
		v.mu.Unlock()
		return &zerr.WritePointerError{Zone: uint64(zi), Expected: start + z.wp, Got: start + off}
	case off+n > v.zb:
		v.mu.Unlock()
		return &zerr.OutOfRangeError{LBA: start + off, Count: n, Limit: start + v.zb}
	case z.st == zClosed:
		if v.open >= v.geo.MaxOpen {
			v.mu.Unlock()
			return &zerr.TooManyOpenError{Limit: uint32(v.geo.MaxOpen)}
		}
		z.st = zOpen
		v.open++
	}
	z.writing = true
	pid := v.pid(zi, z.handle)
	stale := z.stale
	v.mu.Unlock()

	if stale {
		if err := v.trimStale(ctx, zi, z, start+off); err != nil {
			v.mu.Lock()
			z.writing = false
			v.mu.Unlock()
			return err
		}
	}
	err = v.drive.Write(ctx, start+off, data, pid, fua)

	v.mu.Lock()
	defer v.mu.Unlock()
	z.writing = false
	if err != nil {
		return err
	}
	z.wp += n
	if z.wp == v.zb {
		z.st = zFull
		v.open--
	}
	return nil
}

// trimStale trims zone zi's blocks from lba to its end, mapped past its
// write pointer when the volume was opened, so that garbage collection
// does not move them and no later Open counts them; the zone is claimed
// (z.writing) by the caller.
func (v *Volume) trimStale(ctx context.Context, zi lfs.ZoneID, z *zone, lba uint64) error {
	if err := v.drive.Trim(ctx, lba, uint64(zi+1)*v.zb-lba); err != nil {
		return err
	}
	v.mu.Lock()
	z.stale = false
	v.mu.Unlock()
	return nil
}

// Read implements lfs.Volume.
func (v *Volume) Read(ctx context.Context, zi lfs.ZoneID, off uint64, buf []byte) error {
	bs := uint64(v.geo.BlockSize)
	if len(buf) == 0 || uint64(len(buf))%bs != 0 {
		return &zerr.InvalidArgumentError{Field: "buf", Reason: fmt.Sprintf("length %d is not a positive multiple of %d", len(buf), bs)}
	}
	n := uint64(len(buf)) / bs
	v.mu.Lock()
	z, err := v.zoneLocked(zi)
	if err != nil {
		v.mu.Unlock()
		return err
	}
	wp := z.wp
	v.mu.Unlock()
	start := uint64(zi) * v.zb
	if off+n > wp || off+n < off {
		return &zerr.OutOfRangeError{LBA: start + off, Count: n, Limit: start + wp}
	}
	b, err := v.drive.Read(ctx, start+off, n)
	if err != nil {
		return err
	}
	if len(b) != len(buf) {
		return &zerr.CorruptError{Path: fmt.Sprintf("v-zone %d", zi), Reason: fmt.Sprintf("a read of %d blocks at %d returned %d bytes", n, off, len(b))}
	}
	copy(buf, b)
	return nil
}

// Finish implements lfs.Volume.
func (v *Volume) Finish(ctx context.Context, zi lfs.ZoneID) error {
	if err := v.fenced(); err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	z, err := v.zoneLocked(zi)
	if err != nil {
		return err
	}
	switch {
	case z.st == zEmpty:
		return &zerr.ZoneStateError{Zone: uint64(zi), State: "empty", Op: "finish"}
	case z.writing:
		return &zerr.ZoneStateError{Zone: uint64(zi), State: "writing", Op: "finish"}
	case z.st == zOpen:
		v.open--
	}
	z.st = zFull
	if !z.stale {
		return nil
	}
	z.writing = true // the trim of the stale tail is in flight
	v.mu.Unlock()
	err = v.trimStale(ctx, zi, z, uint64(zi)*v.zb+z.wp)
	v.mu.Lock()
	z.writing = false
	return err
}

// Reset implements lfs.Volume: the zone's range is trimmed (durable with
// the next Flush).
func (v *Volume) Reset(ctx context.Context, zi lfs.ZoneID) error {
	if err := v.fenced(); err != nil {
		return err
	}
	v.mu.Lock()
	z, err := v.zoneLocked(zi)
	if err != nil {
		v.mu.Unlock()
		return err
	}
	if z.writing {
		v.mu.Unlock()
		return &zerr.ZoneStateError{Zone: uint64(zi), State: "writing", Op: "reset"}
	}
	if z.st == zOpen {
		v.open--
	}
	z.st, z.wp, z.stale = zEmpty, 0, false
	z.writing = true // no write or open until the trim is in
	v.mu.Unlock()
	err = v.drive.Trim(ctx, uint64(zi)*v.zb, v.zb)
	v.mu.Lock()
	z.writing = false
	v.mu.Unlock()
	return err
}

// Compact implements lfs.Volume by host copy: FDP has no in-storage
// copy, so each run is read and written back through the host (counted
// as Local).
func (v *Volume) Compact(ctx context.Context, copies []lfs.Copy) (lfs.CompactStats, error) {
	var st lfs.CompactStats
	if err := v.fenced(); err != nil {
		return st, err
	}
	bs := uint64(v.geo.BlockSize)
	for _, c := range copies {
		if c.Blocks == 0 {
			continue
		}
		buf := make([]byte, c.Blocks*bs)
		if err := v.Read(ctx, c.Src, c.SrcOff, buf); err != nil {
			return st, err
		}
		if err := v.Write(ctx, c.Dst, c.DstOff, buf, false); err != nil {
			return st, err
		}
		st.Local += c.Blocks
	}
	return st, nil
}

// Locate implements lfs.Volume: the chip a block is striped to when its
// reclaim unit is written in order (chunk j of a unit on its chip j mod
// width). The FTL maps pages, so this is a hint.
func (v *Volume) Locate(ctx context.Context, zi lfs.ZoneID, off uint64) (lfs.Location, error) {
	if uint64(zi) >= uint64(len(v.zones)) || off >= v.zb {
		return lfs.Location{}, &zerr.NotFoundError{Kind: "v-zone block", Name: fmt.Sprintf("%d/%d", zi, off)}
	}
	chunk := uint64(v.geo.ChunkBlocks)
	width := uint64(v.geo.SuperpageBlocks) / chunk
	return lfs.Location{Zone: uint32(zi), Chip: uint32((off / chunk) % width)}, nil
}

// Flush implements lfs.Volume.
func (v *Volume) Flush(ctx context.Context) error { return v.drive.Flush(ctx) }
