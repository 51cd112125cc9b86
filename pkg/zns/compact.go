package zns

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

type compaction struct {
	job *job
	res CompactionResult
}

// ZoneCompaction starts an in-device copy (ZNS+ zone_compaction) and returns
// its id. Each copy moves Count blocks from Src (below its zone's write
// pointer) to Dst. Destinations may be non-contiguous but must not overlap and
// must lie at or above their zone's write pointer; gaps are skipped (they read
// as zeros). Destination zones are opened and refuse host writes until the
// compaction ends; reads below their advancing write pointer are served.
// Whole chunks whose source and destination are on the same chip are copied
// by copyback (subject to the copyback threshold), the rest by read and program.
func (d *Device) ZoneCompaction(ctx context.Context, copies []Copy) (uint64, error) {
	if err := d.checkWritable(); err != nil {
		return 0, err
	}
	cs, err := d.checkCopies(copies)
	if err != nil {
		return 0, err
	}
	claimed, err := d.claimDestinations(cs)
	if err != nil {
		return 0, err
	}
	d.cmu.Lock()
	d.nextComp++
	id := d.nextComp
	cp := &compaction{}
	cp.res.ID = id
	d.comps[id] = cp
	d.cmu.Unlock()
	// The data moves now; the flash work is replayed on the clock piece by
	// piece (sched.go), and the destination zones refuse host writes until
	// the last piece is booked.
	t0 := d.now()
	cp.res.Submitted = t0
	pieces, err := d.runCompaction(cs, &cp.res)
	cp.res.Err = err
	cp.job = d.startJob(t0, pieces, func(end time.Duration) {
		cp.res.Completed = end
		if d.model == nil {
			cp.res.Submitted, cp.res.Completed = 0, 0
		}
		releaseClaims(claimed)
	})
	return id, nil
}

// checkCopies validates a copy list and returns it sorted by destination:
// every copy has blocks and stays in one source and one destination zone,
// destinations do not overlap, sources are written (or in a TL zone) and
// not offline.
func (d *Device) checkCopies(copies []Copy) ([]Copy, error) {
	if len(copies) == 0 {
		return nil, &zerr.InvalidArgumentError{Field: "copies", Reason: "empty copy list"}
	}
	cs := append([]Copy(nil), copies...)
	for i, c := range cs {
		if c.Count == 0 {
			return nil, &zerr.InvalidArgumentError{Field: "copies", Reason: fmt.Sprintf("copy %d has no blocks", i)}
		}
		if _, err := d.zoneFor(c.Src, c.Count); err != nil {
			return nil, err
		}
		if _, err := d.zoneFor(c.Dst, c.Count); err != nil {
			return nil, err
		}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].Dst < cs[j].Dst })
	for i := 1; i < len(cs); i++ {
		if cs[i].Dst < cs[i-1].Dst+cs[i-1].Count {
			return nil, &zerr.InvalidArgumentError{Field: "copies", Reason: fmt.Sprintf("destinations overlap at LBA %d", cs[i].Dst)}
		}
	}
	// sources must be written
	for _, c := range cs {
		sz := d.zones[c.Src/d.g.ZoneSize]
		sz.mu.RLock()
		ok := sz.tl != nil || c.Src-sz.start+c.Count <= sz.wp
		st := sz.state
		wp := sz.start + sz.wp
		sz.mu.RUnlock()
		if st == StateOffline {
			return nil, &zerr.ZoneStateError{Zone: sz.idx, State: st.String(), Op: "copy from"}
		}
		if !ok {
			return nil, &zerr.InvalidArgumentError{Field: "copies", Reason: fmt.Sprintf("source [%d, %d) reaches past the write pointer %d", c.Src, c.Src+c.Count, wp)}
		}
	}
	return cs, nil
}

// claimPrior is a destination zone's state before a compaction claimed it.
type claimPrior struct {
	state ZoneState
	fbg   int
}

