package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// VZone is a handle on one v-zone of the client's namespace. Writes through
// one handle are serialized; reads run concurrently.
type VZone struct {
	c  *Client
	id uint64

	mu      sync.Mutex // guards the fields below
	layout  *v1.VZone
	groups  []*group
	wp      uint64 // v-zone write pointer (blocks), valid when wpKnown
	wpKnown bool
	wpSeq   uint64 // bumped whenever wp or wpKnown change: a derivation from the devices that raced a change is dropped
	tl      bool   // TL_opened: writes may skip ahead over valid blocks
	// tlValid is, in threaded logging opened by this client, the v-zone's
	// valid bitmap (one bit per block) plus every block written since: what
	// must be preserved if a drive ended threaded logging by itself (a node
	// restart) and a physical zone is TL_opened again (tl.go). nil when not
	// known (threaded logging opened by another process).
	tlValid []byte
	tlMode  v1.PlugMode
	static  bool  // fixed layout (direct client)
	rev     int64 // highest etcd revision of a layout seen: nodes must be at least this fresh

	devs       []DeviceRef // distinct drives of the groups, cached by Devices
	devsGroups int         // len(groups) when devs was computed
	resetting  int         // Reset calls in flight
	reopened   bool        // OpenVZone returned this v-zone while a Reset was in flight

	wmu sync.Mutex // serializes writers
	// par is the running parity of the open row of a parity group
	// (parity.go; guarded by wmu, its ppWP by parMu).
	par   parityState
	parMu sync.Mutex
}

// group is a stripe group with its congestion window.
type group struct {
	index    uint32
	width    int
	stripe   uint64 // blocks
	start    uint64 // v-zone offset of the group's first block
	capacity uint64
	zones    []pzone
	cc       *congestion
	// parity: a raid5 group (parity.go): zones are width data legs, the
	// parity leg zones[width] and the partial-parity logs zones[width+1]
	// and zones[width+2] (only zones[width+1] in an older layout).
	parity bool
	// sealedPP caches the PP records of a sealed (finished, so immutable)
	// parity group for reconstruction; a new layout makes new groups.
	sealedPP atomic.Pointer[[]ppRecord]
}

type pzone struct {
	node, addr string
	dev, zone  uint32
	available  bool
	info       *atomic.Pointer[devInfo] // the device's identify, cached on first use
}

// ID is the v-zone id.
func (v *VZone) ID() uint64 { return v.id }

func (v *VZone) setLayout(l *v1.VZone) { v.applyLayout(l, nil) }

// applyLayout installs layout l and then runs then (under v.mu), unless l
// is older than a layout already installed: each layout carries the etcd
// revision it was read at, and a handle shared by several callers (two
// volumes of one client, an open ahead racing a reset) must never go back
// to a layout a later change replaced. It reports whether l was installed.
func (v *VZone) applyLayout(l *v1.VZone, then func()) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if r := l.GetEtcdRevision(); r > 0 && r < v.rev {
		return false
	}
	v.wpSeq++
	old := map[uint32]*congestion{}
	for _, g := range v.groups {
		old[g.index] = g.cc
	}
	v.layout = l
	v.devs = nil
	v.rev = max(v.rev, l.GetEtcdRevision())
	v.groups = nil // a fresh slice: snapshots handed out stay valid
	for _, pg := range l.GetGroups() {
		g := &group{index: pg.GetIndex(), width: int(pg.GetWidth()), stripe: uint64(max(pg.GetStripeBlocks(), 1)),
			start: pg.GetStart(), capacity: pg.GetCapacity()}
		for _, z := range pg.GetZones() {
			g.zones = append(g.zones, pzone{node: z.GetNode(), addr: z.GetAddr(), dev: z.GetDevice(), zone: z.GetZone(), available: z.GetAvailable(),
				info: new(atomic.Pointer[devInfo])})
		}
		switch copies := max(int(pg.GetCopies()), 1); {
		case pg.GetParity() && copies == 1 && g.width > 0 && (g.width+3 == len(g.zones) || g.width+2 == len(g.zones)): // two PP logs (or one, laid out before)
			g.parity = true
		case pg.GetParity() || g.width == 0 || g.width*copies != len(g.zones):
			g.width = len(g.zones) // not a layout this client understands: RAID-0 over what is listed
		}
		if cc, ok := old[g.index]; ok && cc.width == g.width {
			g.cc = cc
		} else {
			g.cc = newCongestion(g.width, !v.c.cfg.DisableCongestionControl, v.c.cfg.LatThreshold, v.c.m)
		}
		v.groups = append(v.groups, g)
	}
	if l.GetState() == v1.VZoneState_VZONE_STATE_EMPTY {
		v.wp, v.wpKnown = 0, true
	}
	if !v.static { // the arbiter's record says whether threaded logging is on
		if tl := l.GetThreadedLogging(); tl != v.tl {
			v.tl, v.wpKnown = tl, false // the write pointer rule changes with it
		}
		if !v.tl {
			v.tlValid = nil
		}
	}
	if then != nil {
		then()
	}
	return true
}

// withRev asks the nodes to serve this v-zone's I/O only once their grants
// are as fresh as the layout the client uses.
func (v *VZone) withRev(ctx context.Context) context.Context {
	v.mu.Lock()
	rev := v.rev
	v.mu.Unlock()
	return wire.WithMinRevision(ctx, rev)
}

// refresh reloads the layout from the arbiter.
func (v *VZone) refresh(ctx context.Context) error {
	if v.static {
		return nil
	}
	l, err := arbiterCall(ctx, v.c, "get v-zone", func(ctx context.Context, a v1.ArbiterClient) (*v1.VZone, error) {
		return a.GetVZone(ctx, &v1.VZoneRequest{Namespace: v.c.cfg.Namespace, Id: v.id})
	})
	if err != nil {
		return err
	}
	v.setLayout(l)
	return nil
}

func (v *VZone) ensureLayout(ctx context.Context) error {
	v.mu.Lock()
	have := v.layout != nil
	v.mu.Unlock()
	if have {
		return nil
	}
	return v.refresh(ctx)
}

// Layout returns the cached layout (loading it on first use).
func (v *VZone) Layout(ctx context.Context) (*v1.VZone, error) {
	if err := v.ensureLayout(ctx); err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.layout, nil
}

func (v *VZone) snapshot() (*v1.VZone, []*group) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.layout, v.groups // never mutated once published (setLayout makes a new one)
}

// locate maps a v-zone offset inside g to (leg, zone offset).
func (g *group) locate(off uint64) (int, uint64) {
	rel := off - g.start
	k := rel / g.stripe
	return int(k % uint64(g.width)), (k/uint64(g.width))*g.stripe + rel%g.stripe
}

// voff maps (leg, zone offset) back to a v-zone offset.
func (g *group) voff(leg int, zoff uint64) uint64 {
	row := zoff / g.stripe
	return g.start + (row*uint64(g.width)+uint64(leg))*g.stripe + zoff%g.stripe
}

