package lfs

import (
	"context"
	"log/slog"
	"sort"
)

type foundNode struct {
	a Addr
	h nodeHeader
	b []byte
}

// numNodeLogs is how many of the first logs hold nodes.
func (fs *FS) numNodeLogs() int {
	if fs.lg.n == numTemps {
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
			if err != nil || h.CPVer != fs.cp.ver {
				continue
			}
			out = append(out, foundNode{a: MakeAddr(z, off+i), h: h, b: append([]byte(nil), b...)})
		}
	}
	return out, nil
}

// recovery is the state of one mount's recovery, shared by its phases.
type recovery struct {
	fs     *FS
	zones  []ZoneInfo
	ml     *metaLog
	zinfo  map[ZoneID]ZoneInfo
	recTL  map[ZoneID]bool // TL log heads the checkpoint names
	tlZone map[ZoneID]bool // zones TL-opened by the last mount

	found     []foundNode       // nodes written after the checkpoint, by sequence
	lastFsync map[uint64]uint64 // ino -> sequence past its last fsynced node
	recovered map[uint64]bool   // inodes rolled forward
	// tornBatches counts the marked inodes not taken as fsync points: a
	// power loss kept them without every direct node of their batch.
	tornBatches int
}

// recoveryPhase is one named step of recovery.
type recoveryPhase struct {
	name string
	run  func(*recovery, context.Context) error
}

// recoveryPhases are the steps of recovery, in order.
var recoveryPhases = []recoveryPhase{
	{"classify-zones", (*recovery).classifyZones},
	{"scan-nodes", (*recovery).scanNodes},
	{"roll-forward", (*recovery).rollForward},
	{"trim-recovered", (*recovery).trimRecovered},
	{"settle-zones", (*recovery).settleZones},
	{"delete-orphans", (*recovery).deleteOrphans},
	{"count-reservations", func(rc *recovery, ctx context.Context) error { return rc.fs.loadPrealloc(ctx, rc.recovered) }},
}

// recover brings the loaded checkpoint up to date with the volume: roll
// forward fsynced nodes, finish half-written zones, reset zones the file
// system does not use, delete orphans, and checkpoint (recoveryPhases).
func (fs *FS) recover(ctx context.Context, zones []ZoneInfo, ml *metaLog) error {
	rc := &recovery{fs: fs, zones: zones, ml: ml, zinfo: map[ZoneID]ZoneInfo{},
		recTL: map[ZoneID]bool{}, tlZone: map[ZoneID]bool{},
		lastFsync: map[uint64]uint64{}, recovered: map[uint64]bool{}}
	for _, p := range recoveryPhases {
		if err := p.run(rc, ctx); err != nil {
			return err
		}
	}
	if rc.tornBatches > 0 {
		slog.Info("roll-forward: fsyncs cut short by the crash not rolled forward (their inodes stop at their previous fsync)", "torn_batches", rc.tornBatches)
	}
	fs.count.tornBatches += uint64(rc.tornBatches)
	fs.cp.cause = "mount"
	return fs.checkpoint(ctx, true)
}

// classifyZones finds the zones threaded logging opened and drops the
// segments whose zone is behind them (holding nothing valid).
//
// Threaded logging: a zone TL-opened by the last mount has its write
// pointer below the segment's written range, or, when the drive ended
// threaded logging on its reopen and plugged the valid blocks after the
// last hole, at capacity but not full (a segment the checkpoint knew fully
// written whose zone is not full was TL-opened since). The checkpoint
// names the TL log heads it knew; one TL-opened after it is still open
// (its last hole was kept unwritten until a record named it, see tlTry).
func (rc *recovery) classifyZones(context.Context) error {
	fs := rc.fs
	for _, z := range rc.zones {
		rc.zinfo[z.ID] = z
	}
	for _, z := range fs.cp.tl {
		rc.recTL[z] = true
	}
	if fs.sb.Features.Incompat&FeatureThreadedLog != 0 {
		for z, s := range fs.segs {
			if zi, ok := rc.zinfo[z]; ok && (rc.recTL[z] || zi.State == ZoneOpen && (zi.WP < s.wp || s.wp == s.cap)) {
				rc.tlZone[z] = true
			}
		}
	}
	for z, s := range fs.segs {
		zi, ok := rc.zinfo[z]
		if rc.tlZone[z] {
			continue
		}
		if !ok || zi.WP < s.wp {
			if s.nvalid > 0 {
				return corrupt("volume", "segment %d holds %d valid blocks up to %d but the zone's write pointer is %d", z, s.nvalid, s.wp, zi.WP)
			}
			delete(fs.segs, z)
		}
	}
	return nil
}

