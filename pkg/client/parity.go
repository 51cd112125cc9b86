package client

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/ondisk"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Parity stripe groups (namespace redundancy raid5).
//
// A parity group of width k lists k+3 physical zones: k data legs, the
// parity leg zones[k] and the two partial-parity (PP) logs zones[k+1] and
// zones[k+2] (a group laid out before there were two lists only zones[k+1]:
// see appendPP). The data legs and the parity leg are on k+1 distinct
// nodes; the PP logs are on the parity leg's node. The parity leg is fixed
// per group (RAID-4 placement,
// not RAID-5 rotation): every zone is append-only, so every row writes
// every leg once whichever leg holds its parity, and rotation would only
// spread reads of parity, which normal reads never do. What a fixed leg
// buys is the rule that matters: the PP record of a row must sit on a node
// that holds no data unit of that row (else losing that node loses a unit
// and its protection), and with a fixed parity leg the PP zones on the
// parity node satisfy it for every row, at the cost of two extra zones per
// group and no extra node. (A rotating parity leg would need PP zones per
// leg.) The arbiter places and counts the k+3 zones (pkg/arbiter
// pickParity).
//
// Striping of the data legs is RAID-0's: row r is stripe units r*k …
// r*k+k-1, all at zone offset r*S of their legs (S = stripe blocks), and
// its parity unit is at offset r*S of the parity leg. Rows are written in
// order at the write pointer of every leg.
//
// A write (writeParity) XORs its blocks into the running parity of the row
// it is in (cached per v-zone; rebuilt from the row's written prefix when
// the cache does not match, after a restart). Every row the write
// completes gets its parity unit written; when the write ends inside a row
// a PP record — header (magic, group, row, covered blocks, payload CRC,
// sequence number, header CRC) plus the row's parity so far — is appended
// to the group's active PP log.
// The data legs, the parity units and the PP record are written in
// parallel, with the call's FUA, and the write is acknowledged only when
// all landed (a Flush flushes the parity and PP zones with the data legs:
// they are devices of the v-zone). A write that some zones took while the
// others' nodes are unavailable is answered at once as degraded
// (zerr.StateDegraded, as for mirrors) so the file system continues in
// another v-zone; so is any write to a group with a zone on a node known
// to be unavailable (the arbiter's view, or a failed call that no
// answered call has followed), even one that touches only live zones: its data would be
// protected by nothing.
//
// The two PP logs are used alternately (ping-pong). Records go to the
// active log; when a record does not fit, the other log — which holds only
// records older than the active log's newest, so superseded — is reset and
// the record written at its start, making it the active log. Between that
// reset and the record, the active log still holds the newest record of
// the open row: a switch leaves no acknowledged block unprotected (a group
// with one log, from an older layout, resets it in place and keeps that
// window). Not covered: a log filled after a switch only by records of
// writes that all failed, followed by another switch, resets the log
// holding the last record of acknowledged data (a run of failed writes in
// one group; a failed write sends the file system to another v-zone). Every record carries a sequence number (Seq), one more than the
// group's newest, so the records of both logs have one order: readers take
// the newest valid record across both logs, and a client that does not
// know the logs' state (a restart, a failed append) reads both and makes
// the log holding the newest record the active one (learnPP). Version 1
// headers (one log, no Seq) still decode, with Seq 0.
//
// Normal reads read the data legs only. A read that meets an unavailable
// data leg (or one the arbiter reports down) reconstructs that leg's
// pieces row by row (reconstruct): from the parity unit when the survivors
// hold the whole row and the parity leg holds its parity, else from the
// newest valid PP record (of both logs) of the row whose covered prefix
// the survivors hold, XORing only the survivors' blocks inside that prefix (blocks after
// it were never acknowledged; a torn record fails its CRC and is skipped).
// A row with neither holds nothing acknowledged on the lost leg: zeroes.
// Two unavailable zones of one group fail the read.
//
// The v-zone's write pointer is the data legs' contiguous prefix; a data
// leg whose node is unavailable stands in with its extent at the group's
// protected end (lostLegWritePointer: rows with parity + the newest PP
// record's cover), so a client that starts during the outage (a mount)
// finds the acknowledged end.
//
// Finish seals the open parity group first (sealParity): a seal record in
// its active PP log (appended by the same rule) keeps what the finished
// zones' write pointers no longer say.
//
// The PP logs are not reset when the group fills: the zones are finished
// with the group and reset with the v-zone. zone_compaction and TL_open are
// refused (mirroredError); the file system recycles by host copy.

