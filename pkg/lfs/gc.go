package lfs

import (
	"context"
	"fmt"
	"sort"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// SegmentInfo describes a recycling candidate.
type SegmentInfo struct {
	Zone     ZoneID
	Valid    uint64 // valid blocks
	Written  uint64 // blocks written (write pointer)
	Capacity uint64
	Age      uint64 // writes since the segment was last written (node sequence units)
}

// RecyclePolicy is the replaceable part of segment recycling: which segment
// to recycle and how to move its valid blocks. (Threaded logging will add a
// method; hybrid recycling is a policy choosing per victim.)
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
		if s.log >= 0 || !s.closed {
			continue
		}
		out = append(out, SegmentInfo{Zone: z, Valid: s.nvalid, Written: s.wp, Capacity: s.cap, Age: fs.nodeSeq - min(s.mtime, fs.nodeSeq)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Zone < out[j].Zone })
	return out
}

// foregroundGC recycles until the reserve of free segments is back.
func (fs *FS) foregroundGC(ctx context.Context) error {
	for i := 0; fs.freeSegments() < int(fs.sb.ReserveSegs); i++ {
		before := fs.freeSegments()
		ok, err := fs.gcOnce(ctx, true)
		if err != nil {
			return err
		}
		if !ok || (fs.freeSegments() <= before && i > 4) {
			// nothing reclaimable: writes get ENOSPC from the space accounting
			return nil
		}
	}
	return nil
}