// leg is one coalesced device request of a user I/O: a contiguous range of
// one physical zone, and where its stripes sit in the user's buffer.
type leg struct {
	idx    int
	zoff   uint64 // first block in the zone (relative to the zone start)
	blocks uint64
	pieces []piece
}

type piece struct {
	voff, n uint64 // v-zone offset and blocks
}

// legs splits [off, off+n) of group g into one leg per physical zone.
func (g *group) legs(off, n uint64) []*leg {
	var out []*leg
	for o := off; o < off+n; {
		i, zoff := g.locate(o)
		run := min(g.stripe-(o-g.start)%g.stripe, off+n-o)
		var l *leg
		for _, x := range out { // at most width legs
			if x.idx == i {
				l = x
				break
			}
		}
		if l == nil {
			l = &leg{idx: i, zoff: zoff}
			out = append(out, l)
		}
		l.blocks += run
		l.pieces = append(l.pieces, piece{voff: o, n: run})
		o += run
	}
	return out
}

// devInfo caches a device's zone size and block size.
type devInfo struct {
	zoneSize, zoneCap uint64
	bs                uint64
	mapping           *v1.IdentifyMappingResponse
}

func (c *Client) device(ctx context.Context, z pzone) (*devInfo, error) {
	if z.info != nil {
		if d := z.info.Load(); d != nil {
			return d, nil
		}
	}
	key := z.node + "/" + fmt.Sprint(z.dev)
	if d, ok := c.maps.Load(key); ok {
		if z.info != nil {
			z.info.Store(d.(*devInfo))
		}
		return d.(*devInfo), nil
	}
	id, err := nodeCall(ctx, c, z.node, z.addr, "identify", func(ctx context.Context, n v1.ZonedDeviceClient) (*v1.IdentifyResponse, error) {
		return n.Identify(ctx, &v1.IdentifyRequest{Device: z.dev})
	})
	if err != nil {
		return nil, err
	}
	m, err := nodeCall(ctx, c, z.node, z.addr, "identify mapping", func(ctx context.Context, n v1.ZonedDeviceClient) (*v1.IdentifyMappingResponse, error) {
		return n.IdentifyMapping(ctx, &v1.IdentifyMappingRequest{Device: z.dev})
	})
	if err != nil {
		return nil, err
	}
	d := &devInfo{zoneSize: id.GetZoneSize(), zoneCap: id.GetZoneCapacity(), bs: uint64(id.GetBlockSize()), mapping: m}
	c.maps.Store(key, d)
	if z.info != nil {
		z.info.Store(d)
	}
	return d, nil
}

// blockSize is the namespace's block size (from the first device seen).
func (v *VZone) blockSize(ctx context.Context) (uint64, error) {
	_, groups := v.snapshot()
	if len(groups) == 0 || len(groups[0].zones) == 0 {
		return 4096, nil
	}
	g := groups[0]
	var err error
	zones := make([]pzone, 0, len(g.zones))
	for c := 0; c < g.copies(); c++ { // a mirrored leg: any copy's drive tells
		zones = append(zones, g.copyZone(c, 0))
	}
	if g.parity { // a parity group: any of its drives tells (the cluster has one block size)
		zones = g.zones
	}
	for c, n := 0, len(zones); c < n; c++ {
		cctx := ctx
		if c < n-1 {
			cctx = failFast(ctx)
		}
		var d *devInfo
		if d, err = v.c.device(cctx, zones[c]); err == nil {
			return d.bs, nil
		}
		if !errors.Is(err, zerr.ErrUnavailable) {
			break
		}
	}
	return 0, err
}

// Info describes a v-zone as ReportZone sees it.
type Info struct {
	ID            uint64 `json:"id"`
	State         string `json:"state"`
	WritePointer  uint64 `json:"write_pointer"` // blocks from the v-zone start
	Capacity      uint64 `json:"capacity"`      // blocks
	Generation    uint64 `json:"generation"`
	Groups        int    `json:"stripe_groups"`
	Width         uint32 `json:"width"` // of the last stripe group
	StripeBlocks  uint32 `json:"stripe_blocks"`
	ThreadedLog   bool   `json:"threaded_logging"`
	BlockSize     uint64 `json:"block_size"`
	AllocatedUpTo uint64 `json:"allocated_up_to"` // end of the last stripe group
}

// ReportZone returns the v-zone's state and write pointer, recomputing the
// write pointer from the physical zones when it is not known.
func (v *VZone) ReportZone(ctx context.Context) (Info, error) {
	if err := v.refresh(ctx); err != nil {
		return Info{}, err
	}
	wp, err := v.writePointer(ctx)
	if err != nil {
		return Info{}, err
	}
	l, groups := v.snapshot()
	bs, _ := v.blockSize(ctx)
	info := Info{ID: v.id, State: stateName(l.GetState()), WritePointer: wp, Capacity: l.GetCapacity(),
		Generation: l.GetGeneration(), Groups: len(groups), BlockSize: bs}
	if len(groups) > 0 {
		last := groups[len(groups)-1]
		info.Width, info.StripeBlocks = uint32(last.width), uint32(last.stripe)
		info.AllocatedUpTo = last.start + last.capacity
	}
	v.mu.Lock()
	info.ThreadedLog = v.tl
	v.mu.Unlock()
	return info, nil
}

func stateName(s v1.VZoneState) string {
	switch s {
	case v1.VZoneState_VZONE_STATE_OPEN:
		return "open"
	case v1.VZoneState_VZONE_STATE_FULL:
		return "full"
	case v1.VZoneState_VZONE_STATE_EMPTY:
		return "empty"
	}
	return "unknown"
}

// writePointer returns the cached write pointer or derives it from the
// devices: in each stripe group, the first block not yet written on its zone
// (the contiguous prefix), so a torn write never hides a hole.
//
// A zone of the cached layout that its node no longer reports to the
// namespace (NOT_OWNER, STALE_LAYOUT) may mean the arbiter moved the group
// (reclaim): the layout is reloaded and, if it changed, the write pointer
// derived again from the new one.
func (v *VZone) writePointer(ctx context.Context) (uint64, error) {
	gen := v.generation()
	wp, err := v.derivedWritePointer(ctx)
	if err != nil && v.movedSince(ctx, err, gen) {
		return v.derivedWritePointer(ctx)
	}
	return wp, err
}

