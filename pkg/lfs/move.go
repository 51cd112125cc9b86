package lfs

import (
	"context"
	"fmt"
)

// moveSegment moves every valid block of s out of it (the checkpoint that
// follows writes what was marked dirty and frees s). The caller holds the GC
// lock, the checkpoint lock (shared or exclusive) and fs.mu. Victim blocks
// are read with fs.mu released and no inode lock; every block is then
// committed under its inode's lock after revalidating that the block is still
// valid, still owned by the same node entry, and still mapped at the victim:
// a block a writer overwrote or truncated meanwhile is simply not moved (an
// IZC copy of it stays an invalid block in the destination).
//
// The phases: collect the valid blocks, pre-read the host-copied ones
// (prefetch), move each block through the host or set it aside for the
// device (hostPass), copy those on the device and commit them (izcGroup),
// and account the round (account).
func (fs *FS) moveSegment(ctx context.Context, s *segment, method MoveMethod) (moveStat, error) {
	fs.ipuQuiesce(s)
	m := &segMove{fs: fs, s: s, method: method, epd: fs.epd()}
	for off := uint64(0); off < s.wp; off++ {
		if s.isValid(off) {
			m.items = append(m.items, victimBlock{off, s.owner[off], s.ofs[off]})
		}
	}
	if method != Compact {
		if err := m.prefetch(ctx); err != nil {
			return m.st, err
		}
	}
	if err := m.hostPass(ctx); err != nil {
		return m.st, err
	}
	// device-side copies (IZC)
	for _, grp := range []struct {
		log  int
		list []victimBlock
	}{{logColdData, m.devData}, {logColdNode, m.devNode}} {
		if len(grp.list) == 0 {
			continue
		}
		if err := m.izcGroup(ctx, grp.log, grp.list); err != nil {
			return m.st, err
		}
	}
	m.account()
	return m.st, nil
}

// victimBlock is one valid block of a victim and its owner (SSA).
type victimBlock struct {
	off   uint64
	owner uint64
	ofs   uint32
}

// segMove is one victim's move (moveSegment).
type segMove struct {
	fs     *FS
	s      *segment
	method MoveMethod
	epd    uint64
	st     moveStat

	items            []victimBlock
	pre              map[uint64][]byte // data blocks read up front (host copy)
	hostChunk        func(off uint64) bool
	devData, devNode []victimBlock // blocks left to the device's copy
}

// still reports whether the victim block is still valid with its owner.
func (m *segMove) still(it victimBlock) bool {
	s := m.s
	return s.isValid(it.off) && s.owner[it.off] == it.owner && s.ofs[it.off] == it.ofs
}

// prefetch: host copy reads the victim's valid data blocks up front, one
// read per run of consecutive blocks (F2FS issues all reads of a victim at
// once, overlapped across chips), not one 4 KiB call per block; P-GC splits
// them across workers when more than half of the victim is valid.
func (m *segMove) prefetch(ctx context.Context) error {
	fs := m.fs
	var need []uint64 // valid data blocks not cached on the host
	for _, it := range m.items {
		if it.ofs == ofsNode {
			continue
		}
		if in := fs.ic.inodes[nidIno(it.owner)]; in == nil || in.pages.get(uint64(nidIdx(it.owner)-1)*m.epd+uint64(it.ofs)) == nil {
			need = append(need, it.off)
		}
	}
	tr := fs.now()
	pre, workers, err := fs.readVictim(ctx, m.s, need, uint64(len(m.items)))
	if err != nil {
		return err
	}
	m.pre = pre
	m.st.read += fs.now() - tr
	m.st.readBlocks = uint64(len(need))
	if workers > 1 {
		m.st.pgcWorkers = workers
	}
	return nil
}

