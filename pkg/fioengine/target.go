package fioengine

import (
	"context"
	"fmt"
	"sync"

	"github.com/zonefleet/zonefleet/pkg/client"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Cond is a zone condition, numbered as fio's enum zbd_zone_cond (and the
// kernel's BLK_ZONE_COND_*).
type Cond uint8

// Zone conditions.
const (
	CondEmpty    Cond = 0x1
	CondImpOpen  Cond = 0x2
	CondExpOpen  Cond = 0x3
	CondClosed   Cond = 0x4
	CondReadOnly Cond = 0xD
	CondFull     Cond = 0xE
	CondOffline  Cond = 0xF
)

// Zone is one zone as fio's report_zones describes it; every field is in
// bytes of the target.
type Zone struct {
	Start, WP, Len, Cap uint64
	Cond                Cond
}

// Geometry of a target: Zones zones of ZoneSize bytes each, the first
// ZoneCap bytes of each writable; MaxOpen zones open at once (0: no limit).
type Geometry struct {
	BlockSize uint64
	ZoneSize  uint64
	ZoneCap   uint64
	Zones     uint64
	MaxOpen   uint32
}

// Size is the target's size in bytes (what fio sees as the file size).
func (g Geometry) Size() uint64 { return g.Zones * g.ZoneSize }

// Target is a zoned device as the engine drives it: a drive of a node
// (drive.go) or a namespace's v-zones (vzones.go). Offsets and lengths are
// bytes; writes must start at their zone's write pointer. Methods are safe
// for concurrent use; the engine orders the writes of one zone itself.
type Target interface {
	Geometry() Geometry
	// Report describes up to n zones from zone first on.
	Report(ctx context.Context, first uint64, n int) ([]Zone, error)
	Read(ctx context.Context, off uint64, buf []byte) error
	Write(ctx context.Context, off uint64, buf []byte) error
	// Append appends buf to the zone off is in and fails unless the
	// target placed it at off.
	Append(ctx context.Context, off uint64, buf []byte) error
	// Reset empties zone z.
	Reset(ctx context.Context, z uint64) error
	// Flush makes every acknowledged write durable.
	Flush(ctx context.Context) error
	Close()
}

// checkRange refuses I/O that is not whole blocks inside the target.
func checkRange(g Geometry, off uint64, n int) error {
	switch {
	case n <= 0 || uint64(n)%g.BlockSize != 0 || off%g.BlockSize != 0:
		return &zerr.InvalidArgumentError{Field: "io", Reason: fmt.Sprintf("offset %d length %d: want whole %d-byte blocks", off, n, g.BlockSize)}
	case off+uint64(n) > g.Size() || off+uint64(n) < off:
		return &zerr.OutOfRangeError{LBA: off / g.BlockSize, Count: uint64(n) / g.BlockSize, Limit: g.Size() / g.BlockSize}
	}
	return nil
}

// Open returns the target o names: a new connection, or the one an
// earlier job of this process with the same options opened (jobs run as
// threads of one fio process share it). Release gives it back.
func Open(ctx context.Context, o Options) (Target, error) {
	key := o.key()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if s, ok := shared.m[key]; ok {
		s.refs++
		return s.t, nil
	}
	t, err := open(ctx, o)
	if err != nil {
		return nil, err
	}
	shared.m[key] = &sharedTarget{t: t, refs: 1}
	return t, nil
}

// Release drops one reference Open handed out; the last closes the target.
func Release(t Target) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for k, s := range shared.m {
		if s.t == t {
			if s.refs--; s.refs == 0 {
				delete(shared.m, k)
				t.Close()
			}
			return
		}
	}
}

var shared = struct {
	mu sync.Mutex
	m  map[string]*sharedTarget
}{m: map[string]*sharedTarget{}}

type sharedTarget struct {
	t    Target
	refs int
}

func open(ctx context.Context, o Options) (Target, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	r, err := o.Resolve()
	if err != nil && o.Addr == "" {
		return nil, err
	}
	ns := o.Namespace
	cfg, err := r.ClientConfig(ns)
	if err != nil {
		return nil, err
	}
	return OpenWith(ctx, cfg, o)
}

func (o Options) check() error {
	if drive := o.Node != "" || o.Addr != ""; drive == (o.Namespace != "") {
		return &zerr.InvalidArgumentError{Field: "target", Reason: "give a drive (node= or addr=, with device=) or a namespace (namespace=), not both"}
	}
	return nil
}

// OpenWith opens the target o names with the client configuration cfg
// (its Namespace is o.Namespace's), bypassing Resolve, and shares nothing.
func OpenWith(ctx context.Context, cfg client.Config, o Options) (Target, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.Namespace == "" {
		return openDrive(ctx, cfg, o)
	}
	cfg.Namespace = o.Namespace
	return openVZones(ctx, cfg, o)
}