// decodePPHeader decodes pkg/ondisk's partial-parity record header
// (version 2 carries Seq; version 1 headers, one PP log per group, still
// decode with Seq 0, older than every version 2 record). ondisk.PPSealed
// marks a seal record (sealParity): written before the group's zones are
// finished, when the drives' write pointers stop telling how far each zone
// was written.
func decodePPHeader(b []byte) (ondisk.PPHeader, bool) { return ondisk.DecodePPHeader(b) }

// ppRecord is a decoded, intact record.
type ppRecord struct {
	ondisk.PPHeader
	xor []byte // Blocks blocks of parity
}

// parseLog walks a PP log's bytes (bs-byte blocks) and returns its intact
// records in log order. A block that is not a header is skipped (a torn
// record, or the zeroes past the write pointer); a record whose payload
// fails its CRC or runs past the end is dropped.
func parseLog(b []byte, bs uint64) []ppRecord {
	var out []ppRecord
	for p := uint64(0); bs > 0 && p+bs <= uint64(len(b)); {
		h, ok := decodePPHeader(b[p : p+bs])
		if !ok {
			p += bs
			continue
		}
		end := p + bs + uint64(h.Blocks)*bs
		if end > uint64(len(b)) || end < p {
			p += bs
			continue
		}
		payload := b[p+bs : end]
		if crc32.Checksum(payload, ondisk.Castagnoli) == h.CRC {
			out = append(out, ppRecord{PPHeader: h, xor: payload})
			p = end
			continue
		}
		p += bs
	}
	return out
}

// parityState is a v-zone's running parity of the row at its write
// pointer (guarded by VZone.wmu, as writes are).
type parityState struct {
	group   uint32
	row     uint64
	covered uint64                 // blocks of the row written
	xor     []byte                 // stripe blocks
	pp      map[uint32]*ppLogState // per group (guarded by VZone.parMu)
}

// ppLogState is what a client knows of a group's PP logs: which one is
// active, its write pointer and the newest record's Seq. It is learnt from
// the logs (learnPP) when unknown, and forgotten after a failed append.
type ppLogState struct {
	logs   []pzone // the logs it was learnt for (a rebuild replaces them)
	active int     // index into logs
	wp     uint64  // the active log's write pointer
	seq    uint64  // the newest record's Seq
}

// ppLogs are g's PP log zones: two (zones[width+1], zones[width+2]) used
// alternately, or one in a group laid out before there were two.
func (g *group) ppLogs() []pzone { return g.zones[g.width+1:] }

// ppTestHook, when set (tests), runs after appendPP reset the other PP log
// and before it writes the record there; an error fails the append.
var ppTestHook func(group uint32, row, covered uint64) error

func xorInto(dst, src []byte) { subtle.XORBytes(dst, dst, src) }

// rowAcc returns the running parity of row r of g over its first covered
// blocks: the cache when it matches, else the XOR of the row's prefix read
// back from the data legs.
func (v *VZone) rowAcc(ctx context.Context, g *group, r, covered, bs uint64) ([]byte, error) {
	S := g.stripe
	ps := &v.par
	if ps.xor != nil && ps.group == g.index && ps.row == r && ps.covered == covered {
		return ps.xor, nil
	}
	acc := make([]byte, S*bs)
	if covered > 0 {
		prefix := make([]byte, covered*bs)
		if err := v.ReadInto(ctx, g.start+r*S*uint64(g.width), prefix); err != nil {
			return nil, fmt.Errorf("parity: read row %d's written prefix: %w", r, err)
		}
		for q := uint64(0); q < covered; q += S {
			m := min(S, covered-q)
			xorInto(acc[:m*bs], prefix[q*bs:(q+m)*bs])
		}
	}
	return acc, nil
}

