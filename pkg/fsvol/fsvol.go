// Package fsvol is the file system's Volume (pkg/lfs) over a ZoneFleet
// cluster: one namespace's v-zones through pkg/client. Bytes go between this
// process and the nodes; compaction is offloaded to the drives.
//
// # Design: keeping the control plane off the write path
//
// Every v-zone costs two arbiter calls (OpenVZone and FinishVZone, an etcd
// transaction each) plus a FINISH RPC per physical zone. The Volume hides
// them from the file system's writers:
//
//   - Open ahead: OpenZone hands out a v-zone opened in the background
//     (Options.OpenAhead of them, two by default, are kept ready, opened
//     concurrently: the file system's data logs fill two segments at once)
//     and starts opening the next one. Spares are never listed by Zones, so Mount, Mkfs and Fsck never see
//     (or reset) them; a spare left behind by a crashed process is an open,
//     empty v-zone the next mount's recovery resets. A spare is only opened
//     while the v-zones held (handed out and not reset) plus the spares stay
//     below MaxZones, and the open ones plus the spares below MaxOpen.
//   - Asynchronous finish: Finish (and the finish of a v-zone written to
//     capacity) returns at once and runs in the background. Ordering: a
//     finish is complete before anything relies on it — Reset of that
//     v-zone waits for it; Zones waits for every pending finish (so Mount
//     sees real states); OpenZone, when the arbiter answers TooManyOpen,
//     TooManyActive or NoResources, waits for the pending finishes (they return active
//     resources) and tries once more; Flush waits for the finishes issued
//     before it; Close waits for all. A finish that failed is retried at each
//     of those points; Zones, Reset and OpenZone report it if it fails again.
//     Reads of a finishing v-zone are unaffected (its data is below the write
//     pointer either way) and the file system never writes a v-zone after
//     finishing it.
//
// # Threaded logging
//
// TLOpen (lfs.TLOpener) reopens a v-zone holding data for ZNS+ threaded
// logging: a finish of it still in flight lands first (it would end threaded
// logging behind the file system's back); then client.VZone.TLOpen asks the
// arbiter (the v-zone counts as open: zerr.TooManyOpenError, after letting
// pending finishes return their slots once) and TL_opens every physical
// zone in parallel. Writes then go to invalid blocks at or above the write
// pointer; a write over a valid block is a zerr.TLViolationError that
// changes nothing. Read allows the whole v-zone while threaded logging is on
// (the drives serve valid blocks from the original flash blocks until they
// are plugged). Finish, or a write reaching the zone's end, ends threaded
// logging on the drives and then at the arbiter, in the background like
// any finish. Options.TLMode selects the plugging (PPA-ordered by default).
//
// # Asynchronous compaction
//
// zone_compaction is asynchronous (ZNS+ §3.2.1), and so is Compact unless
// Options.SyncCompaction: it checks and plans the copies, submits them
// (client.Client.SubmitCompaction) and returns; the copies run on the
// nodes while the file system goes on (the checkpoint's node writes
// overlap them). The contract is devvol's asynchronous one. A later
// request that touches a v-zone a pending compaction copies from or into
// (Read, Write, Finish, Reset, TLOpen, another Compact) waits for it
// first; Flush, Zones and Close wait for all of them, and the destinations'
// drives are flushed by that Flush, so the checkpoint record naming the
// destinations (written after its Flush) never covers copies that are not
// complete and durable. No lock is held while waiting. A compaction that
// failed on the nodes (a node down) is repaired at that wait by host copy:
// the blocks that did not land below each destination's write pointer are
// read from the source (not reset before its compactions settle) and
// written. When the repair fails too, the wait returns a *CompactionError
// (unwrapping to the nodes' typed errors) and the compaction stays
// pending: every Flush and every request touching its v-zones tries the
// repair again, so nothing relying on the copies is acknowledged before
// they are complete. The blocks moved by copyback, read-and-program or
// node to node are known only when a compaction ends: Compact returns
// those of the compactions that ended since the previous Compact
// (Compactions has the totals).
//
// # Durability
//
// A Flush RPC is an fdatasync of one drive, so the Volume tracks dirty
// drives, not v-zones: each write marks the drives it reached (the legs of
// its range and their copies, a parity group's zones: client.VZone.DevicesOf;
// all of the v-zone's after a partial write) with a sequence number, so a
// small write's fsync syncs one drive, not every drive of the v-zone. Flush sends one Flush per dirty drive, all in parallel,
// and forgets a drive only if its flush succeeded and no write marked it
// again meanwhile. A failed Flush returns an error and leaves the failed
// drives dirty, so a retried Flush flushes them again: fsync never reports
// success for data that did not reach stable media.
//
// # Concurrency
//
// Every method is safe for concurrent use; no lock is held across a data
// path call. Opens and resets of v-zones are ordered by one lock (opens
// share it) because the arbiter reuses the id of a v-zone just reset: the
// layouts of the two must not reach the client's cache out of order; the
// segments a checkpoint frees are reset under one hold of it, with one
// arbiter call (ResetZones, the arbiter's ResetVZones). Background work (open ahead, finishes) runs in goroutines bounded by
// the number of v-zones; Close waits for them.
package fsvol

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Volume implements lfs.Volume with a client bound to one namespace.
type Volume struct {
	c     *client.Client
	geo   lfs.VolumeGeometry
	ahead int
	log   *slog.Logger
	tlm   v1.PlugMode

	bg     context.Context // background work; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// the mount lease (lease.go)
	ns      string
	holder  string
	ttl     time.Duration
	leaseOK atomic.Int64 // clock time (Clock.Now) of the last successful renewal
	fenced  atomic.Pointer[FencedError]
	// the renewals' stop and end (nil without a holder)
	leaseStop context.CancelFunc
	leaseDone chan struct{}
	renewals  *prometheus.CounterVec // by result: ok, failed, lost

	// lifecycle orders opens (shared) against resets (exclusive): the arbiter
	// hands out the lowest empty v-zone, often one just reset, and the two
	// answers carry layouts of the same v-zone id that must reach the
	// client's cache in the order they happened. Only control-plane calls
	// take it, never reads or writes.
	lifecycle sync.RWMutex

	// fl groups concurrent Flushes into rounds (Flush).
	fl struct {
		mu         sync.Mutex
		asked      uint64        // Flush calls so far (tickets)
		running    chan struct{} // closed when the round in flight ends; nil when none
		doneTicket uint64        // the last ticket a finished round covers
		err        error         // that round's result
		rounds     uint64        // rounds run (tests)
		hook       func()        // tests: runs at the start of every round
	}

	mu        sync.Mutex
	dirty     map[client.DeviceRef]uint64 // drives written since their last successful flush → mark sequence
	seq       uint64                      // last mark sequence
	spares    []spare                     // opened ahead, not handed out yet
	opening   int                         // opens ahead in flight
	openDone  chan struct{}               // closed (and replaced) when an open ahead ends; nil when none is in flight
	aheadErr  error                       // last open-ahead failure (cleared by a successful open)
	held      int                         // v-zones handed out and not reset (approximate: from Zones, OpenZone, Reset)
	open      map[lfs.ZoneID]bool         // v-zones handed out and not finished or reset
	finishing map[lfs.ZoneID]*finishOp    // finishes in flight or failed
	closed    bool

	sync        bool           // Options.SyncCompaction
	pending     []*pendingComp // asynchronous compactions not settled yet
	compactHook func()         // tests: runs when a compaction ended, before it counts as done
	compactions struct {
		submitted, failed, repaired uint64
		total, unreported           lfs.CompactStats
	}
}

