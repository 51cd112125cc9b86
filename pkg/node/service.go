// Package node is the ssdnode service: it serves emulated ZNS+ drives
// (pkg/zns) over the ZonedDevice gRPC API, enforces the arbiter's zone grants
// per namespace, schedules each device's requests by weighted round robin
// across namespaces, paces writes with eZNS write admission control, pushes
// compaction data to peer nodes, and exports per-device metrics.
//
// # Data path
//
// Served with wire.ServerOptions and registered with RegisterGRPC, a write's
// data is never copied into a protobuf message: the bulk codec leaves it in
// the transport's receive buffers (wire.WriteChunk), and the drive writes
// it from there (zns.Device.WriteV: one pwritev per run of flash pages, of
// the buffers as the network's frames cut them). While WriteStream writes
// one piece, the transport keeps receiving the next into the stream's
// 4 MiB flow-control window (wire.ServerOptions), so the transfer overlaps
// the drive. Unary writes from one connection run
// concurrently (one goroutine per call) and are ordered only by the zone
// write pointer, so a client keeps several in flight on different zones.
// Reads go into pooled buffers (zns.Device.ReadInto into wire.Pool) that
// are sent as wire.ReadChunks: the codec hands the buffer to the transport
// and it returns to the pool once written — no marshal copy, no garbage.
// ReadV serves several ranges of the node's devices in one call (a
// client's stripe legs on this node): per device one drive command with a
// scatter list (zns.Device.ReadV, one modelled wait), devices in parallel.
// With the standard codec everything still works: the
// chunks then hold the decoded bytes.
//
// # Isolation
//
// Every zone-touching call (I/O, ZoneManagement of one zone, SimpleCopy,
// TLOpen, ZoneCompaction, PeerWrite, and ReportZones for the zones it
// describes) passes hold: under the zone's read lock it checks the caller's
// grant from the cache and compares the grant's owner (namespace, owner
// epoch = the etcd create revision of the grant key) with the owner
// persisted with the zone (pkg/zoneowner, DATA/devN.owners). If they differ,
// hold drops its locks, takes the zone's write lock (no I/O in flight),
// resets the zone unless it is empty, makes the reset durable
// (zns.Device.SyncZone: free when the revocation worker did it already),
// records the new owner, and starts over: a new owner's first call never
// sees the previous owner's blocks, whether the owner changed by a deleted
// grant, an overwrite or events the watch never delivered (a compaction
// during a watch break). The record is written without an fdatasync of its
// own: every fdatasync of the drive's data file syncs the owner file first
// (zns.Device.SetBeforeDataSync), so data is never durable without its
// owner, and no power loss keeps the new owner over the old data
// (TestOwnerRecordsAcrossPowerLoss). A failed reset or owner write fails the
// call (fail closed); an unreadable owner record forces a reset. The
// revocation reset (a deleted grant) makes the reset durable in the
// background (its workers share the journal syncs) and records the zone as
// free, also without waiting (a lost free record only forces another reset). Operator and arbiter calls not acting for the
// zone's grantee bypass the owner check (they are trusted and do not make
// the zone anyone's); acting for it, they adopt it like the tenant.
//
// Layouts and the arbiter's own node calls carry the etcd revision they
// were made at (wire.WithMinRevision): the node applies its grant events up
// to it before serving (Grants.CatchUp), so a zone revoked from one v-zone
// and granted to another is reset before the new owner's I/O or the
// arbiter's copy lands. A tenant call whose revision predates the grant's
// creation revision addressed a zone its layout no longer has (a reclaim
// moved the group and the zone went to another v-zone of the namespace):
// it is refused with STALE_LAYOUT, and the client reloads the layout. A
// sealed grant (the arbiter is moving the zone's data) refuses the tenant's
// writes and zone changes with UNAVAILABLE under the zone's read lock; the
// arbiter's ReportZones at the seal's revision takes the write lock first,
// so the write pointer it reads can move no more.
//
// # Nothing global on the data path
//
// A zone's lock (zl) orders its I/O against the reset of a revoked grant.
// It is held for the drive operation only, never across the network:
// ReadStream reads each 1 MiB piece under the lock and sends it after
// releasing it, on a sender goroutine (the next piece is read meanwhile).
// Every stream message to a client or a peer has a deadline
// (Config.SendTimeout, default 30 s): a server stream has none of its own
// and a receiver that stops reading would block the send for ever, so the
// handler waits for each send at most that long and then ends the call
// (DeadlineExceeded; zonefleet_node_send_timeouts_total{op}); the blocked
// send returns when gRPC tears the stream down. A compaction's push to a
// peer (PeerWrite) cancels its stream when a send or the final answer
// misses the deadline, and WaitCompaction reports DeadlineExceeded. A
// compaction nobody waits for is dropped Config.CompactionTTL (default 10
// min) after it started unless a WaitCompaction is waiting then; its
// device record and push are released when they end
// (zonefleet_node_compactions_expired_total).
//
// Per request, the device-wide state a write touches takes no lock while
// the device is not saturated: the WRR's slot is taken and returned with a
// compare-and-swap when nobody is queued (its queues and turn order are
// locked only when requests wait), and the admission monitor's window sums
// are atomics. The drive's own write path below is per zone, and its write
// cache can be split into queues with a lock each (--write-cache-queues,
// flash.Config.WriteCacheQueues). What a write stores, its order within
// its zone and when it is durable are the drive's and do not depend on
// any of these.
//
// # Overload
//
// What one caller can make the node hold is bounded (overload.go; the
// limits are wire's constants). Receives have a deadline as sends do: a
// tenant's WriteStream that sends no message for Config.StreamIdleTimeout
// (wire.StreamIdleTimeout, 30 s) — typically part of a message, then
// silence — ends with DeadlineExceeded
// (zonefleet_node_recv_timeouts_total{op}); the receive runs on a goroutine
// in lockstep with the handler so that the handler can stop waiting. A
// peer's PeerWrite has no such deadline: its sender paces itself by the
// rebuild rate limit, which may hold a message longer. A
// namespace may have wire.MaxNamespaceStreams streams open on the node and
// wire.MaxNamespaceInflightBytes of their data held (received, not yet
// written; read, not yet sent); past either the stream is refused with
// RESOURCE_EXHAUSTED (zerr.LimitError; zonefleet_node_limit_refusals_total)
// and other namespaces are unaffected. A call's minimum revision
// (wire.MinRevisionKey) is waited for at most wire.RevisionWaitTimeout,
// by at most wire.MaxRevisionWaiters calls at once, sharing one etcd
// progress request per wire.RevisionProgressInterval; one more than
// wire.MaxRevisionLead past the node's view is refused at once. The
// connection-level limits (connections, headers, streams per connection,
// request deadline) are the daemon's.
package node

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/auth/limit"
	"github.com/zonefleet/zonefleet/pkg/auth/peerdial"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
	"github.com/zonefleet/zonefleet/pkg/zoneowner"
)

