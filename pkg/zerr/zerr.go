// Package zerr holds the typed errors of the zoned-storage domain.
//
// Every package of ZoneFleet (drive, node service, arbiter, client, file system)
// returns these errors. Each typed error matches one sentinel with errors.Is
// (for example errors.Is(err, zerr.ErrWritePointer)) and carries the fields a
// caller needs with errors.As. The package has no dependencies: the single table
// that maps these errors to gRPC status codes and back lives in pkg/rpcerr.
package zerr

import (
	"errors"
	"fmt"
)

// Sentinels. Each typed error below matches exactly one of them with errors.Is.
var (
	ErrWritePointer     = errors.New("write not at the write pointer")
	ErrZoneFull         = errors.New("zone is full")
	ErrZoneState        = errors.New("operation not allowed in this zone state")
	ErrTooManyOpen      = errors.New("too many open zones")
	ErrTooManyActive    = errors.New("too many active zones")
	ErrOutOfRange       = errors.New("LBA out of range")
	ErrInvalidArgument  = errors.New("invalid argument")
	ErrInvalidBitmap    = errors.New("invalid valid-block bitmap")
	ErrNotOwner         = errors.New("zone not granted to namespace")
	ErrIPUBudget        = errors.New("in-place update budget exceeded")
	ErrNotLeader        = errors.New("not the arbiter leader")
	ErrNotFound         = errors.New("not found")
	ErrAlreadyExists    = errors.New("already exists")
	ErrNoResources      = errors.New("not enough resources")
	ErrUnavailable      = errors.New("unavailable")
	ErrCorrupt          = errors.New("corrupt data")
	ErrUnauthenticated  = errors.New("unauthenticated")
	ErrStaleLayout      = errors.New("stale layout")
	ErrTLViolation      = errors.New("threaded-logging write violates the valid bitmap")
	ErrGeometryMismatch = errors.New("geometry mismatch")
	ErrClosed           = errors.New("closed")
	ErrLimit            = errors.New("limit reached")
	ErrPermissionDenied = errors.New("permission denied")
	ErrPeerIdentity     = errors.New("peer identity mismatch")
)

// WritePointerError: a write did not start at the zone's write pointer.
type WritePointerError struct {
	Zone     uint64 // zone index on the device (or v-zone id)
	Expected uint64 // the write pointer, as an LBA
	Got      uint64 // the LBA the write asked for
}

func (e *WritePointerError) Error() string {
	return fmt.Sprintf("zone %d: write at LBA %d, write pointer at LBA %d", e.Zone, e.Got, e.Expected)
}
func (e *WritePointerError) Is(t error) bool { return t == ErrWritePointer }

// ZoneFullError: a write or append to a full zone, or past its capacity.
type ZoneFullError struct {
	Zone     uint64
	Capacity uint64 // zone capacity in blocks
}

func (e *ZoneFullError) Error() string {
	return fmt.Sprintf("zone %d is full (capacity %d blocks)", e.Zone, e.Capacity)
}
func (e *ZoneFullError) Is(t error) bool { return t == ErrZoneFull }

// ZoneStateError: the operation is not legal in the zone's current state.
type ZoneStateError struct {
	Zone  uint64
	State string // current state, e.g. "read-only"
	Op    string // attempted operation, e.g. "write"
}

func (e *ZoneStateError) Error() string {
	return fmt.Sprintf("zone %d is %s: cannot %s", e.Zone, e.State, e.Op)
}
func (e *ZoneStateError) Is(t error) bool { return t == ErrZoneState }

// StateDegraded is the ZoneStateError state of a mirrored v-zone whose
// write reached some copies while the others' nodes were unavailable: it
// takes no more writes; the caller continues in another v-zone.
const StateDegraded = "degraded"

// IsDegraded tells whether err is a ZoneStateError with StateDegraded.
func IsDegraded(err error) bool {
	var zs *ZoneStateError
	return errors.As(err, &zs) && zs.State == StateDegraded
}

// TooManyOpenError: opening one more zone would exceed the open-resource limit (MOR).
type TooManyOpenError struct{ Limit uint32 }

func (e *TooManyOpenError) Error() string {
	return fmt.Sprintf("too many open zones: limit (MOR) is %d", e.Limit)
}
func (e *TooManyOpenError) Is(t error) bool { return t == ErrTooManyOpen }

// TooManyActiveError: activating one more zone would exceed the active-resource limit (MAR).
type TooManyActiveError struct{ Limit uint32 }

func (e *TooManyActiveError) Error() string {
	return fmt.Sprintf("too many active zones: limit (MAR) is %d", e.Limit)
}
func (e *TooManyActiveError) Is(t error) bool { return t == ErrTooManyActive }

// OutOfRangeError: an LBA range reaches past the end of the device or zone.
type OutOfRangeError struct {
	LBA   uint64
	Count uint64 // blocks requested
	Limit uint64 // first LBA past the end
}

