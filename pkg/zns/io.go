package zns

import (
	"context"
	"fmt"
	"time"

	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/vfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

type srcKind uint8

const (
	srcZero srcKind = iota
	srcFlash
	srcIPU
)

// bloc is where the current data of one block lives.
type bloc struct {
	kind srcKind
	off  int64 // file offset
	chip int
	page int
	fbg  int
}

func (d *Device) flashLoc(z *zone, fbg int, off uint64) bloc {
	l := d.g.Locate(z.fcg, off)
	return bloc{kind: srcFlash, off: d.lay.off(l.Chip, fbg, l.Page, l.Sub), chip: l.Chip, page: l.Page, fbg: fbg}
}

func (d *Device) ipuLoc(z *zone, off uint64, s uint32) bloc {
	return bloc{kind: srcIPU, off: d.lay.ipuBase + int64(s)*int64(d.g.BlockSize), chip: d.g.ChipOfLBA(z.start + off), page: -1}
}

// locate finds the current data of zone-relative block off. Caller holds z.mu.
// Below the write pointer: IPU region, else the zone's FBG (the LogFBG of a
// TL zone). At or above it: zeros, except in a TL zone where the blocks not yet
// overwritten still live in the original FBG.
func (d *Device) locate(z *zone, off uint64) bloc {
	if z.tl != nil && off < z.wp {
		if z.fbg < 0 {
			return bloc{}
		}
		return d.flashLoc(z, z.fbg, off)
	}
	if s, ok := z.ipuLookup(off, d.g.ChunkBlocks); ok {
		return d.ipuLoc(z, off, s)
	}
	if z.tl != nil {
		if z.tl.orig < 0 {
			return bloc{}
		}
		return d.flashLoc(z, z.tl.orig, off)
	}
	if off >= z.wp || z.fbg < 0 {
		return bloc{}
	}
	return d.flashLoc(z, z.fbg, off)
}

func (d *Device) maxIOBlocks() uint64 {
	m := d.g.ZoneSize
	if m < 4096 {
		m = 4096
	}
	return m
}

func (d *Device) checkRange(lba, n uint64) error {
	if n == 0 {
		return &zerr.InvalidArgumentError{Field: "count", Reason: "must be > 0 blocks"}
	}
	if n > d.maxIOBlocks() {
		return &zerr.InvalidArgumentError{Field: "count", Reason: fmt.Sprintf("%d blocks is more than the %d-block maximum transfer", n, d.maxIOBlocks())}
	}
	if lba >= d.g.TotalLBAs || lba+n > d.g.TotalLBAs {
		return &zerr.OutOfRangeError{LBA: lba, Count: n, Limit: d.g.TotalLBAs}
	}
	return nil
}

// readZone copies blocks [a, b) of z into out and models the flash reads from
// t0. Caller holds z.mu (read). Returns the time the data is at the controller.
func (d *Device) readZone(z *zone, a, b uint64, out []byte, t0 time.Duration) (time.Duration, error) {
	return d.readZoneTo(z, a, b, out, t0, nil)
}

// readZoneTo is readZone; with col != nil the page reads are appended to
// *col instead of being booked (a long operation books them later).
func (d *Device) readZoneTo(z *zone, a, b uint64, out []byte, t0 time.Duration, col *[]pread) (time.Duration, error) {
	bs := uint64(d.g.BlockSize)
	done := t0
	var run bloc
	var runStart, runLen uint64
	type pk struct{ chip, page, fbg int }
	var cur pk
	curN := 0
	flushPage := func() {
		if curN > 0 {
			d.st.nandRead.Add(1)
			if col != nil {
				*col = append(*col, pread{cur.chip, curN})
			} else if d.model != nil {
				if t := d.model.Read(t0, cur.chip, curN); t > done {
					done = t
				}
			}
		}
		curN = 0
	}
	flushRun := func() error {
		if runLen == 0 {
			return nil
		}
		dst := out[(runStart-a)*bs : (runStart-a+runLen)*bs]
		if run.kind == srcZero {
			clear(dst)
		} else if _, err := d.f.ReadAt(dst, run.off); err != nil {
			return d.readFail(z, err)
		}
		runLen = 0
		return nil
	}
	for off := a; off < b; off++ {
		l := d.locate(z, off)
		if runLen > 0 && (l.kind != run.kind || (l.kind != srcZero && l.off != run.off+int64(runLen*bs))) {
			if err := flushRun(); err != nil {
				return 0, err
			}
		}
		if runLen == 0 {
			run, runStart = l, off
		}
		runLen++
		switch l.kind {
		case srcFlash:
			k := pk{l.chip, l.page, l.fbg}
			if curN > 0 && k != cur {
				flushPage()
			}
			cur = k
			curN++
		case srcIPU:
			flushPage()
			cur = pk{l.chip, -1, -1}
			curN = 1
			flushPage()
		}
	}
	flushPage()
	if err := flushRun(); err != nil {
		return 0, err
	}
	return done, nil
}

// Read returns n blocks from lba. Blocks at or above a zone's write pointer
// (never written, or past a finish) read as zeros; reading an offline zone is
// a ZoneStateError. A read may span zones.
func (d *Device) Read(ctx context.Context, lba, n uint64) ([]byte, IOResult, error) {
	if err := d.checkOpen(); err != nil {
		return nil, IOResult{}, err
	}
	if err := d.checkRange(lba, n); err != nil {
		return nil, IOResult{}, err
	}
	buf := make([]byte, n*uint64(d.g.BlockSize))
	res, err := d.ReadInto(ctx, lba, buf)
	if err != nil {
		return nil, IOResult{}, err
	}
	return buf, res, nil
}

// ReadInto is Read into the caller's buffer: it fills buf (a whole number
// of blocks) from lba, so a server can read into pooled buffers. On an
// error buf's contents are unspecified.
func (d *Device) ReadInto(ctx context.Context, lba uint64, buf []byte) (IOResult, error) {
	bs := uint64(d.g.BlockSize)
	if len(buf) == 0 || uint64(len(buf))%bs != 0 {
		return IOResult{}, &zerr.InvalidArgumentError{Field: "buffer", Reason: fmt.Sprintf("length %d is not a positive multiple of the %d-byte block", len(buf), bs)}
	}
	return d.ReadV(ctx, []Range{{LBA: lba, Count: uint64(len(buf)) / bs}}, buf)
}

// ReadV reads several ranges into buf, one after the other (buf is exactly
// their total length). The flash reads of all ranges are modelled from the
// same submission time, as one command with a scatter list: the call waits
// once, for the slowest. Each range is checked like Read's; on an error
// nothing is counted and buf's contents are unspecified.
func (d *Device) ReadV(ctx context.Context, rs []Range, buf []byte) (IOResult, error) {
	if err := d.checkOpen(); err != nil {
		return IOResult{}, err
	}
	bs := uint64(d.g.BlockSize)
	if len(rs) == 0 {
		return IOResult{}, &zerr.InvalidArgumentError{Field: "ranges", Reason: "is empty"}
	}
	var total uint64
	for _, r := range rs {
		if err := d.checkRange(r.LBA, r.Count); err != nil {
			return IOResult{}, err
		}
		total += r.Count
	}
	if uint64(len(buf)) != total*bs {
		return IOResult{}, &zerr.InvalidArgumentError{Field: "buffer", Reason: fmt.Sprintf("%d bytes for %d blocks of %d bytes", len(buf), total, bs)}
	}
	t0 := d.now()
	tm := d.l2pTranslate(t0, rs) // the map entries are in memory (L2P cache model)
	done := tm
	at := uint64(0) // blocks of buf filled
	for _, r := range rs {
		lba, n := r.LBA, r.Count
		for pos := lba; pos < lba+n; {
			zi := pos / d.g.ZoneSize
			z := d.zones[zi]
			end := min(lba+n, (zi+1)*d.g.ZoneSize)
			z.mu.RLock()
			if z.state == StateOffline {
				z.mu.RUnlock()
				return IOResult{}, d.stateErr(z, "read")
			}
			t, err := d.readZone(z, pos-z.start, end-z.start, buf[(at+pos-lba)*bs:], tm)
			z.mu.RUnlock()
			if err != nil {
				return IOResult{}, d.ioErr(err)
			}
			done = max(done, t)
			pos = end
		}
		at += n
	}
	if d.model != nil {
		done = d.model.Link(done, len(buf))
	}
	d.st.hostR.Add(total)
	res := IOResult{Submitted: t0, Completed: done}
	return res, d.wait(ctx, done)
}

func (d *Device) checkData(data []byte) (uint64, error) { return d.checkLen(len(data)) }

// checkLen checks a transfer of size bytes and returns its blocks.
func (d *Device) checkLen(size int) (uint64, error) {
	bs := d.g.BlockSize
	if size == 0 || size%bs != 0 {
		return 0, &zerr.InvalidArgumentError{Field: "data", Reason: fmt.Sprintf("length %d is not a positive multiple of the %d-byte block", size, bs)}
	}
	n := uint64(size / bs)
	if n > d.maxIOBlocks() {
		return 0, &zerr.InvalidArgumentError{Field: "data", Reason: fmt.Sprintf("%d blocks is more than the %d-block maximum transfer", n, d.maxIOBlocks())}
	}
	return n, nil
}

// zoneFor returns the zone holding [lba, lba+n), which must not cross a zone.
func (d *Device) zoneFor(lba, n uint64) (*zone, error) {
	if lba >= d.g.TotalLBAs {
		return nil, &zerr.OutOfRangeError{LBA: lba, Count: n, Limit: d.g.TotalLBAs}
	}
	z := d.zones[lba/d.g.ZoneSize]
	if lba+n > z.start+d.g.ZoneSize {
		return nil, &zerr.OutOfRangeError{LBA: lba, Count: n, Limit: z.start + d.g.ZoneSize}
	}
	return z, nil
}

// Write writes data at lba, which must be the zone's write pointer (or, with
// Overwrite, already written blocks of a sequential zone: an in-place update
// into the IPU region; or, in a TL_opened zone, invalid blocks at or above the
// write pointer).
func (d *Device) Write(ctx context.Context, lba uint64, data []byte, fl Flags) (IOResult, error) {
	return d.WriteV(ctx, lba, [][]byte{data}, fl)
}

// WriteV is Write of the buffers of data written back to back (any
// lengths; the total a whole number of blocks). A sequential write goes to
// the backing file with one vectored pwrite per run of flash pages, from
// the caller's buffers: a node writes the network's receive buffers without
// gathering them first.
func (d *Device) WriteV(ctx context.Context, lba uint64, data [][]byte, fl Flags) (IOResult, error) {
	if err := d.checkWritable(); err != nil {
		return IOResult{}, err
	}
	n, err := d.checkLen(iov(data).len())
	if err != nil {
		return IOResult{}, err
	}
	z, err := d.zoneFor(lba, n)
	if err != nil {
		return IOResult{}, err
	}
	t0 := d.now()
	z.mu.Lock()
	res, err := d.writeLocked(z, lba-z.start, data, fl, t0, false)
	z.mu.Unlock()
	if err != nil {
		return IOResult{}, d.ioErr(err)
	}
	if fl.FUA {
		if err := d.syncAll(); err != nil {
			return IOResult{}, err
		}
	}
	return res, d.wait(ctx, res.Completed)
}

// Append writes data at the write pointer of the zone starting at zoneStart
// and returns the first LBA written.
func (d *Device) Append(ctx context.Context, zoneStart uint64, data []byte, fl Flags) (uint64, IOResult, error) {
	if err := d.checkWritable(); err != nil {
		return 0, IOResult{}, err
	}
	n, err := d.checkData(data)
	if err != nil {
		return 0, IOResult{}, err
	}
	if zoneStart >= d.g.TotalLBAs {
		return 0, IOResult{}, &zerr.OutOfRangeError{LBA: zoneStart, Count: n, Limit: d.g.TotalLBAs}
	}
	if zoneStart%d.g.ZoneSize != 0 {
		return 0, IOResult{}, &zerr.InvalidArgumentError{Field: "zone_start", Reason: fmt.Sprintf("LBA %d is not a zone start (zones are %d blocks)", zoneStart, d.g.ZoneSize)}
	}
	z := d.zones[zoneStart/d.g.ZoneSize]
	t0 := d.now()
	z.mu.Lock()
	if z.tl != nil {
		z.mu.Unlock()
		return 0, IOResult{}, &zerr.ZoneStateError{Zone: z.idx, State: z.state.String() + " (TL_opened)", Op: "append"}
	}
	off := z.wp
	fl.Overwrite = false
	res, err := d.writeLocked(z, off, [][]byte{data}, fl, t0, false)
	z.mu.Unlock()
	if err != nil {
		return 0, IOResult{}, d.ioErr(err)
	}
	if fl.FUA {
		if err := d.syncAll(); err != nil {
			return 0, IOResult{}, err
		}
	}
	return z.start + off, res, d.wait(ctx, res.Completed)
}

// syncAll makes the data file and the journal durable: one round of host
// fdatasyncs, the two files at once (the journal only when it has records
// no sync covers yet; else one fdatasync). Their order does not matter for
// crash safety: the kernel may write a journal page back before any data
// at any time anyway, so no record may count on data being durable before
// it unless its writer synced that data first (an in-place update's slots,
// TL finish's plugged copies, a scrubbed FBG), and each does; a record
// durable ahead of the data it describes is what recovery already handles
// (a slot behind or ahead of its zone's record, see Open). Everything
// acknowledged before the call is durable once both syncs returned. A
// failed sync leaves the page cache state unknown (the kernel may have
// dropped the dirty pages), so the device goes read-only.
func (d *Device) syncAll() error {
	var derr, jerr error
	switch {
	case !d.j.pending():
		derr = d.f.Datasync()
	case d.syncs == syncJournalFirst:
		jerr = d.j.sync()
		derr = d.f.Datasync()
	case d.syncs == syncDataFirst:
		derr = d.f.Datasync()
		jerr = d.j.sync()
	default:
		done := make(chan struct{})
		go func() {
			defer close(done)
			jerr = d.j.sync()
		}()
		derr = d.f.Datasync()
		<-done
	}
	if derr != nil {
		return d.ioErr(d.deviceFail("fdatasync data file", derr))
	}
	if jerr != nil {
		return d.ioErr(d.deviceFail("fdatasync journal", jerr))
	}
	return nil
}

// SyncZone makes the zone's state changes so far (its last open, finish;
// a reset is durable by itself) durable: at once when a journal sync
// already covers them, else with one (shared with concurrent callers). A node calls it after resetting
// a zone for a new owner and before recording that owner, so no power loss
// can keep the new owner without the reset.
func (d *Device) SyncZone(zone uint64) error {
	if err := d.checkWritable(); err != nil {
		return err
	}
	if zone >= uint64(len(d.zones)) {
		return &zerr.OutOfRangeError{LBA: zone * d.g.ZoneSize, Count: 1, Limit: uint64(len(d.zones)) * d.g.ZoneSize}
	}
	if d.j.covers(d.zones[zone].jn.Load()) {
		return nil
	}
	if err := d.j.sync(); err != nil {
		return d.ioErr(d.deviceFail("fdatasync journal", err))
	}
	return nil
}

// Flush makes every acknowledged write durable against a machine crash.
func (d *Device) Flush(ctx context.Context) (IOResult, error) {
	if err := d.checkWritable(); err != nil {
		return IOResult{}, err
	}
	t := d.now()
	done := d.wbufFlush(t) // no PLP: the write buffers' content goes to SLC first
	if err := d.syncAll(); err != nil {
		return IOResult{Submitted: t, Completed: t}, err
	}
	if done == t {
		return IOResult{Submitted: t, Completed: t}, nil
	}
	return IOResult{Submitted: t, Completed: done}, d.wait(ctx, done)
}

// writeLocked is the write path; caller holds z.mu. internal writes (copies)
// skip the host link and the write cache; their data is ready at t0.
func (d *Device) writeLocked(z *zone, off uint64, data iov, fl Flags, t0 time.Duration, internal bool) (IOResult, error) {
	n := uint64(data.len() / d.g.BlockSize)
	switch z.state {
	case StateReadOnly, StateOffline:
		return IOResult{}, d.stateErr(z, "write")
	}
	if z.compacting && !internal {
		return IOResult{}, d.stateErr(z, "write")
	}
	if z.tl != nil {
		return d.tlWrite(z, off, data, fl, t0)
	}
	if fl.Overwrite && off < z.wp {
		return d.ipuWrite(z, off, data.flat(), t0)
	}
	if z.state == StateFull {
		return IOResult{}, &zerr.ZoneFullError{Zone: z.idx, Capacity: d.g.ZoneCap}
	}
	if off != z.wp {
		return IOResult{}, &zerr.WritePointerError{Zone: z.idx, Expected: z.start + z.wp, Got: z.start + off}
	}
	if off+n > d.g.ZoneCap {
		return IOResult{}, &zerr.ZoneFullError{Zone: z.idx, Capacity: d.g.ZoneCap}
	}
	if err := d.openForWrite(z, false); err != nil {
		return IOResult{}, err
	}
	if err := d.writePhys(z, z.fbg, off, data); err != nil {
		return IOResult{}, err
	}
	// The write pointer moves in memory only once its slot is written (the
	// acknowledgement point); on failure the zone is read-only at the old one.
	if err := d.persistWP(z, z.wp+n); err != nil {
		return IOResult{}, err
	}
	res := d.writeTiming(z, off, n, t0, fl.FUA, internal)
	if !internal {
		d.st.hostW.Add(n)
		res = d.wbufWrite(z, off, n, fl.FUA, res)
	}
	if z.wp == d.g.ZoneCap {
		_ = d.setState(z, StateFull)
		d.releasePend(z)
		if err := d.journalZone(z); err != nil {
			return IOResult{}, err
		}
	}
	return res, nil
}

// writePhys stores data at zone offset off of FBG fbg: one (vectored)
// pwrite per run of chunks that lie back to back in the store (a zone on
// one die is one run, as is any zone of a drive with the interleaved
// layout; a zone striped over dies of the chip-major layout is a run per
// chunk). A pwrite per chunk cost the node about three times the CPU per
// byte of one per run (16 KiB pwrites against 512 KiB ones into the page
// cache: the per-call work of the host file system, not the copy).
func (d *Device) writePhys(z *zone, fbg int, off uint64, data iov) error {
	bs := uint64(d.g.BlockSize)
	cb := uint64(d.g.ChunkBlocks)
	n := uint64(data.len()) / bs
	var runOff int64 // store offset of the run data[runStart*bs:i*bs]
	runStart := uint64(0)
	for i := uint64(0); i < n; {
		o := off + i
		k := min(n-i, cb-o%cb)
		l := d.flashLoc(z, fbg, o)
		if i > runStart && l.off != runOff+int64((i-runStart)*bs) {
			if _, err := vfs.WriteAtV(d.f, data.slice(int(runStart*bs), int(i*bs)), runOff); err != nil {
				return d.zoneFail(z, "write data", err)
			}
			runStart = i
		}
		if i == runStart {
			runOff = l.off
		}
		i += k
	}
	if n > runStart {
		if _, err := vfs.WriteAtV(d.f, data.slice(int(runStart*bs), int(n*bs)), runOff); err != nil {
			return d.zoneFail(z, "write data", err)
		}
	}
	return nil
}

// iov is a write's data: buffers of any lengths written back to back.
type iov [][]byte

func (v iov) len() int {
	n := 0
	for _, b := range v {
		n += len(b)
	}
	return n
}

// slice returns bytes [from, to) of v as an iov sharing v's memory.
func (v iov) slice(from, to int) iov {
	if len(v) == 1 {
		return iov{v[0][from:to]}
	}
	var out iov
	pos := 0
	for _, b := range v {
		lo, hi := max(from-pos, 0), min(to-pos, len(b))
		if lo < hi {
			out = append(out, b[lo:hi])
		}
		pos += len(b)
		if pos >= to {
			break
		}
	}
	return out
}

// flat returns v as one slice: its only buffer, or a copy.
func (v iov) flat() []byte {
	if len(v) == 1 {
		return v[0]
	}
	out := make([]byte, 0, v.len())
	for _, b := range v {
		out = append(out, b...)
	}
	return out
}

// persistWP writes write pointer wp to the zone's next A/B slot and, once
// that succeeded, sets it in memory. On failure the zone goes read-only and
// keeps its old write pointer. Caller holds z.mu.
//
// A slot of a new zone generation (after a TL_open or TL finish) is
// written only once the journal record of that generation is durable: the
// slots would otherwise overwrite the last durable slot of the generation
// the journal still describes, and a power loss would take the write
// pointer back past flushed data. A reset syncs its record itself, so the
// generation after a reset starts durable and its first write does not
// wait: the record of the flash blocks that write opens the zone on may
// still be lost, and recovery then drops a slot ahead of an empty zone —
// data that no Flush, FUA write or SyncZone has made durable (each of them
// syncs the journal).
func (d *Device) persistWP(z *zone, wp uint64) error {
	if z.jgen != z.gen {
		if !d.j.covers(z.jn.Load()) { // else a SyncZone or another sync made it durable already
			if err := d.j.sync(); err != nil {
				return d.deviceFail("fdatasync journal", err)
			}
		}
		z.jgen = z.gen
	}
	seq := z.slotSeq + 1
	b := encodeSlot(slot{gen: z.gen, wp: wp, seq: seq})
	if _, err := d.f.WriteAt(b, d.lay.slotBase+int64(z.idx*2+seq%2)*slotSize); err != nil {
		return d.zoneFail(z, "write pointer slot", err)
	}
	z.slotSeq, z.wp = seq, wp
	return nil
}

// writeTiming models a sequential write of n blocks at off: host link, write
// cache admission, then one program per chunk the write completes.
func (d *Device) writeTiming(z *zone, off, n uint64, t0 time.Duration, fua, internal bool) IOResult {
	cb := uint64(d.g.ChunkBlocks)
	chunkBytes := int64(cb) * int64(d.g.BlockSize)
	progs := 0
	if d.model == nil {
		for o := off; o < off+n; o++ {
			if o%cb == cb-1 || o == d.g.ZoneCap-1 {
				progs++
			}
		}
		d.st.nandProg.Add(uint64(progs))
		return IOResult{}
	}
	bytes := int64(n) * int64(d.g.BlockSize)
	cached := !internal && d.conf().WriteCacheBytes > 0
	ready := t0
	if !internal {
		ready = d.model.LinkIn(t0, int(bytes))
	}
	if cached {
		if d.conf().WriteCacheDieBytes > 0 {
			ready = d.model.CacheAdmitDies(ready, bytes, d.chipBytes(z, off, n))
		} else {
			ready = d.model.CacheAdmitQueue(ready, bytes, z.idx)
		}
		z.pend += bytes
		z.pendChip = d.g.Locate(z.fcg, off+n-1).Chip
	}
	done := ready
	lastProg := ready
	for o := off; o < off+n; o++ {
		if o%cb == cb-1 || o == d.g.ZoneCap-1 {
			l := d.g.Locate(z.fcg, o)
			p := d.model.Program(ready, l.Chip)
			progs++
			lastProg = max(lastProg, p)
			if cached {
				rel := min(chunkBytes, z.pend)
				z.pend -= rel
				d.model.CacheReleaseQueue(p, rel, z.idx, l.Chip)
			}
		}
	}
	d.st.nandProg.Add(uint64(progs))
	if !cached || fua {
		done = lastProg
	}
	return IOResult{Submitted: t0, Completed: done}
}

// chipBytes splits a write of n blocks at zone offset off by chip (for the
// write cache's per-die back-pressure).
func (d *Device) chipBytes(z *zone, off, n uint64) []flash.ChipBytes {
	cb := uint64(d.g.ChunkBlocks)
	bs := int64(d.g.BlockSize)
	var out []flash.ChipBytes
	for o := off; o < off+n; {
		end := min(off+n, (o/cb+1)*cb)
		c := d.g.Locate(z.fcg, o).Chip
		b := int64(end-o) * bs
		found := false
		for i := range out {
			if out[i].Chip == c {
				out[i].Bytes += b
				found = true
				break
			}
		}
		if !found {
			out = append(out, flash.ChipBytes{Chip: c, Bytes: b})
		}
		o = end
	}
	return out
}

// SimpleCopy copies the source ranges, in order, to one contiguous
// destination starting at dst, which must be its zone's write pointer. The
// data moves inside the device (read and program, no host link).
func (d *Device) SimpleCopy(ctx context.Context, src []Range, dst uint64) (IOResult, error) {
	if err := d.checkWritable(); err != nil {
		return IOResult{}, err
	}
	if len(src) == 0 {
		return IOResult{}, &zerr.InvalidArgumentError{Field: "src", Reason: "no source ranges"}
	}
	var total uint64
	for _, r := range src {
		if err := d.checkRange(r.LBA, r.Count); err != nil {
			return IOResult{}, err
		}
		total += r.Count
		if total > d.maxIOBlocks() {
			return IOResult{}, &zerr.InvalidArgumentError{Field: "src", Reason: "copy larger than the maximum transfer"}
		}
	}
	z, err := d.zoneFor(dst, total)
	if err != nil {
		return IOResult{}, err
	}
	bs := uint64(d.g.BlockSize)
	buf := make([]byte, total*bs)
	t0 := d.now()
	ready := t0
	var p uint64
	for _, r := range src {
		for pos := r.LBA; pos < r.LBA+r.Count; {
			zi := pos / d.g.ZoneSize
			sz := d.zones[zi]
			end := min(r.LBA+r.Count, (zi+1)*d.g.ZoneSize)
			sz.mu.RLock()
			if sz.state == StateOffline {
				sz.mu.RUnlock()
				return IOResult{}, d.stateErr(sz, "copy from")
			}
			t, err := d.readZone(sz, pos-sz.start, end-sz.start, buf[p*bs:], t0)
			sz.mu.RUnlock()
			if err != nil {
				return IOResult{}, err
			}
			ready = max(ready, t)
			p += end - pos
			pos = end
		}
	}
	z.mu.Lock()
	if z.tl != nil {
		z.mu.Unlock()
		return IOResult{}, &zerr.ZoneStateError{Zone: z.idx, State: z.state.String() + " (TL_opened)", Op: "simple copy into"}
	}
	res, err := d.writeLocked(z, dst-z.start, iov{buf}, Flags{}, ready, true)
	z.mu.Unlock()
	if err != nil {
		return IOResult{}, err
	}
	d.st.rpBlocks.Add(total)
	res.Submitted = t0
	if d.model == nil {
		res = IOResult{}
	}
	return res, d.wait(ctx, res.Completed)
}
