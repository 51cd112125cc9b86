// Package zoneowner persists, per zone of one device, which namespace owns
// the zone's data and under which owner epoch — the state the node compares
// with the arbiter's grant on every zone-touching call so that a zone whose
// owner changed is always reset before the new owner's first I/O, so old
// data never reaches the next owner.
//
// Why state and not events: resetting a zone when the node sees its grant
// key deleted is not enough. Owner changes that are overwrites (a watch reconnect
// after an etcd leader change, the arbiter's grant repair, grants split over
// transactions) never produce that event, and the next tenant would read
// the previous tenant's blocks. With an owner epoch for every grant (the etcd
// create revision of the grant key: new for every assignment, unchanged by
// the arbiter's repairs, which overwrite) and the epoch persisted here, the
// node decides from what is, not from what it happened to hear:
//
//	Decide(persisted, grant)
//	  grant absent                        -> Deny      (NOT_OWNER)
//	  persisted == grant                  -> Serve
//	  anything else (other namespace,     -> Reset     (reset the zone under its write
//	  other epoch, never written, record                lock, Set the new owner, then serve)
//	  unreadable)
//
// File format (version 1): a 4096-byte header — magic "ZFOWNER\x00", format
// version, feature bits, zone count, CRC-32C of the header — followed by one
// 256-byte record per zone: namespace length (1 byte), namespace (up to 128
// bytes), epoch (8 bytes), CRC-32C of the record over those bytes and the
// zone index (so a record written at the wrong offset does not verify). A
// record is written with one pwrite and made durable with fdatasync before
// Set returns (concurrent Sets share fdatasyncs; SetFree, whose loss fails
// closed, and SetUnsynced, whose caller orders it, do not wait for one); a
// torn or corrupt record reads as "unknown owner", which forces a reset:
// corruption fails closed, never open.
//
// Concurrency: Get is lock-free (one atomic pointer per zone) and safe from
// any goroutine; Set of one zone must be serialized by the caller (the
// node's per-zone write lock, which it holds for the reset anyway); Sets of
// different zones may run concurrently (pwrite at distinct offsets).
package zoneowner

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/zonefleet/zonefleet/pkg/ondisk"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/zonefleet/zonefleet/pkg/vfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Format constants.
const (
	Version     = 1
	HeaderSize  = 4096
	RecordSize  = 256
	MaxNSLen    = 128
	magic       = "ZFOWNER\x00"
	featureNone = 0
	// knownFeatures is every feature bit this version understands.
	knownFeatures = featureNone
)

// Owner is who owns a zone's data. The zero Owner means "free": the zone
// was reset and no namespace has written to it since.
type Owner struct {
	Namespace string
	Epoch     uint64
}

// Action is what the node must do before serving a call.
type Action int

// Actions.
const (
	Serve Action = iota // the caller owns the zone's current data
	Reset               // reset the zone and record the new owner first
	Deny                // the caller has no grant
)

func (a Action) String() string {
	return [...]string{"serve", "reset", "deny"}[a]
}

// Decide compares the persisted owner (valid=false: unreadable record) with
// the current grant (granted=false: no grant for the caller's namespace).
func Decide(persisted Owner, valid bool, grant Owner, granted bool) Action {
	switch {
	case !granted:
		return Deny
	case valid && persisted == grant:
		return Serve
	}
	return Reset
}

// Store is the owner file of one device.
type Store struct {
	// closeMu orders Close after every Set in flight: Sets of different
	// zones share it (RLock: their writes and fdatasyncs run in parallel),
	// Close takes it alone, and a Set after Close fails with os.ErrClosed
	// (a revocation reset still running while the node shuts down).
	closeMu sync.RWMutex
	closed  bool
	f       vfs.File
	path    string
	zones   uint32
	owners  []atomic.Pointer[entry]
	created bool
	sg      vfs.SyncGroup // the records' fdatasyncs, shared by concurrent Sets
}

type entry struct {
	o     Owner
	valid bool
}

// Open opens or creates the owner file for a device of zones zones.
func Open(path string, zones uint32) (*Store, error) { return OpenFS(vfs.Default, path, zones) }