// gcOnce recycles one victim (or just checkpoints when empty segments wait
// to be freed). It reports whether it did anything.
func (fs *FS) gcOnce(ctx context.Context, foreground bool) (bool, error) {
	if fs.inGC || fs.inCP {
		return false, nil
	}
	fs.inGC = true
	defer func() { fs.inGC = false }()
	cands := fs.candidates()
	for _, c := range cands {
		if c.Valid == 0 {
			return true, fs.checkpoint(ctx, false)
		}
	}
	if len(cands) == 0 {
		return false, nil
	}
	z, ok := fs.pol.SelectVictim(cands, foreground)
	if !ok {
		return false, nil
	}
	s := fs.segs[z]
	if s == nil || s.log >= 0 {
		return false, fmt.Errorf("lfs: policy chose segment %d which is not a candidate", z)
	}
	var info SegmentInfo
	for _, c := range cands {
		if c.Zone == z {
			info = c
		}
	}
	method := fs.pol.Method(info, foreground)
	t0 := fs.now()
	moved, err := fs.moveSegment(ctx, s, method)
	if err != nil {
		return false, err
	}
	if err := fs.checkpoint(ctx, false); err != nil {
		return false, err
	}
	if left := fs.segs[z]; left != nil && left.nvalid > 0 {
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

type moveStat struct{ hostCopy, izc, hostDirty, hostCached uint64 }

// moveSegment moves every valid block of s out of it (the checkpoint that
// follows writes what was marked dirty and frees s).
func (fs *FS) moveSegment(ctx context.Context, s *segment, method MoveMethod) (moveStat, error) {
	var st moveStat
	type dev struct {
		off   uint64
		owner uint64
		ofs   uint32
	}
	var devData, devNode []dev
	epd := fs.epd()
	for off := uint64(0); off < s.wp; off++ {
		if !s.isValid(off) {
			continue
		}
		owner, ofs := s.owner[off], s.ofs[off]
		ino, idx := nidIno(owner), nidIdx(owner)
		a := MakeAddr(s.zone, off)
		if ofs == ofsNode {
			if fs.nat[owner] != a {
				return st, corrupt("SSA", "block %v claims node %#x, NAT says %v", a, owner, fs.nat[owner])
			}
			in := fs.inodes[ino]
			var cached, dirty bool
			if in != nil {
				if idx == 0 {
					cached, dirty = true, in.dirty
				} else if d := in.dn[idx]; d != nil {
					cached, dirty = true, d.dirty
				}
			}
			switch {
			case dirty:
				st.hostDirty++ // written by the checkpoint anyway
			case method == Compact && !(cached && fs.opts.CachedWrite):
				devNode = append(devNode, dev{off, owner, ofs})
			default:
				in, err := fs.getInode(ctx, ino)
				if err != nil {
					return st, err
				}
				if idx == 0 {
					in.cold = true
					fs.markDirty(in)
				} else {
					d, err := fs.getDnode(ctx, in, idx, false)
					if err != nil || d == nil {
						return st, fmt.Errorf("lfs: load node %#x: %w", owner, err)
					}
					d.cold = true
					fs.markDnDirty(in, d)
				}
				if cached {
					st.hostCached++
				} else {
					st.hostCopy++
				}
			}
			continue
		}
		in, err := fs.getInode(ctx, ino)
		if err != nil {
			return st, err
		}
		d, err := fs.getDnode(ctx, in, idx, false)
		if err != nil {
			return st, err
		}
		if d == nil || uint64(ofs) >= epd || d.addrs[ofs] != a {
			return st, corrupt("SSA", "block %v claims %#x[%d] which does not point at it", a, owner, ofs)
		}
		blk := uint64(idx-1)*epd + uint64(ofs)
		p := in.pages[blk]
		switch {
		case p != nil && p.dirty:
			st.hostDirty++
		case method == Compact && !(p != nil && fs.opts.CachedWrite):
			devData = append(devData, dev{off, owner, ofs})
		default:
			if p == nil {
				p = &page{b: make([]byte, fs.bs)}
				if err := fs.readBlocks(ctx, a, p.b); err != nil {
					return st, err
				}
				in.pages[blk] = p
				fs.cachePages++
				st.hostCopy++
			} else {
				st.hostCached++
			}
			p.cold = true
			fs.dirtyPage(in, p)
		}
	}
	// device-side copies (IZC)
	for _, grp := range []struct {
		log  int
		list []dev
	}{{logColdData, devData}, {logColdNode, devNode}} {
		if len(grp.list) == 0 {
			continue
		}
		dsts, copies, err := fs.allocCopies(ctx, grp.log, s.zone, func(i int) uint64 { return grp.list[i].off }, len(grp.list))
		if err != nil {
			return st, err
		}
		cst, err := fs.vol.Compact(ctx, copies)
		fs.stats.CompactCopyback += cst.Copyback
		fs.stats.CompactLocal += cst.Local
		fs.stats.CompactRemote += cst.Remote
		if err != nil {
			for _, c := range copies {
				if ds := fs.segs[c.Dst]; ds != nil {
					ds.closed = true
				}
			}
			for i := range fs.logs {
				if fs.logs[i] != nil && fs.logs[i].closed {
					fs.closeLog(ctx, i)
				}
			}
			return st, err
		}
		fs.blocksWritten += uint64(len(grp.list))
		for i, dv := range grp.list {
			na, old := dsts[i], MakeAddr(s.zone, dv.off)
			if dv.ofs == ofsNode {
				fs.invalidate(old)
				fs.nat[dv.owner] = na
				fs.natDirty[dv.owner] = struct{}{}
			} else {
				in, err := fs.getInode(ctx, nidIno(dv.owner))
				if err != nil {
					return st, err
				}
				d, err := fs.getDnode(ctx, in, nidIdx(dv.owner), false)
				if err != nil || d == nil {
					return st, fmt.Errorf("lfs: load node %#x: %w", dv.owner, err)
				}
				fs.invalidate(old)
				d.addrs[dv.ofs] = na
				fs.markDnDirty(in, d)
			}
			if err := fs.setValid(na, dv.owner, dv.ofs); err != nil {
				return st, err
			}
			st.izc++
		}
	}
	fs.stats.MovedHostCopy += st.hostCopy
	fs.stats.MovedIZC += st.izc
	fs.stats.MovedHostDirty += st.hostDirty
	fs.stats.MovedHostCached += st.hostCached
	return st, nil
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
		s := fs.logs[l]
		if s == nil || s.closed || s.wp >= s.cap {
			if s != nil {
				fs.closeLog(ctx, l)
			}
			var err error
			if s, err = fs.openSeg(ctx, l); err != nil {
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
		s.mtime = fs.nodeSeq
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
		loc, err := fs.vol.Locate(ctx, dst, c)
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
		loc, err := fs.vol.Locate(ctx, from, so)
		if err != nil {
			return
		}
		key := chip{loc.Node, loc.Device, loc.Chip}
		slots := free[key]
		if len(slots) == 0 {
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

// backgroundGC runs one recycling round when the file system is idle.
func (fs *FS) backgroundGC(ctx context.Context) (bool, error) {
	if fs.closed || fs.failed != nil {
		return false, &zerr.ClosedError{What: "file system"}
	}
	return fs.gcOnce(ctx, false)
}
