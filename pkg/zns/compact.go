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
	if len(copies) == 0 {
		return 0, &zerr.InvalidArgumentError{Field: "copies", Reason: "empty copy list"}
	}
	cs := append([]Copy(nil), copies...)
	for i, c := range cs {
		if c.Count == 0 {
			return 0, &zerr.InvalidArgumentError{Field: "copies", Reason: fmt.Sprintf("copy %d has no blocks", i)}
		}
		if _, err := d.zoneFor(c.Src, c.Count); err != nil {
			return 0, err
		}
		if _, err := d.zoneFor(c.Dst, c.Count); err != nil {
			return 0, err
		}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].Dst < cs[j].Dst })
	for i := 1; i < len(cs); i++ {
		if cs[i].Dst < cs[i-1].Dst+cs[i-1].Count {
			return 0, &zerr.InvalidArgumentError{Field: "copies", Reason: fmt.Sprintf("destinations overlap at LBA %d", cs[i].Dst)}
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
			return 0, &zerr.ZoneStateError{Zone: sz.idx, State: st.String(), Op: "copy from"}
		}
		if !ok {
			return 0, &zerr.InvalidArgumentError{Field: "copies", Reason: fmt.Sprintf("source [%d, %d) reaches past the write pointer %d", c.Src, c.Src+c.Count, wp)}
		}
	}
	// claim destination zones
	var claimed []*zone
	type prior struct {
		state ZoneState
		fbg   int
	}
	var priors []prior
	undo := func() {
		for _, z := range claimed {
			z.mu.Lock()
			z.compacting = false
			z.mu.Unlock()
		}
	}
	// rollback returns the zones claimed so far to their state: a refused
	// compaction changes nothing.
	rollback := func() {
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
	for i := 0; i < len(cs); {
		z := d.zones[cs[i].Dst/d.g.ZoneSize]
		j := i
		for j < len(cs) && cs[j].Dst/d.g.ZoneSize == z.idx {
			j++
		}
		z.mu.Lock()
		var err error
		switch {
		case z.compacting || z.tl != nil:
			err = &zerr.ZoneStateError{Zone: z.idx, State: z.state.String() + " (busy)", Op: "zone_compaction into"}
		case z.state == StateFull:
			err = &zerr.ZoneFullError{Zone: z.idx, Capacity: d.g.ZoneCap}
		case cs[i].Dst-z.start < z.wp:
			err = &zerr.WritePointerError{Zone: z.idx, Expected: z.start + z.wp, Got: cs[i].Dst}
		case cs[j-1].Dst+cs[j-1].Count-z.start > d.g.ZoneCap:
			err = &zerr.ZoneFullError{Zone: z.idx, Capacity: d.g.ZoneCap}
		default:
			p := prior{z.state, z.fbg}
			if err = d.openForWrite(z, false); err == nil {
				priors = append(priors, p)
			}
		}
		if err == nil {
			z.compacting = true
			claimed = append(claimed, z)
		}
		z.mu.Unlock()
		if err != nil {
			rollback()
			return 0, err
		}
		i = j
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
		undo()
	})
	return id, nil
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
	cb := uint64(d.g.ChunkBlocks)
	bs := uint64(d.g.BlockSize)
	var total uint64
	for _, c := range cs {
		total += c.Count
	}
	stage := make([]byte, min(total, max(compactStageBytes/bs, cb))*bs) // a piece is at most a chunk
	var dz *zone
	var pieces []piece
	pendChunk := int64(-1)
	var pend piece
	flushProg := func() {
		if pendChunk >= 0 {
			d.st.nandProg.Add(1)
			pieces = append(pieces, pend)
		}
		pendChunk = -1
		pend = piece{}
	}
	// the staged run: destination blocks [runOff, runOff+runN) of dz, and
	// what its blocks count for once written
	var runOff, runN uint64
	var acct runAcct
	writeRun := func() error {
		if runN == 0 {
			return nil
		}
		dz.mu.Lock()
		err := d.writePhys(dz, dz.fbg, runOff, iov{stage[:runN*bs]})
		if err == nil {
			err = d.persistWP(dz, runOff+runN)
		}
		dz.mu.Unlock()
		if err != nil {
			return err
		}
		res.Blocks += acct.blocks
		res.CopybackBlocks += acct.cbBlocks
		res.CopybackChunks += acct.cbChunks
		res.ReadProgBlocks += acct.rpBlocks
		d.st.cbChunks.Add(acct.cbChunks)
		d.st.rpBlocks.Add(acct.rpBlocks)
		d.st.nandRead.Add(acct.nandRead)
		d.st.nandProg.Add(acct.nandProg)
		runN = 0
		acct = runAcct{}
		return nil
	}
	finishZone := func() error {
		flushProg()
		if err := writeRun(); err != nil {
			return err
		}
		if dz == nil {
			return nil
		}
		dz.mu.Lock()
		defer dz.mu.Unlock()
		if dz.wp == d.g.ZoneCap {
			_ = d.setState(dz, StateFull)
			return d.journalZone(dz) // a failure made the device read-only
		}
		return nil
	}
	for _, c := range cs {
		z := d.zones[c.Dst/d.g.ZoneSize]
		if z != dz {
			if err := finishZone(); err != nil {
				return pieces, err
			}
			dz = z
		}
		for i := uint64(0); i < c.Count; {
			src, dst := c.Src+i, c.Dst+i
			sz := d.zones[src/d.g.ZoneSize]
			soff, doff := src-sz.start, dst-dz.start
			// piece: up to the next source or destination chunk boundary
			k := min(c.Count-i, cb-soff%cb, cb-doff%cb)
			if runN > 0 && (doff != runOff+runN || (runN+k)*bs > uint64(len(stage))) {
				if err := writeRun(); err != nil {
					return pieces, err
				}
			}
			if runN == 0 {
				runOff = doff
			}
			buf := stage[runN*bs : (runN+k)*bs]
			sz.mu.RLock()
			l0 := d.locate(sz, soff)
			full := k == cb && l0.kind == srcFlash
			if full {
				for j := uint64(1); j < k; j++ {
					if l := d.locate(sz, soff+j); l.kind != srcFlash || l.off != l0.off+int64(j*bs) {
						full = false
					}
				}
			}
			var reads []pread
			var err error
			if full {
				if _, err = d.f.ReadAt(buf, l0.off); err != nil {
					err = d.readFail(sz, err)
				}
			} else {
				_, err = d.readZoneTo(sz, soff, soff+k, buf, 0, &reads)
			}
			sz.mu.RUnlock()
			if err != nil {
				return pieces, err
			}
			dz.mu.Lock()
			gap := runN == 0 && doff > dz.wp
			dz.mu.Unlock()
			if gap { // gap in the destination: zero-filled
				flushProg()
				dz.mu.Lock()
				err := d.zeroRange(dz, dz.fbg, dz.wp, doff)
				if err == nil {
					dz.wp = doff
				}
				dz.mu.Unlock()
				if err != nil {
					return pieces, err
				}
			}
			dl := d.flashLoc(dz, dz.fbg, doff)
			useCB := full && d.copybackAllowed(l0, dl)
			runN += k
			acct.blocks += k
			if useCB {
				acct.cbBlocks += k
				acct.cbChunks++
				acct.nandProg++
				pieces = append(pieces, piece{cb: true, dst: dl.chip})
			} else {
				if full {
					acct.nandRead++
					reads = []pread{{l0.chip, int(k)}}
				}
				acct.rpBlocks += k
				ch := int64(doff / cb)
				if pendChunk >= 0 && pendChunk != ch {
					flushProg()
				}
				pendChunk = ch
				pend.dst = dl.chip
				pend.reads = append(pend.reads, reads...)
				if (doff+k)%cb == 0 || doff+k == d.g.ZoneCap {
					flushProg()
				}
			}
			i += k
		}
	}
	return pieces, finishZone()
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