// claimDestinations opens the destination zones of cs (sorted by
// destination) and marks them compacting; a refused claim returns every
// zone claimed so far to its state (a refused compaction changes nothing).
func (d *Device) claimDestinations(cs []Copy) ([]*zone, error) {
	var claimed []*zone
	var priors []claimPrior
	for i := 0; i < len(cs); {
		z := d.zones[cs[i].Dst/d.g.ZoneSize]
		j := i
		for j < len(cs) && cs[j].Dst/d.g.ZoneSize == z.idx {
			j++
		}
		z.mu.Lock()
		p, err := d.claimZone(z, cs[i], cs[j-1])
		if err == nil {
			priors = append(priors, p)
			z.compacting = true
			claimed = append(claimed, z)
		}
		z.mu.Unlock()
		if err != nil {
			d.rollbackClaims(claimed, priors)
			return nil, err
		}
		i = j
	}
	return claimed, nil
}

// claimZone checks that z can take copies first..last (its first and last
// copy) and opens it (z.mu held).
func (d *Device) claimZone(z *zone, first, last Copy) (claimPrior, error) {
	switch {
	case z.compacting || z.tl != nil:
		return claimPrior{}, &zerr.ZoneStateError{Zone: z.idx, State: z.state.String() + " (busy)", Op: "zone_compaction into"}
	case z.state == StateFull:
		return claimPrior{}, &zerr.ZoneFullError{Zone: z.idx, Capacity: d.g.ZoneCap}
	case first.Dst-z.start < z.wp:
		return claimPrior{}, &zerr.WritePointerError{Zone: z.idx, Expected: z.start + z.wp, Got: first.Dst}
	case last.Dst+last.Count-z.start > d.g.ZoneCap:
		return claimPrior{}, &zerr.ZoneFullError{Zone: z.idx, Capacity: d.g.ZoneCap}
	}
	p := claimPrior{z.state, z.fbg}
	return p, d.openForWrite(z, false)
}

// rollbackClaims returns claimed zones to their prior states.
func (d *Device) rollbackClaims(claimed []*zone, priors []claimPrior) {
	for k, z := range claimed {
		z.mu.Lock()
		z.compacting = false
		if p := priors[k]; z.state != p.state {
			_ = d.setState(z, p.state)
			if p.fbg < 0 && z.fbg >= 0 {
				_ = d.releaseFBG(z.fcg, z.fbg, false)
				z.fbg = -1
			}
			_ = d.journalZone(z) // best effort: a failure made the device read-only
		}
		z.mu.Unlock()
	}
}

// releaseClaims lets the destination zones of a finished compaction take
// host writes again.
func releaseClaims(claimed []*zone) {
	for _, z := range claimed {
		z.mu.Lock()
		z.compacting = false
		z.mu.Unlock()
	}
}

// WaitCompaction waits for a compaction and returns its result (once; the id
// is forgotten afterwards).
func (d *Device) WaitCompaction(ctx context.Context, id uint64) (CompactionResult, error) {
	d.cmu.Lock()
	cp := d.comps[id]
	d.cmu.Unlock()
	if cp == nil {
		return CompactionResult{}, &zerr.NotFoundError{Kind: "compaction", Name: strconv.FormatUint(id, 10)}
	}
	if err := cp.job.wait(ctx); err != nil {
		return CompactionResult{}, err
	}
	d.cmu.Lock()
	delete(d.comps, id)
	d.cmu.Unlock()
	if cp.res.Err != nil {
		return cp.res, cp.res.Err
	}
	return cp.res, d.wait(ctx, cp.res.Completed)
}

// compactStageBytes bounds the destination run runCompaction gathers before
// writing it: one pwrite(v) and one write-pointer slot per run instead of
// per chunk (a variable for tests; never below one chunk).
var compactStageBytes uint64 = 1 << 20

// runAcct is what a staged run counts for once its data is written.
type runAcct struct{ blocks, cbBlocks, cbChunks, rpBlocks, nandRead, nandProg uint64 }