// writeParity is writeGroup for a parity group: the data legs as RAID-0,
// the parity units of the rows the write completes and, when it ends
// inside a row, a PP record, all in parallel.
func (v *VZone) writeParity(ctx context.Context, g *group, off uint64, data []byte, bs uint64, fua bool) (uint64, error) {
	n := uint64(len(data)) / bs
	S, k := g.stripe, uint64(g.width)
	rowBlocks := S * k
	for _, z := range g.zones {
		if !z.available || v.c.suspect.down(z.node) {
			// a zone's node is known unavailable: new data would be
			// unprotected (and the row's parity incomplete)
			v.c.m.degradedWrites.Inc()
			return 0, &zerr.ZoneStateError{Zone: v.id, State: zerr.StateDegraded,
				Op: fmt.Sprintf("write (node %s of a parity group is unavailable: continue in another v-zone)", z.node)}
		}
	}
	g.sealedPP.Store(nil) // written after a seal (a Finish that failed): not sealed any more
	rel := off - g.start
	r0 := rel / rowBlocks
	acc, err := v.rowAcc(ctx, g, r0, rel-r0*rowBlocks, bs)
	if err != nil {
		return 0, err
	}
	acc = append([]byte(nil), acc...) // the cache stays valid if this write fails
	var parity []byte                 // parity units of the completed rows, from row r0
	q := rel - r0*rowBlocks           // row offset of the next block
	for t := uint64(0); t < n; {
		m := min(S-q%S, n-t) // blocks to the end of this unit
		u := q % S
		xorInto(acc[u*bs:(u+m)*bs], data[t*bs:(t+m)*bs])
		t, q = t+m, q+m
		if q == rowBlocks {
			parity = append(parity, acc...)
			clear(acc)
			q = 0
		}
	}
	rEnd := (rel + n) / rowBlocks // the row the write ends in (q blocks into it)

	type job struct {
		z    pzone
		zoff uint64
		buf  []byte
		pp   *ondisk.PPHeader // a PP record: buf is its payload
	}
	var jobs []job
	for _, l := range g.legs(off, n) {
		buf := make([]byte, 0, l.blocks*bs)
		for _, p := range l.pieces {
			buf = append(buf, data[(p.voff-off)*bs:(p.voff-off+p.n)*bs]...)
		}
		jobs = append(jobs, job{z: g.zones[l.idx], zoff: l.zoff, buf: buf})
	}
	if len(parity) > 0 {
		jobs = append(jobs, job{z: g.zones[g.width], zoff: r0 * S, buf: parity})
	}
	if q > 0 {
		payload := min(q, S)
		jobs = append(jobs, job{z: g.ppLogs()[0], buf: acc[:payload*bs], pp: &ondisk.PPHeader{Group: g.index, Row: rEnd, Covered: q}})
	}
	errs := make([]error, len(jobs))
	run := func(ctx context.Context) {
		var wg sync.WaitGroup
		for i, j := range jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if j.pp != nil {
					errs[i] = v.appendPP(ctx, g, *j.pp, j.buf, bs, fua)
					return
				}
				errs[i] = v.writeLeg(ctx, j.z, j.zoff, [][]byte{j.buf}, bs, fua)
			}()
		}
		wg.Wait()
	}
	count := func() (ok, down int) {
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, zerr.ErrUnavailable):
				down++
			}
		}
		return ok, down
	}
	run(failFast(ctx)) // one attempt each: a lost node answers degraded at once
	if ok, down := count(); ok == 0 && down == len(jobs) {
		// nobody answered (the client's own network, more likely): retry as
		// usual (writeLeg recognizes a landed attempt by the write pointer;
		// a PP record may be appended twice, which is harmless)
		run(ctx)
	}
	ok, down := count()
	for i, err := range errs {
		if err != nil && errors.Is(err, zerr.ErrUnavailable) {
			v.c.suspect.mark(jobs[i].z.node)
		}
	}
	if ok == len(jobs) {
		v.par.group, v.par.row, v.par.covered, v.par.xor = g.index, rEnd, q, acc
		return n, nil
	}
	v.par.xor = nil // the next write reads the row back
	if ok > 0 && ok+down == len(jobs) {
		v.c.m.degradedWrites.Inc()
		return 0, fmt.Errorf("%w: %v", &zerr.ZoneStateError{Zone: v.id, State: zerr.StateDegraded,
			Op: "write (a zone's node of a parity group is unavailable: continue in another v-zone)"}, errors.Join(errs...))
	}
	return 0, errors.Join(errs...)
}