func (v *VZone) derivedWritePointer(ctx context.Context) (uint64, error) {
	v.mu.Lock()
	if v.wpKnown {
		wp := v.wp
		v.mu.Unlock()
		return wp, nil
	}
	seq := v.wpSeq
	v.mu.Unlock()
	l, groups := v.snapshot()
	if l == nil {
		return 0, &zerr.NotFoundError{Kind: "v-zone layout", Name: fmt.Sprint(v.id)}
	}
	ctx = v.withRev(ctx)
	v.mu.Lock()
	tl := v.tl
	v.mu.Unlock()
	wp := uint64(0)
	if !tl && l.GetState() == v1.VZoneState_VZONE_STATE_FULL {
		// A finished v-zone's write pointer is its capacity, as a finished
		// zone's is. A leg (or copy, parity or partial-parity zone) whose
		// node was down when the v-zone was finished missed its FINISH and
		// reports its old write pointer once the node is back: deriving the
		// write pointer from it would move the end of a finished v-zone
		// below what its writer recorded (a mount then finds "a write
		// pointer behind the data"). Every zone is finished now — one
		// attempt each, in parallel; a zone already full answers a state
		// error, which finishZones ignores; a node still down is left for
		// the next fresh client — and the write pointer is the capacity.
		v.finishZones(failFast(ctx), groups)
		wp = l.GetCapacity()
		groups = nil
	}
	for _, g := range groups {
		prefix := g.start + g.capacity
		for i := 0; i < g.width; i++ {
			var zw uint64
			var err error
			if g.parity { // one attempt: a lost data leg has a stand-in
				if zw, err = v.zoneWritePointer(failFast(ctx), g.zones[i]); err != nil && errors.Is(err, zerr.ErrUnavailable) {
					v.c.suspect.mark(g.zones[i].node)
					zw, err = v.lostLegWritePointer(ctx, g, i)
				}
			} else {
				zw, err = v.legWritePointer(ctx, g, i)
			}
			if err != nil {
				return 0, err
			}
			perZone := g.capacity / uint64(g.width)
			if tl {
				// Threaded logging writes sparsely: the write pointer is past
				// the last block written or plugged on any zone.
				if zw > 0 {
					wp = max(wp, g.voff(i, min(zw, perZone)-1)+1)
				}
				continue
			}
			if zw >= perZone {
				continue
			}
			prefix = min(prefix, g.voff(i, zw))
		}
		if tl {
			continue
		}
		wp = prefix
		if prefix < g.start+g.capacity {
			break
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.wpSeq != seq {
		// A write, open, reset or finish changed the write pointer while we
		// asked the drives: what they said may predate it.
		if v.wpKnown {
			return v.wp, nil
		}
		return wp, nil
	}
	v.wp, v.wpKnown = wp, true
	v.wpSeq++
	return wp, nil
}

// legWritePointer is the write pointer (relative to the zone start) of leg
// i of g. For a mirrored group it is the lowest of its copies' (what every
// copy holds); a copy whose node is unavailable is skipped while another
// copy answers.
func (v *VZone) legWritePointer(ctx context.Context, g *group, i int) (uint64, error) {
	var (
		wp      uint64
		known   bool
		lastErr error
	)
	n := g.copies()
	for c := 0; c < n; c++ {
		z := g.copyZone(c, i)
		cctx := ctx
		if n > 1 && (c < n-1 || known) {
			cctx = failFast(ctx)
		}
		zw, err := v.zoneWritePointer(cctx, z)
		if err != nil {
			if n > 1 && errors.Is(err, zerr.ErrUnavailable) {
				lastErr = err
				continue
			}
			return 0, err
		}
		if !known || zw < wp {
			wp, known = zw, true
		}
	}
	if !known {
		return 0, lastErr
	}
	return wp, nil
}

// zoneWritePointer asks z's node for its write pointer (relative to the
// zone start).
func (v *VZone) zoneWritePointer(ctx context.Context, z pzone) (uint64, error) {
	d, err := v.c.device(ctx, z)
	if err != nil {
		return 0, err
	}
	rep, err := nodeCall(ctx, v.c, z.node, z.addr, "report zone", func(ctx context.Context, n v1.ZonedDeviceClient) (*v1.ReportZonesResponse, error) {
		return n.ReportZones(ctx, &v1.ReportZonesRequest{Device: z.dev, StartZone: z.zone, MaxZones: 1})
	})
	if err != nil {
		return 0, err
	}
	if len(rep.GetZones()) == 0 || rep.GetZones()[0].GetIndex() != z.zone {
		return 0, &NodeError{Node: z.node, Addr: z.addr, Op: "report zone", Err: &zerr.NotOwnerError{Zone: fmt.Sprintf("%s/%d/%d", z.node, z.dev, z.zone), Namespace: v.c.cfg.Namespace}}
	}
	return rep.GetZones()[0].GetWritePointer() - uint64(z.zone)*d.zoneSize, nil
}

// WriteError says how far a failed write got: Written blocks from Offset
// landed contiguously; nothing is claimed past them.
type WriteError struct {
	VZone     uint64
	Offset    uint64
	Written   uint64
	Requested uint64
	Err       error
}

func (e *WriteError) Error() string {
	return fmt.Sprintf("v-zone %d: write at %d: %d of %d blocks written before the failure: %v", e.VZone, e.Offset, e.Written, e.Requested, e.Err)
}
func (e *WriteError) Unwrap() error { return e.Err }

// Write writes data at off, which must be the v-zone's write pointer (or,
// after TLOpen, at or above it). When the write pointer reaches the end of
// the current stripe group the next group is allocated through the arbiter.
func (v *VZone) Write(ctx context.Context, off uint64, data []byte) error {
	v.wmu.Lock()
	defer v.wmu.Unlock()
	return v.write(ctx, off, data, false)
}

// WriteFUA is Write with forced unit access: every device request carries
// the FUA flag, so the data is on stable media when WriteFUA returns without
// a Flush round trip afterwards.
func (v *VZone) WriteFUA(ctx context.Context, off uint64, data []byte) error {
	v.wmu.Lock()
	defer v.wmu.Unlock()
	return v.write(ctx, off, data, true)
}

// WriteVec is Write (WriteFUA with fua) of the buffers of bufs back to back,
// of any lengths (the total whole blocks): each stripe leg goes to its node
// as the parts of bufs it covers, without gathering them into one buffer
// (a file system writes back its cached pages this way). bufs are read
// until WriteVec returns, and may be read by an abandoned earlier attempt
// after that (see writeBlocks): they must not change.
func (v *VZone) WriteVec(ctx context.Context, off uint64, bufs [][]byte, fua bool) error {
	v.wmu.Lock()
	defer v.wmu.Unlock()
	return v.writeP(ctx, off, newPayload(bufs), fua)
}

// Append writes data at the write pointer and returns the offset it wrote at.
func (v *VZone) Append(ctx context.Context, data []byte) (uint64, error) {
	v.wmu.Lock()
	defer v.wmu.Unlock()
	if err := v.ensureLayout(ctx); err != nil {
		return 0, err
	}
	wp, err := v.writePointer(ctx)
	if err != nil {
		return 0, err
	}
	return wp, v.write(ctx, wp, data, false)
}

func (v *VZone) write(ctx context.Context, off uint64, data []byte, fua bool) error {
	return v.writeP(ctx, off, newPayload([][]byte{data}), fua)
}

func (v *VZone) writeP(ctx context.Context, off uint64, data payload, fua bool) error {
	start := time.Now()
	if err := v.ensureLayout(ctx); err != nil {
		return err
	}
	base := ctx // the revision is added per stripe group: allocating one raises it
	ctx = v.withRev(ctx)
	bs, err := v.blockSize(ctx)
	if err != nil {
		return err
	}
	if data.size == 0 || uint64(data.size)%bs != 0 {
		return &zerr.InvalidArgumentError{Field: "data", Reason: fmt.Sprintf("%d bytes is not a positive multiple of the %d-byte block", data.size, bs)}
	}
	n := uint64(data.size) / bs
	wp, err := v.writePointer(ctx)
	if err != nil {
		return err
	}
	v.mu.Lock()
	tl := v.tl
	capacity := v.layout.GetCapacity()
	state := v.layout.GetState()
	v.mu.Unlock()
	if state == v1.VZoneState_VZONE_STATE_FULL {
		return &zerr.ZoneStateError{Zone: v.id, State: "full", Op: "write"}
	}
	if off != wp && !(tl && off > wp) {
		return &zerr.WritePointerError{Zone: v.id, Expected: wp, Got: off}
	}
	if off+n > capacity {
		return &zerr.ZoneFullError{Zone: v.id, Capacity: capacity}
	}
	if tl {
		if err := v.tlCheck(off, n); err != nil {
			return err // before any leg is sent: nothing changes
		}
	}
	done := uint64(0)
	moved := 0 // layout refreshes after the arbiter moved the group under this write
	for done < n {
		cur := off + done
		gen := v.generation() // of the layout this attempt writes through
		g, err := v.groupFor(ctx, cur)
		if err != nil {
			return &WriteError{VZone: v.id, Offset: off, Written: done, Requested: n, Err: err}
		}
		chunk := min(n-done, g.start+g.capacity-cur)
		got, err := v.writeGroup(v.withRev(base), g, cur, data, int(done*bs), chunk, bs, fua)
		if err != nil && got == 0 && moved < maxLayoutMoves && v.layoutMoved(ctx, err, gen, cur, tl) {
			// Nothing of this group landed where the layout now has it: a
			// reclaim of an idle namespace (eZNS) moved the group's data to
			// other zones and revoked the old ones. Write again through the
			// new layout. Legs that a node still took on an old zone are
			// lost with that zone's reset; the new one holds the copy.
			moved++
			continue
		}
		done += got
		v.mu.Lock()
		if err != nil {
			v.wpKnown = false // re-derive from the devices next time
		} else {
			v.wp = cur + chunk
		}
		if tl {
			v.tlMark(cur, got)
		}
		v.wpSeq++
		v.mu.Unlock()
		if err != nil {
			// A write attempt is activity too: a reclaim whose sealed
			// zones refused it (UNAVAILABLE) gives up at the report
			// instead of making the writer wait for its copy.
			v.reportActivity(done)
			return &WriteError{VZone: v.id, Offset: off, Written: done, Requested: n, Err: err}
		}
	}
	v.c.m.ops.WithLabelValues("write").Inc()
	v.c.m.bytes.WithLabelValues("write").Add(float64(data.size))
	v.c.m.latency.WithLabelValues("write").Observe(time.Since(start).Seconds())
	v.reportActivity(n)
	return nil
}

// maxLayoutMoves bounds the layout refreshes of one write: a group moved
// again and again means something else is wrong.
const maxLayoutMoves = 3

// layoutMoved reports, after a write at cur through the layout of
// generation gen landed nothing and failed with err, whether the arbiter had
// moved the v-zone's layout under it (the nodes refuse zones no longer
// granted, or a stale revision): it refreshes the layout and re-derives the
// write pointer, and says yes only when the layout is another generation now
// (a concurrent read may have refreshed it already) and the v-zone still
// expects the write at cur (any offset past the pointer in threaded
// logging).
func (v *VZone) layoutMoved(ctx context.Context, err error, gen, cur uint64, tl bool) bool {
	if !v.movedSince(ctx, err, gen) {
		return false
	}
	v.mu.Lock()
	v.wpKnown = false
	v.mu.Unlock()
	wp, werr := v.writePointer(ctx)
	if werr != nil {
		return false
	}
	v.c.log.Info("v-zone layout moved under a write (reclaim): writing through the new one", "vzone", v.id, "offset", cur, "generation", gen)
	return wp == cur || tl && cur > wp
}

// movedSince reports whether a call through the layout of generation gen
// that failed with err was refused because the arbiter moved the layout
// (the nodes refuse zones no longer granted, or a stale revision): it then
// refreshes the layout and says whether it is another generation now (a
// concurrent caller may have refreshed it already). The same layout means
// the refusal was no move.
func (v *VZone) movedSince(ctx context.Context, err error, gen uint64) bool {
	if !errors.Is(err, zerr.ErrNotOwner) && !errors.Is(err, zerr.ErrStaleLayout) {
		return false
	}
	return v.refresh(ctx) == nil && v.generation() != gen
}

// generation is the cached layout's generation.
func (v *VZone) generation() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.layout.GetGeneration()
}

// activityTimeout bounds one activity report: it is advisory (the arbiter
// uses it to pick v-zones to reclaim), so a failover simply skips reports.
const activityTimeout = 2 * time.Second

// reportActivity tells the arbiter the namespace wrote or tried to (for
// reclaim), at most once a second and at most one report in flight. It is fire-and-forget: the
// report runs on its own goroutine with its own deadline, so the write path
// never waits for the control plane (DESIGN §1), not even during a failover.
func (v *VZone) reportActivity(n uint64) {
	c := v.c
	if c.direct || c.bg == nil {
		return
	}
	c.mu.Lock()
	c.activityBlocks += n
	due := !c.activityBusy && !c.closed && time.Since(c.lastActivity) > time.Second
	blocks := c.activityBlocks
	if due {
		c.lastActivity, c.activityBusy, c.activityBlocks = time.Now(), true, 0
	}
	c.mu.Unlock()
	if !due {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(c.bg, activityTimeout)
		defer cancel()
		_, err := arbiterCall(ctx, c, "report activity", func(ctx context.Context, a v1.ArbiterClient) (*v1.ReportActivityResponse, error) {
			return a.ReportActivity(ctx, &v1.ReportActivityRequest{Namespace: c.cfg.Namespace, BlocksWritten: blocks})
		})
		c.mu.Lock()
		c.activityBusy = false
		c.mu.Unlock()
		c.m.activity.WithLabelValues(outcome(err)).Inc()
		if err != nil {
			c.log.Debug("report activity", "err", err)
		}
	}()
}

func outcome(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// groupFor returns the stripe group holding offset off, allocating stripe
// groups through the arbiter until one does.
func (v *VZone) groupFor(ctx context.Context, off uint64) (*group, error) {
	for attempts := 0; attempts < 64; attempts++ {
		l, groups := v.snapshot()
		for _, g := range groups {
			if off >= g.start && off < g.start+g.capacity {
				return g, nil
			}
		}
		if off >= l.GetCapacity() {
			return nil, &zerr.ZoneFullError{Zone: v.id, Capacity: l.GetCapacity()}
		}
		if l.GetThreadedLogging() {
			// Threaded logging covers the stripe groups allocated before it.
			return nil, &zerr.ZoneFullError{Zone: v.id, Capacity: v.allocatedEnd()}
		}
		nl, err := arbiterCall(ctx, v.c, "next stripe group", func(ctx context.Context, a v1.ArbiterClient) (*v1.VZone, error) {
			return a.NextStripeGroup(ctx, &v1.VZoneRequest{Namespace: v.c.cfg.Namespace, Id: v.id})
		})
		if err != nil {
			return nil, err
		}
		v.setLayout(nl)
	}
	return nil, &zerr.UnavailableError{What: "arbiter", Reason: "no stripe group covers the write after 64 allocations"}
}

// writeGroup writes [off, off+n) of one group, the bytes of data from at:
// one request per physical zone, all in parallel (the last on the caller's
// goroutine, so a write of one leg starts none). It returns the contiguous
// prefix that landed.
func (v *VZone) writeGroup(ctx context.Context, g *group, off uint64, data payload, at int, n, bs uint64, fua bool) (uint64, error) {
	if g.parity {
		return v.writeParity(ctx, g, off, data.flat(at, at+int(n*bs)), bs, fua)
	}
	legs := g.legs(off, n)
	errs := make([]error, len(legs))
	one := func(li int, l *leg) {
		// The leg's stripe units are sent as they lie in data, without
		// gathering them (the codec of pkg/wire frames the buffers back to
		// back; the node writes them with one pwritev).
		var bufs [][]byte
		for _, p := range l.pieces {
			lo := at + int((p.voff-off)*bs)
			bufs = data.cut(bufs, lo, lo+int(p.n*bs))
		}
		errs[li] = v.writeCopies(ctx, g, l.idx, l.zoff, bufs, bs, fua)
	}
	var wg sync.WaitGroup
	for li, l := range legs[:len(legs)-1] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			one(li, l)
		}()
	}
	one(len(legs)-1, legs[len(legs)-1])
	wg.Wait()
	prefix := off + n
	var first error
	for li, err := range errs {
		if err != nil {
			if first == nil {
				first = err
			}
			prefix = min(prefix, legs[li].pieces[0].voff)
		}
	}
	return prefix - off, first
}