// scanNodes reads the node blocks written after the checkpoint: past the
// node logs' checkpointed cursors, in zones TL-opened since, and in zones
// no segment holds; it orders them by sequence and notes each inode's
// last fsync.
func (rc *recovery) scanNodes(ctx context.Context) error {
	fs := rc.fs
	scan := func(z ZoneID, from, to uint64) error {
		f, err := fs.scanNodes(ctx, z, from, to)
		rc.found = append(rc.found, f...)
		return err
	}
	for i, lz := range fs.cp.logs {
		if i >= fs.numNodeLogs() || lz == 0 {
			continue
		}
		z := lz - 1
		zi, ok := rc.zinfo[z]
		if !ok || fs.segs[z] == nil {
			continue
		}
		if err := scan(z, fs.cp.logWP[i], zi.WP); err != nil {
			return err
		}
	}
	for z := range rc.tlZone {
		if rc.recTL[z] {
			continue // a log head: scanned from its cursor above
		}
		// TL-opened after the checkpoint: every node the log wrote is in a
		// hole below the write pointer; the plugged blocks are older than
		// the checkpoint (the segment was stable) and are skipped by version
		if err := scan(z, 0, rc.zinfo[z].WP); err != nil {
			return err
		}
	}
	for _, zi := range rc.zones {
		if fs.segs[zi.ID] != nil || zi.ID == rc.ml.zone || zi.WP == 0 {
			continue
		}
		if err := scan(zi.ID, 0, zi.WP); err != nil {
			return err
		}
	}
	sort.Slice(rc.found, func(i, j int) bool { return rc.found[i].h.Seq < rc.found[j].h.Seq })
	bySeq := make(map[uint64]nodeHeader, len(rc.found))
	for _, f := range rc.found {
		bySeq[f.h.Seq] = f.h
	}
	for _, f := range rc.found {
		if f.h.Flags&nodeFlagFsync != 0 && batchWhole(f.h, bySeq) {
			rc.lastFsync[f.h.Ino] = f.h.Seq + 1
		} else if f.h.Flags&nodeFlagFsync != 0 {
			rc.tornBatches++
		}
		if f.h.Seq >= fs.count.nodeSeq {
			fs.count.nodeSeq = f.h.Seq + 1
		}
	}
	return nil
}

// batchWhole reports whether the marked inode h is an fsync point: always
// without nodeFlagBatch (its direct nodes were durable before it was
// written); with it, only when the Batch direct nodes written in the same
// write, the sequence numbers just before its own, were all found intact
// (a power loss during that write may have kept the inode without some of
// them; roll-forward then stops at the inode's previous fsync point).
func batchWhole(h nodeHeader, bySeq map[uint64]nodeHeader) bool {
	if h.Flags&nodeFlagBatch == 0 {
		return true
	}
	if uint64(h.Batch) > h.Seq {
		return false
	}
	for s := h.Seq - uint64(h.Batch); s < h.Seq; s++ {
		d, ok := bySeq[s]
		if !ok || d.Ino != h.Ino || d.Kind != nodeDirect {
			return false
		}
	}
	return true
}

