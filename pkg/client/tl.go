package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Threaded logging of a v-zone (ZNS+ §3.2.2) over the cluster.
//
// TLOpen asks the arbiter first (TLOpenVZone: the v-zone becomes an active
// v-zone of the namespace and its physical zones active on their devices,
// fenced by the layout generation the bitmap was computed from), then
// TL_opens every physical zone, all in parallel, each with its share of the
// bitmap (the stripe mapping is unchanged: v-zone block b lives where it
// always did). Writes may then start at any offset at or above the v-zone's
// write pointer whose blocks are all invalid; a write that touches a valid
// block is refused before any leg is sent (zerr.TLViolationError, nothing
// changes). Since v-zone offsets map monotonically onto each physical zone,
// increasing v-zone writes are increasing on every drive, which plugs the
// valid blocks a write skips. Reads need nothing special: below a zone's
// write pointer the drive serves the LogFBG (written or plugged), above it
// the original FBG, so every valid block reads right at every moment.
//
// A drive ends threaded logging by itself when its node restarts (the
// reopen plugs the rest and closes the zone). The client keeps the bitmap
// it opened with plus every block written since; the next write that finds
// such a zone (a WritePointerError from a zone that is no longer TL_opened)
// TL_opens it again with that bitmap and writes once more, so the file
// system sees nothing. Without that knowledge (threaded logging opened by
// another process) the write fails with a zerr.ZoneStateError. An empty
// physical zone (never written; it cannot be TL_opened) is written with
// zeros before the write's offset instead.
//
// Finish ends threaded logging on every physical zone first (the drives plug
// what is left and make the zones full), then tells the arbiter (FinishVZone),
// so the arbiter never counts a zone free while a drive still holds it open.

// TLOpen reopens the v-zone for threaded logging with valid (one bit per
// v-zone block, bit i%8 of byte i/8 is block i; set = must be preserved).
// valid must have (capacity+7)/8 bytes and mark only blocks below the write
// pointer (zerr.InvalidBitmapError otherwise, nothing changes). The arbiter
// answers zerr.TooManyOpenError when the namespace has max_active_vzones
// active already. Afterwards the write pointer is 0. When a drive fails its
// TL_open (no spare flash block group, or unreachable), the v-zone is
// finished again before TLOpen returns that error: full, as before the
// call, unless the rollback fails too (then the error says so and no longer
// matches the drive's refusal).
func (v *VZone) TLOpen(ctx context.Context, valid []byte, mode v1.PlugMode) error {
	v.wmu.Lock()
	defer v.wmu.Unlock()
	if err := v.refresh(ctx); err != nil {
		return err
	}
	if err := v.ensureLayout(ctx); err != nil {
		return err
	}
	l, groups := v.snapshot()
	for _, g := range groups {
		if g.redundant() {
			return mirroredError(v.id, "TL_open")
		}
	}
	capacity := l.GetCapacity()
	if uint64(len(valid)) != (capacity+7)/8 {
		return &zerr.InvalidBitmapError{Zone: v.id, Reason: fmt.Sprintf("has %d bytes, the v-zone needs %d", len(valid), (capacity+7)/8)}
	}
	if l.GetState() == v1.VZoneState_VZONE_STATE_EMPTY || len(groups) == 0 {
		return &zerr.ZoneStateError{Zone: v.id, State: "empty", Op: "TL_open"}
	}
	v.mu.Lock()
	already := v.tl
	v.mu.Unlock()
	if already {
		return &zerr.ZoneStateError{Zone: v.id, State: "open (TL_opened)", Op: "TL_open"}
	}
	wp, err := v.writePointer(v.withRev(ctx))
	if err != nil {
		return err
	}
	if l.GetState() == v1.VZoneState_VZONE_STATE_FULL {
		wp = v.allocatedEnd() // finished: every allocated block may hold data
	}
	for b := wp; b < uint64(len(valid))*8; b++ {
		if valid[b/8]&(1<<(b%8)) != 0 {
			return &zerr.InvalidBitmapError{Zone: v.id, Reason: fmt.Sprintf("marks block %d valid but the v-zone holds data only below %d", b, wp)}
		}
	}
	if !v.static {
		nl, err := arbiterCall(ctx, v.c, "TL_open v-zone", func(ctx context.Context, a v1.ArbiterClient) (*v1.VZone, error) {
			return a.TLOpenVZone(ctx, &v1.TLOpenVZoneRequest{Namespace: v.c.cfg.Namespace, Id: v.id, Generation: l.GetGeneration()})
		})
		if err != nil {
			return err
		}
		v.setLayout(nl)
		_, groups = v.snapshot()
	}
	v.mu.Lock()
	v.tl, v.tlMode, v.tlValid = true, mode, append([]byte(nil), valid...)
	v.wp, v.wpKnown = 0, true
	v.wpSeq++
	v.mu.Unlock()
	ctx = v.withRev(ctx)
	type job struct {
		g *group
		i int
	}
	var jobs []job
	for _, g := range groups {
		for i := range g.zones {
			jobs = append(jobs, job{g, i})
		}
	}
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for k, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = v.tlOpenZone(ctx, j.g, j.i, valid, mode, true)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		// The arbiter counts the v-zone in threaded logging and some
		// drives may have TL_opened their zone. Roll back: finish it again
		// (the drives that TL_opened plug their holes, nothing is written
		// in them yet; the others are full already), so that a refusal
		// (a drive with no spare flash block group, zerr.ErrNoResources)
		// leaves the v-zone as it was: full, every block where it was.
		// Without the rollback the caller, told "refused", took a fresh
		// zone while this v-zone stayed in threaded logging, and its next
		// TL_open found it so (a file system turned read-only under fio).
		if ferr := v.tlFinish(ctx); ferr != nil {
			// The v-zone's state is unknown: the error no longer reads as
			// a refusal (%v), only as what the rollback met.
			return fmt.Errorf("v-zone %d: TL_open failed (%v) and finishing it again failed: %w", v.id, err, ferr)
		}
		return fmt.Errorf("v-zone %d: TL_open (rolled back, the v-zone is full again): %w", v.id, err)
	}
	return nil
}