// Config of the service.
type Config struct {
	ID string
	// AdminToken is checked only on a server without the authenticator
	// (in-process tests: daemon.Config.Security nil). Every binary and the
	// local cluster run pkg/auth in front, and then the verified identity
	// decides (auth.FromContext); "" there means admin calls are open.
	AdminToken string
	// Peers reaches other nodes for ZoneCompaction's PeerWrite: by node id,
	// resolved from the registered node records, TLS pinned to node:<id>,
	// no bearer token (peerdial). nil: remote copies fail.
	Peers *peerdial.Pool
	// PeerGrants verifies the operation grants of peer calls (the token
	// verification keys). Set on TLS clusters: a node then serves PeerRead
	// only to the node an arbiter-signed grant names, for the namespace and
	// zones it lists (auth.CheckPeerRead), and takes PeerWrite only with
	// such a grant, signed for the arbiter's compactor or for the tenant
	// who asked for the compaction (auth.CheckPeerWrite). nil: a node's
	// certificate is enough (--insecure clusters, in-process tests).
	PeerGrants *auth.Verifier
	// PeerRevoked refuses tenants' PeerWrite grants of revoked generations
	// (the token generations the node follows); may be nil.
	PeerRevoked func(namespace string, generation uint64) error
	// Audit counts and logs the refusals the service decides itself (peer
	// calls without authority, admin-only calls) like the authenticator's
	// (zonefleet_auth_refusals_total, rate-limited WARN); nil: returned only.
	Audit *auth.Authenticator
	// Standalone: no arbiter; any namespace may use any zone.
	Standalone bool
	Admission  AdmissionConfig
	// QueueSlots is how many requests one device serves at once (WRR slots);
	// 0 = two per chip.
	QueueSlots int
	// Owners holds, per device (index i for device i), the zone owners
	// persisted with the device (zoneowner.Open of "devN.owners" next to the
	// device file). A node with grants and no Owners keeps them in memory
	// (in-process tests only; Run always opens the files).
	Owners []*zoneowner.Store
	// SendTimeout bounds each stream message sent to a client (ReadStream)
	// or pushed to a peer (compaction's PeerWrite); 0 = DefaultSendTimeout.
	SendTimeout time.Duration
	// CompactionTTL: a compaction nobody waits for (WaitCompaction) is
	// dropped this long after it started, once it ended; 0 =
	// DefaultCompactionTTL.
	CompactionTTL time.Duration
	// Clock is the wall clock of these deadlines and of the rebuild rate
	// limit; nil = real time.
	Clock clock.Clock
	// RebuildRate bounds the bytes per second this node's devices read or
	// write for rebuilds (throttle.go); 0 = unlimited. ssdnode's
	// --rebuild-rate sets it (DefaultRebuildRate MiB/s).
	RebuildRate int64
	// RebuildBurst is the rebuild bucket's size in bytes; 0 =
	// DefaultRebuildBurst (an eighth of a second of RebuildRate, 64 KiB to
	// 1 MiB).
	RebuildBurst int64
	// StreamIdleTimeout ends a WriteStream that sends no message for this
	// long; 0 = wire.StreamIdleTimeout.
	StreamIdleTimeout time.Duration
	// MaxNamespaceStreams and MaxNamespaceInflightBytes bound one
	// namespace's streams on this node (overload.go); 0 = wire's limits.
	MaxNamespaceStreams       int
	MaxNamespaceInflightBytes int64
}

// Service implements v1.ZonedDeviceServer over local devices.
type Service struct {
	v1.UnimplementedZonedDeviceServer
	cfg    Config
	log    *slog.Logger
	devs   []*device
	grants *Grants // nil when standalone
	misses *limit.MissGuard
	// legacyPeers: address-based peer dialling, only for servers without
	// an authenticator and without a peer pool (in-process tests).
	legacyPeers *peers
	m           *metrics
	// sealWaits counts the reports waiting for the writes admitted
	// before a seal (a test waits for a report to block on them before
	// asserting it has not returned).
	sealWaits atomic.Int64

	opsMu sync.Mutex
	ops   map[string]*compactionOp
	opSeq uint64

	// sending counts stream sends in flight on sender goroutines (asyncSender).
	sending atomic.Int64
	// receiving counts stream receives waiting under the idle deadline
	// (idleReceiver).
	receiving atomic.Int64
	limits    streamLimits
	// rebuild is the node's rebuild rate limit (throttle.go).
	rebuild *Bucket
}

type device struct {
	idx uint32
	dev *zns.Device
	adm *Admission
	wrr *WRR
	geo identity
	// zl orders a zone's I/O against the reset that follows a revoked grant:
	// I/O holds the read lock from its last grant check to its end, the reset
	// the write lock.
	zl []sync.RWMutex
	// owners is who owns each zone's data (namespace, owner epoch): checked
	// against the grant under the zone's lock on every zone-touching call
	// (hold), set under its write lock after the reset that precedes a new
	// owner's first I/O.
	owners *zoneowner.Store
}

type identity struct {
	zoneSize uint64
	zoneCap  uint64
	zones    uint64
	bs       int
}