// appendPP appends a PP record (header h, Seq and CRC filled in here,
// and payload) to g's active PP log at its write pointer. When it does not
// fit, the other log — which holds only records older than the active
// log's newest — is reset and the record written at its start, making it
// the active log: until the record lands, the active log still holds the
// newest record of every row, so no acknowledged block is unprotected
// between the reset and the write. (A group with one PP log resets that.)
func (v *VZone) appendPP(ctx context.Context, g *group, h ondisk.PPHeader, payload []byte, bs uint64, fua bool) error {
	logs := g.ppLogs()
	v.parMu.Lock()
	st := v.par.pp[g.index]
	v.parMu.Unlock()
	if st == nil || !slices.EqualFunc(st.logs, logs, samePZone) {
		var err error
		if st, err = v.learnPP(ctx, g, bs); err != nil {
			return err
		}
	}
	st = &ppLogState{logs: st.logs, active: st.active, wp: st.wp, seq: st.seq} // published only on success
	z := logs[st.active]
	d, err := v.c.device(ctx, z)
	if err != nil {
		return err
	}
	rec := make([]byte, bs+uint64(len(payload)))
	copy(rec[bs:], payload)
	h.Blocks, h.CRC, h.Seq = uint32(uint64(len(payload))/bs), crc32.Checksum(payload, ondisk.Castagnoli), st.seq+1
	h.Encode(rec[:bs])
	blocks := uint64(len(rec)) / bs
	err = func() error {
		if st.wp+blocks <= d.zoneCap {
			return nil
		}
		st.active = (st.active + 1) % len(logs)
		z = logs[st.active]
		_, err := nodeCall(ctx, v.c, z.node, z.addr, "reset partial-parity log", func(ctx context.Context, n v1.ZonedDeviceClient) (*v1.ZoneManagementResponse, error) {
			return n.ZoneManagement(ctx, &v1.ZoneManagementRequest{Device: z.dev, Zone: z.zone, Action: v1.ZoneAction_ZONE_ACTION_RESET})
		})
		if err != nil {
			return err
		}
		st.wp = 0
		if ppTestHook != nil {
			return ppTestHook(g.index, h.Row, h.Covered)
		}
		return nil
	}()
	if err == nil {
		err = v.writeLeg(ctx, z, st.wp, [][]byte{rec}, bs, fua)
	}
	v.parMu.Lock()
	defer v.parMu.Unlock()
	if v.par.pp == nil {
		v.par.pp = map[uint32]*ppLogState{}
	}
	if err != nil {
		delete(v.par.pp, g.index) // learnt again from the logs
		return err
	}
	st.wp, st.seq = st.wp+blocks, h.Seq
	v.par.pp[g.index] = st
	return nil
}

func samePZone(a, b pzone) bool {
	return a.node == b.node && a.dev == b.dev && a.zone == b.zone
}

// learnPP reads g's PP logs: the active one is the one holding the newest
// record (the first when both are empty).
func (v *VZone) learnPP(ctx context.Context, g *group, bs uint64) (*ppLogState, error) {
	logs := g.ppLogs()
	st := &ppLogState{logs: logs}
	var best uint64
	for i, z := range logs {
		wp, err := v.zoneWritePointer(ctx, z)
		if err != nil {
			return nil, err
		}
		b, err := v.readRaw(ctx, z, 0, wp, bs)
		if err != nil {
			return nil, err
		}
		for _, r := range parseLog(b, bs) {
			if r.Seq > best || (i == 0 && r.Seq == best) {
				best, st.active = r.Seq, i
			}
		}
		if i == st.active {
			st.wp = wp
		}
	}
	st.seq = best
	return st, nil
}

