package lfs

import (
	"context"
	"sort"
)

type foundNode struct {
	a Addr
	h nodeHeader
	b []byte
}

// numNodeLogs is how many of the first logs hold nodes.
func (fs *FS) numNodeLogs() int {
	if fs.nlogs == numTemps {
		return 3
	}
	return 1
}

// scanNodes reads blocks [from, to) of zone z and returns the node blocks
// written after the loaded checkpoint.
func (fs *FS) scanNodes(ctx context.Context, z ZoneID, from, to uint64) ([]foundNode, error) {
	var out []foundNode
	const chunk = 64
	buf := make([]byte, chunk*fs.bs)
	for off := from; off < to; off += chunk {
		n := min(uint64(chunk), to-off)
		if err := fs.unlocked(func() error { return fs.vol.Read(ctx, z, off, buf[:n*uint64(fs.bs)]) }); err != nil {
			return nil, err
		}
		for i := uint64(0); i < n; i++ {
			b := buf[i*uint64(fs.bs) : (i+1)*uint64(fs.bs)]
			h, err := decodeNodeHeader(b)
			if err != nil || h.CPVer != fs.cpVer {
				continue
			}
			out = append(out, foundNode{a: MakeAddr(z, off+i), h: h, b: append([]byte(nil), b...)})
		}
	}
	return out, nil
}

