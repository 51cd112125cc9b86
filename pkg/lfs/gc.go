package lfs

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// recycler is the recycling component: one round at a time (mu), the
// policy that picks victims, and threaded logging's state. Its state but
// the lock is guarded by FS.mu.
type recycler struct {
	mu      rankedMutex // one recycling round at a time (taken first of all)
	pol     RecyclePolicy
	running bool    // a round is moving blocks
	tl      tlState // threaded logging (tl.go)
}

// SegmentInfo describes a recycling candidate.
type SegmentInfo struct {
	Zone     ZoneID
	Valid    uint64 // valid blocks
	Written  uint64 // blocks written (write pointer)
	Capacity uint64
	Age      uint64 // writes since the segment was last written (node sequence units)
}

// RecyclePolicy is the replaceable part of segment recycling: which segment
// to recycle and how to move its valid blocks by compaction. Threaded
// logging (zns+ mode) is chosen per victim by hybrid segment recycling when a
// log needs a segment (tl.go), outside the policy.
type RecyclePolicy interface {
	// SelectVictim picks one of cands (never empty); ok false means none is worth it.
	SelectVictim(cands []SegmentInfo, foreground bool) (z ZoneID, ok bool)
	// Method says how to move the victim's valid blocks.
	Method(victim SegmentInfo, foreground bool) MoveMethod
}

// Selection is a victim selection rule.
type Selection int

const (
	// Greedy takes the segment with the fewest valid blocks.
	Greedy Selection = iota
	// CostBenefit maximises age*(1-u)/(1+u) (LFS / F2FS background GC).
	CostBenefit
)

// Policy is the default RecyclePolicy: a selection for foreground and one for
// background recycling, and one move method.
type Policy struct {
	Foreground, Background Selection
	Move                   MoveMethod
}

// DefaultPolicy is greedy in the foreground, cost-benefit in the background.
func DefaultPolicy(m MoveMethod) RecyclePolicy {
	return Policy{Foreground: Greedy, Background: CostBenefit, Move: m}
}

// SelectVictim implements RecyclePolicy.
func (p Policy) SelectVictim(cands []SegmentInfo, foreground bool) (ZoneID, bool) {
	sel := p.Background
	if foreground {
		sel = p.Foreground
	}
	best, bestScore := -1, -1.0
	for i, c := range cands {
		if c.Valid >= c.Capacity || c.Capacity == 0 {
			continue
		}
		u := float64(c.Valid) / float64(c.Capacity)
		var score float64
		if sel == Greedy {
			score = 1 - u
		} else {
			score = float64(c.Age+1) * (1 - u) / (1 + u)
		}
		if score > bestScore || score == bestScore && c.Zone < cands[best].Zone {
			best, bestScore = i, score
		}
	}
	if best < 0 {
		return 0, false
	}
	return cands[best].Zone, true
}

// Method implements RecyclePolicy.
func (p Policy) Method(SegmentInfo, bool) MoveMethod { return p.Move }