func (e *OutOfRangeError) Error() string {
	return fmt.Sprintf("LBA range [%d, %d) is past the end at LBA %d", e.LBA, e.LBA+e.Count, e.Limit)
}
func (e *OutOfRangeError) Is(t error) bool { return t == ErrOutOfRange }

// InvalidArgumentError: a request field is malformed.
type InvalidArgumentError struct {
	Field  string
	Reason string
}

func (e *InvalidArgumentError) Error() string {
	return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason)
}
func (e *InvalidArgumentError) Is(t error) bool { return t == ErrInvalidArgument }

// InvalidBitmapError: a valid-block bitmap has the wrong size or marks blocks it may not.
type InvalidBitmapError struct {
	Zone   uint64
	Reason string
}

func (e *InvalidBitmapError) Error() string {
	return fmt.Sprintf("zone %d: invalid bitmap: %s", e.Zone, e.Reason)
}
func (e *InvalidBitmapError) Is(t error) bool { return t == ErrInvalidBitmap }

// NotOwnerError: a namespace addressed a zone that was not granted to it.
type NotOwnerError struct {
	Zone      string // physical zone address "node/device/zone" or v-zone id
	Namespace string
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("zone %s is not granted to namespace %q", e.Zone, e.Namespace)
}
func (e *NotOwnerError) Is(t error) bool { return t == ErrNotOwner }

// IPUBudgetError: an in-place update does not fit the remaining budget.
type IPUBudgetError struct {
	Budget uint64 // blocks
	Used   uint64 // blocks
}

func (e *IPUBudgetError) Error() string {
	return fmt.Sprintf("in-place update budget exceeded: %d of %d blocks used", e.Used, e.Budget)
}
func (e *IPUBudgetError) Is(t error) bool { return t == ErrIPUBudget }

// NotLeaderError: an arbiter follower received a request meant for the leader.
type NotLeaderError struct{ Leader string } // leader address, empty when unknown

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return "not the arbiter leader; no leader is elected yet"
	}
	return fmt.Sprintf("not the arbiter leader; leader is at %s", e.Leader)
}
func (e *NotLeaderError) Is(t error) bool { return t == ErrNotLeader }

// NotFoundError: a named object does not exist.
type NotFoundError struct {
	Kind string // "namespace", "node", "zone", "compaction", ...
	Name string
}

func (e *NotFoundError) Error() string   { return fmt.Sprintf("%s %q not found", e.Kind, e.Name) }
func (e *NotFoundError) Is(t error) bool { return t == ErrNotFound }

// AlreadyExistsError: a create names an object that exists.
type AlreadyExistsError struct {
	Kind string
	Name string
}

func (e *AlreadyExistsError) Error() string {
	return fmt.Sprintf("%s %q already exists", e.Kind, e.Name)
}
func (e *AlreadyExistsError) Is(t error) bool { return t == ErrAlreadyExists }

// NoResourcesError: the cluster or device cannot honour the request (full cluster,
// not enough essentials, no free zone, write cache exhausted...).
type NoResourcesError struct {
	Resource  string
	Requested uint64
	Available uint64
}

func (e *NoResourcesError) Error() string {
	return fmt.Sprintf("not enough %s: requested %d, available %d", e.Resource, e.Requested, e.Available)
}
func (e *NoResourcesError) Is(t error) bool { return t == ErrNoResources }

// UnavailableError: a component that should answer cannot right now (node down, closing).
type UnavailableError struct {
	What   string
	Reason string
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("%s unavailable: %s", e.What, e.Reason)
}
func (e *UnavailableError) Is(t error) bool { return t == ErrUnavailable }

// CorruptError: persisted data failed a checksum, version or identity check.
type CorruptError struct {
	Path   string
	Reason string
}

func (e *CorruptError) Error() string   { return fmt.Sprintf("%s: corrupt: %s", e.Path, e.Reason) }
func (e *CorruptError) Is(t error) bool { return t == ErrCorrupt }

// UnauthenticatedError: an admin call without the right credential.
type UnauthenticatedError struct{ Reason string }

func (e *UnauthenticatedError) Error() string   { return "unauthenticated: " + e.Reason }
func (e *UnauthenticatedError) Is(t error) bool { return t == ErrUnauthenticated }

// StaleLayoutError: a client used a v-zone layout generation that has been
// replaced (the arbiter says so with VZone and the generations; a node,
// which knows zones and not v-zones, says why in Reason).
type StaleLayoutError struct {
	VZone      string
	Generation uint64 // the generation the caller used
	Current    uint64
	Reason     string
}

func (e *StaleLayoutError) Error() string {
	if e.Reason != "" {
		return "stale layout: " + e.Reason
	}
	return fmt.Sprintf("v-zone %s: layout generation %d is stale (current %d)", e.VZone, e.Generation, e.Current)
}
func (e *StaleLayoutError) Is(t error) bool { return t == ErrStaleLayout }