// writeLeg writes buf (its buffers back to back) at zone offset zoff of z.
// A retried write whose first attempt landed but whose answer was lost is
// recognized by the write pointer.
func (v *VZone) writeLeg(ctx context.Context, z pzone, zoff uint64, buf [][]byte, bs uint64, fua bool) error {
	d, err := v.c.device(ctx, z)
	if err != nil {
		return err
	}
	lba := uint64(z.zone)*d.zoneSize + zoff
	blocks := uint64(bufLen(buf)) / bs
	attempt := 0
	_, err = nodeCall(ctx, v.c, z.node, z.addr, "write", func(ctx context.Context, n v1.ZonedDeviceClient) (struct{}, error) {
		attempt++
		err := writeBlocks(ctx, n, z.dev, lba, buf, fua)
		if attempt > 1 && errors.Is(err, zerr.ErrTLViolation) && v.tlLanded(ctx, n, z, d, lba+blocks) {
			err = nil // threaded logging: the earlier attempt landed (the write pointer is past it)
			if fua {
				_, err = n.Flush(ctx, &v1.FlushRequest{Device: z.dev})
			}
			return struct{}{}, err
		}
		var wp *zerr.WritePointerError
		if attempt > 1 && errors.As(err, &wp) && wp.Got == lba && wp.Expected == lba+blocks {
			if fua { // the earlier attempt landed; make it durable as asked
				_, err = n.Flush(ctx, &v1.FlushRequest{Device: z.dev})
				return struct{}{}, err
			}
			return struct{}{}, nil // the earlier attempt landed
		}
		return struct{}{}, err
	})
	if err != nil && errors.Is(err, zerr.ErrWritePointer) && v.isTL() {
		// The drive ended threaded logging on this zone by itself (a node
		// restart finishes it on reopen): open it again and write once more.
		return v.tlResume(ctx, z, d, zoff, buf, bs, fua, err)
	}
	return err
}