// readRaw reads blocks blocks at zone offset zoff of z.
func (v *VZone) readRaw(ctx context.Context, z pzone, zoff, blocks, bs uint64) ([]byte, error) {
	out := make([]byte, blocks*bs)
	if blocks == 0 {
		return out, nil
	}
	l := &leg{zoff: zoff, blocks: blocks, pieces: []piece{{voff: 0, n: blocks}}}
	_, err := v.readLeg(ctx, z, l, 0, out, bs)
	return out, err
}

// readParity is ReadInto's part for reads that touch a parity group: the
// data legs as usual (one attempt each while another way to the bytes
// exists), and the legs on unavailable nodes reconstructed.
func (v *VZone) readParity(ctx context.Context, parts []*group, off, n uint64, buf []byte) error {
	bad := map[string]bool{}
	for _, g := range parts {
		for _, z := range g.zones {
			if g.parity && !v.preferred(z) {
				bad[z.node] = true
			}
		}
	}
	for attempt := 0; attempt < 3; attempt++ {
		var refs []readLegRef
		var lost []func() error
		for _, g := range parts {
			lo, hi := max(off, g.start), min(off+n, g.start+g.capacity)
			for _, l := range g.legs(lo, hi-lo) {
				z := g.zones[l.idx]
				if g.parity && bad[z.node] {
					lost = append(lost, func() error { return v.reconstruct(ctx, g, l, bad, off, buf) })
					continue
				}
				dctx := ctx
				if g.parity {
					dctx = failFast(ctx)
				}
				d, err := v.c.device(dctx, z)
				if err != nil {
					if g.parity && errors.Is(err, zerr.ErrUnavailable) {
						bad[z.node] = true
						lost = append(lost, func() error { return v.reconstruct(ctx, g, l, bad, off, buf) })
						continue
					}
					return err
				}
				refs = append(refs, readLegRef{g: g, l: l, z: z, lba: uint64(z.zone)*d.zoneSize + l.zoff, bs: d.bs})
			}
		}
		var err error
		if len(refs) > 0 {
			err = v.runCalls(failFast(ctx), planRead(refs), buf, off)
		}
		if err != nil {
			if !errors.Is(err, zerr.ErrUnavailable) || ctx.Err() != nil {
				return err
			}
			nodes := unavailableNodes(err)
			for _, node := range nodes {
				bad[node] = true
				v.c.suspect.mark(node)
			}
			if len(nodes) == 0 {
				return err
			}
			continue // again, reconstructing the legs of the newly bad nodes
		}
		if len(lost) > 0 {
			v.c.m.degradedReads.Inc()
		}
		for _, f := range lost {
			if err := f(); err != nil {
				return err
			}
		}
		return nil
	}
	return &zerr.UnavailableError{What: fmt.Sprintf("v-zone %d", v.id), Reason: "parity read: nodes kept failing"}
}