// OpenFS is Open on fsys (tests: the drive's crashable file system, to see
// what a power loss leaves of both).
func OpenFS(fsys vfs.FS, path string, zones uint32) (*Store, error) {
	if zones == 0 {
		return nil, &zerr.InvalidArgumentError{Field: "zones", Reason: "must be positive"}
	}
	f, err := fsys.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	s := &Store{f: f, path: path, zones: zones, owners: make([]atomic.Pointer[entry], zones)}
	if err := s.load(fsys); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) header() []byte {
	h := make([]byte, HeaderSize)
	copy(h, magic)
	binary.LittleEndian.PutUint32(h[8:], Version)
	binary.LittleEndian.PutUint64(h[12:], knownFeatures)
	binary.LittleEndian.PutUint32(h[20:], s.zones)
	binary.LittleEndian.PutUint32(h[24:], crc32.Checksum(h[:24], ondisk.Castagnoli))
	return h
}

func (s *Store) load(fsys vfs.FS) error {
	size, err := s.f.Size()
	if err != nil {
		return err
	}
	if size == 0 { // new file: header, then every zone free
		buf := make([]byte, HeaderSize+int(s.zones)*RecordSize)
		copy(buf, s.header())
		for z := uint32(0); z < s.zones; z++ {
			copy(buf[HeaderSize+int(z)*RecordSize:], record(z, Owner{}))
		}
		if _, err := s.f.WriteAt(buf, 0); err != nil {
			return err
		}
		if err := s.f.Datasync(); err != nil {
			return err
		}
		// the new file's name too: else a power loss could drop the file
		// with every record in it
		if err := fsys.SyncDir(filepath.Dir(s.path)); err != nil {
			return err
		}
		for z := range s.owners {
			s.owners[z].Store(&entry{valid: true})
		}
		s.created = true
		return nil
	}
	h := make([]byte, HeaderSize)
	if _, err := s.f.ReadAt(h, 0); err != nil {
		return &zerr.CorruptError{Path: s.path, Reason: "short header"}
	}
	if string(h[:8]) != magic {
		return &zerr.CorruptError{Path: s.path, Reason: "not a ZoneFleet owner file (bad magic)"}
	}
	if crc32.Checksum(h[:24], ondisk.Castagnoli) != binary.LittleEndian.Uint32(h[24:]) {
		return &zerr.CorruptError{Path: s.path, Reason: "header checksum mismatch"}
	}
	if v := binary.LittleEndian.Uint32(h[8:]); v != Version {
		return &zerr.CorruptError{Path: s.path, Reason: fmt.Sprintf("format version %d, this build reads %d", v, Version)}
	}
	if f := binary.LittleEndian.Uint64(h[12:]); f&^knownFeatures != 0 {
		return &zerr.CorruptError{Path: s.path, Reason: fmt.Sprintf("unknown feature bits %#x", f&^knownFeatures)}
	}
	if z := binary.LittleEndian.Uint32(h[20:]); z != s.zones {
		return &zerr.GeometryMismatchError{Field: "owner file zones", Have: fmt.Sprint(z), Want: fmt.Sprint(s.zones)}
	}
	body := make([]byte, int(s.zones)*RecordSize)
	n, err := s.f.ReadAt(body, HeaderSize)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	for z := uint32(0); z < s.zones; z++ {
		off := int(z) * RecordSize
		var e entry
		if off+RecordSize <= n {
			e.o, e.valid = parse(z, body[off:off+RecordSize])
		} // a missing (truncated) record is invalid: reset before use
		s.owners[z].Store(&e)
	}
	return nil
}

func record(zone uint32, o Owner) []byte {
	r := make([]byte, RecordSize)
	r[0] = byte(len(o.Namespace))
	copy(r[1:], o.Namespace)
	binary.LittleEndian.PutUint64(r[1+MaxNSLen:], o.Epoch)
	binary.LittleEndian.PutUint32(r[RecordSize-4:], recordCRC(zone, r))
	return r
}

func recordCRC(zone uint32, r []byte) uint32 {
	var z [4]byte
	binary.LittleEndian.PutUint32(z[:], zone)
	c := crc32.Update(0, ondisk.Castagnoli, z[:])
	return crc32.Update(c, ondisk.Castagnoli, r[:1+MaxNSLen+8])
}

func parse(zone uint32, r []byte) (Owner, bool) {
	if binary.LittleEndian.Uint32(r[RecordSize-4:]) != recordCRC(zone, r) {
		return Owner{}, false
	}
	n := int(r[0])
	if n > MaxNSLen {
		return Owner{}, false
	}
	return Owner{Namespace: string(r[1 : 1+n]), Epoch: binary.LittleEndian.Uint64(r[1+MaxNSLen:])}, true
}