// spare is a v-zone opened ahead: its id and the incarnation of that
// opening (what Close gives back, and only that).
type spare struct {
	id  lfs.ZoneID
	inc uint64
}

// finishOp is one background finish of a v-zone.
type finishOp struct {
	done chan struct{} // closed when the attempt ends
	err  error         // its result (read after done)
}

var (
	_ lfs.Volume        = (*Volume)(nil)
	_ lfs.TLOpener      = (*Volume)(nil)
	_ lfs.ZonesResetter = (*Volume)(nil)
)

// DefaultOpenAhead is how many v-zones a Volume keeps open ahead by default:
// two, opened concurrently, because the file system's data logs write two
// segments at once (lfs.DefaultWriteLanes) and one arbiter open per segment
// would otherwise pace the writes.
const DefaultOpenAhead = 2

// Options of a volume.
type Options struct {
	// MaxZones caps the v-zones the file system may hold; 0 takes the
	// namespace's capacity quota (its v-zones, reserved for it) or, without
	// one, the cluster's capacity shared equally by the namespaces that
	// exist now (not reserved: a namespace created later, or one writing
	// more than its share, can leave this file system ENOSPC below 100 %).
	MaxZones int
	// OpenAhead is how many v-zones are kept open ahead of need (opened
	// concurrently); 0 means DefaultOpenAhead, a negative value opens every
	// v-zone on demand.
	OpenAhead int
	// Logger for background failures; default slog.Default().
	Logger *slog.Logger
	// TLMode is how the drives plug the valid blocks a threaded-logging
	// write skips; unspecified means PPA-ordered (ZNS+ §3.2.2: plugging
	// ahead of the write pointer while the chip is idle).
	TLMode v1.PlugMode
	// MountHolder, when set, makes the volume take the namespace's mount
	// lease in New and renew it (see lease.go): one mount writes a
	// namespace at a time. Unique per mount (host, pid, a random id).
	MountHolder string
	// ForceMount takes the lease even from a live holder (that mount then
	// stops writing); MountTTL is the lease's TTL (0: the arbiter's 15 s).
	ForceMount bool
	MountTTL   time.Duration
	// Registerer gets the mount lease's metrics (nil: none).
	Registerer prometheus.Registerer
	// SyncCompaction makes Compact wait for the copies and flush their
	// drives before it returns. By default Compact returns once the copies
	// are submitted (see Asynchronous compaction in the package
	// documentation).
	SyncCompaction bool
}