// recover brings the loaded checkpoint up to date with the volume: roll
// forward fsynced nodes, finish half-written zones, reset zones the file
// system does not use, delete orphans, and checkpoint.
func (fs *FS) recover(ctx context.Context, zones []ZoneInfo, ml *metaLog) error {
	zinfo := map[ZoneID]ZoneInfo{}
	for _, z := range zones {
		zinfo[z.ID] = z
	}
	// Threaded logging: a zone TL-opened by the last mount has its write
	// pointer below the segment's written range, or, when the drive ended
	// threaded logging on its reopen and plugged the valid blocks after the
	// last hole, at capacity but not full (a segment the checkpoint knew
	// fully written whose zone is not full was TL-opened since). The
	// checkpoint names the TL log heads it knew; one TL-opened after it is
	// still open (its last hole was kept unwritten until a record named it,
	// see tlTry).
	recTL := map[ZoneID]bool{}
	for _, z := range fs.cpTL {
		recTL[z] = true
	}
	tlZone := map[ZoneID]bool{}
	if fs.sb.Features.Incompat&FeatureThreadedLog != 0 {
		for z, s := range fs.segs {
			if zi, ok := zinfo[z]; ok && (recTL[z] || zi.State == ZoneOpen && (zi.WP < s.wp || s.wp == s.cap)) {
				tlZone[z] = true
			}
		}
	}
	for z, s := range fs.segs {
		zi, ok := zinfo[z]
		if tlZone[z] {
			continue
		}
		if !ok || zi.WP < s.wp {
			if s.nvalid > 0 {
				return corrupt("volume", "segment %d holds %d valid blocks up to %d but the zone's write pointer is %d", z, s.nvalid, s.wp, zi.WP)
			}
			delete(fs.segs, z)
		}
	}
	// roll forward
	var found []foundNode
	for i, lz := range fs.cpLogs {
		if i >= fs.numNodeLogs() || lz == 0 {
			continue
		}
		z := lz - 1
		zi, ok := zinfo[z]
		if !ok || fs.segs[z] == nil {
			continue
		}
		f, err := fs.scanNodes(ctx, z, fs.cpLogWP[i], zi.WP)
		if err != nil {
			return err
		}
		found = append(found, f...)
	}
	for z := range tlZone {
		if recTL[z] {
			continue // a log head: scanned from its cursor above
		}
		// TL-opened after the checkpoint: every node the log wrote is in a
		// hole below the write pointer; the plugged blocks are older than
		// the checkpoint (the segment was stable) and are skipped by version
		f, err := fs.scanNodes(ctx, z, 0, zinfo[z].WP)
		if err != nil {
			return err
		}
		found = append(found, f...)
	}
	for _, zi := range zones {
		if fs.segs[zi.ID] != nil || zi.ID == ml.zone || zi.WP == 0 {
			continue
		}
		f, err := fs.scanNodes(ctx, zi.ID, 0, zi.WP)
		if err != nil {
			return err
		}
		found = append(found, f...)
	}
	sort.Slice(found, func(i, j int) bool { return found[i].h.Seq < found[j].h.Seq })
	lastFsync := map[uint64]uint64{}
	for _, f := range found {
		if f.h.Flags&nodeFlagFsync != 0 {
			lastFsync[f.h.Ino] = f.h.Seq + 1
		}
		if f.h.Seq >= fs.nodeSeq {
			fs.nodeSeq = f.h.Seq + 1
		}
	}
	// ensureSeg checks that a block a rolled-forward node names is written
	// (below its zone's write pointer, also in a segment the checkpoint
	// knows: such a segment may have been written past its checkpointed
	// write pointer, but never past the zone's) and makes its segment known.
	ensureSeg := func(a Addr) error {
		z := a.Zone()
		zi, ok := zinfo[z]
		if !ok || a.Off() >= zi.WP || z == ml.zone {
			return corrupt("roll-forward", "block %v is not written", a)
		}
		if fs.segs[z] != nil {
			return nil
		}
		s := newSegment(z, fs.geo.ZoneBlocks)
		s.wp = zi.WP
		fs.segs[z] = s
		return nil
	}
	recovered := map[uint64]bool{}
	for _, f := range found {
		if f.h.Seq >= lastFsync[f.h.Ino] {
			continue
		}
		if err := ensureSeg(f.a); err != nil {
			return err
		}
		nid := f.h.Nid
		old := fs.nat[nid]
		if f.h.Kind == nodeDirect {
			_, nw, err := decodeDirect(f.b)
			if err != nil {
				return err
			}
			ow := make([]Addr, len(nw))
			if old != 0 {
				ob, err := fs.readNode(ctx, nid)
				if err != nil {
					return err
				}
				if _, ow, err = decodeDirect(ob); err != nil {
					return err
				}
			}
			for e := range nw {
				if nw[e] == ow[e] {
					continue
				}
				fs.invalidate(ow[e])
				if nw[e] != 0 {
					if err := ensureSeg(nw[e]); err != nil {
						return err
					}
					if err := fs.setValid(nw[e], nid, uint32(e)); err != nil {
						return err
					}
				}
			}
		}
		fs.invalidate(old)
		fs.nat[nid] = f.a
		fs.natDirty[nid] = struct{}{}
		if err := fs.setValid(f.a, nid, ofsNode); err != nil {
			return err
		}
		recovered[f.h.Ino] = true
	}
	fs.used = 0
	for _, s := range fs.segs {
		fs.used += s.nvalid
	}
	fs.nodes = uint64(len(fs.nat))
	// recovered inodes: drop blocks past their size; delete unlinked ones
	if len(recovered) > 0 {
		maxIdx := map[uint64]uint32{}
		for nid := range fs.nat {
			if ino := nidIno(nid); recovered[ino] && nidIdx(nid) > maxIdx[ino] {
				maxIdx[ino] = nidIdx(nid)
			}
		}
		inos := make([]uint64, 0, len(recovered))
		for ino := range recovered {
			inos = append(inos, ino)
		}
		sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
		for _, ino := range inos {
			in, err := fs.getInode(ctx, ino)
			if err != nil {
				return err
			}
			bs := uint64(fs.bs)
			// the inode and its direct nodes may come from different
			// points of an fsync torn by the crash (nodes go to up to
			// three logs): the block count is counted again
			in.body.Blocks, in.body.BlocksKnown = 0, false
			if err := fs.freeFrom(ctx, in, (in.body.Size+bs-1)/bs, uint64(maxIdx[ino])*fs.epd()); err != nil {
				return err
			}
			if err := fs.countBlocks(ctx, in); err != nil {
				return err
			}
			fs.markDirty(in)
			if in.body.Nlink == 0 {
				fs.orphans[ino] = struct{}{}
			}
		}
	}
	// zones: finish the written ones we keep, reset the rest
	ids := make([]ZoneID, 0, len(zones))
	for _, z := range zones {
		ids = append(ids, z.ID)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		zi := zinfo[id]
		if id == ml.zone {
			continue
		}
		s := fs.segs[id]
		if s == nil {
			if err := fs.unlocked(func() error { return fs.vol.Reset(ctx, id) }); err != nil {
				return err
			}
			continue
		}
		if !tlZone[id] {
			s.wp = zi.WP // (a TL zone keeps its written range: finish plugs the rest)
		}
		s.closed = true
		if zi.State != ZoneFull {
			if err := fs.unlocked(func() error { return fs.vol.Finish(ctx, id) }); err != nil {
				return err
			}
		}
	}
	for o := range fs.orphans {
		if err := fs.maybeDelete(ctx, o); err != nil {
			return err
		}
	}
	fs.cpCause = "mount"
	return fs.checkpoint(ctx, true)
}