// writeBlocks sends one write of buf's buffers back to back: unary up to
// the node's limit, streamed above it. Buffers go to the transport as they
// are (the codec frames several as one bytes field); the caller must not
// change them until the write returned — and, since the transport may
// still be sending an abandoned attempt, should not reuse them for other
// data before a write of them succeeded (see pkg/bufpool).
func writeBlocks(ctx context.Context, n v1.ZonedDeviceClient, dev uint32, lba uint64, buf [][]byte, fua bool) error {
	data := newPayload(buf)
	size := data.size
	nc, vec := n.(nodeConn)
	if !vec && len(buf) > 1 {
		buf = [][]byte{data.flat(0, size)} // (not a connection of this client's)
		data = newPayload(buf)
	}
	if size <= wire.MaxUnaryData {
		req := &v1.WriteRequest{Device: dev, Lba: lba, Fua: fua}
		if len(buf) == 1 {
			req.Data = buf[0]
			_, err := n.Write(ctx, req)
			return err
		}
		return nc.cc.Invoke(ctx, v1.ZonedDevice_Write_FullMethodName, &wire.WriteChunk{Req: req, Payload: sliceBuffers(buf)}, new(v1.WriteResponse), grpc.StaticMethod())
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := n.WriteStream(ctx)
	if err != nil {
		return err
	}
	const piece = 1 << 20
	for off := 0; off < size; off += piece {
		req := &v1.WriteRequest{}
		if off == 0 {
			req.Device, req.Lba, req.TotalBlocks, req.Fua = dev, lba, uint32(size/4096), fua
		}
		part := data.cut(nil, off, min(off+piece, size))
		if len(part) == 1 {
			req.Data = part[0]
			err = s.Send(req)
		} else {
			err = s.SendMsg(&wire.WriteChunk{Req: req, Payload: sliceBuffers(part)})
		}
		if err != nil {
			break // the status comes from CloseAndRecv
		}
	}
	_, err = s.CloseAndRecv()
	return err
}

// bufLen is the bytes of bufs in all.
func bufLen(bufs [][]byte) int {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	return n
}

// payload is a write's data: buffers back to back (a caller's one slice, or
// a file system's cached pages), with the end offset of each for cutting
// stripe units out of it by binary search.
type payload struct {
	bufs [][]byte
	ends []int // ends[i]: offset just past bufs[i]
	size int
}

func newPayload(bufs [][]byte) payload {
	p := payload{bufs: bufs, ends: make([]int, len(bufs))}
	for i, b := range bufs {
		p.size += len(b)
		p.ends[i] = p.size
	}
	return p
}

// cut appends bytes [from, to) of p to dst, as parts of p's buffers.
func (p payload) cut(dst [][]byte, from, to int) [][]byte {
	i := sort.SearchInts(p.ends, from+1) // first buffer ending past from
	for ; i < len(p.bufs) && from < to; i++ {
		start := p.ends[i] - len(p.bufs[i])
		lo, hi := from-start, min(to, p.ends[i])-start
		if lo < hi {
			dst = append(dst, p.bufs[i][lo:hi])
		}
		from = p.ends[i]
	}
	return dst
}

// flat returns bytes [from, to) of p as one slice: a part of one buffer, or
// a copy.
func (p payload) flat(from, to int) []byte {
	parts := p.cut(nil, from, to)
	if len(parts) == 1 {
		return parts[0]
	}
	out := make([]byte, 0, to-from)
	for _, b := range parts {
		out = append(out, b...)
	}
	return out
}

// sliceBuffers wraps bufs for the codec without copying. (Pointers into one
// array: a SliceBuffer value stored in the interface would be one
// allocation per buffer, per cached page of a write-back.)
func sliceBuffers(bufs [][]byte) mem.BufferSlice {
	arr := make([]mem.SliceBuffer, len(bufs))
	out := make(mem.BufferSlice, len(bufs))
	for i, b := range bufs {
		arr[i] = b
		out[i] = &arr[i]
	}
	return out
}

// Read reads n blocks at off. Blocks never written read as zeroes.
func (v *VZone) Read(ctx context.Context, off, n uint64) ([]byte, error) {
	if err := v.ensureLayout(ctx); err != nil {
		return nil, err
	}
	bs, err := v.blockSize(ctx)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, &zerr.InvalidArgumentError{Field: "blocks", Reason: "must be at least 1"}
	}
	l, _ := v.snapshot()
	if off >= l.GetCapacity() || n > l.GetCapacity()-off {
		return nil, &zerr.OutOfRangeError{LBA: off, Count: n, Limit: l.GetCapacity()}
	}
	out := make([]byte, n*bs)
	if err := v.ReadInto(ctx, off, out); err != nil {
		return nil, err
	}
	return out, nil
}

