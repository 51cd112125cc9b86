package zns

import (
	"context"
	"fmt"
	"time"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// tlState is the threaded-logging state of a TL_opened zone (ZNS+ §3.2.2).
// While TL_opened, zone.fbg is the LogFBG and orig the original FBG.
type tlState struct {
	orig    int
	mode    TLMode
	bitmap  []byte          // valid blocks (zone-relative), set = must be preserved
	plugged map[uint64]bool // chunks already copied into the LogFBG ahead of the WP (PPA-ordered)
}

func (t *tlState) valid(off uint64) bool { return t.bitmap[off/8]&(1<<(off%8)) != 0 }

// TLOpen opens a zone holding data for threaded logging: bitmap marks the
// valid blocks (bit i of byte i/8 = zone block i; one bit per block of the
// zone capacity). The device allocates a LogFBG, moves the write pointer back
// to the zone start; the host then writes invalid blocks in increasing LBA
// order and the device plugs the skipped valid blocks (LBA-ordered: right
// after each write; PPA-ordered: ahead of the write pointer when the chip is
// idle). Close, finish or set read-only make the LogFBG the zone's FBG.
func (d *Device) TLOpen(ctx context.Context, zoneIdx uint64, bitmap []byte, mode TLMode) (IOResult, error) {
	if err := d.checkWritable(); err != nil {
		return IOResult{}, err
	}
	if zoneIdx >= d.g.Zones {
		return IOResult{}, &zerr.OutOfRangeError{LBA: zoneIdx, Count: 1, Limit: d.g.Zones}
	}
	if mode > PPAOrdered {
		return IOResult{}, &zerr.InvalidArgumentError{Field: "mode", Reason: fmt.Sprintf("unknown TL mode %d", mode)}
	}
	need := (d.g.ZoneCap + 7) / 8
	if uint64(len(bitmap)) != need {
		return IOResult{}, &zerr.InvalidBitmapError{Zone: zoneIdx, Reason: fmt.Sprintf("has %d bytes, zone needs %d", len(bitmap), need)}
	}
	z := d.zones[zoneIdx]
	t0 := d.now()
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.tl != nil || z.compacting {
		return IOResult{}, &zerr.ZoneStateError{Zone: z.idx, State: z.state.String() + map[bool]string{true: " (TL_opened)", false: " (zone_compaction destination)"}[z.tl != nil], Op: "TL_open"}
	}
	switch z.state {
	case StateFull, StateClosed, StateImplicitOpen, StateExplicitOpen:
	default:
		return IOResult{}, d.stateErr(z, "TL_open")
	}
	for off := uint64(0); off < d.g.ZoneCap; off++ {
		if bitmap[off/8]&(1<<(off%8)) != 0 && off >= z.wp {
			return IOResult{}, &zerr.InvalidBitmapError{Zone: zoneIdx, Reason: fmt.Sprintf("marks block %d valid but the write pointer is at %d", z.start+off, z.start+z.wp)}
		}
	}
	for b := d.g.ZoneCap; b < need*8; b++ {
		if bitmap[b/8]&(1<<(b%8)) != 0 {
			return IOResult{}, &zerr.InvalidBitmapError{Zone: zoneIdx, Reason: "marks bits past the zone capacity"}
		}
	}
	// The LogFBG is a spare unless the zone holds no FBG (finished empty).
	extra := z.fbg >= 0
	undo := func() {
		if extra {
			d.dropLogFBG(z.fcg)
		}
	}
	if extra {
		if err := d.takeLogFBG(z.fcg); err != nil {
			return IOResult{}, err
		}
	}
	if err := d.zeroRange(z, z.fbg, z.wp, d.g.ZoneCap); err != nil {
		undo()
		return IOResult{}, err
	}
	logFBG, err := d.allocFBG(z.fcg)
	if err != nil {
		undo()
		return IOResult{}, err
	}
	from := z.state
	if err := d.setState(z, StateExplicitOpen); err != nil {
		_ = d.releaseFBG(z.fcg, logFBG, false)
		undo()
		return IOResult{}, err
	}
	_ = from
	d.releasePend(z)
	z.tl = &tlState{orig: z.fbg, mode: mode, bitmap: append([]byte(nil), bitmap...), plugged: map[uint64]bool{}}
	z.fbg = logFBG
	z.wp = 0
	z.gen++
	// IPU mappings move to the new generation first: a crash before the
	// zone record keeps the old generation and its mappings.
	for _, r := range d.zoneIPURecs(z) {
		if err := d.jappend(r.encode()); err != nil {
			return IOResult{}, err
		}
	}
	if err := d.journalZone(z); err != nil {
		return IOResult{}, err
	}
	if err := d.persistWP(z, z.wp); err != nil {
		return IOResult{}, err
	}
	done := t0
	if mode == LBAOrdered {
		t, err := d.plugForward(z, t0)
		if err != nil {
			return IOResult{}, err
		}
		done = max(done, t)
		if err := d.persistWP(z, z.wp); err != nil {
			return IOResult{}, err
		}
	} else if err := d.ppaPlug(z, t0); err != nil {
		return IOResult{}, err
	}
	if d.model == nil {
		return IOResult{}, nil
	}
	res := IOResult{Submitted: t0, Completed: done}
	return res, nil
}

// tlWrite is a sparse sequential overwrite. Caller holds z.mu.
func (d *Device) tlWrite(z *zone, off uint64, data iov, fl Flags, t0 time.Duration) (IOResult, error) {
	n := uint64(data.len() / d.g.BlockSize)
	if z.state == StateFull {
		return IOResult{}, &zerr.ZoneFullError{Zone: z.idx, Capacity: d.g.ZoneCap}
	}
	if off < z.wp {
		return IOResult{}, &zerr.TLViolationError{Zone: z.idx, LBA: z.start + off, Reason: fmt.Sprintf("below the write pointer %d", z.start+z.wp)}
	}
	if off+n > d.g.ZoneCap {
		return IOResult{}, &zerr.ZoneFullError{Zone: z.idx, Capacity: d.g.ZoneCap}
	}
	for o := off; o < off+n; o++ {
		if z.tl.valid(o) {
			return IOResult{}, &zerr.TLViolationError{Zone: z.idx, LBA: z.start + o, Reason: "block is marked valid"}
		}
	}
	if err := d.openForWrite(z, false); err != nil {
		return IOResult{}, err
	}
	plugDone, err := d.plugRange(z, z.wp, off, t0, false, true)
	if err != nil {
		return IOResult{}, err
	}
	if err := d.writePhys(z, z.fbg, off, data); err != nil {
		return IOResult{}, err
	}
	for o := off; o < off+n; o++ {
		d.dropIPUAt(z, o)
	}
	res := d.writeTiming(z, off, n, t0, fl.FUA, false)
	oldWP := z.wp
	z.wp = off + n
	if z.tl.mode == LBAOrdered {
		t, err := d.plugForward(z, t0)
		if err != nil {
			z.wp = oldWP
			return IOResult{}, err
		}
		plugDone = max(plugDone, t)
	}
	if err := d.persistWP(z, z.wp); err != nil {
		z.wp = oldWP // the zone is read-only now, at the old write pointer
		return IOResult{}, err
	}
	d.st.hostW.Add(n)
	// A cached write completes at write-cache admission, as a normal write
	// does: the plugged blocks in front of it are the drive's own copies,
	// programmed ahead of it on their chips (the chip model orders them), so
	// the host waits for them only when it asked for durability (FUA) or
	// the drive has no write cache.
	if d.model != nil && (fl.FUA || d.conf().WriteCacheBytes == 0) {
		res.Completed = max(res.Completed, plugDone)
	}
	if z.wp == d.g.ZoneCap {
		if err := d.tlFinalize(z); err != nil {
			return IOResult{}, err
		}
		_ = d.setState(z, StateFull)
		d.releasePend(z)
		return res, d.journalZone(z)
	}
	if z.tl.mode == PPAOrdered {
		if err := d.ppaPlug(z, d.now()); err != nil {
			return IOResult{}, err
		}
	}
	return res, nil
}

// plugForward plugs the run of valid blocks at the write pointer and moves
// the write pointer past it (LBA-ordered plugging).
func (d *Device) plugForward(z *zone, t0 time.Duration) (time.Duration, error) {
	end := z.wp
	for end < d.g.ZoneCap && z.tl.valid(end) {
		end++
	}
	if end == z.wp {
		return t0, nil
	}
	t, err := d.plugRange(z, z.wp, end, t0, false, false)
	if err != nil {
		return 0, err
	}
	z.wp = end
	return t, nil
}

// plugRange copies the valid blocks of [a, b) into the LogFBG (skipping
// chunks already plugged ahead), chunk by chunk: a fully valid chunk by
// copyback, otherwise read and program. background selects the statistic;
// zeroInvalid zero-fills the skipped invalid blocks (they end up below the
// write pointer). With sink != nil the flash work is appended to *sink
// instead of being booked from t0.
func (d *Device) plugRange(z *zone, a, b uint64, t0 time.Duration, background, zeroInvalid bool, sink ...*[]piece) (time.Duration, error) {
	var sk *[]piece
	if len(sink) > 0 {
		sk = sink[0]
	}
	cb := uint64(d.g.ChunkBlocks)
	done := t0
	for c := a / cb; c*cb < b; c++ {
		lo, hi := max(a, c*cb), min(b, (c+1)*cb)
		if z.tl.plugged[c] {
			continue
		}
		var offs []uint64
		for o := lo; o < hi; o++ {
			if z.tl.valid(o) {
				offs = append(offs, o)
			} else if zeroInvalid {
				if err := d.zeroRange(z, z.fbg, o, o+1); err != nil {
					return 0, err
				}
			}
		}
		if len(offs) == 0 {
			continue
		}
		full := lo == c*cb && hi == (c+1)*cb && uint64(len(offs)) == cb
		t, err := d.plugChunk(z, c, offs, full, t0, sk)
		if err != nil {
			return 0, err
		}
		if full {
			z.tl.plugged[c] = true
		}
		done = max(done, t)
		if background {
			d.st.plugBG.Add(uint64(len(offs)))
		} else {
			d.st.plugDemand.Add(uint64(len(offs)))
		}
	}
	return done, nil
}

// plugChunk copies the listed valid blocks of chunk c from their current
// place into the LogFBG. Caller holds z.mu.
func (d *Device) plugChunk(z *zone, c uint64, offs []uint64, full bool, t0 time.Duration, sink *[]piece) (time.Duration, error) {
	bs := d.g.BlockSize
	buf := make([]byte, bs)
	src0 := d.locate(z, offs[0])
	dst0 := d.flashLoc(z, z.fbg, offs[0])
	useCB := full && src0.kind == srcFlash
	if useCB {
		for i, o := range offs {
			l := d.locate(z, o)
			if l.kind != srcFlash || l.off != src0.off+int64(i*bs) {
				useCB = false
				break
			}
		}
	}
	if useCB {
		useCB = d.copybackAllowed(src0, dst0)
	}
	for _, o := range offs {
		l := d.locate(z, o)
		if l.kind == srcZero {
			clear(buf)
		} else if _, err := d.f.ReadAt(buf, l.off); err != nil {
			err = d.readFail(z, err)
			return 0, err
		}
		if _, err := d.f.WriteAt(buf, d.flashLoc(z, z.fbg, o).off); err != nil {
			return 0, d.zoneFail(z, "plug", err)
		}
	}
	d.st.nandProg.Add(1)
	p := piece{cb: useCB, dst: dst0.chip}
	if useCB {
		d.st.cbChunks.Add(1)
		d.st.plugCB.Add(uint64(len(offs)))
	} else {
		d.st.rpBlocks.Add(uint64(len(offs)))
		d.st.nandRead.Add(1)
		p.reads = []pread{{src0.chip, len(offs)}}
	}
	if d.model == nil {
		return 0, nil
	}
	if sink != nil {
		*sink = append(*sink, p)
		return t0, nil
	}
	return d.bookPiece(t0, p), nil
}

// copybackAllowed applies the chip rule and the consecutive-copyback
// threshold, and updates the destination page's chain count.
func (d *Device) copybackAllowed(src, dst bloc) bool {
	if src.chip != dst.chip || d.conf().DisableCopyback {
		return false
	}
	si := d.pageIndex(src.chip, src.fbg, src.page)
	di := d.pageIndex(dst.chip, dst.fbg, dst.page)
	k := d.cbCount[si].Load()
	if th := d.conf().CopybackThreshold; th > 0 && int(k) >= th {
		d.cbCount[di].Store(0)
		return false
	}
	d.cbCount[di].Store(k + 1)
	return true
}

// ppaPlug copies, in the background, fully valid chunks ahead of the write
// pointer whose lower pages on the same chip are already programmed, while
// the target chip is idle (PPA-ordered plugging).
func (d *Device) ppaPlug(z *zone, t time.Duration) error {
	cb := uint64(d.g.ChunkBlocks)
	D := uint64(d.g.DZone)
	nchunks := d.g.ZoneCap / cb
	first := (z.wp + cb - 1) / cb
	for ch := uint64(0); ch < D; ch++ {
		// first chunk on this chip at or after the WP chunk
		c := first - first%D + ch
		if c < first {
			c += D
		}
		for ; c < nchunks; c += D {
			if z.tl.plugged[c] {
				continue
			}
			if c >= D {
				p := c - D
				if !z.tl.plugged[p] && (p+1)*cb > z.wp {
					break // a lower page of this flash block is not programmed yet
				}
			}
			allValid := true
			for o := c * cb; o < (c+1)*cb; o++ {
				if !z.tl.valid(o) {
					allValid = false
					break
				}
			}
			if !allValid {
				break
			}
			chip := z.fcg*d.g.DZone + int(ch)
			if d.model != nil && !d.model.ChipIdle(t, chip) {
				break
			}
			if _, err := d.plugRange(z, c*cb, (c+1)*cb, t, true, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// tlRecover re-plugs, after a restart, every valid block below the
// persisted write pointer of a TL zone: the slot may have reached the disk
// while the plugged copies did not (they are not synced before it), and the
// original FBG still holds them. Host-written (invalid) blocks are left
// alone. Caller holds z.mu; Open only.
func (d *Device) tlRecover(z *zone) error {
	hw := z.wp
	z.wp = 0 // locate now reads valid blocks from the original FBG (or IPU)
	_, err := d.plugRange(z, 0, hw, d.now(), false, false)
	z.wp = hw
	return err
}

// tlFinalize ends threaded logging: every valid block not yet in the LogFBG
// is plugged, the LogFBG becomes the zone's FBG and the original FBG is
// erased. The write pointer moves past the last valid block; skipped invalid
// blocks below it read as zeros. Caller holds z.mu.
func (d *Device) tlFinalize(z *zone) error {
	t := d.now()
	last := z.wp
	for o := z.wp; o < d.g.ZoneCap; o++ {
		if z.tl.valid(o) {
			last = o + 1
		}
	}
	// The plugging is booked piece by piece in the background (sched.go):
	// nobody waits for it, and user I/O on its chips interleaves with it.
	var pieces []piece
	if _, err := d.plugRange(z, z.wp, last, t, false, true, &pieces); err != nil {
		return err
	}
	// The original FBG is erased once the plugging that reads it has ended.
	fcg := z.fcg
	eraseOrig := false
	defer func() {
		d.startJob(t, pieces, func(end time.Duration) {
			if eraseOrig {
				d.bookErase(fcg, end)
			}
		})
	}()
	// The plugged copies must be durable before the journal says the
	// original FBG is gone.
	if err := d.f.Datasync(); err != nil {
		return d.deviceFail("fdatasync data file", err)
	}
	orig := z.tl.orig
	z.tl = nil
	if orig >= 0 {
		d.dropLogFBG(z.fcg)
	}
	z.wp = last
	z.gen++
	d.dropIPU(z)
	if err := d.journalZone(z); err != nil {
		return err
	}
	if err := d.persistWP(z, z.wp); err != nil {
		return err
	}
	if err := d.releaseFBGAt(z.fcg, orig, true, -2); err != nil {
		return err
	}
	eraseOrig = true
	return nil
}