// runCompaction moves the data of cs (sorted by destination) and returns the
// flash work to replay on the clock, piece by piece.
//
// Sources are read chunk by chunk under their zone's read lock (a source
// zone reset meanwhile cannot hand the copy another zone's blocks) into one
// staging buffer; a contiguous run of destination blocks is written once
// it reaches compactStageBytes, a gap, a zone boundary or the end, and then
// its write pointer is persisted. Readers of a destination zone see its
// write pointer advance run by run. A run's accounting (the result's
// counts, the device's counters) is applied once its data is written: a
// failed write leaves them as they were before that run.
func (d *Device) runCompaction(cs []Copy, res *CompactionResult) ([]piece, error) {
	r := &compactRun{d: d, res: res, cb: uint64(d.g.ChunkBlocks), bs: uint64(d.g.BlockSize), pendChunk: -1}
	var total uint64
	for _, c := range cs {
		total += c.Count
	}
	r.stage = make([]byte, min(total, max(compactStageBytes/r.bs, r.cb))*r.bs) // a piece is at most a chunk
	for _, c := range cs {
		if z := d.zones[c.Dst/d.g.ZoneSize]; z != r.dz {
			if err := r.finishZone(); err != nil {
				return r.pieces, err
			}
			r.dz = z
		}
		for i := uint64(0); i < c.Count; {
			k, err := r.copyPiece(c, i)
			if err != nil {
				return r.pieces, err
			}
			i += k
		}
	}
	return r.pieces, r.finishZone()
}

// compactRun is one runCompaction: the destination zone being filled, the
// staged run of its blocks and the flash pieces gathered so far.
type compactRun struct {
	d      *Device
	res    *CompactionResult
	cb, bs uint64
	stage  []byte
	dz     *zone
	pieces []piece
	// the read-and-program piece of the destination chunk pendChunk (-1:
	// none) still gathering its reads
	pendChunk int64
	pend      piece
	// the staged run: destination blocks [runOff, runOff+runN) of dz, and
	// what its blocks count for once written
	runOff, runN uint64
	acct         runAcct
}

// flushProg ends the pending read-and-program piece.
func (r *compactRun) flushProg() {
	if r.pendChunk >= 0 {
		r.d.st.nandProg.Add(1)
		r.pieces = append(r.pieces, r.pend)
	}
	r.pendChunk = -1
	r.pend = piece{}
}

// writeRun writes the staged run and persists its write pointer, then
// applies its accounting.
func (r *compactRun) writeRun() error {
	if r.runN == 0 {
		return nil
	}
	d, dz := r.d, r.dz
	dz.mu.Lock()
	err := d.writePhys(dz, dz.fbg, r.runOff, iov{r.stage[:r.runN*r.bs]})
	if err == nil {
		err = d.persistWP(dz, r.runOff+r.runN)
	}
	dz.mu.Unlock()
	if err != nil {
		return err
	}
	a := r.acct
	r.res.Blocks += a.blocks
	r.res.CopybackBlocks += a.cbBlocks
	r.res.CopybackChunks += a.cbChunks
	r.res.ReadProgBlocks += a.rpBlocks
	d.st.cbChunks.Add(a.cbChunks)
	d.st.rpBlocks.Add(a.rpBlocks)
	d.st.nandRead.Add(a.nandRead)
	d.st.nandProg.Add(a.nandProg)
	r.runN = 0
	r.acct = runAcct{}
	return nil
}

// finishZone writes what is staged for the current destination zone and
// marks it full when the copies filled it.
func (r *compactRun) finishZone() error {
	r.flushProg()
	if err := r.writeRun(); err != nil {
		return err
	}
	dz := r.dz
	if dz == nil {
		return nil
	}
	dz.mu.Lock()
	defer dz.mu.Unlock()
	if dz.wp == r.d.g.ZoneCap {
		_ = r.d.setState(dz, StateFull)
		return r.d.journalZone(dz) // a failure made the device read-only
	}
	return nil
}