// ReadInto fills buf (whole blocks) from off. The range splits into legs
// (one per physical zone it touches) and the legs into calls: one per node
// (ReadV with a range per leg, up to the unary limit; Read for one leg;
// ReadStream for a leg larger than that), all in parallel, the last on the
// caller's goroutine, so a read of one call starts no goroutine. The
// nodes' answers are copied straight from the receive buffers to their
// places in buf. A read refused because the arbiter moved the layout (a
// reclaim revoked the zones) is read again through the new layout.
func (v *VZone) ReadInto(ctx context.Context, off uint64, buf []byte) error {
	for moved := 0; ; moved++ {
		gen := v.generation()
		err := v.readInto(ctx, off, buf)
		if err == nil || moved == maxLayoutMoves || !v.movedSince(ctx, err, gen) {
			return err
		}
	}
}

func (v *VZone) readInto(ctx context.Context, off uint64, buf []byte) error {
	start := time.Now()
	if err := v.ensureLayout(ctx); err != nil {
		return err
	}
	ctx = v.withRev(ctx)
	bs, err := v.blockSize(ctx)
	if err != nil {
		return err
	}
	if len(buf) == 0 || uint64(len(buf))%bs != 0 {
		return &zerr.InvalidArgumentError{Field: "buffer", Reason: fmt.Sprintf("%d bytes is not a positive multiple of the %d-byte block", len(buf), bs)}
	}
	n := uint64(len(buf)) / bs
	l, groups := v.snapshot()
	if off >= l.GetCapacity() || n > l.GetCapacity()-off {
		return &zerr.OutOfRangeError{LBA: off, Count: n, Limit: l.GetCapacity()}
	}
	var parts []*group
	covered := uint64(0)
	for _, g := range groups {
		if lo, hi := max(off, g.start), min(off+n, g.start+g.capacity); lo < hi {
			parts = append(parts, g)
			covered += hi - lo
		}
	}
	if covered < n {
		clear(buf) // blocks of no stripe group yet were never written: zeroes
	}
	mirrored, parity := false, false
	for _, g := range parts {
		mirrored = mirrored || g.copies() > 1
		parity = parity || g.parity
	}
	if parity {
		err := v.readParity(ctx, parts, off, n, buf)
		if errors.Is(err, zerr.ErrUnavailable) && ctx.Err() == nil && v.refresh(ctx) == nil {
			// The arbiter may have rebuilt a lost leg on another node (a
			// new generation): a client that read around the lost node
			// never met an error that refreshes its layout, and with a
			// second node of the group down its old layout names two
			// unavailable zones. Read once more through the new layout.
			if nl, ngroups := v.snapshot(); nl.GetGeneration() != l.GetGeneration() {
				parts = parts[:0]
				for _, g := range ngroups {
					if lo, hi := max(off, g.start), min(off+n, g.start+g.capacity); lo < hi {
						parts = append(parts, g)
					}
				}
				err = v.readParity(ctx, parts, off, n, buf)
			}
		}
		if err != nil {
			return fmt.Errorf("v-zone %d: read %d blocks at %d: %w", v.id, n, off, err)
		}
		v.c.m.ops.WithLabelValues("read").Inc()
		v.c.m.bytes.WithLabelValues("read").Add(float64(len(buf)))
		v.c.m.latency.WithLabelValues("read").Observe(time.Since(start).Seconds())
		return nil
	}
	var refs []readLegRef
	for _, g := range parts {
		if mirrored {
			break // readMirrored picks the copies
		}
		lo, hi := max(off, g.start), min(off+n, g.start+g.capacity)
		for _, l := range g.legs(lo, hi-lo) {
			z := g.zones[l.idx]
			d, err := v.c.device(ctx, z)
			if err != nil {
				return fmt.Errorf("v-zone %d: read %d blocks at %d: %w", v.id, n, off, err)
			}
			refs = append(refs, readLegRef{g: g, l: l, z: z, lba: uint64(z.zone)*d.zoneSize + l.zoff, bs: d.bs})
		}
	}
	var first error
	if mirrored {
		first = v.readMirrored(ctx, parts, off, n, buf)
	} else if len(refs) > 0 {
		first = v.runCalls(ctx, planRead(refs), buf, off)
	}
	if first != nil {
		return fmt.Errorf("v-zone %d: read %d blocks at %d: %w", v.id, n, off, first)
	}
	v.c.m.ops.WithLabelValues("read").Inc()
	v.c.m.bytes.WithLabelValues("read").Add(float64(len(buf)))
	v.c.m.latency.WithLabelValues("read").Observe(time.Since(start).Seconds())
	return nil
}