// zoneBitmap is the part of the v-zone bitmap valid that falls on zone i of g.
func zoneBitmap(g *group, i int, valid []byte, zoneCap uint64) []byte {
	perZone := g.capacity / uint64(g.width)
	bm := make([]byte, (zoneCap+7)/8)
	for zoff := uint64(0); zoff < perZone; zoff++ {
		vo := g.voff(i, zoff)
		if vo/8 < uint64(len(valid)) && valid[vo/8]&(1<<(vo%8)) != 0 {
			bm[zoff/8] |= 1 << (zoff % 8)
		}
	}
	return bm
}

// tlOpenZone TL_opens zone i of g. An empty zone is left alone (it holds
// nothing to preserve; writes pad it). With idempotent, a zone found already
// TL_opened counts as done (a retried TLOpen).
func (v *VZone) tlOpenZone(ctx context.Context, g *group, i int, valid []byte, mode v1.PlugMode, idempotent bool) error {
	z := g.zones[i]
	d, err := v.c.device(ctx, z)
	if err != nil {
		return err
	}
	bm := zoneBitmap(g, i, valid, d.zoneCap)
	_, err = nodeCall(ctx, v.c, z.node, z.addr, "tl_open", func(ctx context.Context, n v1.ZonedDeviceClient) (*v1.TLOpenResponse, error) {
		return n.TLOpen(ctx, &v1.TLOpenRequest{Device: z.dev, Zone: z.zone, ValidBitmap: bm, Mode: mode})
	})
	if err == nil || !errors.Is(err, zerr.ErrZoneState) {
		return err
	}
	zd, rerr := v.reportZone(ctx, z)
	if rerr != nil {
		return errors.Join(err, rerr)
	}
	switch {
	case zd.GetState() == v1.ZoneState_ZONE_STATE_EMPTY:
		return nil
	case zd.GetThreadedLogging() && idempotent:
		return nil
	}
	return err
}

// reportZone reports one physical zone.
func (v *VZone) reportZone(ctx context.Context, z pzone) (*v1.ZoneDescriptor, error) {
	rep, err := nodeCall(ctx, v.c, z.node, z.addr, "report zone", func(ctx context.Context, n v1.ZonedDeviceClient) (*v1.ReportZonesResponse, error) {
		return n.ReportZones(ctx, &v1.ReportZonesRequest{Device: z.dev, StartZone: z.zone, MaxZones: 1})
	})
	if err != nil {
		return nil, err
	}
	if len(rep.GetZones()) == 0 || rep.GetZones()[0].GetIndex() != z.zone {
		return nil, &NodeError{Node: z.node, Addr: z.addr, Op: "report zone", Err: &zerr.NotOwnerError{Zone: fmt.Sprintf("%s/%d/%d", z.node, z.dev, z.zone), Namespace: v.c.cfg.Namespace}}
	}
	return rep.GetZones()[0], nil
}

func (v *VZone) isTL() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.tl
}

// ThreadedLogging tells whether the v-zone is in threaded logging (as the
// cached layout says, or TLOpen of this client).
func (v *VZone) ThreadedLogging() bool { return v.isTL() }

// tlCheck refuses a threaded-logging write over a valid block.
func (v *VZone) tlCheck(off, n uint64) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.tlValid == nil {
		return nil // the drives check (another process opened threaded logging)
	}
	for b := off; b < off+n; b++ {
		if b/8 < uint64(len(v.tlValid)) && v.tlValid[b/8]&(1<<(b%8)) != 0 {
			return &zerr.TLViolationError{Zone: v.id, LBA: b, Reason: "block is marked valid (v-zone offset)"}
		}
	}
	return nil
}