// NewMemory is a Store without a file, for in-process test nodes that run
// without a data directory: the owner check works the same, but the owners
// are forgotten with the process (a restarted node resets every granted zone
// on first use, which fails closed). Every ssdnode keeps a file (Open).
func NewMemory(zones uint32) *Store {
	s := &Store{zones: zones, owners: make([]atomic.Pointer[entry], zones), created: true}
	for z := range s.owners {
		s.owners[z].Store(&entry{valid: true})
	}
	return s
}

// Created reports whether Open created the file. A node that creates it
// for a device which already holds data (an upgrade from a version without
// owner files) seeds it from its current grant snapshot before serving;
// otherwise every zone with a grant is reset on first use.
func (s *Store) Created() bool { return s.created }

// Zones is the number of zones the file covers.
func (s *Store) Zones() uint32 { return s.zones }

// Get returns the persisted owner of zone and whether its record was readable.
func (s *Store) Get(zone uint32) (Owner, bool) {
	if zone >= s.zones {
		return Owner{}, false
	}
	e := s.owners[zone].Load()
	return e.o, e.valid
}

// Set durably records the owner of zone (Owner{} after a reset that leaves
// the zone free). The caller holds the zone's write lock. Concurrent Sets of
// different zones share their fdatasyncs (vfs.SyncGroup).
func (s *Store) Set(zone uint32, o Owner) error { return s.set(zone, o, true) }

// SetFree records that zone holds nobody's data without waiting for the
// record to be durable: a power loss may bring back the previous owner (or
// a torn record, which reads as unknown), and either forces a reset before
// the next owner's first I/O, as for a zone that was never freed: freeing
// fails closed. The caller holds the zone's write lock.
func (s *Store) SetFree(zone uint32) error { return s.set(zone, Owner{}, false) }

// SetUnsynced records the owner of zone without waiting for an fdatasync;
// Sync (or a later Set, or Close) makes it durable. The caller must make
// sure of two things: the reset that made the zone the new owner's is
// durable before this (else a power loss could keep the new owner and the
// old data), and Sync runs before any data the new owner writes is made
// durable (else a power loss could keep the data without its owner, and the
// next check would reset it). The node does both: zns.Device.SyncZone
// first, and Sync before every fdatasync of the device's data file
// (zns.Device.SetBeforeDataSync). The caller holds the zone's write lock.
func (s *Store) SetUnsynced(zone uint32, o Owner) error { return s.set(zone, o, false) }

// Sync makes every record written so far durable: one fdatasync, shared
// with concurrent callers, none when nothing was written since the last.
func (s *Store) Sync() error {
	if s.f == nil {
		return nil
	}
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return nil // Close synced every record; later writes fail
	}
	return s.sg.SyncAll(s.fdatasync)
}

func (s *Store) set(zone uint32, o Owner, durable bool) error {
	if zone >= s.zones {
		return &zerr.OutOfRangeError{LBA: uint64(zone), Count: 1, Limit: uint64(s.zones)}
	}
	if len(o.Namespace) > MaxNSLen {
		return &zerr.InvalidArgumentError{Field: "namespace", Reason: fmt.Sprintf("longer than %d bytes", MaxNSLen)}
	}
	if s.f == nil { // NewMemory
		s.owners[zone].Store(&entry{o: o, valid: true})
		return nil
	}
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		s.owners[zone].Store(&entry{}) // not recorded: fail closed
		return fmt.Errorf("zone owner file %s: %w", s.path, os.ErrClosed)
	}
	if _, err := s.f.WriteAt(record(zone, o), HeaderSize+int64(zone)*RecordSize); err != nil {
		s.owners[zone].Store(&entry{}) // unknown now: fail closed
		return err
	}
	s.sg.Modified()
	if durable {
		if err := s.sg.SyncAll(s.fdatasync); err != nil {
			s.owners[zone].Store(&entry{})
			return err
		}
	}
	s.owners[zone].Store(&entry{o: o, valid: true})
	return nil
}

func (s *Store) fdatasync() error { return s.f.Datasync() }

// Syncs is the number of fdatasyncs Sets have run (concurrent Sets share one).
func (s *Store) Syncs() uint64 { return s.sg.Rounds() }

// Close closes the file.
func (s *Store) Close() error {
	if s.f == nil {
		return nil
	}
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.sg.SyncAll(s.fdatasync) // SetFree's records
	if e := s.f.Close(); err == nil {
		err = e
	}
	return err
}