// scatter copies a leg's bytes, as they arrive, to the places of its pieces
// in out (whose first block is v-zone offset base).
type scatter struct {
	l      *leg
	out    []byte
	base   uint64
	bs     uint64
	pi     int    // current piece
	at     uint64 // bytes of the current piece filled
	filled uint64 // bytes of the leg filled
}

func (s *scatter) write(p []byte) {
	for len(p) > 0 && s.pi < len(s.l.pieces) {
		pc := s.l.pieces[s.pi]
		dst := s.out[(pc.voff-s.base)*s.bs+s.at : (pc.voff-s.base+pc.n)*s.bs]
		k := copy(dst, p)
		p = p[k:]
		s.at += uint64(k)
		s.filled += uint64(k)
		if s.at == pc.n*s.bs {
			s.pi, s.at = s.pi+1, 0
		}
	}
	s.filled += uint64(len(p)) // more than asked: counted so the length check fails
}

// Finish finishes the v-zone: no more writes; its active resources return.
func (v *VZone) Finish(ctx context.Context) error {
	v.wmu.Lock()
	defer v.wmu.Unlock()
	if v.isTL() {
		return v.tlFinish(ctx)
	}
	_, groups := v.snapshot()
	if err := v.sealParity(v.withRev(ctx), groups); err != nil {
		return err
	}
	l, err := arbiterCall(ctx, v.c, "finish v-zone", func(ctx context.Context, a v1.ArbiterClient) (*v1.VZone, error) {
		return a.FinishVZone(ctx, &v1.VZoneRequest{Namespace: v.c.cfg.Namespace, Id: v.id})
	})
	if err != nil {
		return err
	}
	// Finish the physical zones of the groups that were open on the drives,
	// all in parallel: those of the layout the arbiter answered with, and
	// those of the cached one when it was older (a reclaim moved the group
	// to other zones: the cached zones are no longer granted, the new ones
	// are open on their drives and would keep the drives' active resources).
	installed := v.applyLayout(l, func() { v.wp, v.wpKnown = l.GetCapacity(), true })
	if installed {
		_, fresh := v.snapshot()
		if !sameZones(groups, fresh) {
			groups = append(groups, fresh...)
		}
	}
	ctx = v.withRev(ctx)
	errs := v.finishZones(ctx, groups)
	return errors.Join(errs...)
}

// sameZones says whether two group lists name the same physical zones.
func sameZones(a, b []*group) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i].zones) != len(b[i].zones) {
			return false
		}
		for j := range a[i].zones {
			if a[i].zones[j] != b[i].zones[j] {
				return false
			}
		}
	}
	return true
}