// ensureSeg checks that a block a rolled-forward node names is written
// (below its zone's write pointer, also in a segment the checkpoint knows:
// such a segment may have been written past its checkpointed write
// pointer, but never past the zone's) and makes its segment known.
func (rc *recovery) ensureSeg(a Addr) error {
	fs := rc.fs
	z := a.Zone()
	zi, ok := rc.zinfo[z]
	if !ok || a.Off() >= zi.WP || z == rc.ml.zone {
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

// rollForward applies every node up to its inode's last fsync (NAT, SIT,
// SSA) and recounts the used blocks and nodes.
func (rc *recovery) rollForward(ctx context.Context) error {
	fs := rc.fs
	for _, f := range rc.found {
		if f.h.Seq >= rc.lastFsync[f.h.Ino] {
			continue
		}
		if err := rc.ensureSeg(f.a); err != nil {
			return err
		}
		nid := f.h.Nid
		old := fs.nat[nid]
		if f.h.Kind == nodeDirect {
			if err := rc.rollDirect(ctx, nid, old, f.b); err != nil {
				return err
			}
		}
		fs.invalidate(old)
		fs.nat[nid] = f.a
		fs.cp.natDirty[nid] = struct{}{}
		if err := fs.setValid(f.a, nid, ofsNode); err != nil {
			return err
		}
		rc.recovered[f.h.Ino] = true
	}
	fs.count.used = 0
	for _, s := range fs.segs {
		fs.count.used += s.nvalid
	}
	fs.count.nodes = uint64(len(fs.nat))
	return nil
}

// rollDirect moves the validity of the data blocks direct node nid names
// from its version at old (0: none) to the one in b.
func (rc *recovery) rollDirect(ctx context.Context, nid uint64, old Addr, b []byte) error {
	fs := rc.fs
	_, nw, err := decodeDirect(b)
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
			if err := rc.ensureSeg(nw[e]); err != nil {
				return err
			}
			if err := fs.setValid(nw[e], nid, uint32(e)); err != nil {
				return err
			}
		}
	}
	return nil
}

// trimRecovered drops the blocks of recovered inodes past their size,
// recounts their blocks and makes unlinked ones orphans.
func (rc *recovery) trimRecovered(ctx context.Context) error {
	fs := rc.fs
	if len(rc.recovered) == 0 {
		return nil
	}
	maxIdx := map[uint64]uint32{}
	for nid := range fs.nat {
		if ino := nidIno(nid); rc.recovered[ino] && nidIdx(nid) > maxIdx[ino] {
			maxIdx[ino] = nidIdx(nid)
		}
	}
	inos := make([]uint64, 0, len(rc.recovered))
	for ino := range rc.recovered {
		inos = append(inos, ino)
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	for _, ino := range inos {
		in, err := fs.getInode(ctx, ino)
		if err != nil {
			return err
		}
		bs := uint64(fs.bs)
		// the inode and its direct nodes may come from different points of
		// an fsync torn by the crash (nodes go to up to three logs): the
		// block count is counted again
		in.body.Blocks, in.body.BlocksKnown = 0, false
		if err := fs.freeFrom(ctx, in, (in.body.Size+bs-1)/bs, uint64(maxIdx[ino])*fs.epd()); err != nil {
			return err
		}
		if err := fs.countBlocks(ctx, in); err != nil {
			return err
		}
		fs.markDirty(in)
		if in.body.Nlink == 0 {
			fs.files.orphans[ino] = struct{}{}
		}
	}
	return nil
}

// settleZones finishes the written zones the file system keeps and resets
// the rest.
func (rc *recovery) settleZones(ctx context.Context) error {
	fs := rc.fs
	ids := make([]ZoneID, 0, len(rc.zones))
	for _, z := range rc.zones {
		ids = append(ids, z.ID)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		zi := rc.zinfo[id]
		if id == rc.ml.zone {
			continue
		}
		s := fs.segs[id]
		if s == nil {
			if err := fs.unlocked(func() error { return fs.vol.Reset(ctx, id) }); err != nil {
				return err
			}
			continue
		}
		if !rc.tlZone[id] {
			s.wp = zi.WP // (a TL zone keeps its written range: finish plugs the rest)
		}
		s.closed = true
		if zi.State != ZoneFull {
			if err := fs.unlocked(func() error { return fs.vol.Finish(ctx, id) }); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleteOrphans deletes the unlinked inodes no file handle survives to.
func (rc *recovery) deleteOrphans(ctx context.Context) error {
	for o := range rc.fs.files.orphans {
		if err := rc.fs.maybeDelete(ctx, o); err != nil {
			return err
		}
	}
	return nil
}