// reconstruct fills leg l's pieces of buf (whose first block is v-zone
// offset base) from the other zones of its parity group, row by row.
func (v *VZone) reconstruct(ctx context.Context, g *group, l *leg, bad map[string]bool, base uint64, buf []byte) error {
	S, k := g.stripe, uint64(g.width)
	rowBlocks := S * k
	others := make([]int, 0, g.width)
	for j := 0; j < g.width; j++ {
		if j == l.idx {
			continue
		}
		if bad[g.zones[j].node] {
			return &zerr.UnavailableError{What: fmt.Sprintf("v-zone %d stripe group %d", v.id, g.index),
				Reason: fmt.Sprintf("legs %d and %d are both on unavailable nodes: a parity group survives one", l.idx, j)}
		}
		others = append(others, j)
	}
	bs, err := v.blockSize(ctx)
	if err != nil {
		return err
	}
	// the survivors' write pointers say how much of each row they hold
	wps := make(map[int]uint64, len(others)+1)
	for _, j := range append(others, g.width) {
		if bad[g.zones[j].node] {
			wps[j] = 0 // the parity leg is lost too: PP records only
			continue
		}
		if wps[j], err = v.zoneWritePointer(ctx, g.zones[j]); err != nil {
			return err
		}
	}
	// the leg's zone range [l.zoff, l.zoff+l.blocks) of every survivor and
	// of the parity leg, read once, in parallel
	span := make(map[int][]byte, len(others)+1)
	srcs := others
	if !bad[g.zones[g.width].node] {
		srcs = append(slices.Clone(others), g.width)
	}
	serrs := make([]error, len(srcs))
	var wg sync.WaitGroup
	var smu sync.Mutex
	for i, j := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := v.readRaw(ctx, g.zones[j], l.zoff, l.blocks, bs)
			smu.Lock()
			span[j], serrs[i] = b, err
			smu.Unlock()
		}()
	}
	wg.Wait()
	if err := errors.Join(serrs...); err != nil {
		return err
	}
	var recs []ppRecord
	recsRead := false
	pz := g.ppLogs()[0] // the PP logs are on one node
	if c := g.sealedPP.Load(); c != nil {
		recs, recsRead = *c, true
	} else if !bad[pz.node] {
		// read the PP log up front: a seal record changes the rules
		if recs, err = v.ppRecords(ctx, g, bs); err != nil {
			return err
		}
		recsRead = true
	}
	// The seal counts only as the group's last record: a Finish that
	// failed after sealing leaves the v-zone open, and records of later
	// writes follow (the next Finish seals again).
	var seal *ppRecord
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Group == g.index {
			if recs[i].Flags&ondisk.PPSealed != 0 {
				seal = &recs[i]
			}
			break
		}
	}
	if seal != nil {
		g.sealedPP.Store(&recs) // finished: the log no longer changes
	}
	for _, p := range l.pieces {
		_, pz := g.locate(p.voff)
		at := (pz - l.zoff) * bs // the piece's place in span
		rel := p.voff - g.start
		r := rel / rowBlocks
		a := rel % S // unit offset (the piece lies in one unit)
		out := buf[(p.voff-base)*bs : (p.voff-base+p.n)*bs]
		held := func(c uint64) bool { // every survivor holds its blocks of row r below row offset c
			for _, j := range others {
				need := min(sub64(c, uint64(j)*S), S)
				if wps[j] < r*S+need {
					return false
				}
			}
			return true
		}
		covered := rowBlocks
		useParity := wps[g.width] >= (r+1)*S && held(rowBlocks)
		if seal != nil {
			// finished: the write pointers say nothing; the seal does
			useParity = r < seal.ParityRows
			held = func(uint64) bool { return true }
		}
		if useParity {
			copy(out, span[g.width][at:at+p.n*bs])
		} else {
			if !recsRead {
				if bad[g.ppLogs()[0].node] {
					return &zerr.UnavailableError{What: fmt.Sprintf("v-zone %d stripe group %d", v.id, g.index), Reason: "the partial-parity log is on an unavailable node too"}
				}
				if recs, err = v.ppRecords(ctx, g, bs); err != nil {
					return err
				}
				recsRead = true
			}
			var rec *ppRecord
			for i := len(recs) - 1; i >= 0; i-- {
				x := &recs[i]
				if x.Group != g.index || x.Row != r || !held(x.Covered) {
					continue
				}
				if seal != nil && x.Flags&ondisk.PPSealed == 0 && r == seal.Row {
					continue // the seal's cover is what was acknowledged of its row
				}
				rec = x
				break
			}
			clear(out)
			if rec == nil {
				continue // nothing of this row was acknowledged on any leg
			}
			covered = rec.Covered
			if lo := a * bs; lo < uint64(len(rec.xor)) {
				copy(out, rec.xor[lo:min(uint64(len(rec.xor)), (a+p.n)*bs)])
			}
		}
		for _, j := range others {
			start := uint64(j)*S + a // row offset of the piece's first block on leg j
			m := min(sub64(covered, start), p.n)
			if m == 0 {
				continue
			}
			xorInto(out[:m*bs], span[j][at:at+m*bs])
		}
		if mine := uint64(l.idx)*S + a; covered < mine+p.n { // past what was acknowledged: zeroes
			clear(out[sub64(covered, mine)*bs:])
		}
	}
	return nil
}