// New derives the geometry from the namespace and the nodes' drives.
func New(ctx context.Context, c *client.Client, o Options) (*Volume, error) {
	ns, err := c.GetNamespace(ctx)
	if err != nil {
		return nil, err
	}
	nodes, err := c.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	var zoneCap uint64
	var bs, page uint32
	for _, n := range nodes {
		for _, d := range n.GetDevices() {
			if zoneCap == 0 || d.GetZoneCapacity() < zoneCap {
				zoneCap = d.GetZoneCapacity()
			}
			bs, page = d.GetBlockSize(), d.GetPageSize()
		}
	}
	if zoneCap == 0 || bs == 0 {
		return nil, &zerr.UnavailableError{What: "cluster", Reason: "no node with a drive is registered"}
	}
	zoneBlocks := uint64(ns.GetZonesPerVzone()) * zoneCap
	maxZones := o.MaxZones
	if maxZones <= 0 && ns.GetVzones() > 0 {
		// the namespace's capacity quota: reserved for it, whatever the
		// other namespaces write
		maxZones = int(min(ns.GetVzones(), 1<<31))
	}
	if maxZones <= 0 {
		st, err := c.ClusterStatus(ctx)
		if err != nil {
			return nil, err
		}
		maxZones = int(st.GetCapacityBlocks() / zoneBlocks / uint64(max(st.GetNamespaces(), 1)))
	}
	chunk := 1
	if page > bs && page%bs == 0 {
		chunk = int(page / bs)
	}
	ahead := o.OpenAhead
	if ahead == 0 {
		ahead = DefaultOpenAhead
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	bg, cancel := context.WithCancel(context.Background())
	tlm := o.TLMode
	if tlm == v1.PlugMode_PLUG_MODE_UNSPECIFIED {
		tlm = v1.PlugMode_PLUG_MODE_PPA_ORDERED
	}
	v := &Volume{c: c, ahead: max(ahead, 0), log: log, bg: bg, cancel: cancel, tlm: tlm, sync: o.SyncCompaction,
		dirty: map[client.DeviceRef]uint64{}, open: map[lfs.ZoneID]bool{}, finishing: map[lfs.ZoneID]*finishOp{},
		ns: ns.GetName(), holder: o.MountHolder, ttl: o.MountTTL,
		geo: lfs.VolumeGeometry{
			BlockSize: int(bs), ZoneBlocks: zoneBlocks, ChunkBlocks: chunk,
			MaxOpen: int(ns.GetMaxActiveVzones()), MaxZones: maxZones,
		}}
	if v.ttl <= 0 {
		v.ttl = 15 * time.Second
	}
	if v.holder != "" {
		v.leaseMetrics(o.Registerer)
		if err := v.acquireLease(ctx, o.ForceMount); err != nil {
			cancel()
			return nil, err
		}
	}
	return v, nil
}

// Geometry implements lfs.Volume.
func (v *Volume) Geometry() lfs.VolumeGeometry { return v.geo }

func (v *Volume) vz(z lfs.ZoneID) *client.VZone { return v.c.VZone(uint64(z)) }

// Close waits for the background work, gives the spare v-zones back (reset)
// and stops opening ahead. The Volume must not be used afterwards; the
// client stays open (it belongs to the caller). A spare is given back by
// its incarnation (client.VZone.ResetIncarnation), never by id alone: a
// mount of the same namespace that started meanwhile has reset it (its
// recovery resets every v-zone it does not know) and may have opened the
// same id again for its own log, which the arbiter then refuses to reset
// (StaleLayout, ignored here). Close a Volume before another one (in this
// process) mounts the same namespace anyway: its background opens and
// finishes would otherwise race that mount's recovery. (A process that
// exits takes its background work with it; the next mount resets its spare.)
func (v *Volume) Close(ctx context.Context) error {
	cerr := v.settle(ctx, nil)
	v.mu.Lock()
	v.closed = true
	v.mu.Unlock()
	v.wg.Wait()
	v.mu.Lock()
	spares := v.spares
	v.spares = nil
	v.mu.Unlock()
	errs := []error{cerr}
	for _, sp := range spares {
		if sp.inc == 0 {
			continue // an arbiter without incarnations: the next mount's recovery resets it
		}
		// Only this opening: if another mount of the namespace already
		// reset the spare (its recovery resets v-zones it does not know)
		// and opened the id again, the arbiter refuses and that mount's
		// v-zone is left alone.
		err := v.vz(sp.id).ResetIncarnation(ctx, sp.inc)
		if errors.Is(err, zerr.ErrStaleLayout) {
			v.log.Debug("spare v-zone reused by another mount; not reset", "vzone", sp.id)
			err = nil
		}
		errs = append(errs, err)
	}
	errs = append(errs, v.drainFinishes(ctx, nil, true))
	errs = append(errs, v.releaseLease(ctx))
	v.cancel()
	return errors.Join(errs...)
}

// OpenZone implements lfs.Volume: a v-zone opened ahead when there is one.
func (v *Volume) OpenZone(ctx context.Context) (lfs.ZoneID, error) {
	if err := v.fencedErr(); err != nil {
		return 0, err
	}
	for {
		v.mu.Lock()
		if n := len(v.spares); n > 0 {
			z := v.spares[0].id
			v.spares = v.spares[1:]
			v.handOut(z)
			v.refillLocked()
			v.mu.Unlock()
			return z, nil
		}
		wait := v.openDone
		v.mu.Unlock()
		if wait == nil {
			break
		}
		select { // an open ahead is in flight: it is nearer than a new one
		case <-wait:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		v.mu.Lock()
		failed := v.aheadErr != nil
		v.mu.Unlock()
		if failed {
			break
		}
	}
	z, err := v.openWhileFinishing(ctx, func() (lfs.ZoneID, error) {
		z, _, err := v.openNow(ctx)
		return z, err
	})
	if err != nil {
		return 0, err
	}
	v.mu.Lock()
	v.handOut(z)
	v.refillLocked()
	v.mu.Unlock()
	return z, nil
}

// OpenZoneLike is OpenZone with a copyback-aware layout hint: the new
// v-zone's stripe groups sit on the dies of zone like's where the cluster
// has room, so a compaction of like into it finds same-chip destinations
// (client.Client.OpenVZoneLike). It never hands out a spare (a spare's
// layout was chosen without the hint) unless the namespace's active
// resources are all in use, when it falls back to OpenZone; like is
// typically the victim of a segment cleaning.
func (v *Volume) OpenZoneLike(ctx context.Context, like lfs.ZoneID) (lfs.ZoneID, error) {
	if err := v.fencedErr(); err != nil {
		return 0, err
	}
	open := func() (lfs.ZoneID, error) {
		v.lifecycle.RLock()
		defer v.lifecycle.RUnlock()
		vz, _, err := v.c.OpenVZoneLike(ctx, uint64(like))
		if err != nil {
			return 0, err
		}
		return lfs.ZoneID(vz.ID()), nil
	}
	z, err := v.openWhileFinishing(ctx, open)
	if err != nil && (errors.Is(err, zerr.ErrTooManyOpen) || errors.Is(err, zerr.ErrTooManyActive) || errors.Is(err, zerr.ErrNoResources)) {
		// The spare opened ahead holds the last active resource: the hint is
		// only a hint, hand out the spare (or whatever OpenZone finds).
		return v.OpenZone(ctx)
	}
	if err != nil {
		return 0, err
	}
	v.mu.Lock()
	v.handOut(z)
	v.mu.Unlock()
	return z, nil
}

// busyErr tells whether an open failed for want of active resources.
func busyErr(err error) bool {
	return errors.Is(err, zerr.ErrTooManyOpen) || errors.Is(err, zerr.ErrTooManyActive) || errors.Is(err, zerr.ErrNoResources)
}

// openWhileFinishing runs open; when it fails for want of active resources
// while finishes are in flight, it tries again as they give them back. A
// finish returns its resources at the arbiter first and then finishes the
// drives' zones, which takes the client's retry deadline when a node is
// down (a mirrored v-zone that lost a copy): so open is tried again a few
// times at short intervals before waiting for the finishes to end, and
// once more after that even if a finish failed (its arbiter part is what
// counts).
func (v *Volume) openWhileFinishing(ctx context.Context, open func() (lfs.ZoneID, error)) (lfs.ZoneID, error) {
	z, err := open()
	for i := 0; err != nil && busyErr(err) && v.pendingFinishes() && i < 20; i++ {
		if serr := clock.Sleep(ctx, v.c.Clock(), 25*time.Millisecond); serr != nil {
			return 0, errors.Join(err, serr)
		}
		z, err = open()
	}
	if err != nil && busyErr(err) && v.pendingFinishes() {
		derr := v.drainFinishes(ctx, nil, true)
		if z, err = open(); err != nil {
			return 0, errors.Join(err, derr)
		}
	}
	return z, err
}

func (v *Volume) openNow(ctx context.Context) (lfs.ZoneID, uint64, error) {
	v.lifecycle.RLock()
	defer v.lifecycle.RUnlock()
	vz, inc, err := v.c.OpenVZoneIncarnation(ctx)
	if err != nil {
		return 0, 0, err
	}
	return lfs.ZoneID(vz.ID()), inc, nil
}

// handOut records z as the file system's. v.mu held.
func (v *Volume) handOut(z lfs.ZoneID) {
	v.held++
	v.open[z] = true
}

// refillLocked starts opening spares, concurrently, until v.ahead are
// ready or in flight, as long as the namespace has room for one more.
// v.mu held.
func (v *Volume) refillLocked() {
	for !v.closed && len(v.spares)+v.opening < v.ahead &&
		v.held+len(v.spares)+v.opening+1 <= v.geo.MaxZones && len(v.open)+len(v.finishing)+len(v.spares)+v.opening+1 <= v.geo.MaxOpen {
		if v.openDone == nil {
			v.openDone = make(chan struct{})
		}
		v.opening++
		v.aheadErr = nil
		v.wg.Add(1)
		go func() {
			defer v.wg.Done()
			z, inc, err := v.openNow(v.bg)
			v.mu.Lock()
			v.opening--
			done := v.openDone
			v.openDone = nil
			if v.opening > 0 {
				v.openDone = make(chan struct{})
			}
			if err != nil {
				v.aheadErr = err // the next OpenZone opens on demand (and tries ahead again)
				v.log.Debug("open a v-zone ahead", "err", err)
			} else {
				v.spares = append(v.spares, spare{id: z, inc: inc})
				v.refillLocked()
			}
			v.mu.Unlock()
			close(done)
		}()
	}
}

// Zones implements lfs.Volume: every non-empty v-zone with its write pointer,
// spares excepted, once every pending finish has landed. It lists while no
// open is in flight (the lifecycle lock), so a spare being opened is never
// reported as the file system's.
func (v *Volume) Zones(ctx context.Context) ([]lfs.ZoneInfo, error) {
	if err := v.settle(ctx, nil); err != nil {
		return nil, err
	}
	if err := v.drainFinishes(ctx, nil, true); err != nil {
		return nil, err
	}
	// No open in flight while listing: a v-zone being opened ahead is
	// either a known spare (left out) or not open yet, never listed as the
	// file system's (Mount would reset it under the spare pool's feet).
	v.lifecycle.Lock()
	list, err := v.c.ListVZones(ctx)
	v.mu.Lock()
	spare := map[lfs.ZoneID]bool{}
	for _, sp := range v.spares {
		spare[sp.id] = true
	}
	v.mu.Unlock()
	v.lifecycle.Unlock()
	if err != nil {
		return nil, err
	}
	var out []lfs.ZoneInfo
	open := map[lfs.ZoneID]bool{}
	for _, l := range list {
		id := lfs.ZoneID(l.GetId())
		if spare[id] {
			continue
		}
		var st lfs.ZoneState
		switch l.GetState() {
		case v1.VZoneState_VZONE_STATE_OPEN:
			st = lfs.ZoneOpen
			open[id] = true
		case v1.VZoneState_VZONE_STATE_FULL:
			st = lfs.ZoneFull
		default:
			continue
		}
		wp, err := v.vz(id).WritePointer(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, lfs.ZoneInfo{ID: id, WP: wp, Capacity: l.GetCapacity(), State: st})
	}
	v.mu.Lock()
	v.held, v.open = len(out), open
	v.mu.Unlock()
	return out, nil
}

// Write implements lfs.Volume.
func (v *Volume) Write(ctx context.Context, z lfs.ZoneID, off uint64, data []byte, fua bool) error {
	return v.WriteV(ctx, z, off, [][]byte{data}, fua)
}

// WriteV is Write of bufs back to back (lfs.VectorWriter): the client sends
// each stripe leg as the parts of bufs it covers, with no gather copy.
func (v *Volume) WriteV(ctx context.Context, z lfs.ZoneID, off uint64, bufs [][]byte, fua bool) error {
	if err := v.fencedErr(); err != nil {
		return err
	}
	if err := v.settleZone(ctx, z); err != nil {
		return err
	}
	size := 0
	for _, b := range bufs {
		size += len(b)
	}
	vz := v.vz(z)
	// with fua durable when acknowledged: no Flush round trip
	werr := vz.WriteVec(ctx, off, bufs, fua)
	var we *client.WriteError
	if werr != nil && !(errors.As(werr, &we) && we.Written > 0) {
		return werr
	}
	if werr != nil || !fua {
		// Something landed that is not known durable: its drives need a
		// flush before the next Flush succeeds — the drives this range
		// reached (a small write touches one leg: a later Flush then syncs
		// one drive, not all of the v-zone's), all of the v-zone's after a
		// partial write.
		var err error
		if werr != nil {
			err = v.markDirty(ctx, vz)
		} else {
			err = v.markDirtyRange(ctx, vz, off, uint64(size)/uint64(v.geo.BlockSize))
		}
		if err != nil {
			return errors.Join(werr, err)
		}
	}
	if werr != nil {
		return &lfs.PartialWriteError{Zone: z, Off: off, Written: we.Written, Err: werr}
	}
	v.finishIfFull(z, off+uint64(size)/uint64(v.geo.BlockSize))
	return nil
}

// markDirty records the drives of vz as written.
func (v *Volume) markDirty(ctx context.Context, vz *client.VZone) error {
	devs, err := vz.Devices(ctx)
	if err != nil {
		return err
	}
	v.markDevs(devs)
	return nil
}

// markDirtyRange records the drives that a write of [off, off+n) of vz
// reached as written.
func (v *Volume) markDirtyRange(ctx context.Context, vz *client.VZone, off, n uint64) error {
	devs, err := vz.DevicesOf(ctx, off, n)
	if err != nil {
		return err
	}
	v.markDevs(devs)
	return nil
}

// markDevs records devs as written.
func (v *Volume) markDevs(devs []client.DeviceRef) {
	v.mu.Lock()
	v.seq++
	for _, d := range devs {
		v.dirty[d] = v.seq
	}
	v.mu.Unlock()
}

// finishIfFull finishes a v-zone written to capacity (in the background): a
// drive's zone becomes full by itself, a v-zone keeps its active resources at
// the arbiter until finished, and the file system counts a full zone as no
// longer open.
func (v *Volume) finishIfFull(z lfs.ZoneID, end uint64) {
	if end >= v.geo.ZoneBlocks {
		v.startFinish(z)
	}
}

// Read implements lfs.Volume; the range must lie below the write pointer.
// The data goes straight from the nodes' answers into buf.
func (v *Volume) Read(ctx context.Context, z lfs.ZoneID, off uint64, buf []byte) error {
	bs := uint64(v.geo.BlockSize)
	if len(buf) == 0 || uint64(len(buf))%bs != 0 {
		return &zerr.InvalidArgumentError{Field: "buffer", Reason: "not a positive multiple of the block size"}
	}
	n := uint64(len(buf)) / bs
	if err := v.settleZone(ctx, z); err != nil {
		return err
	}
	vz := v.vz(z)
	wp, err := vz.WritePointer(ctx)
	if err != nil {
		return err
	}
	if vz.ThreadedLogging() {
		// Below the old write pointer every block reads right at every
		// moment (valid: its data, plugged or not yet; overwritten: the new
		// data); the drives serve it. The file system only reads blocks it
		// holds, so the whole v-zone is allowed.
		wp = v.geo.ZoneBlocks
	}
	if off+n > wp {
		return &zerr.OutOfRangeError{LBA: off, Count: n, Limit: wp}
	}
	return vz.ReadInto(ctx, off, buf)
}

// Finish implements lfs.Volume: the finish runs in the background (see the
// package documentation for what waits for it).
func (v *Volume) Finish(ctx context.Context, z lfs.ZoneID) error {
	if err := v.fencedErr(); err != nil {
		return err
	}
	if err := v.settleZone(ctx, z); err != nil {
		return err
	}
	v.startFinish(z)
	return nil
}

// startFinish starts finishing z unless a finish of z is in flight.
func (v *Volume) startFinish(z lfs.ZoneID) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.open, z)
	if op, ok := v.finishing[z]; ok {
		select {
		case <-op.done: // failed before: try again
		default:
			return
		}
	}
	op := &finishOp{done: make(chan struct{})}
	v.finishing[z] = op
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		err := v.vz(z).Finish(v.bg)
		v.mu.Lock()
		op.err = err
		if err == nil && v.finishing[z] == op {
			delete(v.finishing, z)
		}
		v.mu.Unlock()
		if err != nil {
			v.log.Warn("finish v-zone (retried when next needed)", "vzone", z, "err", err)
		}
		close(op.done)
	}()
}

