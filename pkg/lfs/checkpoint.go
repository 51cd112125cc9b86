package lfs

import (
	"context"
	"sort"
	"time"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// checkpointer is the checkpoint component: the lock that makes a
// checkpoint exclusive (mutating operations hold it shared), the deltas
// since the last checkpoint (NAT entries, SIT validity), the metadata
// zones and the loaded checkpoint's log heads. Its state but the lock is
// guarded by FS.mu.
type checkpointer struct {
	mu       rankedRWMutex // mutating ops R, checkpoints W; readers never
	ver      uint64
	logs     []ZoneID // log heads (zone+1) of the last checkpoint
	logWP    []uint64
	tl       []ZoneID // TL-opened log heads of the loaded checkpoint (recover)
	prealloc []uint64 // inodes holding reservations in the loaded checkpoint (recover)
	running  bool     // a checkpoint is writing

	natDirty map[uint64]struct{}
	touched  touchLog // validity changes since the last checkpoint (and the validity at it)

	metaZone           ZoneID
	metaWP, metaEpoch  uint64
	metaSeq, sinceSnap uint64
	hasMeta            bool

	wrote     map[uint64]*inode // inodes with nodes the checkpoint in progress wrote (see checkpoint)
	lastWrite time.Duration     // the last checkpoint's data write-back (compaction phases)
	lastFlush time.Duration     // the last checkpoint's Flush (waits for the drives' copies and writes)
	lastData  uint64            // data blocks the last checkpoint's write-back wrote (α excludes them)
	cause     string            // why the next checkpoint is taken (metrics; "" = other)
	// begun numbers the checkpoints begun, committed is the number of the
	// last one that committed (FS.mu): a request for a checkpoint is
	// answered by any checkpoint begun after it (checkpointAfter).
	begun, committed uint64

	loadProblems []Problem // SIT/SSA disagreements the load found
	sitRepaired  bool      // the load made the SIT agree with the nodes (repair)
}

func (fs *FS) applyCheckpoint(cp *checkpoint) error {
	if cp.Full {
		fs.segs = map[ZoneID]*segment{}
		fs.nat = map[uint64]Addr{}
	}
	fs.cp.ver, fs.count.nodeSeq, fs.count.nextIno = cp.Version, cp.NextSeq, cp.NextIno
	old := fs.segs
	fs.segs = map[ZoneID]*segment{}
	for _, sr := range cp.Segments {
		s := old[sr.Zone]
		if s == nil {
			s = newSegment(sr.Zone, fs.geo.ZoneBlocks)
		}
		if sr.WP > s.cap {
			return corrupt("checkpoint", "segment %d write pointer %d past capacity %d", sr.Zone, sr.WP, s.cap)
		}
		s.wp, s.mtime, s.log = sr.WP, sr.Mtime, -1
		if cp.Full {
			if len(sr.Bitmap) != int((s.cap+7)/8) {
				return corrupt("checkpoint", "segment %d bitmap has %d bytes, want %d", sr.Zone, len(sr.Bitmap), (s.cap+7)/8)
			}
			for i := range s.valid {
				s.valid[i] = 0
			}
			for i, b := range sr.Bitmap {
				s.valid[i/8] |= uint64(b) << (8 * (i % 8))
			}
			s.nvalid = s.popcount()
		}
		fs.segs[sr.Zone] = s
	}
	fs.files.orphans = map[uint64]struct{}{}
	for _, o := range cp.Orphans {
		fs.files.orphans[o] = struct{}{}
	}
	for _, e := range cp.NAT {
		if e[1] == 0 {
			delete(fs.nat, e[0])
		} else {
			fs.nat[e[0]] = Addr(e[1])
		}
	}
	for _, a := range cp.Invalid {
		fs.invalidate(a)
	}
	for _, a := range cp.Valid {
		s := fs.segOf(a)
		if s == nil || a.Off() >= s.cap {
			return corrupt("checkpoint", "SIT delta marks %v valid, in no segment", a)
		}
		if !s.isValid(a.Off()) {
			s.valid[a.Off()/64] |= 1 << (a.Off() % 64)
			s.nvalid++
		}
	}
	fs.cp.logs, fs.cp.logWP, fs.cp.tl, fs.cp.prealloc = cp.Logs, cp.LogWP, cp.TL, cp.Prealloc
	return nil
}

// checkpoint writes back every dirty page and node, then appends a checkpoint
// record (a full snapshot in a new metadata zone when needed), then resets the
// segments that hold no valid block any more.
//
// Its node writes carry no fsync mark: until the record is durable, only the
// record would make them count, and roll-forward ignores them. They mark
// the nodes clean all the same, so a checkpoint that fails after writing
// some (a record, Flush or node write that failed) marks the inodes it wrote
// nodes of dirty again (notRecorded): the next fsync of such an inode then
// writes it with the fsync mark (roll-forward applies every node of an inode
// up to its last marked one, also the unmarked nodes this checkpoint wrote),
// instead of finding nothing dirty and acknowledging state that only the
// lost record covered.
func (fs *FS) checkpoint(ctx context.Context, forceSnapshot bool) (err error) {
	if fs.failed != nil {
		return fs.failed
	}
	if fs.cp.running {
		return nil
	}
	fs.cp.running = true
	fs.cp.wrote = map[uint64]*inode{}
	fs.cp.begun++
	seq := fs.cp.begun
	defer func() {
		if err != nil {
			fs.notRecorded()
		} else {
			fs.cp.committed = seq
		}
		fs.ipuCheckpointed(err == nil)
		fs.cp.running, fs.cp.wrote = false, nil
	}()
	fs.retryDeferred(ctx)
	fs.markAtimes()
	t0 := fs.now()
	if err := fs.cpWriteBack(ctx); err != nil {
		return err
	}
	free := fs.cpFreeable()
	cp := fs.buildCheckpoint(false, free)
	if err := fs.cpRecord(ctx, cp, forceSnapshot, free); err != nil {
		return err
	}
	fs.cpCommitted(ctx, cp, free, t0)
	return nil
}

// cpWriteBack writes the dirty pages and nodes and flushes the volume: the
// first phase of a checkpoint.
func (fs *FS) cpWriteBack(ctx context.Context) error {
	t0, b0 := fs.now(), fs.count.blocksWritten
	if err := fs.flushAll(ctx); err != nil {
		return err
	}
	fs.cp.lastWrite, fs.cp.lastData = fs.now()-t0, fs.count.blocksWritten-b0
	if err := fs.writeDirtyNodes(ctx, nil, nodesCheckpoint); err != nil {
		return err
	}
	tf := fs.now()
	if err := fs.unlocked(func() error { return fs.vol.Flush(ctx) }); err != nil {
		return err
	}
	fs.cp.lastFlush = fs.now() - tf
	return nil
}

// cpFreeable lists the segments this checkpoint frees: no valid block and
// not a log head, in zone order (resets in a reproducible order).
func (fs *FS) cpFreeable() []ZoneID {
	var free []ZoneID
	for z, s := range fs.segs {
		if s.nvalid == 0 && s.log < 0 {
			free = append(free, z)
		}
	}
	sort.Slice(free, func(i, j int) bool { return free[i] < free[j] })
	return free
}

// cpRecord writes checkpoint cp: a record appended to the metadata zone,
// or a new metadata zone with a full snapshot (forced, none yet, every
// 256 records, or no room). A failure it cannot ride through leaves the
// freed segments away from threaded logging (transient) or turns the file
// system read-only.
func (fs *FS) cpRecord(ctx context.Context, cp *checkpoint, forceSnapshot bool, free []ZoneID) error {
	payload := cp.encode()
	need := uint64(metaBlocks(len(payload), fs.bs))
	snap := forceSnapshot || !fs.cp.hasMeta || fs.cp.sinceSnap >= 256 ||
		fs.cp.metaWP+need+fs.snapshotReserve() > fs.geo.ZoneBlocks
	var err error
	if snap {
		err = fs.rotateMeta(ctx, fs.buildCheckpoint(true, free))
	} else {
		rec := encodeMetaRecord(metaRecord{Type: recCheckpoint, Epoch: fs.cp.metaEpoch, Seq: fs.cp.metaSeq, Payload: payload}, fs.bs)
		mz, mwp := fs.cp.metaZone, fs.cp.metaWP
		err = fs.unlocked(func() error { return fs.vol.Write(ctx, mz, mwp, rec, true) })
		if err == nil {
			fs.cp.metaWP += need
			fs.cp.metaSeq++
			fs.cp.sinceSnap++
			fs.count.blocksWritten += need
			fs.count.metaBlocks += need
		} else {
			// The metadata zone's tail is unknown now: continue in a new one.
			fs.cp.metaWP = fs.geo.ZoneBlocks
		}
	}
	// A mirrored metadata zone that lost a copy takes no more writes: the
	// checkpoint goes to a new metadata zone with a full snapshot at once
	// (the record may be on the live copies: a checkpoint of a state that
	// existed; the snapshot's higher epoch wins at a mount). New zones may
	// meet the lost node until the arbiter sees it gone: short waits.
	// The burst of replacement zones after a node loss can also meet the
	// namespace's active-zone limit while the degraded zones' finishes are
	// still giving their resources back: a rotation refused for want of
	// resources (nothing written) waits and tries again too.
	for tries := 0; err != nil && (zerr.IsDegraded(err) || tries > 0 && noResources(err)) && tries < degradedTries; tries++ {
		if fs.degradedWait(ctx, tries) != nil {
			break
		}
		err = fs.rotateMeta(ctx, fs.buildCheckpoint(true, free))
	}
	if err == nil {
		return nil
	}
	if transient(err) || noResources(err) {
		// No zone for a new metadata zone (nothing written), or a node is
		// unavailable: the record may or may not be on the drives. Both
		// are checkpoints of states that existed, and the next checkpoint
		// starts a new metadata zone with a full snapshot (metaWP was set
		// past the end). Until then the segments this record frees must
		// stay untouched (a mount from it resets them): no threaded
		// logging into them.
		for _, z := range free {
			if s := fs.segs[z]; s != nil {
				s.stable = false
			}
		}
		return err
	}
	// The record may or may not be on the drives and the drive is failing:
	// the tables cannot tell which checkpoint a mount would find.
	return fs.goReadOnly("checkpoint record write", err)
}

// cpCommitted ends a checkpoint whose record cp is on the drives: the
// deltas start over, the freed segments are dropped (once their readers
// left) and their zones reset, and the closed segments become stable.
func (fs *FS) cpCommitted(ctx context.Context, cp *checkpoint, free []ZoneID, t0 time.Duration) {
	fs.cp.ver = cp.Version
	fs.cp.natDirty = map[uint64]struct{}{}
	fs.cp.touched.reset()
	cause := fs.cp.cause
	if cause == "" {
		cause = "other"
	}
	fs.cp.cause = ""
	fs.stats.checkpointBy(cause)
	fs.tlAfterCheckpoint(ctx)
	fs.cp.logs, fs.cp.logWP = cp.Logs, cp.LogWP
	for _, in := range fs.ic.active {
		in.needCP = false
	}
	fs.ic.active = map[uint64]*inode{}
	for _, z := range free {
		s := fs.segs[z]
		delete(fs.segs, z)
		for s != nil && s.pins > 0 {
			fs.pinCond.Wait() // a reader still reads a block it resolved before
		}
	}
	// The zones are free in the checkpoint (a mount resets them); they are
	// reset together (one arbiter change for all over fsvol); a reset that
	// fails while a node is unavailable is retried (zoneOp).
	fs.resetZones(ctx, free, "reset of a freed segment")
	// closed segments are stable now: threaded logging may reuse their
	// holes (every block in them is older than this record)
	for _, s := range fs.segs {
		s.stable = s.closed && s.log < 0 && !s.tl
	}
	fs.stats.Checkpoints++
	fs.m.checkpoint(fs.since(t0), cause)
}

// notRecorded runs when a checkpoint failed (fs.mu held): its record may
// not be on the drives, so the nodes it wrote (unmarked) may not count at a
// mount. Their inodes are dirty again: an fsync must write them with the
// fsync mark, and the next checkpoint writes them again. An inode deleted
// meanwhile is left alone (its NAT entries go with the next record).
func (fs *FS) notRecorded() {
	for ino, in := range fs.cp.wrote {
		if in.gone || fs.ic.inodes[ino] != in {
			continue
		}
		fs.markDirty(in)
	}
}

// snapshotReserve is the room kept in the metadata zone for the next snapshot estimate.
func (fs *FS) snapshotReserve() uint64 { return 2 }

func (fs *FS) buildCheckpoint(full bool, free []ZoneID) *checkpoint {
	isFree := map[ZoneID]bool{}
	for _, z := range free {
		isFree[z] = true
	}
	cp := &checkpoint{Full: full, Version: fs.cp.ver + 1, NextSeq: fs.count.nodeSeq, NextIno: fs.count.nextIno, Used: fs.count.used,
		HasTL: fs.sb.Features.Incompat&FeatureThreadedLog != 0, TL: fs.tlZones(),
		HasPrealloc: fs.sb.Features.Incompat&FeaturePrealloc != 0, Prealloc: fs.preallocList()}
	zs := make([]ZoneID, 0, len(fs.segs))
	for z := range fs.segs {
		if !isFree[z] {
			zs = append(zs, z)
		}
	}
	sort.Slice(zs, func(i, j int) bool { return zs[i] < zs[j] })
	for _, z := range zs {
		s := fs.segs[z]
		cp.Segments = append(cp.Segments, segRec{Zone: z, WP: s.wp, Mtime: s.mtime})
	}
	for _, s := range fs.lg.heads {
		if s == nil {
			cp.Logs = append(cp.Logs, 0)
			cp.LogWP = append(cp.LogWP, 0)
		} else if s.tl {
			cp.Logs = append(cp.Logs, s.zone+1)
			cp.LogWP = append(cp.LogWP, s.tlCur) // roll-forward scans from the log's cursor
		} else {
			cp.Logs = append(cp.Logs, s.zone+1)
			cp.LogWP = append(cp.LogWP, s.wp)
		}
	}
	for o := range fs.files.orphans {
		cp.Orphans = append(cp.Orphans, o)
	}
	sort.Slice(cp.Orphans, func(i, j int) bool { return cp.Orphans[i] < cp.Orphans[j] })
	if full {
		for nid, a := range fs.nat {
			cp.NAT = append(cp.NAT, [2]uint64{nid, uint64(a)})
		}
		for i := range cp.Segments {
			s := fs.segs[cp.Segments[i].Zone]
			bm := make([]byte, (s.cap+7)/8)
			for j := range bm {
				bm[j] = byte(s.valid[j/8] >> (8 * (j % 8)))
			}
			cp.Segments[i].Bitmap = bm
		}
	} else {
		for nid := range fs.cp.natDirty {
			cp.NAT = append(cp.NAT, [2]uint64{nid, uint64(fs.nat[nid])})
		}
		fs.cp.touched.each(func(a Addr, was bool) {
			s := fs.segOf(a)
			now := s != nil && s.isValid(a.Off())
			switch {
			case now && !was:
				cp.Valid = append(cp.Valid, a)
			case !now && was:
				cp.Invalid = append(cp.Invalid, a)
			}
		})
	}
	sort.Slice(cp.NAT, func(i, j int) bool { return cp.NAT[i][0] < cp.NAT[j][0] })
	sort.Slice(cp.Valid, func(i, j int) bool { return cp.Valid[i] < cp.Valid[j] })
	sort.Slice(cp.Invalid, func(i, j int) bool { return cp.Invalid[i] < cp.Invalid[j] })
	return cp
}

// rotateMeta opens a new metadata zone, writes the superblock and a snapshot
// there, and resets the previous metadata zone.
func (fs *FS) rotateMeta(ctx context.Context, cp *checkpoint) error {
	payload := cp.encode()
	epoch := fs.cp.metaEpoch + 1
	sup := encodeMetaRecord(metaRecord{Type: recSuper, Epoch: epoch, Seq: 0, Payload: fs.sb.encode()}, fs.bs)
	snap := encodeMetaRecord(metaRecord{Type: recSnapshot, Epoch: epoch, Seq: 1, Payload: payload}, fs.bs)
	total := uint64((len(sup) + len(snap)) / fs.bs)
	if total > fs.geo.ZoneBlocks {
		return &zerr.NoResourcesError{Resource: "metadata zone blocks (snapshot too large)", Requested: total, Available: fs.geo.ZoneBlocks}
	}
	var z ZoneID
	if err := fs.unlocked(func() error {
		var err error
		if co, ok := fs.vol.(ClassOpener); ok {
			z, err = co.OpenZoneFor(ctx, ClassMeta)
		} else {
			z, err = fs.vol.OpenZone(ctx)
		}
		return err
	}); err != nil {
		return err
	}
	buf := append(sup, snap...)
	if err := fs.unlocked(func() error { return fs.vol.Write(ctx, z, 0, buf, true) }); err != nil {
		fs.noteBackground(bgReset, fs.unlocked(func() error { return fs.vol.Reset(ctx, z) }))
		return err
	}
	fs.count.blocksWritten += total
	fs.count.metaBlocks += total
	old, had := fs.cp.metaZone, fs.cp.hasMeta
	fs.cp.metaZone, fs.cp.metaWP, fs.cp.metaEpoch, fs.cp.metaSeq, fs.cp.sinceSnap, fs.cp.hasMeta = z, total, epoch, 2, 0, true
	if had {
		// The old metadata zone is no longer referenced (the checkpoint is
		// complete, so this call succeeds); a failed reset leaves it for the
		// next mount's sweep of unreferenced zones, but the volume still
		// counts it: go read-only rather than run on with a wrong count.
		fs.zoneOp(ctx, true, old, "reset of the previous metadata zone")
	}
	return nil
}