// New builds the service over devs (index i serves as device i). grants may
// be nil only with cfg.Standalone.
func New(cfg Config, devs []*zns.Device, grants *Grants, log *slog.Logger) (*Service, error) {
	if len(devs) == 0 {
		return nil, &zerr.InvalidArgumentError{Field: "devices", Reason: "at least one device is needed"}
	}
	if grants == nil && !cfg.Standalone {
		return nil, &zerr.InvalidArgumentError{Field: "grants", Reason: "a node in a cluster needs the arbiter's grants (or run standalone)"}
	}
	if cfg.RebuildRate < 0 || cfg.RebuildBurst < 0 {
		return nil, &zerr.InvalidArgumentError{Field: "rebuild_rate", Reason: fmt.Sprintf("%d bytes/s with a burst of %d bytes: must not be negative (0 = unlimited)", cfg.RebuildRate, cfg.RebuildBurst)}
	}
	s := &Service{cfg: cfg, log: log, grants: grants, ops: map[string]*compactionOp{}}
	s.rebuild = NewBucket(s.clk(), cfg.RebuildRate, cfg.RebuildBurst)
	if cfg.Peers == nil {
		s.legacyPeers = newPeers()
	}
	s.misses = limit.NewMissGuard(limit.MissGuardConfig{NegativeTTL: 250 * time.Millisecond})
	for i, d := range devs {
		id := d.Identify()
		slots := cfg.QueueSlots
		if slots <= 0 {
			slots = 2 * id.Chips
		}
		var owners *zoneowner.Store
		switch {
		case i < len(cfg.Owners) && cfg.Owners[i] != nil:
			owners = cfg.Owners[i]
			if uint64(owners.Zones()) != id.Zones {
				return nil, &zerr.GeometryMismatchError{Field: fmt.Sprintf("device %d owner file zones", i), Have: fmt.Sprint(owners.Zones()), Want: fmt.Sprint(id.Zones)}
			}
		default:
			owners = zoneowner.NewMemory(uint32(id.Zones))
		}
		// owner records written without waiting (adopt) become durable
		// before any data written after them does
		d.SetBeforeDataSync(owners.Sync)
		s.devs = append(s.devs, &device{
			idx: uint32(i), dev: d, adm: NewAdmission(d.Clock(), cfg.Admission), wrr: NewWRR(slots),
			geo:    identity{zoneSize: id.ZoneSize, zoneCap: id.ZoneCapacity, zones: id.Zones, bs: id.BlockSize},
			zl:     make([]sync.RWMutex, id.Zones),
			owners: owners,
		})
	}
	s.m = newMetrics(s)
	if grants != nil {
		grants.refusals = s.m.limitRefusals
	}
	return s, nil
}

// ResetRevoked resets a zone whose grant went away, so that its next owner
// finds it empty. Zones that are already empty are left alone.
func (s *Service) ResetRevoked(device, zone uint32) {
	d, err := s.device(device)
	if err != nil || uint64(zone) >= d.geo.zones {
		return
	}
	d.zl[zone].Lock() // waits for I/O admitted under the revoked grant
	defer d.zl[zone].Unlock()
	zs, err := d.dev.ReportZones(zns.StateAny, uint64(zone), 1)
	if err != nil || len(zs) == 0 || zs[0].State == zns.StateOffline {
		return
	}
	if zs[0].State == zns.StateEmpty {
		s.syncReset(d, zone) // an earlier reset (the owner's own) may not be durable yet
		s.setFree(d, zone)
		return
	}
	if _, err := d.dev.ZoneMgmt(context.Background(), uint64(zone), zns.ActionReset, false); err != nil {
		s.log.Warn("reset of a revoked zone failed", "device", device, "zone", zone, "err", err)
		return
	}
	d.adm.Forget(d.idx, uint64(zone))
	s.syncReset(d, zone)
	s.setFree(d, zone)
	s.m.revokedResets.WithLabelValues(fmt.Sprint(device)).Inc()
	s.log.Info("reset a zone whose grant was revoked", "device", device, "zone", zone)
}

// syncReset makes the zone's reset durable here, in the background reset
// worker (concurrent workers share the journal sync), so that the next
// owner's adopt finds it durable and records the owner without an fdatasync
// on its first I/O. A failure is only logged: adopt syncs again.
func (s *Service) syncReset(d *device, zone uint32) {
	if err := d.dev.SyncZone(uint64(zone)); err != nil {
		s.log.Warn("making a revoked zone's reset durable failed", "device", d.idx, "zone", zone, "err", err)
	}
}

// setFree records that zone holds nobody's data (zone write lock held).
// A failed write leaves the record unknown, which forces a reset before the
// next owner's first I/O anyway.
func (s *Service) setFree(d *device, zone uint32) {
	if o, ok := d.owners.Get(zone); ok && o == (zoneowner.Owner{}) {
		return
	}
	if err := d.owners.SetFree(zone); err != nil {
		s.log.Warn("recording a reset zone as free failed", "device", d.idx, "zone", zone, "err", err)
	}
}