// sealParity appends a seal record to the PP log of every parity group
// that is about to be finished (Finish): finishing fills the zones with
// zeroes and moves their write pointers to the end, after which neither
// the parity leg's write pointer (which rows have parity) nor the data
// legs' (how far the open row got) can be trusted. The seal keeps both:
// ParityRows, and the row at the v-zone's write pointer with its XOR and
// cover, so reconstruction of a finished group uses the parity of the
// rows before ParityRows, the seal (or an older PP record) for the rows
// after, and zeroes past the seal's row. A group whose PP log's node is
// unavailable is not sealed (its data legs are all there; nothing would
// reconstruct them anyway), nor is a full or empty one.
func (v *VZone) sealParity(ctx context.Context, groups []*group) error {
	var open []*group
	for _, g := range groups {
		if g.parity {
			open = append(open, g)
		}
	}
	if len(open) == 0 {
		return nil
	}
	bs, err := v.blockSize(ctx)
	if err != nil {
		return err
	}
	wp, err := v.writePointer(ctx)
	if err != nil {
		return err
	}
	for _, g := range open {
		if wp <= g.start || wp >= g.start+g.capacity {
			continue // empty, or full: its rows all have parity
		}
		if !v.preferred(g.ppLogs()[0]) { // the PP logs are on one node
			continue
		}
		S, rowBlocks := g.stripe, g.stripe*uint64(g.width)
		pwp, err := v.zoneWritePointer(failFast(ctx), g.zones[g.width])
		if err != nil {
			if errors.Is(err, zerr.ErrUnavailable) {
				continue // the PP log is on the same node
			}
			return err
		}
		rel := wp - g.start
		r, c := rel/rowBlocks, rel%rowBlocks
		acc, err := v.rowAcc(ctx, g, r, c, bs)
		if err != nil {
			return err
		}
		payload := min(c, S)
		h := ondisk.PPHeader{Group: g.index, Row: r, Covered: c, Flags: ondisk.PPSealed, ParityRows: min(pwp/S, r)}
		if err := v.appendPP(ctx, g, h, acc[:payload*bs], bs, true); err != nil {
			return fmt.Errorf("seal parity group %d: %w", g.index, err)
		}
	}
	return nil
}

// ppRecords reads g's PP logs up to their write pointers and returns
// their records oldest first (by Seq; log order among equal ones).
func (v *VZone) ppRecords(ctx context.Context, g *group, bs uint64) ([]ppRecord, error) {
	var out []ppRecord
	for _, pz := range g.ppLogs() {
		pwp, err := v.zoneWritePointer(ctx, pz)
		if err != nil {
			return nil, err
		}
		b, err := v.readRaw(ctx, pz, 0, pwp, bs)
		if err != nil {
			return nil, err
		}
		out = append(out, parseLog(b, bs)...)
	}
	slices.SortStableFunc(out, func(a, b ppRecord) int { return cmp.Compare(a.Seq, b.Seq) })
	return out, nil
}

// lostLegWritePointer stands in for the write pointer of data leg i of
// parity group g while its node is unavailable: the leg's extent at the
// group's protected end — the rows whose parity unit is written, plus the
// blocks the newest intact PP record of the next row covers. Anything the
// lost leg held past that was never acknowledged.
func (v *VZone) lostLegWritePointer(ctx context.Context, g *group, i int) (uint64, error) {
	bs, err := v.blockSize(ctx)
	if err != nil {
		return 0, err
	}
	S := g.stripe
	pwp, err := v.zoneWritePointer(ctx, g.zones[g.width])
	if err != nil {
		return 0, err
	}
	rows := pwp / S
	recs, err := v.ppRecords(ctx, g, bs)
	if err != nil {
		return 0, err
	}
	var c uint64
	for k := len(recs) - 1; k >= 0; k-- {
		if recs[k].Group == g.index && recs[k].Row == rows {
			c = recs[k].Covered
			break
		}
	}
	return rows*S + min(sub64(c, uint64(i)*S), S), nil
}

func sub64(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return 0
}