// candidates lists segments that may be recycled.
func (fs *FS) candidates() []SegmentInfo {
	var out []SegmentInfo
	for z, s := range fs.segs {
		if s.log >= 0 || !s.closed || s.pending > 0 || s.tl {
			continue
		}
		out = append(out, SegmentInfo{Zone: z, Valid: s.nvalid, Written: s.wp, Capacity: s.cap, Age: fs.count.nodeSeq - min(s.mtime, fs.count.nodeSeq)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Zone < out[j].Zone })
	return out
}

// foregroundGC recycles until the reserve of free segments is back. It runs
// with no lock held (housekeeping before an operation) and takes the GC lock:
// a writer that finds the reserve short waits for the round in progress.
func (fs *FS) foregroundGC(ctx context.Context) error {
	fs.gc.mu.Lock()
	defer fs.gc.mu.Unlock()
	for i := 0; ; i++ {
		fs.mu.Lock()
		before, bad := fs.freeSegments(), fs.closed || fs.failed != nil
		fs.mu.Unlock()
		if bad {
			return &zerr.ClosedError{What: "file system"}
		}
		if before >= fs.gcReserve() {
			return nil
		}
		ok, err := fs.gcOnce(ctx, true, false)
		if err != nil {
			return err
		}
		fs.mu.Lock()
		after := fs.freeSegments()
		fs.mu.Unlock()
		if !ok || (after <= before && i > 4) {
			// nothing reclaimable: writes get ENOSPC from the space accounting
			return nil
		}
	}
}

// gcPick chooses the round's victim among the candidates and its move
// method. empty: a segment with no valid block waits to be freed (the
// round is just a checkpoint); a nil segment otherwise: nothing to do, or
// the policy's error.
func (fs *FS) gcPick(foreground bool) (s *segment, method MoveMethod, empty bool, err error) {
	cands := fs.candidates()
	for _, c := range cands {
		if c.Valid == 0 {
			return nil, 0, true, nil
		}
	}
	if len(cands) == 0 {
		return nil, 0, false, nil
	}
	z, ok := fs.gc.pol.SelectVictim(cands, foreground)
	if !ok {
		return nil, 0, false, nil
	}
	s = fs.segs[z]
	if s == nil || s.log >= 0 {
		return nil, 0, false, fmt.Errorf("lfs: policy chose segment %d which is not a candidate", z)
	}
	var info SegmentInfo
	for _, c := range cands {
		if c.Zone == z {
			info = c
		}
	}
	return s, fs.gc.pol.Method(info, foreground), false, nil
}

// gcAccount adds a compaction round's phases (Fig. 6) and its α sample to
// the statistics: t0 the round's start, tMoved the end of the move (the
// closing checkpoint ran since), w0 the blocks written before it.
func (fs *FS) gcAccount(moved moveStat, t0, tMoved time.Duration, w0 uint64, victimNode bool) {
	fs.stats.CompactedSegments++
	// phases (Fig. 6): what moveSegment did not spend reading or copying
	// was init; the checkpoint's data write-back is the write phase
	ph := &fs.stats.CompactionPhases
	ph.Read += moved.read
	ph.Copy += moved.copy
	ph.Init += max(tMoved-t0-moved.read-moved.copy, 0)
	cpd := fs.now() - tMoved
	w := min(fs.cp.lastWrite, cpd)
	ph.Write += w
	cpd -= w
	if moved.izc > 0 {
		// zone_compaction is asynchronous: the checkpoint's Flush waits for
		// the copies still running on the drives (copy phase)
		f := min(fs.cp.lastFlush, cpd)
		ph.Copy += f
		cpd -= f
	}
	ph.Checkpoint += cpd
	fs.m.recycled.WithLabelValues("compaction").Inc()
	// α (§3.3.2: (N_node + N_meta) / N_valid): node and metadata blocks the
	// closing checkpoint wrote per valid block moved; the data blocks its
	// write-back wrote (moved by host copy, or users' dirty pages) and the
	// moved node blocks it rewrote from the host are not counted
	if n := moved.izc + moved.hostCopy + moved.hostCached; n > 0 {
		w := fs.count.blocksWritten - w0
		w -= min(w, fs.cp.lastData)
		w -= min(w, moved.hostNodes)
		fs.profileAlpha(victimNode, n, w)
	}
}

// gcOnce recycles one victim (or just checkpoints when empty segments wait
// to be freed). It reports whether it did anything. The caller holds the GC
// lock; with excl it also holds the checkpoint lock exclusively and fs.mu
// (the virtual clock's synchronous tick), otherwise nothing else: the move
// then runs under the checkpoint lock shared, concurrently with readers and
// writers, and the closing checkpoint takes it exclusively.
func (fs *FS) gcOnce(ctx context.Context, foreground, excl bool) (bool, error) {
	if !excl {
		fs.cp.mu.RLock()
		fs.mu.Lock()
	}
	release := func() {
		if !excl {
			fs.mu.Unlock()
			fs.cp.mu.RUnlock()
		}
	}
	cp := func() error {
		if excl {
			fs.cp.cause = "gc"
			return fs.checkpoint(ctx, false)
		}
		return fs.exclusiveCheckpoint(ctx, false, "gc")
	}
	if fs.closed || fs.failed != nil {
		release()
		return false, &zerr.ClosedError{What: "file system"}
	}
	t0 := fs.now()
	s, method, empty, err := fs.gcPick(foreground)
	if empty {
		release()
		return true, cp()
	}
	if s == nil {
		release()
		return false, err
	}
	z := s.zone
	// Threaded logging keeps off the victim until the closing checkpoint has
	// written its dirty blocks elsewhere and freed it.
	s.victim = true
	victimNode := segIsNode(s) // which α its checkpoint feeds (§3.3.2)
	moved, err := fs.moveSegment(ctx, s, method)
	w0 := fs.count.blocksWritten
	release()
	if err != nil {
		if excl {
			s.victim = false // (fs.mu held by the caller)
		} else {
			fs.mu.Lock()
			s.victim = false
			fs.mu.Unlock()
		}
		return false, err
	}
	if excl {
		fs.cp.cause = "gc"
	}
	tMoved := fs.now()
	err = cp()
	if !excl {
		fs.mu.Lock()
		defer fs.mu.Unlock()
	}
	s.victim = false
	if err != nil {
		return false, err
	}
	fs.gcAccount(moved, t0, tMoved, w0, victimNode)
	// (the zone may have been reset and reopened as a new segment meanwhile)
	if left := fs.segs[z]; left == s && left.nvalid > 0 {
		return false, corrupt("recycling", "segment %d still has %d valid blocks after moving", z, left.nvalid)
	}
	kind := "background"
	if foreground {
		kind = "foreground"
		fs.stats.GCForeground++
	} else {
		fs.stats.GCBackground++
	}
	fs.m.gc(kind, method.String(), fs.since(t0), moved)
	return true, nil
}

type moveStat struct {
	hostCopy, izc, hostDirty, hostCached uint64
	hostNodes                            uint64        // node blocks among hostCopy and hostCached
	read, copy                           time.Duration // host copy's victim reads; IZC's zone_compaction
	readBlocks                           uint64        // host copy: victim blocks read up front (the read phase)
	pgcWorkers                           int           // P-GC: workers the read phase was split across (0: not split)
}

// gcLock locks the inode owning a victim block (fs.mu held on entry and
// return). It returns nil when the block is no longer valid with that owner
// (overwritten, truncated, deleted meanwhile): nothing to move.
func (fs *FS) gcLock(ctx context.Context, s *segment, off, owner uint64, ofs uint32) (*inode, error) {
	still := func() bool { return s.isValid(off) && s.owner[off] == owner && s.ofs[off] == ofs }
	for i := 0; i < 100; i++ {
		if !still() {
			return nil, nil
		}
		in, err := fs.getInode(ctx, nidIno(owner))
		if err != nil {
			if !still() {
				return nil, nil
			}
			return nil, err
		}
		if !fs.lockIn(in) {
			continue
		}
		if !still() {
			fs.unlockIn(in)
			return nil, nil
		}
		return in, nil
	}
	return nil, fmt.Errorf("lfs: inode %d of block %v keeps changing", nidIno(owner), MakeAddr(s.zone, off))
}

// nodeDirty reports whether node idx of in is cached dirty.
func (fs *FS) nodeDirty(in *inode, idx uint32) bool {
	if idx == 0 {
		return in.dirty
	}
	d := in.dn[idx]
	return d != nil && d.dirty
}

// moveNode moves one valid node block a of in (in locked, revalidated).
func (fs *FS) moveNode(ctx context.Context, in *inode, idx uint32, owner uint64, a Addr, method MoveMethod, hostCached bool, st *moveStat, device func()) error {
	if fs.nat[owner] != a {
		return corrupt("SSA", "block %v claims node %#x, NAT says %v", a, owner, fs.nat[owner])
	}
	var cached, dirty bool
	if idx == 0 {
		cached, dirty = true, in.dirty
	} else if d := in.dn[idx]; d != nil {
		cached, dirty = true, d.dirty
	}
	switch {
	case dirty:
		st.hostDirty++ // written by the checkpoint anyway
	case method == Compact && !(cached && hostCached):
		device()
	default:
		if idx == 0 {
			in.cold = true
			fs.markDirty(in)
		} else {
			d, err := fs.getDnode(ctx, in, idx, false)
			if err != nil || d == nil {
				return fmt.Errorf("lfs: load node %#x: %w", owner, err)
			}
			d.cold = true
			fs.markDnDirty(in, d)
		}
		if cached {
			st.hostCached++
		} else {
			st.hostCopy++
		}
		st.hostNodes++
	}
	return nil
}

// allocCopies reserves n destination blocks in log li for device-side copies
// of blocks src(i) of zone from, and returns the destination of every source
// block and the Copy list. Within each reserved region it applies ZNS+
// copyback-aware allocation (§3.3.1): every fully valid source chunk gets a
// destination chunk on the same chip when one is free; the other blocks fill
// the rest of the region in order.
func (fs *FS) allocCopies(ctx context.Context, li int, from ZoneID, src func(int) uint64, n int) ([]Addr, []Copy, error) {
	dsts := make([]Addr, n)
	var copies []Copy
	cb := uint64(max(fs.geo.ChunkBlocks, 1))
	for i := 0; i < n; {
		l := fs.logFor(li)
		s := fs.lg.heads[l]
		if s == nil || s.closed || s.wp >= s.cap || s.tl {
			// (zone_compaction writes sequentially from the write
			// pointer: never into a threaded-logging segment)
			if s != nil {
				fs.closeLog(ctx, l)
			}
			var err error
			if s, err = fs.openSeg(ctx, l, false, from); err != nil {
				return nil, nil, err
			}
		}
		k := min(uint64(n-i), s.cap-s.wp)
		base := s.wp
		region := make([]int, k) // region slot -> source index
		for j := range region {
			region[j] = -1
		}
		if cb > 1 && !fs.opts.NoCopybackAware {
			fs.copybackPlace(ctx, s.zone, base, k, from, src, i, region)
		}
		placed := make([]bool, k)
		for _, r := range region {
			if r >= 0 {
				placed[r-i] = true
			}
		}
		next := uint64(0)
		for j := i; j < i+int(k); j++ {
			if placed[j-i] {
				continue
			}
			for region[next] >= 0 {
				next++
			}
			region[next] = j
		}
		for slot, j := range region {
			dsts[j] = MakeAddr(s.zone, base+uint64(slot))
		}
		// copies in destination order, merged when both sides are contiguous
		for slot, j := range region {
			so, do := src(j), base+uint64(slot)
			if c := len(copies) - 1; c >= 0 && copies[c].Dst == s.zone && copies[c].DstOff+copies[c].Blocks == do && copies[c].SrcOff+copies[c].Blocks == so {
				copies[c].Blocks++
			} else {
				copies = append(copies, Copy{Src: from, SrcOff: so, Dst: s.zone, DstOff: do, Blocks: 1})
			}
		}
		s.wp += k
		s.mtime = fs.count.nodeSeq
		i += int(k)
		if s.wp >= s.cap {
			s.closed = true
			fs.closeLog(ctx, l)
		}
	}
	return dsts, copies, nil
}

// copybackPlace assigns fully valid source chunks among sources [first,
// first+k) to free destination chunks of [base, base+k) of zone dst on the
// same chip (same node, device and chip per Volume.Locate).
func (fs *FS) copybackPlace(ctx context.Context, dst ZoneID, base, k uint64, from ZoneID, src func(int) uint64, first int, region []int) {
	cb := uint64(fs.geo.ChunkBlocks)
	type chip struct {
		node          string
		device, chipN uint32
	}
	free := map[chip][]uint64{} // chip -> free destination chunk slots (region offsets)
	for c := (base + cb - 1) / cb * cb; c+cb <= base+k; c += cb {
		var loc Location
		err := fs.unlocked(func() error {
			var err error
			loc, err = fs.vol.Locate(ctx, dst, c)
			return err
		})
		if err != nil {
			return
		}
		key := chip{loc.Node, loc.Device, loc.Chip}
		free[key] = append(free[key], c-base)
	}
	for j := first; j+int(cb) <= first+int(k); j++ {
		so := src(j)
		if so%cb != 0 || src(j+int(cb)-1) != so+cb-1 {
			continue
		}
		var loc Location
		err := fs.unlocked(func() error {
			var err error
			loc, err = fs.vol.Locate(ctx, from, so)
			return err
		})
		if err != nil {
			return
		}
		key := chip{loc.Node, loc.Device, loc.Chip}
		fs.stats.CopybackEligible += cb
		slots := free[key]
		if len(slots) == 0 {
			j += int(cb) - 1
			continue
		}
		free[key] = slots[1:]
		for b := uint64(0); b < cb; b++ {
			region[slots[0]+b] = j + int(b)
		}
		fs.stats.CopybackPlanned += cb
		j += int(cb) - 1
	}
}

// CachedChunkPolicy is how compaction in the drives (IZC) treats the
// victim's blocks that are cached clean on the host (Options.CachedChunks).
type CachedChunkPolicy uint8

const (
	// CachedChunksByCost chooses per chunk by Options.FlashReadCost and
	// HostWriteCost; without them every clean block is copied on the device.
	CachedChunksByCost CachedChunkPolicy = iota
	// CachedChunksFromHost is IZC-H (ZNS+ §3.2.1): a chunk whose valid
	// blocks are all cached is written from the host, saving the chip read
	// a device copy needs; the other chunks are copied on the device.
	CachedChunksFromHost
	// CachedChunksOnDevice is IZC-D: every clean block is copied on the
	// device, cached or not.
	CachedChunksOnDevice
)

// String is the policy's name in the paper's terms.
func (p CachedChunkPolicy) String() string {
	switch p {
	case CachedChunksByCost:
		return "by-cost"
	case CachedChunksFromHost:
		return "izc-h"
	case CachedChunksOnDevice:
		return "izc-d"
	}
	return fmt.Sprintf("CachedChunkPolicy(%d)", uint8(p))
}

// cachedChunks returns, for the per-block IZC-H / IZC-D choice (ZNS+
// §3.2.1, Table 4; Options.FlashReadCost, HostWriteCost), whether the block
// at off of victim s goes from the host when it is cached clean (fs.mu held;
// the answer is a hint: the block is revalidated when it is moved). A device
// copy reads a chunk on the chip once, however many of its blocks it moves,
// so the host saves that read only when every valid block of the chunk is
// cached on the host; it then pays the request handling and link transfer
// of the chunk's clean cached blocks (HostWriteCost is a whole chunk's, so
// k of its cb blocks cost k/cb of it; dirty blocks are written from the
// host in any case). A chunk goes from the host when all its valid blocks
// are cached and its clean ones cost less to write than FlashReadCost.
func (fs *FS) cachedChunks(s *segment, n int, at func(i int) (off, owner uint64, ofs uint32)) func(off uint64) bool {
	no := func(uint64) bool { return false }
	cb := uint64(max(fs.geo.ChunkBlocks, 1))
	byCost := fs.opts.CachedChunks == CachedChunksByCost
	switch {
	case fs.opts.CachedWrite || fs.opts.CachedChunks == CachedChunksOnDevice:
		return no
	case byCost && (fs.opts.FlashReadCost <= 0 || fs.opts.HostWriteCost <= 0 || fs.opts.HostWriteCost/time.Duration(cb) >= fs.opts.FlashReadCost):
		return no
	}
	epd := fs.epd()
	type chunk struct {
		uncached bool   // a valid block is not cached: the device reads the chunk anyway
		clean    uint64 // valid blocks cached clean
	}
	chunks := map[uint64]*chunk{}
	for i := 0; i < n; i++ {
		off, owner, ofs := at(i)
		c := chunks[off/cb]
		if c == nil {
			c = &chunk{}
			chunks[off/cb] = c
		}
		if c.uncached {
			continue
		}
		in := fs.ic.inodes[nidIno(owner)]
		cached, dirty := false, false
		switch {
		case in == nil:
		case ofs == ofsNode:
			if idx := nidIdx(owner); idx == 0 {
				cached, dirty = true, in.dirty
			} else if d := in.dn[idx]; d != nil {
				cached, dirty = true, d.dirty
			}
		default:
			if p := in.pages.get(uint64(nidIdx(owner)-1)*epd + uint64(ofs)); p != nil {
				cached, dirty = true, p.dirty
			}
		}
		switch {
		case !cached:
			c.uncached = true
		case !dirty:
			c.clean++
		}
	}
	host := map[uint64]bool{}
	for k, c := range chunks {
		if !c.uncached && c.clean > 0 && (!byCost || fs.opts.HostWriteCost*time.Duration(c.clean)/time.Duration(cb) < fs.opts.FlashReadCost) {
			host[k] = true
		}
	}
	return func(off uint64) bool { return host[off/cb] }
}

// readVictim reads blocks offs (increasing) of victim s, which has valid
// valid blocks, in runs of consecutive blocks, with fs.mu released for each
// read (the segment is pinned). Blocks invalidated meanwhile are revalidated
// by the caller before they are used.
//
// P-GC (seeds/004 Algorithm 1): when more than half of the victim's blocks
// are valid and Options.PGCWorkers allows, the blocks are cut into that many
// contiguous shares of (nearly) equal size and the shares are read in
// parallel, one goroutine each (on a TurnClock: in turns, overlapping in
// modelled time), every share in runs; the caller commits the moves as
// before. It reports how many workers read.
func (fs *FS) readVictim(ctx context.Context, s *segment, offs []uint64, valid uint64) (map[uint64][]byte, int, error) {
	out := make(map[uint64][]byte, len(offs))
	m := fs.pgcWorkers()
	if valid*2 <= s.cap || len(offs) < 2 {
		m = 1
	}
	m = min(m, len(offs))
	if m <= 1 {
		for _, r := range victimRuns(offs) {
			buf := make([]byte, len(r)*fs.bs)
			if err := fs.readBlocks(ctx, MakeAddr(s.zone, r[0]), buf); err != nil {
				return nil, 1, err
			}
			for k, off := range r {
				out[off] = buf[k*fs.bs : (k+1)*fs.bs]
			}
		}
		return out, 1, nil
	}
	if tc, ok := fs.turnClock(); ok {
		// a modelled clock played on one goroutine: the workers take
		// turns in modelled time (pgcclock.go)
		out, err := fs.readVictimTurns(ctx, tc, s, offs, m)
		return out, m, err
	}
	// the pin keeps the zone from being reset while the workers read; the
	// workers touch no table state (fs.vol is safe for concurrent calls)
	s.pins++
	fs.mu.Unlock()
	wctx, cancel := context.WithCancel(ctx)
	bufs := make([][]byte, m)
	var (
		wg       sync.WaitGroup
		emu      sync.Mutex
		firstErr error
	)
	for w := 0; w < m; w++ {
		share := offs[w*len(offs)/m : (w+1)*len(offs)/m]
		bufs[w] = make([]byte, len(share)*fs.bs)
		wg.Add(1)
		go func(share []uint64, buf []byte) {
			defer wg.Done()
			for _, r := range victimRuns(share) {
				n := len(r) * fs.bs
				if err := fs.vol.Read(wctx, s.zone, r[0], buf[:n:n]); err != nil {
					emu.Lock()
					if firstErr == nil {
						firstErr = err // the cause: the others fail after the cancel
					}
					emu.Unlock()
					cancel()
					return
				}
				buf = buf[n:]
			}
		}(share, bufs[w])
	}
	wg.Wait()
	cancel()
	fs.mu.Lock()
	s.pins--
	if s.pins == 0 {
		fs.pinCond.Broadcast()
	}
	if firstErr != nil {
		return nil, m, firstErr
	}
	for w := 0; w < m; w++ {
		for k, off := range offs[w*len(offs)/m : (w+1)*len(offs)/m] {
			out[off] = bufs[w][k*fs.bs : (k+1)*fs.bs]
		}
	}
	return out, m, nil
}

// victimRuns cuts offs (increasing) into runs of consecutive blocks of at
// most 64 blocks, one read each.
func victimRuns(offs []uint64) [][]uint64 {
	const maxRun = 64
	var runs [][]uint64
	for i := 0; i < len(offs); {
		j := i + 1
		for j < len(offs) && j-i < maxRun && offs[j] == offs[i]+uint64(j-i) {
			j++
		}
		runs = append(runs, offs[i:j])
		i = j
	}
	return runs
}

// DefaultPGCWorkers is Options.PGCWorkers' default: the paper's two threads
// (seeds/004 §3.3).
const DefaultPGCWorkers = 2

// pgcWorkers is how many workers P-GC splits a host-copy victim's reads
// across. On a virtual clock 1 unless the clock is a TurnClock (the
// workers then take turns in modelled time): goroutines waiting on it at
// once would make modelled times depend on scheduling (the power-loss tests
// and the paper benchmarks replay runs exactly), as for write-back and
// read-ahead, which do not run there either.
func (fs *FS) pgcWorkers() int {
	n := fs.opts.PGCWorkers
	if n == 0 {
		n = DefaultPGCWorkers
	}
	if _, turns := fs.turnClock(); n < 1 || fs.clk.Kind() == clock.KindVirtual && !turns {
		return 1
	}
	return min(n, 64)
}