// SeedOwners records the current grant of every granted zone as its owner,
// for owner files just created over devices that may already hold data (a
// node upgraded from a version without owner files): their data belongs to
// the namespaces that hold the grants now. Zones without a grant are left
// free (SweepUngranted resets them). Call before serving.
func (s *Service) SeedOwners() error {
	if s.grants == nil {
		return nil
	}
	for _, d := range s.devs {
		if !d.owners.Created() {
			continue
		}
		for z := uint32(0); uint64(z) < d.geo.zones; z++ {
			if o, ok := s.grants.Current(d.idx, z); ok {
				if err := d.owners.Set(z, o); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// SweepUngranted resets every non-empty zone without a grant: grants deleted
// while the node was down. Standalone nodes have no grants and sweep nothing.
func (s *Service) SweepUngranted() {
	if s.grants == nil {
		return
	}
	for _, d := range s.devs {
		zs, err := d.dev.ReportZones(zns.StateAny, 0, 0)
		if err != nil {
			continue
		}
		for _, z := range zs {
			if z.State == zns.StateEmpty || z.State == zns.StateOffline {
				continue
			}
			if _, ok := s.grants.Lookup(d.idx, uint32(z.Index)); !ok {
				s.ResetRevoked(d.idx, uint32(z.Index))
			}
		}
	}
}

// Close stops the admission monitors and peer connections (devices are the caller's).
func (s *Service) Close() {
	for _, d := range s.devs {
		d.adm.Close()
	}
	if s.legacyPeers != nil {
		s.legacyPeers.close()
	}
}

// SetNamespaceWeight sets a namespace's share of every device's request slots.
func (s *Service) SetNamespaceWeight(ns string, weight int) {
	for _, d := range s.devs {
		d.wrr.SetWeight(ns, weight)
	}
}

// SetAdmission switches write admission control on or off on every device.
func (s *Service) SetAdmission(on bool) {
	for _, d := range s.devs {
		d.adm.SetEnabled(on)
	}
}

// RebuildStats are the bytes this node's devices read or wrote for
// rebuilds and the clock time they waited for the rebuild rate limit.
func (s *Service) RebuildStats() (bytes uint64, throttled time.Duration) {
	b, w, _ := s.rebuild.Stats()
	return b, w
}

// Collector returns the service's Prometheus collector (register it once).
func (s *Service) Collector() *metrics { return s.m }

// Healthy returns an error when a device cannot serve.
func (s *Service) Healthy() error {
	for _, d := range s.devs {
		if _, err := d.dev.ReportZones(zns.StateAny, 0, 1); err != nil {
			return fmt.Errorf("device %d: %w", d.idx, err)
		}
	}
	return nil
}

// Record is the node's registration record.
func (s *Service) Record(addr, version string, started time.Time) cluster.NodeRecord {
	rec := cluster.NodeRecord{ID: s.cfg.ID, Addr: addr, Version: version, StartedAt: started}
	for _, d := range s.devs {
		id := d.dev.Identify()
		g := d.dev.Geometry()
		rec.Devices = append(rec.Devices, cluster.DeviceInfo{
			Index: d.idx, Channels: uint32(g.Channels), Ways: uint32(g.Chips / g.Channels), DZone: uint32(g.DZone),
			FCGs: uint32(g.NFCG), MAR: uint32(id.MaxActive), MOR: uint32(id.MaxOpen), BlockSize: uint32(id.BlockSize),
			PageSize: uint32(id.PageSize), ZoneSize: id.ZoneSize, ZoneCapacity: id.ZoneCapacity, NumZones: uint32(id.Zones),
			Media: id.Media,
		})
	}
	return rec
}

func (s *Service) device(idx uint32) (*device, error) {
	if int(idx) >= len(s.devs) {
		return nil, &zerr.NotFoundError{Kind: "device", Name: fmt.Sprint(idx)}
	}
	return s.devs[idx], nil
}

// isAdmin: may the caller manage the node (select-all, offline, GetLog)?
// The verified identity decides: the operator or the arbiter. Without an
// authenticator in front (in-process test servers only) the legacy admin
// token decides, and an empty one opens admin calls.
func (s *Service) isAdmin(ctx context.Context) bool {
	if id, ok := auth.FromContext(ctx); ok {
		return id.IsAdmin() || id.Kind == auth.KindArbiter
	}
	if s.cfg.AdminToken == "" {
		return true
	}
	return subtle.ConstantTimeCompare([]byte(wire.Token(ctx)), []byte(s.cfg.AdminToken)) == 1
}

// bypassGrants: does the caller act on zones regardless of grants? Only a
// verified operator or arbiter (or, without an authenticator, the legacy
// admin token when one is configured).
func (s *Service) bypassGrants(ctx context.Context) bool {
	if s.grants == nil {
		return true
	}
	if id, ok := auth.FromContext(ctx); ok {
		return id.IsAdmin() || id.Kind == auth.KindArbiter
	}
	return s.cfg.AdminToken != "" && s.isAdmin(ctx)
}

// namespace is the namespace the caller acts for: the verified one (the
// authenticator replaced the metadata with it), never a bare claim when an
// authenticator runs.
func (s *Service) namespace(ctx context.Context) string {
	if id, ok := auth.FromContext(ctx); ok {
		return id.Namespace
	}
	return wire.Namespace(ctx)
}

func (s *Service) requireAdmin(ctx context.Context, what string) error {
	if s.isAdmin(ctx) {
		return nil
	}
	if id, ok := auth.FromContext(ctx); ok {
		return s.refused("/zonefleet.v1.ZonedDevice/"+what, auth.RefusedPolicy, &auth.PermissionDeniedError{Identity: id.String(), Method: what, Reason: "needs the operator (admin)"})
	}
	return &zerr.UnauthenticatedError{Reason: what + " needs the node's admin token (metadata " + wire.TokenKey + ")"}
}

// refused returns a refusal the service decided itself as its gRPC status,
// counted and logged by Config.Audit when set.
func (s *Service) refused(method, reason string, err error) error {
	if s.cfg.Audit != nil {
		return s.cfg.Audit.Refused(method, reason, err)
	}
	return auth.Status(err)
}

// authorizeZones checks that the caller may do I/O on every zone in [first, last].
func (s *Service) authorizeZones(ctx context.Context, d *device, first, last uint64) error {
	if s.bypassGrants(ctx) {
		s.syncForTrusted(ctx, d, first, last)
		return nil
	}
	ns := s.namespace(ctx)
	if ns == "" {
		return &zerr.NotOwnerError{Zone: cluster.PhysZone{Node: s.cfg.ID, Device: d.idx, Zone: uint32(first)}.String(), Namespace: ns}
	}
	if err := s.grants.CatchUp(ctx, wire.MinRevision(ctx)); err != nil {
		return err
	}
	for z := first; z <= last && z < d.geo.zones; z++ {
		if err := s.checkGrant(ns, d.idx, uint32(z), wire.MinRevision(ctx)); err != nil {
			return err
		}
	}
	return nil
}

// syncForTrusted brings the grant cache up to date for the zones an
// operator or arbiter call acts on for a namespace (the arbiter's
// compactor copying into zones it has just granted): a zone granted to that
// namespace in etcd but not yet in the cache is looked up (one linearizable
// read, then the watch catches up), so that hold recognises the namespace
// as the zone's owner and records it before the copy. Otherwise the copied
// data would carry no owner and the tenant's first call would reset it.
// Trusted callers only; errors leave the call to proceed as before.
func (s *Service) syncForTrusted(ctx context.Context, d *device, first, last uint64) {
	ns := s.namespace(ctx)
	if s.grants == nil || ns == "" {
		return
	}
	_ = s.grants.CatchUp(ctx, wire.MinRevision(ctx))
	for z := first; z <= last && z < d.geo.zones; z++ {
		if !s.grants.Cached(ns, d.idx, uint32(z)) {
			_ = s.grants.Check(ns, d.idx, uint32(z))
		}
	}
}

// checkGrant checks one zone's grant to ns and that a caller's layout
// (minRev, its etcd revision; 0 = not sent) does not predate it. A layout
// always carries a revision at or above the grants of every zone in it, so
// a grant created after minRev was made for something the caller has not
// seen: the arbiter moved the caller's v-zone (reclaim) and gave the zone to
// another v-zone of the same namespace. Through a stale layout a write would
// land in that other v-zone's zone and a read return its data; the caller
// gets STALE_LAYOUT instead and reloads the layout.
func (s *Service) checkGrant(ns string, dev, zone uint32, minRev int64) error {
	if err := s.grantHeld(ns, dev, zone); err != nil {
		return err
	}
	if since, ok := s.grants.Since(dev, zone); ok && minRev > 0 && since > minRev {
		s.m.staleLayoutRefused.Inc()
		pz := cluster.PhysZone{Node: s.cfg.ID, Device: dev, Zone: zone}
		return &zerr.StaleLayoutError{Reason: fmt.Sprintf("zone %s was granted at etcd revision %d, after the caller's layout (revision %d)", pz, since, minRev)}
	}
	return nil
}

// grantHeld checks one zone's grant: the cache first; a miss costs an etcd
// read only when the MissGuard admits it (remembered misses and a rate per
// namespace and in total), so random calls cannot load etcd.
func (s *Service) grantHeld(ns string, dev, zone uint32) error {
	if s.grants.Cached(ns, dev, zone) {
		return nil
	}
	if s.grants.Held(ns, dev, zone) {
		// Granted, but the reset of the zone's revocation from its last
		// owner has not run yet: wait for it (Check, no etcd read) rather
		// than answer from a miss remembered before the grant arrived.
		return s.grants.Check(ns, dev, zone)
	}
	notOwner := &zerr.NotOwnerError{Zone: cluster.PhysZone{Node: s.cfg.ID, Device: dev, Zone: zone}.String(), Namespace: ns}
	key := fmt.Sprintf("%d/%d/%s", dev, zone, ns)
	if err := s.misses.Admit(ns, key); err != nil {
		s.m.grantMissRefused.Inc()
		return notOwner
	}
	if err := s.grants.Check(ns, dev, zone); err != nil {
		s.misses.RecordMiss(key)
		return err
	}
	return nil
}

// hold read-locks the zones of [lba, lba+n) — already validated and
// authorized — and checks, under the locks and from the cache only, that the
// caller holds each zone's grant and that the zone's data belongs to that
// grant (the owner persisted with the zone equals the grant's namespace and
// owner epoch). A revocation resets its zone under the write lock, so it
// either happened before (the check fails) or waits until the I/O is done. A
// zone whose owner differs is reset under its write lock and the grant's
// owner persisted before the call goes on (adopt): a new owner's first I/O
// never sees the previous owner's blocks, however the owner changed (a
// deleted grant, an overwrite, events the watch never delivered).
func (s *Service) hold(ctx context.Context, d *device, lba, n uint64) (func(), error) {
	return s.holdZones(ctx, d, zonesOf(d, lba, n), nil)
}

// holdWrite is hold for a call that writes [lba, lba+n) or changes its
// zones (finish, reset, append, TL_open): a zone whose grant is sealed (the
// arbiter is moving its data) refuses it with UNAVAILABLE, under the lock,
// so that a write either completed before the seal applied (the arbiter's
// re-read of the write pointer waits for it) or does not happen.
func (s *Service) holdWrite(ctx context.Context, d *device, lba, n uint64) (func(), error) {
	zs := zonesOf(d, lba, n)
	return s.holdZones(ctx, d, zs, zs)
}

// zonesOf lists the zones of [lba, lba+n).
func zonesOf(d *device, lba, n uint64) []uint64 {
	first, last := lba/d.geo.zoneSize, (lba+max(n, 1)-1)/d.geo.zoneSize
	if last >= d.geo.zones {
		last = d.geo.zones - 1
	}
	zones := make([]uint64, 0, last-first+1)
	for z := first; z <= last; z++ {
		zones = append(zones, z)
	}
	return zones
}

// holdRanges is hold for several ranges of one device (SimpleCopy,
// ZoneCompaction, PeerWrite): every zone they touch is read-locked once, in
// zone order (a read lock taken twice by one goroutine can deadlock against
// a waiting reset), and checked under the lock. Ranges are already
// validated and authorized.
func (s *Service) holdRanges(ctx context.Context, d *device, reads, writes [][2]uint64) (func(), error) {
	set := map[uint64]bool{}
	written := map[uint64]bool{}
	for i, r := range append(slices.Clone(reads), writes...) {
		if r[1] == 0 {
			continue
		}
		first, last := r[0]/d.geo.zoneSize, (r[0]+r[1]-1)/d.geo.zoneSize
		for z := first; z <= last && z < d.geo.zones; z++ {
			set[z] = true
			written[z] = written[z] || i >= len(reads)
		}
	}
	zones := make([]uint64, 0, len(set))
	var wz []uint64
	for z := range set {
		zones = append(zones, z)
		if written[z] {
			wz = append(wz, z)
		}
	}
	slices.Sort(zones)
	return s.holdZones(ctx, d, zones, wz)
}

// holdZones read-locks zones (sorted, distinct) and runs the grant and
// owner checks under the locks; the call writes the zones in written (a
// subset), which a sealed grant refuses to a tenant. A zone that must change
// owner is adopted with every lock released, then the whole check runs
// again.
func (s *Service) holdZones(ctx context.Context, d *device, zones, written []uint64) (func(), error) {
	unlock := func() {
		for _, z := range zones {
			d.zl[z].RUnlock()
		}
	}
	for attempt := 0; ; attempt++ {
		for _, z := range zones {
			d.zl[z].RLock()
		}
		if s.grants == nil { // standalone: no grants, no owners
			return unlock, nil
		}
		bypass := s.bypassGrants(ctx)
		ns := s.namespace(ctx)
		var stale []uint64
		var want []zoneowner.Owner
		for _, z := range zones {
			cur, ok := s.grants.Current(d.idx, uint32(z))
			mine := ok && ns != "" && cur.Namespace == ns
			if !mine {
				if bypass {
					continue // the operator or the arbiter on a zone it does not act for a tenant on
				}
				unlock()
				return nil, &zerr.NotOwnerError{Zone: cluster.PhysZone{Node: s.cfg.ID, Device: d.idx, Zone: uint32(z)}.String(), Namespace: ns}
			}
			if !bypass && slices.Contains(written, z) && s.grants.Sealed(d.idx, uint32(z)) {
				unlock()
				s.m.sealedRefused.Inc()
				return nil, &zerr.UnavailableError{What: "zone " + cluster.PhysZone{Node: s.cfg.ID, Device: d.idx, Zone: uint32(z)}.String(),
					Reason: "sealed: the arbiter is moving its data (reclaim); retry, the layout changes or the seal goes"}
			}
			if p, valid := d.owners.Get(uint32(z)); zoneowner.Decide(p, valid, cur, true) == zoneowner.Serve {
				continue
			}
			stale, want = append(stale, z), append(want, cur)
		}
		if len(stale) == 0 {
			return unlock, nil
		}
		unlock()
		if attempt >= 3 { // the grant keeps changing under us
			return nil, &zerr.UnavailableError{What: "node " + s.cfg.ID, Reason: fmt.Sprintf("zone %d/%d changes owner repeatedly; retry", d.idx, stale[0])}
		}
		for i, z := range stale {
			if err := s.adopt(ctx, d, uint32(z), want[i]); err != nil {
				return nil, err
			}
		}
	}
}

// adopt makes zone the data of owner o: under the zone's write lock (no
// I/O of anyone in flight) and if the grant still names o and the persisted
// owner still differs, it resets the zone and persists o. A failed reset or
// write fails the call: the zone stays unreadable for o until one works.
func (s *Service) adopt(ctx context.Context, d *device, zone uint32, o zoneowner.Owner) error {
	d.zl[zone].Lock()
	defer d.zl[zone].Unlock()
	if cur, ok := s.grants.Current(d.idx, zone); !ok || cur != o {
		return nil // changed meanwhile: the caller checks again
	}
	prev, valid := d.owners.Get(zone)
	if valid && prev == o {
		return nil
	}
	zs, err := d.dev.ReportZones(zns.StateAny, uint64(zone), 1)
	if err != nil {
		return err
	}
	if len(zs) == 0 {
		return &zerr.OutOfRangeError{LBA: uint64(zone) * d.geo.zoneSize, Count: 1, Limit: d.geo.zones * d.geo.zoneSize}
	}
	if zs[0].State != zns.StateEmpty {
		if zs[0].State == zns.StateOffline {
			return &zerr.UnavailableError{What: fmt.Sprintf("zone %d/%d", d.idx, zone), Reason: "offline; it cannot be reset for its new owner"}
		}
		if _, err := d.dev.ZoneMgmt(context.WithoutCancel(ctx), uint64(zone), zns.ActionReset, false); err != nil {
			return err
		}
		d.adm.Forget(d.idx, uint64(zone))
		s.m.ownerResets.WithLabelValues(fmt.Sprint(d.idx)).Inc()
		s.log.Info("reset a zone before its new owner's first I/O", "device", d.idx, "zone", zone,
			"namespace", o.Namespace, "epoch", o.Epoch, "previous_epoch", prev.Epoch, "previous_known", valid)
	}
	// The reset (this one, the revocation's or the previous owner's own) is
	// durable before the new owner is recorded: no power loss keeps the new
	// owner with the old data. Usually the revocation worker made it so
	// already and this costs nothing.
	if err := d.dev.SyncZone(uint64(zone)); err != nil {
		return err
	}
	// Not synced here: the device syncs the owner records before any of its
	// data syncs (SetBeforeDataSync), so data the owner made durable is
	// never kept without its owner, and the first write waits for no fsync.
	return d.owners.SetUnsynced(zone, o)
}

// authorizeRange checks blocks [lba, lba+n) after validating the range.
func (s *Service) authorizeRange(ctx context.Context, d *device, lba, n uint64) error {
	if n == 0 {
		return &zerr.InvalidArgumentError{Field: "blocks", Reason: "must be at least 1"}
	}
	end := d.geo.zones * d.geo.zoneSize
	if lba >= end || n > end-lba {
		return &zerr.OutOfRangeError{LBA: lba, Count: n, Limit: end}
	}
	return s.authorizeZones(ctx, d, lba/d.geo.zoneSize, (lba+n-1)/d.geo.zoneSize)
}

func (s *Service) authorizeZone(ctx context.Context, d *device, zone uint32) error {
	if uint64(zone) >= d.geo.zones {
		return &zerr.OutOfRangeError{LBA: uint64(zone) * d.geo.zoneSize, Count: 1, Limit: d.geo.zones * d.geo.zoneSize}
	}
	return s.authorizeZones(ctx, d, uint64(zone), uint64(zone))
}

// Identify answers nvme zns id-ns.
func (s *Service) Identify(_ context.Context, req *v1.IdentifyRequest) (*v1.IdentifyResponse, error) {
	d, err := s.device(req.GetDevice())
	if err != nil {
		return nil, err
	}
	id := d.dev.Identify()
	g := d.dev.Geometry()
	c := d.dev.Config()
	return &v1.IdentifyResponse{
		NodeId: s.cfg.ID, Device: d.idx, BlockSize: uint32(id.BlockSize), PageSize: uint32(id.PageSize),
		Channels: uint32(g.Channels), Ways: uint32(g.Chips / g.Channels), PagesPerBlock: uint32(g.PagesPerBlock),
		BlocksPerChip: uint32(g.FBGsPerFCG), Dzone: uint32(g.DZone), NumZones: uint32(id.Zones),
		ZoneSize: id.ZoneSize, ZoneCapacity: id.ZoneCapacity, MaxOpenZones: uint32(id.MaxOpen),
		MaxActiveZones: uint32(id.MaxActive), Media: mediaPB(id.Media),
		Timing: &v1.Timing{
			ReadNs: uint64(c.ReadLatency), ProgramNs: uint64(c.ProgramLatency), DmaNs: uint64(c.DMALatency),
			EraseNs: uint64(c.EraseLatency), CopybackRatio: c.CopybackRatio, HostLinkBytesPerSecond: uint64(c.HostLinkBytesPerSec),
		},
		Clock: clockPB(d.dev.Clock().Kind()), TimeScale: timeScale(d.dev.Clock()), WriteCacheBytes: uint64(c.WriteCacheBytes),
		IpuBudgetBlocks: uint64(id.IPUBudget), CopybackThreshold: uint32(c.CopybackThreshold), TotalBlocks: id.TotalLBAs,
		MaxUnaryBytes: wire.MaxUnaryData, FormatVersion: zns.FormatName, Uuid: id.UUID,
	}, nil
}

func timeScale(c clock.Clock) float64 {
	if s, ok := c.(interface{ Scale() float64 }); ok {
		return s.Scale()
	}
	return 1
}

func mediaPB(m string) v1.Media {
	switch m {
	case "TLC":
		return v1.Media_MEDIA_TLC
	case "MLC":
		return v1.Media_MEDIA_MLC
	case "ZNAND":
		return v1.Media_MEDIA_ZNAND
	}
	return v1.Media_MEDIA_UNSPECIFIED
}

func clockPB(k clock.Kind) v1.ClockKind {
	switch k {
	case clock.KindRealtime:
		return v1.ClockKind_CLOCK_KIND_REALTIME
	case clock.KindVirtual:
		return v1.ClockKind_CLOCK_KIND_VIRTUAL
	case clock.KindOff:
		return v1.ClockKind_CLOCK_KIND_OFF
	}
	return v1.ClockKind_CLOCK_KIND_UNSPECIFIED
}

// IdentifyMapping answers ZNS+ identify_mapping.
func (s *Service) IdentifyMapping(_ context.Context, req *v1.IdentifyMappingRequest) (*v1.IdentifyMappingResponse, error) {
	d, err := s.device(req.GetDevice())
	if err != nil {
		return nil, err
	}
	m := d.dev.IdentifyMapping()
	chunksPerZone := uint32(m.ZoneBlocks / uint64(m.ChunkBlocks))
	return &v1.IdentifyMappingResponse{
		BlocksPerChunk: uint32(m.ChunkBlocks), ChunksPerZone: chunksPerZone, Dzone: uint32(m.DZone), Fcgs: uint32(m.NFCG),
		Fields: []*v1.MappingField{
			{Name: "chunk_shift", Lsb: 0, Width: uint32(m.ChunkShift), Description: "LBA bits below the logical chunk address (LBA >> chunk_shift = chunk)"},
			{Name: "chip", Lsb: uint32(m.ChipIDShift), Width: uint32(m.ChipIDBits), Description: "chip within the zone's chip group, from the chunk address"},
			{Name: "fcg", Lsb: uint32(m.FCGIDShift), Width: uint32(m.FCGIDBits), Description: "flash chip group (zone index mod fcgs), from the chunk address"},
		},
		Formula: fmt.Sprintf("chunk = LBA >> %d; chip = fcg*%d + (chunk >> %d & %#x); fcg = (chunk >> %d) & %#x (= zone %% %d)",
			m.ChunkShift, m.DZone, m.ChipIDShift, (1<<m.ChipIDBits)-1, m.FCGIDShift, (1<<m.FCGIDBits)-1, m.NFCG),
	}, nil
}

var stateToPB = map[zns.ZoneState]v1.ZoneState{
	zns.StateEmpty: v1.ZoneState_ZONE_STATE_EMPTY, zns.StateImplicitOpen: v1.ZoneState_ZONE_STATE_IMPLICIT_OPEN,
	zns.StateExplicitOpen: v1.ZoneState_ZONE_STATE_EXPLICIT_OPEN, zns.StateClosed: v1.ZoneState_ZONE_STATE_CLOSED,
	zns.StateFull: v1.ZoneState_ZONE_STATE_FULL, zns.StateReadOnly: v1.ZoneState_ZONE_STATE_READ_ONLY,
	zns.StateOffline: v1.ZoneState_ZONE_STATE_OFFLINE,
}

func stateFromPB(s v1.ZoneState) (zns.ZoneState, error) {
	if s == v1.ZoneState_ZONE_STATE_UNSPECIFIED {
		return zns.StateAny, nil
	}
	for k, v := range stateToPB {
		if v == s {
			return k, nil
		}
	}
	return 0, &zerr.InvalidArgumentError{Field: "state", Reason: fmt.Sprintf("unknown zone state %d", s)}
}

// ReportZones lists zones: all of them for an admin, the caller's granted zones otherwise.
func (s *Service) ReportZones(ctx context.Context, req *v1.ReportZonesRequest) (*v1.ReportZonesResponse, error) {
	d, err := s.device(req.GetDevice())
	if err != nil {
		return nil, err
	}
	filter, err := stateFromPB(req.GetState())
	if err != nil {
		return nil, err
	}
	max := int(req.GetMaxZones())
	if max <= 0 || max > 65536 {
		max = 65536
	}
	admin := s.bypassGrants(ctx)
	ns := s.namespace(ctx)
	minRev := wire.MinRevision(ctx)
	if !admin || s.grants != nil && minRev > 0 {
		// Cache only (one etcd read per ungranted zone would let one call
		// load etcd); the client's minimum revision brings the cache up to
		// date with the grants it has seen.
		if err := s.grants.CatchUp(ctx, minRev); err != nil {
			return nil, err
		}
	}
	// The arbiter reading a namespace's zones at a revision (reclaim,
	// rebuild) gets them as that revision leaves them: a zone just granted
	// after its revocation from someone else is reported once reset, and a
	// sealed zone once the writes admitted before the seal are done (its
	// write pointer can move no more).
	settle := admin && s.grants != nil && ns != "" && minRev > 0
	resp := &v1.ReportZonesResponse{}
	start := uint64(req.GetStartZone())
	for start < d.geo.zones && len(resp.Zones) < max {
		zones, err := d.dev.ReportZones(filter, start, max-len(resp.Zones))
		if err != nil {
			return nil, err
		}
		if len(zones) == 0 {
			start = d.geo.zones
			break
		}
		for _, z := range zones {
			start = z.Index + 1
			if !admin && !s.grants.Cached(ns, d.idx, uint32(z.Index)) {
				continue
			}
			resetting := settle && s.grants.Held(ns, d.idx, uint32(z.Index)) && !s.grants.Cached(ns, d.idx, uint32(z.Index))
			sealed := settle && s.grants.Held(ns, d.idx, uint32(z.Index)) && s.grants.Sealed(d.idx, uint32(z.Index))
			if resetting || sealed { // else the zone as read stands
				if resetting {
					_ = s.grants.Check(ns, d.idx, uint32(z.Index)) // waits for a pending reset
				}
				if sealed {
					s.sealWaits.Add(1)
					d.zl[z.Index].Lock() // every write holding the zone is done
					d.zl[z.Index].Unlock()
					s.sealWaits.Add(-1)
				}
				fresh, err := d.dev.ReportZones(zns.StateAny, z.Index, 1)
				if err != nil || len(fresh) == 0 {
					continue
				}
				if z = fresh[0]; !matches(filter, z.State) {
					continue
				}
			}
			if !admin && s.ownerStale(d, uint32(z.Index)) {
				// A zone the caller was just given, still holding its
				// previous owner's data: reset it first (as its first I/O
				// would), so that neither its data nor its write pointer
				// reaches the new owner.
				unlock, err := s.hold(ctx, d, z.Index*d.geo.zoneSize, 1)
				if err != nil {
					continue
				}
				unlock()
				fresh, err := d.dev.ReportZones(zns.StateAny, z.Index, 1)
				if err != nil || len(fresh) == 0 {
					continue
				}
				if z = fresh[0]; !matches(filter, z.State) {
					continue
				}
			}
			resp.Zones = append(resp.Zones, &v1.ZoneDescriptor{
				Index: uint32(z.Index), StartLba: z.Start, Capacity: z.Capacity, WritePointer: z.WP,
				State: stateToPB[z.State], ThreadedLogging: z.TL, Fcg: uint32(z.Index % uint64(d.dev.Geometry().NFCG)),
			})
		}
	}
	resp.NextStartZone = uint32(start)
	resp.More = start < d.geo.zones
	return resp, nil
}

// ownerStale: does the zone's grant name an owner other than the one
// persisted with the zone (its owner-change reset has not run yet)?
func (s *Service) ownerStale(d *device, zone uint32) bool {
	if s.grants == nil {
		return false
	}
	cur, ok := s.grants.Current(d.idx, zone)
	if !ok {
		return false
	}
	p, valid := d.owners.Get(zone)
	return zoneowner.Decide(p, valid, cur, true) != zoneowner.Serve
}

var actionFromPB = map[v1.ZoneAction]zns.Action{
	v1.ZoneAction_ZONE_ACTION_OPEN: zns.ActionOpen, v1.ZoneAction_ZONE_ACTION_CLOSE: zns.ActionClose,
	v1.ZoneAction_ZONE_ACTION_FINISH: zns.ActionFinish, v1.ZoneAction_ZONE_ACTION_RESET: zns.ActionReset,
	v1.ZoneAction_ZONE_ACTION_OFFLINE: zns.ActionOffline,
}

// ZoneManagement opens, closes, finishes, resets or offlines a zone (or all: admin only).
func (s *Service) ZoneManagement(ctx context.Context, req *v1.ZoneManagementRequest) (*v1.ZoneManagementResponse, error) {
	d, err := s.device(req.GetDevice())
	if err != nil {
		return nil, err
	}
	action, ok := actionFromPB[req.GetAction()]
	if !ok {
		return nil, &zerr.InvalidArgumentError{Field: "action", Reason: fmt.Sprintf("unknown zone action %d", req.GetAction())}
	}
	if req.GetSelectAll() {
		if err := s.requireAdmin(ctx, "select-all zone management"); err != nil {
			return nil, err
		}
	} else if err := s.authorizeZone(ctx, d, req.GetZone()); err != nil {
		return nil, err
	}
	if action == zns.ActionOffline {
		if err := s.requireAdmin(ctx, "taking a zone offline"); err != nil {
			return nil, err
		}
	}
	if !req.GetSelectAll() {
		// Fenced like I/O: a revocation reset waits for it, and a new
		// owner's first call (even a finish or a reset) runs after the
		// owner-change reset.
		unlock, err := s.holdWrite(ctx, d, uint64(req.GetZone())*d.geo.zoneSize, 1)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	if _, err := d.dev.ZoneMgmt(ctx, uint64(req.GetZone()), action, req.GetSelectAll()); err != nil {
		return nil, err
	}
	if action == zns.ActionReset || action == zns.ActionFinish {
		d.adm.Forget(d.idx, uint64(req.GetZone()))
	}
	resp := &v1.ZoneManagementResponse{}
	if !req.GetSelectAll() {
		resp.AffectedZones = []uint32{req.GetZone()}
	}
	return resp, nil
}

// Flush makes acknowledged writes durable against a machine crash.
func (s *Service) Flush(ctx context.Context, req *v1.FlushRequest) (*v1.FlushResponse, error) {
	d, err := s.device(req.GetDevice())
	if err != nil {
		return nil, err
	}
	if _, err := d.dev.Flush(ctx); err != nil {
		return nil, err
	}
	return &v1.FlushResponse{}, nil
}

// GetLog returns the device's statistics page (admin).
func (s *Service) GetLog(ctx context.Context, req *v1.GetLogRequest) (*v1.GetLogResponse, error) {
	d, err := s.device(req.GetDevice())
	if err != nil {
		return nil, err
	}
	if err := s.requireAdmin(ctx, "GetLog"); err != nil {
		return nil, err
	}
	l := d.dev.Log()
	chunk := uint64(d.dev.Geometry().ChunkBlocks)
	resp := &v1.GetLogResponse{
		HostBlocksWritten: l.HostBlocksWritten, HostBlocksRead: l.HostBlocksRead, NandPagesProgrammed: l.NANDPagesProgrammed,
		NandPagesRead: l.NANDPagesRead, Waf: l.WAF, CopybackBlocks: l.CopybackChunks * chunk, ReadProgramBlocks: l.ReadProgramBlocks,
		PluggedOnDemand: l.PluggedOnDemand, PluggedBackground: l.PluggedBackground, CacheBytes: uint64(l.CacheBytes),
		CacheCapacityBytes: uint64(l.CacheCapacity), CacheStalls: uint64(l.CacheStalls), CacheStallNs: uint64(l.CacheStallTime),
		Erases: l.Erases, ZonesByState: map[string]uint32{}, OpenZones: uint32(l.OpenZones), ActiveZones: uint32(l.ActiveZones),
		IpuBudgetBlocks: l.IPUBudget, IpuUsedBlocks: l.IPUUsed, ElapsedNs: uint64(l.Now),
		MaxEraseCount: l.EraseCountMax, MinEraseCount: l.EraseCountMin,
	}
	for k, v := range l.ZonesPerState {
		resp.ZonesByState[k] = uint32(v)
	}
	for i, b := range l.ChipBusy {
		cs := &v1.ChipStats{Chip: uint32(i), BusyNs: uint64(b)}
		if i < len(l.ChipUtilization) {
			cs.Utilization = l.ChipUtilization[i]
		}
		resp.Chips = append(resp.Chips, cs)
	}
	return resp, nil
}

// AdmissionStalls sums the writes paced by admission control over every device.
func (s *Service) AdmissionStalls() (uint64, time.Duration) {
	var n uint64
	var t time.Duration
	for _, d := range s.devs {
		dn, dt := d.adm.Stalls()
		n += dn
		t += dt
	}
	return n, t
}

// matches: does a zone in state st pass a ReportZones filter?
func matches(filter, st zns.ZoneState) bool { return filter == zns.StateAny || st == filter }