func (v *Volume) pendingFinishes() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.finishing) > 0
}

// drainFinishes waits for the pending finishes of zones (all when nil) and,
// with retry, retries the failed ones once, synchronously.
func (v *Volume) drainFinishes(ctx context.Context, zones []lfs.ZoneID, retry bool) error {
	v.mu.Lock()
	ops := map[lfs.ZoneID]*finishOp{}
	if zones == nil {
		for z, op := range v.finishing {
			ops[z] = op
		}
	} else {
		for _, z := range zones {
			if op, ok := v.finishing[z]; ok {
				ops[z] = op
			}
		}
	}
	v.mu.Unlock()
	var errs []error
	for z, op := range ops {
		select {
		case <-op.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if op.err == nil || !retry {
			continue
		}
		err := v.vz(z).Finish(ctx)
		v.mu.Lock()
		if err == nil && v.finishing[z] == op {
			delete(v.finishing, z)
		}
		v.mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("finish v-zone %d: %w", z, err))
		}
	}
	return errors.Join(errs...)
}

// Reset implements lfs.Volume. A finish of z still in flight lands first.
// Resetting a v-zone that is in the spare pool is a no-op (see below).
func (v *Volume) Reset(ctx context.Context, z lfs.ZoneID) error {
	if err := v.fencedErr(); err != nil {
		return err
	}
	if err := v.settleZone(ctx, z); err != nil {
		return err
	}
	v.mu.Lock()
	op := v.finishing[z]
	v.mu.Unlock()
	if op != nil {
		select {
		case <-op.done: // a failed finish does not matter: the reset releases the zone
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	v.lifecycle.Lock()
	v.mu.Lock()
	spare := false
	for _, sp := range v.spares {
		spare = spare || sp.id == z
	}
	v.mu.Unlock()
	if spare {
		// A spare is never the file system's: this is a repeated Reset of a
		// v-zone that was reset and then opened ahead again. Resetting it
		// would leave an empty v-zone in the spare pool.
		v.lifecycle.Unlock()
		return nil
	}
	err := v.vz(z).Reset(ctx)
	v.lifecycle.Unlock()
	if err != nil {
		return err
	}
	v.mu.Lock()
	if v.finishing[z] == op {
		delete(v.finishing, z)
	}
	if v.held > 0 {
		v.held--
	}
	delete(v.open, z)
	v.mu.Unlock()
	return nil
}

// ResetZones implements lfs.ZonesResetter: each zone as Reset, with one
// arbiter call for all of them (client.Client.ResetVZones: one state change
// instead of one per v-zone) under one hold of the lifecycle lock.
func (v *Volume) ResetZones(ctx context.Context, zs []lfs.ZoneID) []error {
	if err := v.fencedErr(); err != nil {
		errs := make([]error, len(zs))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	errs := make([]error, len(zs))
	ops := make([]*finishOp, len(zs))
	for i, z := range zs {
		if errs[i] = v.settleZone(ctx, z); errs[i] != nil {
			continue
		}
		v.mu.Lock()
		ops[i] = v.finishing[z]
		v.mu.Unlock()
		if ops[i] != nil {
			select {
			case <-ops[i].done: // a failed finish does not matter: the reset releases the zone
			case <-ctx.Done():
				errs[i] = ctx.Err()
			}
		}
	}
	v.lifecycle.Lock()
	v.mu.Lock()
	var refs []client.ResetRef
	var idx []int
	for i, z := range zs {
		if errs[i] != nil || slices.ContainsFunc(v.spares, func(sp spare) bool { return sp.id == z }) {
			continue // (a spare: see Reset)
		}
		refs = append(refs, client.ResetRef{ID: uint64(z)})
		idx = append(idx, i)
	}
	v.mu.Unlock()
	rerrs := v.c.ResetVZones(ctx, refs)
	v.lifecycle.Unlock()
	v.mu.Lock()
	for k, i := range idx {
		if errs[i] = rerrs[k]; errs[i] != nil {
			continue
		}
		z := zs[i]
		if v.finishing[z] == ops[i] {
			delete(v.finishing, z)
		}
		if v.held > 0 {
			v.held--
		}
		delete(v.open, z)
	}
	v.mu.Unlock()
	return errs
}

// TLOpen implements lfs.TLOpener: the arbiter moves v-zone z to threaded
// logging (counted as an open v-zone: zerr.TooManyOpenError over MaxOpen),
// then every physical zone is TL_opened in parallel (client.VZone.TLOpen).
// A finish of z still in flight lands first (it would end threaded logging
// behind our back). When the arbiter refuses for lack of open slots and
// finishes are pending, they land (they give slots back) and TLOpen tries
// once more.
func (v *Volume) TLOpen(ctx context.Context, z lfs.ZoneID, valid []byte) error {
	if err := v.fencedErr(); err != nil {
		return err
	}
	if want := (v.geo.ZoneBlocks + 7) / 8; uint64(len(valid)) != want {
		return &zerr.InvalidBitmapError{Zone: uint64(z), Reason: fmt.Sprintf("has %d bytes, the zone needs %d", len(valid), want)}
	}
	if err := v.settleZone(ctx, z); err != nil {
		return err
	}
	if err := v.drainFinishes(ctx, []lfs.ZoneID{z}, true); err != nil {
		return err
	}
	err := v.vz(z).TLOpen(ctx, valid, v.tlm)
	if err != nil && (errors.Is(err, zerr.ErrTooManyOpen) || errors.Is(err, zerr.ErrTooManyActive)) && v.pendingFinishes() {
		if derr := v.drainFinishes(ctx, nil, true); derr != nil {
			return errors.Join(err, derr)
		}
		err = v.vz(z).TLOpen(ctx, valid, v.tlm)
	}
	if err != nil {
		return err
	}
	v.mu.Lock()
	v.open[z] = true
	v.mu.Unlock()
	return nil
}

// Compact implements lfs.Volume with the drives' zone_compaction. Earlier
// compactions touching the same zones end first. Synchronous
// (Options.SyncCompaction): the copies are complete and flushed on return.
// Asynchronous (the default): it returns once the copies are submitted (see
// the package documentation, Asynchronous compaction).
func (v *Volume) Compact(ctx context.Context, copies []lfs.Copy) (lfs.CompactStats, error) {
	if err := v.fencedErr(); err != nil {
		return lfs.CompactStats{}, err
	}
	if len(copies) == 0 {
		return lfs.CompactStats{}, &zerr.InvalidArgumentError{Field: "copies", Reason: "is empty"}
	}
	cc := make([]client.Copy, len(copies))
	zones := map[lfs.ZoneID]bool{}
	for i, c := range copies {
		cc[i] = client.Copy{Src: uint64(c.Src), SrcOff: c.SrcOff, Dst: uint64(c.Dst), DstOff: c.DstOff, Blocks: c.Blocks}
		zones[c.Src], zones[c.Dst] = true, true
	}
	if err := v.settle(ctx, zones); err != nil {
		return lfs.CompactStats{}, err
	}
	if !v.sync {
		return v.submit(ctx, copies, cc, zones)
	}
	st, err := v.c.Compact(ctx, cc)
	out := lfs.CompactStats{Copyback: st.Copyback, Local: st.ReadProgram + st.HostCopy, Remote: st.Remote}
	if err != nil {
		return out, err
	}
	// The copies must be durable when Compact returns: one flush per drive
	// of the destinations, in parallel. A destination filled to capacity is
	// finished.
	devs, err := v.dstDevices(ctx, copies)
	if err != nil {
		return out, err
	}
	if err := errors.Join(v.c.FlushDevices(ctx, devs)...); err != nil {
		return out, err
	}
	v.finishFilled(copies)
	return out, nil
}

// dstDevices lists the drives of the destinations of copies.
func (v *Volume) dstDevices(ctx context.Context, copies []lfs.Copy) ([]client.DeviceRef, error) {
	var devs []client.DeviceRef
	seen := map[client.DeviceRef]bool{}
	zs := map[lfs.ZoneID]bool{}
	for _, c := range copies {
		if zs[c.Dst] {
			continue
		}
		zs[c.Dst] = true
		ds, err := v.vz(c.Dst).Devices(ctx)
		if err != nil {
			return nil, err
		}
		for _, d := range ds {
			if !seen[d] {
				seen[d] = true
				devs = append(devs, d)
			}
		}
	}
	return devs, nil
}

// finishFilled finishes (in the background) the destinations copies filled
// to capacity.
func (v *Volume) finishFilled(copies []lfs.Copy) {
	end := map[lfs.ZoneID]uint64{}
	for _, c := range copies {
		end[c.Dst] = max(end[c.Dst], c.DstOff+c.Blocks)
	}
	for z, e := range end {
		v.finishIfFull(z, e)
	}
}

// pendingComp is a compaction Compact submitted and nobody has settled yet.
type pendingComp struct {
	h      *client.Compaction
	copies []lfs.Copy
	zones  map[lfs.ZoneID]bool // v-zones it copies from or into
	done   chan struct{}       // closed when h is done (the test hook run)

	// v.mu
	settling chan struct{} // non-nil while one caller waits for (or repairs) it; closed at its end
	settled  bool

	// only the caller holding settling
	failed error // the background compaction's error, once seen
}

// submit starts an asynchronous compaction (Compact without SyncCompaction).
func (v *Volume) submit(ctx context.Context, copies []lfs.Copy, cc []client.Copy, zones map[lfs.ZoneID]bool) (lfs.CompactStats, error) {
	// The background part outlives this call: it keeps ctx's values, not
	// its cancellation, and ends with the Volume (Close waits for it).
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(v.bg, cancel)
	h, err := v.c.SubmitCompaction(bctx, cc)
	if err != nil {
		stop()
		cancel()
		return lfs.CompactStats{}, err
	}
	p := &pendingComp{h: h, copies: append([]lfs.Copy(nil), copies...), zones: zones, done: make(chan struct{})}
	v.mu.Lock()
	v.pending = append(v.pending, p)
	v.compactions.submitted++
	out := v.compactions.unreported
	v.compactions.unreported = lfs.CompactStats{}
	hook := v.compactHook
	v.wg.Add(1)
	v.mu.Unlock()
	go func() {
		defer v.wg.Done()
		<-h.Done()
		stop()
		cancel()
		if hook != nil {
			hook()
		}
		st, err := h.Wait(context.Background())
		v.mu.Lock()
		// the stats reach the file system with a later Compact (CompactStats)
		s := lfs.CompactStats{Copyback: st.Copyback, Local: st.ReadProgram + st.HostCopy, Remote: st.Remote}
		v.compactions.unreported.Copyback += s.Copyback
		v.compactions.unreported.Local += s.Local
		v.compactions.unreported.Remote += s.Remote
		v.compactions.total.Copyback += s.Copyback
		v.compactions.total.Local += s.Local
		v.compactions.total.Remote += s.Remote
		if err != nil {
			v.compactions.failed++
		}
		v.mu.Unlock()
		if err != nil {
			v.log.Warn("asynchronous zone compaction failed (repaired by host copy when next needed)", "err", err)
		}
		close(p.done)
	}()
	// The destinations' drives are written: the next Flush flushes them
	// (after waiting for the copies).
	devs, err := v.dstDevices(ctx, copies)
	if err != nil {
		return out, err // the copies go on; a touching request or Flush settles them
	}
	v.mu.Lock()
	v.seq++
	for _, d := range devs {
		v.dirty[d] = v.seq
	}
	v.mu.Unlock()
	return out, nil
}

// settle waits for the pending compactions that touch zones (all of them
// when zones is nil). A compaction that failed in the background is
// repaired (repair); when that fails too, settle returns a
// *CompactionError and the compaction stays pending, so the next request
// touching its zones and every Flush try again. Nothing is held while
// waiting.
func (v *Volume) settle(ctx context.Context, zones map[lfs.ZoneID]bool) error {
	v.mu.Lock()
	var due []*pendingComp
	for _, p := range v.pending {
		if zones == nil || p.touches(zones) {
			due = append(due, p)
		}
	}
	v.mu.Unlock()
	var errs []error
	for _, p := range due {
		if err := v.settleOne(ctx, p); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// settleZone settles the compactions touching z (the data path's check:
// nothing to allocate when none is pending).
func (v *Volume) settleZone(ctx context.Context, z lfs.ZoneID) error {
	v.mu.Lock()
	none := len(v.pending) == 0
	v.mu.Unlock()
	if none {
		return nil
	}
	return v.settle(ctx, map[lfs.ZoneID]bool{z: true})
}

func (p *pendingComp) touches(zones map[lfs.ZoneID]bool) bool {
	for z := range p.zones {
		if zones[z] {
			return true
		}
	}
	return false
}

func (v *Volume) settleOne(ctx context.Context, p *pendingComp) error {
	for {
		v.mu.Lock()
		if p.settled {
			v.mu.Unlock()
			return nil
		}
		if w := p.settling; w != nil {
			v.mu.Unlock()
			select { // another caller waits for it: its result is ours
			case <-w:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		w := make(chan struct{})
		p.settling = w
		v.mu.Unlock()
		err := v.complete(ctx, p)
		v.mu.Lock()
		p.settling = nil
		if err == nil {
			p.settled = true
			for i, q := range v.pending {
				if q == p {
					v.pending = append(v.pending[:i], v.pending[i+1:]...)
					break
				}
			}
		}
		v.mu.Unlock()
		close(w)
		if err == nil {
			v.finishFilled(p.copies)
		}
		return err
	}
}

// complete waits for p and, when it failed, repairs it (the caller holds
// p.settling).
func (v *Volume) complete(ctx context.Context, p *pendingComp) error {
	select {
	case <-p.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if p.failed == nil {
		_, p.failed = p.h.Wait(ctx)
		if p.failed == nil {
			return nil
		}
	}
	if err := v.repair(ctx, p); err != nil {
		zs := make([]lfs.ZoneID, 0, len(p.zones))
		for z := range p.zones {
			zs = append(zs, z)
		}
		slices.Sort(zs)
		return &CompactionError{Zones: zs, Err: p.failed, Repair: err}
	}
	v.mu.Lock()
	v.compactions.repaired++
	v.mu.Unlock()
	v.log.Warn("asynchronous zone compaction repaired by host copy", "err", p.failed)
	return nil
}

// repairChunk bounds the blocks a repair moves per read and write.
const repairChunk = 256

// repair completes the copies of a failed compaction by host copy: every
// destination v-zone holds, below its write pointer, exactly the copied
// blocks that landed (nothing else writes a destination before its
// compaction settles, and the copies of one destination are contiguous from
// its old write pointer), so the rest of each copy is read from its source
// (intact: a source is not reset before its compactions settle) and written
// at the write pointer. A destination whose physical zones stopped at
// different points cannot be written at its write pointer: the repair fails
// (and the file system needs a remount, which recovers from the last
// checkpoint, taken before these copies).
func (v *Volume) repair(ctx context.Context, p *pendingComp) error {
	bs := uint64(v.geo.BlockSize)
	cs := append([]lfs.Copy(nil), p.copies...)
	slices.SortStableFunc(cs, func(a, b lfs.Copy) int {
		if a.Dst != b.Dst {
			return cmp.Compare(a.Dst, b.Dst)
		}
		return cmp.Compare(a.DstOff, b.DstOff)
	})
	for _, c := range cs {
		dst := v.vz(c.Dst)
		wp, err := dst.WritePointer(ctx)
		if err != nil {
			return err
		}
		if wp >= c.DstOff+c.Blocks {
			continue
		}
		if wp < c.DstOff {
			return fmt.Errorf("destination v-zone %d: write pointer %d below the copy at %d", c.Dst, wp, c.DstOff)
		}
		for done := wp - c.DstOff; done < c.Blocks; {
			n := min(c.Blocks-done, repairChunk)
			buf := make([]byte, n*bs)
			if err := v.vz(c.Src).ReadInto(ctx, c.SrcOff+done, buf); err != nil {
				return fmt.Errorf("read source v-zone %d: %w", c.Src, err)
			}
			if err := dst.Write(ctx, c.DstOff+done, buf); err != nil {
				return fmt.Errorf("write destination v-zone %d: %w", c.Dst, err)
			}
			done += n
		}
		if err := v.markDirty(ctx, dst); err != nil {
			return err
		}
	}
	return nil
}

// CompactionError is an asynchronous compaction that failed on the nodes
// and whose repair by host copy failed too. It unwraps to both errors (a
// node down: zerr.ErrUnavailable). Every Flush and every request touching
// Zones returns it until a repair succeeds.
type CompactionError struct {
	Zones  []lfs.ZoneID // the v-zones it copies from and into
	Err    error        // the compaction's error
	Repair error        // the last repair's
}

func (e *CompactionError) Error() string {
	return fmt.Sprintf("zone compaction of v-zones %v failed: %v; repair: %v", e.Zones, e.Err, e.Repair)
}

func (e *CompactionError) Unwrap() []error { return []error{e.Err, e.Repair} }

// CompactionCounts says what the asynchronous compactions did so far.
type CompactionCounts struct {
	Submitted, Failed, Repaired uint64
	Pending                     int
	Stats                       lfs.CompactStats // blocks moved by the ended ones
}

// Compactions reports the asynchronous compactions of this Volume.
func (v *Volume) Compactions() CompactionCounts {
	v.mu.Lock()
	defer v.mu.Unlock()
	return CompactionCounts{Submitted: v.compactions.submitted, Failed: v.compactions.failed,
		Repaired: v.compactions.repaired, Pending: len(v.pending), Stats: v.compactions.total}
}

// Locate implements lfs.Volume.
func (v *Volume) Locate(ctx context.Context, z lfs.ZoneID, off uint64) (lfs.Location, error) {
	l, err := v.vz(z).Locate(ctx, off)
	if err != nil {
		return lfs.Location{}, err
	}
	return lfs.Location{Node: l.Node, Device: l.Device, Zone: l.Zone, Chip: l.Chip}, nil
}

// Flush implements lfs.Volume: one fdatasync per drive written since its
// last successful flush, all in parallel. Only the drives whose flush
// succeeded (and that no write marked again meanwhile) are forgotten, so a
// failed Flush stays failed until a retry reaches every drive. Finishes
// issued before Flush have been attempted when it returns (a failure is
// retried and reported by Zones, Reset and OpenZone, not here: it loses no
// data).
//
// Concurrent Flushes share rounds (group commit): a Flush that finds a
// round in flight waits for it and then, unless a round that started after
// it was called has ended meanwhile, runs or joins the next one; every
// caller gets the result of a round that started after its call, so it
// covers every write acknowledged before the call.
func (v *Volume) Flush(ctx context.Context) error {
	if err := v.fencedErr(); err != nil {
		return err
	}
	v.fl.mu.Lock()
	v.fl.asked++
	ticket := v.fl.asked
	for {
		if v.fl.doneTicket >= ticket {
			err := v.fl.err
			v.fl.mu.Unlock()
			return err
		}
		if v.fl.running == nil {
			break
		}
		wait := v.fl.running
		v.fl.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
		v.fl.mu.Lock()
	}
	// Lead a round covering every call so far.
	covers := v.fl.asked
	done := make(chan struct{})
	v.fl.running = done
	v.fl.rounds++
	hook := v.fl.hook
	v.fl.mu.Unlock()
	if hook != nil {
		hook()
	}
	err := v.flushRound(ctx)
	v.fl.mu.Lock()
	v.fl.running = nil
	if ctx.Err() == nil || err == nil {
		// (a round cut short by its leader's ctx answers only the leader)
		v.fl.doneTicket, v.fl.err = covers, err
	}
	v.fl.mu.Unlock()
	close(done)
	return err
}

// flushRound is one round of Flush.
func (v *Volume) flushRound(ctx context.Context) error {
	if err := v.settle(ctx, nil); err != nil {
		return err
	}
	v.mu.Lock()
	devs := make([]client.DeviceRef, 0, len(v.dirty))
	marks := make([]uint64, 0, len(v.dirty))
	for d, s := range v.dirty {
		devs = append(devs, d)
		marks = append(marks, s)
	}
	v.mu.Unlock()
	start := time.Now()
	errs := v.c.FlushDevices(ctx, devs)
	v.mu.Lock()
	for i, d := range devs {
		if errs[i] == nil && v.dirty[d] == marks[i] {
			delete(v.dirty, d)
		}
	}
	v.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("flush %d drives (%s): %w", len(devs), time.Since(start).Round(time.Millisecond), err)
	}
	_ = v.drainFinishes(ctx, nil, false) // their failures were logged and are retried when needed
	return nil
}