// tlMark records [off, off+n) as written (to be preserved by a re-TL_open).
func (v *VZone) tlMark(off, n uint64) {
	if v.tlValid == nil {
		return
	}
	for b := off; b < off+n && b/8 < uint64(len(v.tlValid)); b++ {
		v.tlValid[b/8] |= 1 << (b % 8)
	}
}

// tlLanded tells whether zone z's write pointer is at or past end (an LBA):
// a retried threaded-logging write whose first attempt landed.
func (v *VZone) tlLanded(ctx context.Context, n v1.ZonedDeviceClient, z pzone, d *devInfo, end uint64) bool {
	rep, err := n.ReportZones(ctx, &v1.ReportZonesRequest{Device: z.dev, StartZone: z.zone, MaxZones: 1})
	if err != nil || len(rep.GetZones()) == 0 || rep.GetZones()[0].GetIndex() != z.zone {
		return false
	}
	return rep.GetZones()[0].GetWritePointer() >= end
}

// tlResume handles a WritePointerError of a threaded-logging write to zone
// z (cause): the zone is no longer TL_opened. Below its write pointer it is
// TL_opened again with the bitmap plus what was written since; above it the
// skipped (invalid) blocks are written as zeros with the data.
func (v *VZone) tlResume(ctx context.Context, z pzone, d *devInfo, zoff uint64, buf [][]byte, bs uint64, fua bool, cause error) error {
	zd, err := v.reportZone(ctx, z)
	if err != nil {
		return errors.Join(cause, err)
	}
	if zd.GetThreadedLogging() {
		return cause // a real write pointer error
	}
	zw := zd.GetWritePointer() - uint64(z.zone)*d.zoneSize
	lba := uint64(z.zone)*d.zoneSize + zoff
	v.mu.Lock()
	valid := append([]byte(nil), v.tlValid...)
	known := v.tlValid != nil
	mode := v.tlMode
	v.mu.Unlock()
	switch {
	case zw > zoff:
		if !known {
			return &zerr.ZoneStateError{Zone: v.id, State: fmt.Sprintf("threaded logging ended by the drive on %s/%d/%d", z.node, z.dev, z.zone), Op: "write"}
		}
		g, i := v.zoneOf(z)
		if g == nil {
			return cause
		}
		if err := v.tlOpenZone(ctx, g, i, valid, mode, false); err != nil {
			return errors.Join(cause, err)
		}
		v.c.m.retries.WithLabelValues("tl_reopen").Inc()
		v.c.log.Info("threaded logging resumed on a zone its drive had finished", "vzone", v.id, "node", z.node, "device", z.dev, "zone", z.zone)
	case zw < zoff:
		buf = append([][]byte{make([]byte, (zoff-zw)*bs)}, buf...)
		lba -= zoff - zw
	default:
		return cause
	}
	_, err = nodeCall(ctx, v.c, z.node, z.addr, "write", func(ctx context.Context, n v1.ZonedDeviceClient) (struct{}, error) {
		return struct{}{}, writeBlocks(ctx, n, z.dev, lba, buf, fua)
	})
	return err
}

// zoneOf finds the group and leg of physical zone z in the current layout.
func (v *VZone) zoneOf(z pzone) (*group, int) {
	_, groups := v.snapshot()
	for _, g := range groups {
		for i, x := range g.zones {
			if x.node == z.node && x.dev == z.dev && x.zone == z.zone {
				return g, i
			}
		}
	}
	return nil, 0
}

// tlFinish ends threaded logging: every physical zone is finished (the
// drives plug the rest), then the arbiter is told. Caller holds v.wmu.
func (v *VZone) tlFinish(ctx context.Context) error {
	_, groups := v.snapshot()
	if errs := v.finishZones(v.withRev(ctx), groups); errors.Join(errs...) != nil {
		return errors.Join(errs...) // still TL at the arbiter: a retried Finish does it all again
	}
	if v.static {
		v.mu.Lock()
		v.tl, v.tlValid, v.wpKnown = false, nil, false
		v.wpSeq++
		v.mu.Unlock()
		return nil
	}
	l, err := arbiterCall(ctx, v.c, "finish v-zone", func(ctx context.Context, a v1.ArbiterClient) (*v1.VZone, error) {
		return a.FinishVZone(ctx, &v1.VZoneRequest{Namespace: v.c.cfg.Namespace, Id: v.id})
	})
	if err != nil {
		return err
	}
	v.applyLayout(l, func() { v.wp, v.wpKnown = l.GetCapacity(), true })
	return nil
}