// copyPiece stages block i of copy c and the following ones up to the next
// source or destination chunk boundary, and returns how many.
func (r *compactRun) copyPiece(c Copy, i uint64) (uint64, error) {
	d, dz, bs := r.d, r.dz, r.bs
	src, dst := c.Src+i, c.Dst+i
	sz := d.zones[src/d.g.ZoneSize]
	soff, doff := src-sz.start, dst-dz.start
	k := min(c.Count-i, r.cb-soff%r.cb, r.cb-doff%r.cb)
	if r.runN > 0 && (doff != r.runOff+r.runN || (r.runN+k)*bs > uint64(len(r.stage))) {
		if err := r.writeRun(); err != nil {
			return 0, err
		}
	}
	if r.runN == 0 {
		r.runOff = doff
	}
	l0, full, reads, err := r.readSource(sz, soff, k, r.stage[r.runN*bs:(r.runN+k)*bs])
	if err != nil {
		return 0, err
	}
	if err := r.fillGap(doff); err != nil {
		return 0, err
	}
	r.account(l0, full, reads, doff, k)
	return k, nil
}

// readSource reads k blocks of source zone sz at soff into buf under its
// read lock: a whole flash chunk with one read (full, from l0), anything
// else block by block with its page reads collected.
func (r *compactRun) readSource(sz *zone, soff, k uint64, buf []byte) (bloc, bool, []pread, error) {
	d := r.d
	sz.mu.RLock()
	defer sz.mu.RUnlock()
	l0 := d.locate(sz, soff)
	full := k == r.cb && l0.kind == srcFlash
	if full {
		for j := uint64(1); j < k; j++ {
			if l := d.locate(sz, soff+j); l.kind != srcFlash || l.off != l0.off+int64(j*r.bs) {
				full = false
			}
		}
	}
	if full {
		if _, err := d.f.ReadAt(buf, l0.off); err != nil {
			return l0, full, nil, d.readFail(sz, err)
		}
		return l0, full, nil, nil
	}
	var reads []pread
	_, err := d.readZoneTo(sz, soff, soff+k, buf, 0, &reads)
	return l0, full, reads, err
}

// fillGap zero-fills the destination below doff when a new run starts past
// the destination's write pointer (a gap between copies).
func (r *compactRun) fillGap(doff uint64) error {
	dz := r.dz
	dz.mu.Lock()
	gap := r.runN == 0 && doff > dz.wp
	dz.mu.Unlock()
	if !gap {
		return nil
	}
	r.flushProg()
	dz.mu.Lock()
	defer dz.mu.Unlock()
	if err := r.d.zeroRange(dz, dz.fbg, dz.wp, doff); err != nil {
		return err
	}
	dz.wp = doff
	return nil
}

// account adds k staged blocks at destination offset doff to the run and
// gathers their flash work: a copyback piece for a whole chunk on the same
// chip, else the reads and the program of the destination chunk.
func (r *compactRun) account(l0 bloc, full bool, reads []pread, doff, k uint64) {
	d := r.d
	dl := d.flashLoc(r.dz, r.dz.fbg, doff)
	r.runN += k
	r.acct.blocks += k
	if full && d.copybackAllowed(l0, dl) {
		r.acct.cbBlocks += k
		r.acct.cbChunks++
		r.acct.nandProg++
		r.pieces = append(r.pieces, piece{cb: true, dst: dl.chip})
		return
	}
	if full {
		r.acct.nandRead++
		reads = []pread{{l0.chip, int(k)}}
	}
	r.acct.rpBlocks += k
	ch := int64(doff / r.cb)
	if r.pendChunk >= 0 && r.pendChunk != ch {
		r.flushProg()
	}
	r.pendChunk = ch
	r.pend.dst = dl.chip
	r.pend.reads = append(r.pend.reads, reads...)
	if (doff+k)%r.cb == 0 || doff+k == d.g.ZoneCap {
		r.flushProg()
	}
}

// CompactionCounts returns how compaction id moves its blocks (copyback and
// read-and-program) without waiting for it: the data moves at submission,
// so the counts are final once ZoneCompaction returns; only its modelled
// completion is later. ok is false for an unknown (or already waited) id.
func (d *Device) CompactionCounts(id uint64) (copyback, readProg uint64, ok bool) {
	d.cmu.Lock()
	defer d.cmu.Unlock()
	cp := d.comps[id]
	if cp == nil {
		return 0, 0, false
	}
	return cp.res.CopybackBlocks, cp.res.ReadProgBlocks, true
}