// TLViolationError: a threaded-logging write hits a block marked valid, or goes backwards.
type TLViolationError struct {
	Zone   uint64
	LBA    uint64
	Reason string
}

func (e *TLViolationError) Error() string {
	return fmt.Sprintf("zone %d: threaded-logging write at LBA %d: %s", e.Zone, e.LBA, e.Reason)
}
func (e *TLViolationError) Is(t error) bool { return t == ErrTLViolation }

// GeometryMismatchError: an existing backing store was made with another geometry.
type GeometryMismatchError struct {
	Field string
	Have  string // what is on disk
	Want  string // what was configured
}

func (e *GeometryMismatchError) Error() string {
	return fmt.Sprintf("geometry mismatch: %s is %s on disk, %s configured", e.Field, e.Have, e.Want)
}
func (e *GeometryMismatchError) Is(t error) bool { return t == ErrGeometryMismatch }

// ClosedError: the object was closed.
type ClosedError struct{ What string }

func (e *ClosedError) Error() string   { return e.What + " is closed" }
func (e *ClosedError) Is(t error) bool { return t == ErrClosed }

// LimitError: a caller reached a limit that bounds what it may make a
// server hold (concurrent streams, in-flight bytes, waiting calls); the
// request was refused and changed nothing. Retry later or use less.
type LimitError struct {
	What  string // the limited resource, e.g. "concurrent streams of namespace a on node n1"
	Limit uint64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("limit reached: %s (limit %d)", e.What, e.Limit)
}
func (e *LimitError) Is(t error) bool { return t == ErrLimit }

// PermissionDeniedError: an authenticated caller may not do this (the
// per-method policy, an admin-only option, a peer call without an assigned
// operation).
type PermissionDeniedError struct {
	Identity string // who asked, e.g. "namespace:tenant-a"
	Method   string // full gRPC method or operation
	Reason   string
}

func (e *PermissionDeniedError) Error() string {
	return fmt.Sprintf("permission denied: %s may not call %s: %s", e.Identity, e.Method, e.Reason)
}
func (e *PermissionDeniedError) Is(t error) bool { return t == ErrPermissionDenied }

// PeerIdentityError: the server reached at Addr did not prove the identity
// the caller dialled (its certificate names Got, not Want). Nothing was sent
// to it: the TLS handshake failed before any call.
type PeerIdentityError struct {
	Want string // the role dialled, e.g. "node:node-1"
	Got  string // the role the certificate names, or why none was read
	Addr string
}

func (e *PeerIdentityError) Error() string {
	return fmt.Sprintf("server at %s is not %s: its certificate names %s", e.Addr, e.Want, e.Got)
}
func (e *PeerIdentityError) Is(t error) bool { return t == ErrPeerIdentity }

// Typed lists one example of every typed error. pkg/rpcerr tests round-trip
// each of them; a new typed error must be added here and to the rpcerr table.
func Typed() []error {
	return []error{
		&WritePointerError{Zone: 3, Expected: 4104, Got: 4096},
		&ZoneFullError{Zone: 1, Capacity: 8192},
		&ZoneStateError{Zone: 2, State: "read-only", Op: "write"},
		&TooManyOpenError{Limit: 14},
		&TooManyActiveError{Limit: 14},
		&OutOfRangeError{LBA: 100, Count: 8, Limit: 104},
		&InvalidArgumentError{Field: "length", Reason: "must be a multiple of 4096"},
		&InvalidBitmapError{Zone: 5, Reason: "has 10 bytes, zone needs 16"},
		&NotOwnerError{Zone: "node1/0/7", Namespace: "tenant-a"},
		&IPUBudgetError{Budget: 64, Used: 64},
		&NotLeaderError{Leader: "127.0.0.1:7001"},
		&NotFoundError{Kind: "namespace", Name: "x"},
		&AlreadyExistsError{Kind: "namespace", Name: "x"},
		&NoResourcesError{Resource: "essential zones", Requested: 8, Available: 2},
		&UnavailableError{What: "node node2", Reason: "lease expired"},
		&CorruptError{Path: "/data/dev0.meta", Reason: "checksum mismatch in record 12"},
		&UnauthenticatedError{Reason: "admin token required"},
		&StaleLayoutError{VZone: "ns/3", Generation: 2, Current: 3},
		&TLViolationError{Zone: 4, LBA: 77, Reason: "block is marked valid"},
		&GeometryMismatchError{Field: "zone_size", Have: "8192", Want: "4096"},
		&ClosedError{What: "device dev0"},
		&LimitError{What: "concurrent streams of namespace a on node n1", Limit: 32},
		&PermissionDeniedError{Identity: "namespace:a", Method: "/zonefleet.v1.Arbiter/CreateNamespace", Reason: "needs the operator (admin)"},
		&PeerIdentityError{Want: "node:node-1", Got: "node:node-2", Addr: "127.0.0.1:7100"},
	}
}