// finishZones finishes every physical zone of groups, all in parallel; a
// zone already full (or no longer granted) is no error.
func (v *VZone) finishZones(ctx context.Context, groups []*group) []error {
	var zones []pzone
	for _, g := range groups {
		zones = append(zones, g.zones...)
	}
	errs := make([]error, len(zones))
	var wg sync.WaitGroup
	for i, z := range zones {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := nodeCall(ctx, v.c, z.node, z.addr, "finish zone", func(ctx context.Context, n v1.ZonedDeviceClient) (*v1.ZoneManagementResponse, error) {
				return n.ZoneManagement(ctx, &v1.ZoneManagementRequest{Device: z.dev, Zone: z.zone, Action: v1.ZoneAction_ZONE_ACTION_FINISH})
			})
			if err != nil && !errors.Is(err, zerr.ErrZoneState) && !errors.Is(err, zerr.ErrNotOwner) {
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	return errs
}

// Reset empties the v-zone: the arbiter takes its physical zones back and
// the nodes reset them.
func (v *VZone) Reset(ctx context.Context) error { return v.reset(ctx, 0) }

// ResetIncarnation resets the v-zone only if it is still the opening
// incarnation (from OpenVZoneIncarnation): giving back a v-zone this process
// opened can never reset a later opening of the same id by another mount
// (the arbiter hands out the lowest empty id, often one just reset). A
// *zerr.StaleLayoutError says the v-zone is another opening now; nothing
// changed. Resetting an empty v-zone is a no-op.
func (v *VZone) ResetIncarnation(ctx context.Context, incarnation uint64) error {
	if incarnation == 0 {
		return &zerr.InvalidArgumentError{Field: "incarnation", Reason: "must be non-zero (0 resets unconditionally: use Reset)"}
	}
	return v.reset(ctx, incarnation)
}

func (v *VZone) reset(ctx context.Context, incarnation uint64) error {
	v.wmu.Lock()
	defer v.wmu.Unlock()
	v.parMu.Lock()
	v.par = parityState{} // the partial-parity logs are reset with the zones
	v.parMu.Unlock()
	if v.static { // no arbiter: reset the physical zones themselves
		_, groups := v.snapshot()
		for _, g := range groups {
			for _, z := range g.zones {
				_, err := nodeCall(ctx, v.c, z.node, z.addr, "reset zone", func(ctx context.Context, n v1.ZonedDeviceClient) (*v1.ZoneManagementResponse, error) {
					return n.ZoneManagement(ctx, &v1.ZoneManagementRequest{Device: z.dev, Zone: z.zone, Action: v1.ZoneAction_ZONE_ACTION_RESET})
				})
				if err != nil {
					return err
				}
			}
		}
		v.mu.Lock()
		v.wp, v.wpKnown, v.tl, v.tlValid = 0, true, false, nil
		v.wpSeq++
		v.mu.Unlock()
		return nil
	}
	v.mu.Lock()
	v.resetting++
	v.mu.Unlock()
	l, err := arbiterCall(ctx, v.c, "reset v-zone", func(ctx context.Context, a v1.ArbiterClient) (*v1.VZone, error) {
		return a.ResetVZone(ctx, &v1.VZoneRequest{Namespace: v.c.cfg.Namespace, Id: v.id, Incarnation: incarnation})
	})
	v.resetDone(l, err)
	return err
}

// resetDone ends an arbiter reset of the v-zone (one counted in
// v.resetting): with its answer l installed unless it failed or an
// OpenVZone returned this v-zone while the reset was in flight — the
// arbiter hands out only empty v-zones, so that open ran after the reset
// and its layout is the newer one.
func (v *VZone) resetDone(l *v1.VZone, err error) {
	v.mu.Lock()
	v.resetting--
	reopened := v.reopened
	if v.resetting == 0 {
		v.reopened = false
	}
	v.mu.Unlock()
	if err == nil && !reopened {
		v.applyLayout(l, func() { v.wp, v.wpKnown, v.tl = 0, true, false })
	}
}

// ResetRef names a v-zone to reset and, when Incarnation is non-zero, the
// opening it must still be (as VZone.ResetIncarnation).
type ResetRef struct {
	ID          uint64
	Incarnation uint64
}

// maxResetBatch is the most v-zones one ResetVZones call to the arbiter
// takes (the arbiter's limit).
const maxResetBatch = 64

// ResetVZones resets several v-zones of the namespace, as VZone.Reset (or
// ResetIncarnation) each, with one arbiter call per 64 of them: one state
// change at the arbiter instead of one per v-zone. A call is all or nothing
// at the arbiter; when one fails, every v-zone of that call is reset on its
// own instead, and the result holds each one's error (nil for those reset),
// in the order given. A v-zone named twice is reset once. A direct client
// (no arbiter) resets them one by one.
func (c *Client) ResetVZones(ctx context.Context, refs []ResetRef) []error {
	errs := make([]error, len(refs))
	if c.direct {
		for i, r := range refs {
			errs[i] = c.VZone(r.ID).reset(ctx, r.Incarnation)
		}
		return errs
	}
	// one entry per v-zone (the first asking), in id order: the writers'
	// locks are taken in that order
	first := map[uint64]int{}
	var uniq []int
	for i, r := range refs {
		if j, ok := first[r.ID]; ok {
			if refs[j].Incarnation == 0 || refs[j].Incarnation == r.Incarnation {
				continue // the same reset; its result is copied below
			}
		} else {
			first[r.ID] = i
		}
		uniq = append(uniq, i)
	}
	slices.SortStableFunc(uniq, func(a, b int) int { return cmp.Compare(refs[a].ID, refs[b].ID) })
	// (two different incarnations of one id: the second goes alone)
	var batch, alone []int
	seen := map[uint64]bool{}
	for _, i := range uniq {
		if seen[refs[i].ID] {
			alone = append(alone, i)
			continue
		}
		seen[refs[i].ID] = true
		batch = append(batch, i)
	}
	for len(batch) > 0 {
		n := min(len(batch), maxResetBatch)
		c.resetBatch(ctx, refs, batch[:n], errs)
		batch = batch[n:]
	}
	for _, i := range alone {
		errs[i] = c.VZone(refs[i].ID).reset(ctx, refs[i].Incarnation)
	}
	for i, r := range refs {
		if j := first[r.ID]; j != i && (refs[j].Incarnation == 0 || refs[j].Incarnation == r.Incarnation) {
			errs[i] = errs[j]
		}
	}
	return errs
}

// resetBatch is one ResetVZones call for refs[idx...] (distinct ids in
// ascending order); on failure each is reset on its own.
func (c *Client) resetBatch(ctx context.Context, refs []ResetRef, idx []int, errs []error) {
	vzs := make([]*VZone, len(idx))
	req := &v1.ResetVZonesRequest{Namespace: c.cfg.Namespace}
	for k, i := range idx {
		v := c.VZone(refs[i].ID)
		vzs[k] = v
		req.Vzones = append(req.Vzones, &v1.VZoneRequest{Id: refs[i].ID, Incarnation: refs[i].Incarnation})
		v.wmu.Lock()
		v.parMu.Lock()
		v.par = parityState{} // the partial-parity logs are reset with the zones
		v.parMu.Unlock()
		v.mu.Lock()
		v.resetting++
		v.mu.Unlock()
	}
	resp, err := arbiterCall(ctx, c, "reset v-zones", func(ctx context.Context, a v1.ArbiterClient) (*v1.ResetVZonesResponse, error) {
		return a.ResetVZones(ctx, req)
	})
	if err == nil && len(resp.GetVzones()) != len(idx) {
		err = &zerr.UnavailableError{What: "arbiter", Reason: fmt.Sprintf("ResetVZones answered %d layouts for %d v-zones", len(resp.GetVzones()), len(idx))}
	}
	for k, v := range vzs {
		var l *v1.VZone
		if err == nil {
			l = resp.GetVzones()[k]
		}
		v.resetDone(l, err)
		v.wmu.Unlock()
	}
	if err == nil {
		return
	}
	unimplemented := status.Code(errors.Unwrap(err)) == codes.Unimplemented || status.Code(err) == codes.Unimplemented
	if !unimplemented && (errors.Is(err, zerr.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil) {
		// the arbiter is unreachable past the retry deadline: one at a time
		// would only wait that long again for each
		for _, i := range idx {
			errs[i] = err
		}
		return
	}
	// All or nothing at the arbiter (or an arbiter without the call): find
	// out which one failed, and reset the others, by resetting each on its
	// own.
	for k, i := range idx {
		errs[i] = vzs[k].reset(ctx, refs[i].Incarnation)
	}
}

// Location is where a v-zone block lives.
type Location struct {
	Node   string `json:"node"`
	Addr   string `json:"addr"`
	Device uint32 `json:"device"`
	Zone   uint32 `json:"zone"`
	LBA    uint64 `json:"lba"`
	Chip   uint32 `json:"chip"`
}

// Locate tells on which node, device, zone and chip block off lives (for
// copyback-aware allocation: two blocks on one chip can be copied by copyback).
func (v *VZone) Locate(ctx context.Context, off uint64) (Location, error) {
	if err := v.ensureLayout(ctx); err != nil {
		return Location{}, err
	}
	_, groups := v.snapshot()
	for _, g := range groups {
		if off < g.start || off >= g.start+g.capacity {
			continue
		}
		i, zoff := g.locate(off)
		z := g.zones[i]
		d, err := v.c.device(ctx, z)
		if err != nil {
			return Location{}, err
		}
		lba := uint64(z.zone)*d.zoneSize + zoff
		return Location{Node: z.node, Addr: z.addr, Device: z.dev, Zone: z.zone, LBA: lba, Chip: chipOf(d.mapping, lba, z.zone)}, nil
	}
	return Location{}, &zerr.OutOfRangeError{LBA: off, Count: 1, Limit: v.allocatedEnd()}
}

func (v *VZone) allocatedEnd() uint64 {
	_, groups := v.snapshot()
	if len(groups) == 0 {
		return 0
	}
	g := groups[len(groups)-1]
	return g.start + g.capacity
}

// chipOf computes a chunk's chip from identify_mapping's bit fields.
func chipOf(m *v1.IdentifyMappingResponse, lba uint64, zone uint32) uint32 {
	var shift, chipLSB, chipW uint32
	for _, f := range m.GetFields() {
		switch f.GetName() {
		case "chunk_shift":
			shift = f.GetWidth()
		case "chip":
			chipLSB, chipW = f.GetLsb(), f.GetWidth()
		}
	}
	chunk := lba >> shift
	inFCG := uint32(chunk>>chipLSB) & (1<<chipW - 1)
	fcg := uint32(0)
	if m.GetFcgs() > 0 {
		fcg = zone % m.GetFcgs()
	}
	return fcg*m.GetDzone() + inFCG
}

// WritePointer returns the v-zone's write pointer (cached, or recovered from
// the drives).
func (v *VZone) WritePointer(ctx context.Context) (uint64, error) {
	if err := v.ensureLayout(ctx); err != nil {
		return 0, err
	}
	return v.writePointer(ctx)
}