// hostPass moves every block the host copies (or finds dirty, to be
// written by the checkpoint) and sets the others aside for the device.
func (m *segMove) hostPass(ctx context.Context) error {
	fs, s, items := m.fs, m.s, m.items
	m.hostChunk = fs.cachedChunks(s, len(items), func(i int) (uint64, uint64, uint32) { return items[i].off, items[i].owner, items[i].ofs })
	for _, it := range items {
		if !m.still(it) {
			continue
		}
		var err error
		if it.ofs == ofsNode {
			err = m.hostNode(ctx, it)
		} else {
			err = m.hostData(ctx, it)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// hostNode moves one node block (moveNode), or sets it aside.
func (m *segMove) hostNode(ctx context.Context, it victimBlock) error {
	fs := m.fs
	in, err := fs.gcLock(ctx, m.s, it.off, it.owner, it.ofs)
	if err != nil || in == nil {
		return err
	}
	a := MakeAddr(m.s.zone, it.off)
	err = fs.moveNode(ctx, in, nidIdx(it.owner), it.owner, a, m.method, fs.opts.CachedWrite || m.hostChunk(it.off), &m.st, func() { m.devNode = append(m.devNode, it) })
	fs.unlockIn(in)
	return err
}

// hostData moves one data block through the page cache (read first, with
// no lock, when it will be host-copied), or sets it aside for the device.
func (m *segMove) hostData(ctx context.Context, it victimBlock) error {
	fs, s, epd := m.fs, m.s, m.epd
	off, owner, ofs := it.off, it.owner, it.ofs
	ino, idx := nidIno(owner), nidIdx(owner)
	a := MakeAddr(s.zone, off)
	var data []byte
	if m.method != Compact {
		if in := fs.ic.inodes[ino]; in == nil || in.pages.get(uint64(idx-1)*epd+uint64(ofs)) == nil {
			if data = m.pre[off]; data == nil {
				data = make([]byte, fs.bs)
				if err := fs.readBlocks(ctx, a, data); err != nil {
					return err
				}
			}
		}
	}
	in, err := fs.gcLock(ctx, s, off, owner, ofs)
	if err != nil || in == nil {
		return err
	}
	defer fs.unlockIn(in)
	d, err := fs.getDnode(ctx, in, idx, false)
	if err != nil {
		return err
	}
	if !m.still(it) {
		return nil
	}
	if d == nil || uint64(ofs) >= epd || d.addrs[ofs] != a {
		return corrupt("SSA", "block %v claims %#x[%d] which does not point at it", a, owner, ofs)
	}
	blk := uint64(idx-1)*epd + uint64(ofs)
	p := in.pages.get(blk)
	switch {
	case p != nil && p.dirty:
		m.st.hostDirty++
	case m.method == Compact && !(p != nil && (fs.opts.CachedWrite || m.hostChunk(off))):
		m.devData = append(m.devData, it)
	default:
		if p == nil {
			if data == nil {
				data = make([]byte, fs.bs)
				if err := fs.readBlocks(ctx, a, data); err != nil {
					return err
				}
			}
			if p = in.pages.get(blk); p == nil {
				p = &page{b: data}
				in.pages.set(blk, p)
				fs.ic.pages++
			}
			m.st.hostCopy++
		} else {
			m.st.hostCached++
		}
		p.cold = true
		fs.dirtyPage(in, blk, p)
	}
	return nil
}

// izcGroup copies list on the device into log temp's cold log
// (Volume.Compact) and commits every copy whose block did not change
// meanwhile.
func (m *segMove) izcGroup(ctx context.Context, temp int, list []victimBlock) error {
	fs, s := m.fs, m.s
	l := fs.logFor(temp)
	fs.lockLog(l)
	dsts, copies, err := fs.allocCopies(ctx, temp, s.zone, func(i int) uint64 { return list[i].off }, len(list))
	if err != nil {
		fs.lg.mu[l].Unlock()
		return err
	}
	var cst CompactStats
	tc := fs.now()
	err = fs.unlocked(func() error {
		var err error
		cst, err = fs.vol.Compact(ctx, copies)
		return err
	})
	m.st.copy += fs.now() - tc
	fs.stats.CompactCopyback += cst.Copyback
	fs.stats.CompactLocal += cst.Local
	fs.stats.CompactRemote += cst.Remote
	if err != nil {
		for _, c := range copies {
			if ds := fs.segs[c.Dst]; ds != nil {
				ds.closed = true
			}
		}
		if fs.lg.heads[l] != nil && fs.lg.heads[l].closed {
			fs.closeLog(ctx, l)
		}
		fs.lg.mu[l].Unlock()
		return err
	}
	fs.lg.mu[l].Unlock()
	fs.count.blocksWritten += uint64(len(list))
	for i, dv := range list {
		if err := m.izcCommit(ctx, dv, dsts[i]); err != nil {
			return err
		}
	}
	return nil
}

// izcCommit points the owner of victim block dv at its copy na, unless
// the block changed meanwhile (the copy at na then stays invalid).
func (m *segMove) izcCommit(ctx context.Context, dv victimBlock, na Addr) error {
	fs, s := m.fs, m.s
	old := MakeAddr(s.zone, dv.off)
	in, err := fs.gcLock(ctx, s, dv.off, dv.owner, dv.ofs)
	if err != nil || in == nil {
		return err // (nil: changed meanwhile)
	}
	if dv.ofs == ofsNode {
		if fs.nat[dv.owner] != old || fs.nodeDirty(in, nidIdx(dv.owner)) {
			fs.unlockIn(in)
			return nil
		}
		fs.invalidate(old)
		fs.nat[dv.owner] = na
		fs.cp.natDirty[dv.owner] = struct{}{}
	} else {
		d, err := fs.getDnode(ctx, in, nidIdx(dv.owner), false)
		if err != nil || d == nil {
			fs.unlockIn(in)
			return fmt.Errorf("lfs: load node %#x: %w", dv.owner, err)
		}
		blk := uint64(nidIdx(dv.owner)-1)*m.epd + uint64(dv.ofs)
		if d.addrs[dv.ofs] != old || !s.isValid(dv.off) || in.pages.get(blk) != nil && in.pages.get(blk).dirty {
			fs.unlockIn(in)
			return nil
		}
		fs.invalidate(old)
		d.addrs[dv.ofs] = na
		fs.markDnDirty(in, d)
	}
	err = fs.setValid(na, dv.owner, dv.ofs)
	fs.unlockIn(in)
	if err != nil {
		return err
	}
	m.st.izc++
	return nil
}

// account adds the round's figures to the statistics.
func (m *segMove) account() {
	fs, st := m.fs, &m.st
	fs.stats.MovedHostCopy += st.hostCopy
	fs.stats.MovedIZC += st.izc
	fs.stats.MovedHostDirty += st.hostDirty
	fs.stats.MovedHostCached += st.hostCached
	fs.stats.GCVictimBlocksRead += st.readBlocks
	if st.pgcWorkers > 1 {
		fs.stats.PGCSplitMigrations++
	}
}
