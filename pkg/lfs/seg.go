package lfs

import (
	"context"
	"errors"
	"math/bits"
	"syscall"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Log indexes (F2FS temperature rules): node logs hold inodes and direct
// nodes, data logs hold file and dentry blocks.
//
//	hot node:  directory inodes and direct nodes
//	warm node: regular file / symlink inodes and direct nodes
//	cold node: node blocks moved by recycling
//	hot data:  dentry blocks (directory data)
//	warm data: regular file data written by users
//	cold data: data moved by recycling, files marked cold (user.lfs.cold xattr)
const (
	logHotNode = iota
	logWarmNode
	logColdNode
	logHotData
	logWarmData
	logColdData
	numTemps
)

var logNames = [numTemps]string{"hot_node", "warm_node", "cold_node", "hot_data", "warm_data", "cold_data"}

// segment is one in-use v-zone: its SIT entry (valid bitmap and count) and
// its SSA (owner of every written block).
type segment struct {
	zone    ZoneID
	wp      uint64 // blocks written
	cap     uint64
	valid   []uint64
	nvalid  uint64
	pending int      // blocks written but not yet committed (a write-back in flight): not a recycling candidate
	pins    int      // readers reading blocks of it with fs.mu released (no Reset meanwhile)
	owner   []uint64 // SSA: owner nid per block
	ofs     []uint32 // SSA: index in the owner (ofsNode for a node block)
	mtime   uint64   // node sequence at the last write into it
	log     int      // active log index, -1 when not a log head
	kind    int      // the log that last opened it (its type, for threaded logging), -1 unknown (a mount's segments)
	closed  bool     // no more writes (full, finished or abandoned)
	stable  bool     // closed at the last checkpoint and not written since (a threaded-logging candidate)
	victim  bool     // being moved by recycling (no threaded logging into it)
	// Threaded logging (tl.go): the segment was TL-opened and its log writes
	// into its holes; wp stays at cap (every block below it reads back).
	tl     bool
	tlRec  bool     // a checkpoint record names it as TL-opened
	tlCur  uint64   // next block the log considers
	tlEnd  uint64   // the log writes below this
	tlKeep []uint64 // blocks the drives preserve (valid or pre-invalid at TL_open)
	tlPlug uint64   // blocks kept (plugged by the drives) at TL_open
	tlPrev []uint64 // valid bitmap at its last TL_open (N_cold, β)
	tlCold []uint64 // its cold blocks at its last TL_open (valid then and at the one before; β)
}

func newSegment(z ZoneID, capBlocks uint64) *segment {
	return &segment{zone: z, cap: capBlocks, valid: make([]uint64, (capBlocks+63)/64),
		owner: make([]uint64, capBlocks), ofs: make([]uint32, capBlocks), log: -1, kind: -1}
}

func (s *segment) isValid(off uint64) bool {
	return off < s.cap && s.valid[off/64]&(1<<(off%64)) != 0
}

func (s *segment) popcount() uint64 {
	var n int
	for _, w := range s.valid {
		n += bits.OnesCount64(w)
	}
	return uint64(n)
}

// logFor maps a temperature to a log index given the number of logs.
func (fs *FS) logFor(t int) int {
	if fs.lg.n == numTemps {
		return t
	}
	if t <= logColdNode {
		return 0
	}
	return 1
}

// zoneClass is the ZoneClass of log li's zones: the log itself with the six
// logs; with two, the warm node or warm data class.
func (fs *FS) zoneClass(li int) ZoneClass {
	switch {
	case fs.lg.n == numTemps:
		return ZoneClass(li)
	case fs.logIsNode(li):
		return ClassWarmNode
	}
	return ClassWarmData
}

// logIsNode reports whether log li writes node blocks.
func (fs *FS) logIsNode(li int) bool {
	if fs.lg.n == numTemps {
		return li <= logColdNode
	}
	return li == 0
}

// segIsNode reports whether s holds node blocks (its first valid block is
// one; the logs never mix node and data blocks in a segment).
func segIsNode(s *segment) bool {
	for i, w := range s.valid {
		if w != 0 {
			off := uint64(i)*64 + uint64(bits.TrailingZeros64(w))
			return s.ofs[off] == ofsNode
		}
	}
	return false
}

// freeSegments is how many more v-zones the file system may open.
func (fs *FS) freeSegments() int {
	return fs.geo.MaxZones - metaZonesReserved - len(fs.segs) - fs.lg.opening - fs.deferredResets()
}

const metaZonesReserved = 2

func (fs *FS) segOf(a Addr) *segment {
	if a == 0 {
		return nil
	}
	return fs.segs[a.Zone()]
}

// touch records a validity change of a for the next checkpoint delta.
func (fs *FS) touch(a Addr, wasValid bool) {
	fs.cp.touched.add(a, wasValid)
}

// setValid marks a valid and records its owner (SIT + SSA).
func (fs *FS) setValid(a Addr, owner uint64, ofs uint32) error {
	s := fs.segOf(a)
	if s == nil || a.Off() >= s.cap {
		return corrupt("SIT", "block %v is in no segment", a)
	}
	off := a.Off()
	if s.isValid(off) {
		if s.owner[off] == owner && s.ofs[off] == ofs {
			return nil
		}
		return corrupt("SIT", "block %v already owned by %#x/%d, claimed by %#x/%d", a, s.owner[off], s.ofs[off], owner, ofs)
	}
	if was, ok := fs.cp.touched.get(a); ok && was && fs.gc.tl.preInvalid > 0 {
		fs.gc.tl.preInvalid-- // valid again (roll-forward)
	}
	fs.touch(a, false)
	s.valid[off/64] |= 1 << (off % 64)
	s.nvalid++
	s.owner[off] = owner
	s.ofs[off] = ofs
	return nil
}

// invalidate marks a invalid (a no-op for 0 or an already invalid block).
func (fs *FS) invalidate(a Addr) {
	s := fs.segOf(a)
	if s == nil {
		return
	}
	off := a.Off()
	if !s.isValid(off) {
		return
	}
	if was, ok := fs.cp.touched.get(a); !ok || was {
		fs.gc.tl.preInvalid++ // valid at the last checkpoint: pre-invalid until the next
	}
	fs.touch(a, true)
	s.valid[off/64] &^= 1 << (off % 64)
	s.nvalid--
}

// openSeg starts a new segment for log li: with threaded logging, a dirty
// segment TL-opened when hybrid segment recycling prefers it (tlOK: the
// caller can write into holes), else a new v-zone; like (at most one) is the
// zone whose blocks the segment will receive by compaction, a layout hint
// for a Volume that implements LikeOpener (copyback-aware allocation).
func (fs *FS) openSeg(ctx context.Context, li int, tlOK bool, like ...ZoneID) (*segment, error) {
	if tlOK {
		if s := fs.tlTry(ctx, li); s != nil {
			return s, nil
		}
		if fs.failed != nil {
			return nil, fs.failed
		}
	}
	s, err := fs.openZoneSeg(ctx, li, like...)
	if err != nil {
		return nil, err
	}
	fs.lg.heads[li] = s
	return s, nil
}

// openZoneSeg opens a new v-zone as a segment of log li (not yet any
// lane's head; fs.mu held, released for the OpenZone).
func (fs *FS) openZoneSeg(ctx context.Context, li int, like ...ZoneID) (*segment, error) {
	if fs.freeSegments() <= 0 {
		return nil, &zerr.NoResourcesError{Resource: "free segments", Requested: 1, Available: 0}
	}
	var z ZoneID
	fs.lg.opening++
	err := fs.unlocked(func() error {
		var err error
		if lo, ok := fs.vol.(LikeOpener); ok && len(like) > 0 && !fs.opts.NoCopybackAware {
			z, err = lo.OpenZoneLike(ctx, like[0])
		} else if co, ok := fs.vol.(ClassOpener); ok {
			z, err = co.OpenZoneFor(ctx, fs.zoneClass(li))
		} else {
			z, err = fs.vol.OpenZone(ctx)
		}
		return err
	})
	fs.lg.opening--
	if err != nil {
		return nil, err
	}
	if old := fs.segs[z]; old != nil {
		return nil, corrupt("volume", "OpenZone returned zone %d which is in use", z)
	}
	s := newSegment(z, fs.geo.ZoneBlocks)
	s.log, s.kind = li, li
	fs.segs[z] = s
	fs.m.segOpened()
	return s, nil
}

// closeLog retires the head segment of log li.
func (fs *FS) closeLog(ctx context.Context, li int) {
	s := fs.lg.heads[li]
	if s == nil {
		return
	}
	fs.lg.heads[li] = nil
	s.log = -1
	if s.tl {
		s.closed = true
		fs.tlRetire(ctx, s)
		return
	}
	fs.retire(ctx, s)
}

// retire closes s, no longer a log head (not threaded logging): a zone
// left below capacity is finished.
func (fs *FS) retire(ctx context.Context, s *segment) {
	if !s.closed {
		s.closed = true
		if s.wp < s.cap {
			// A zone left open counts against the volume's open zones
			// while the tables think it closed: read-only.
			fs.zoneOp(ctx, false, s.zone, "finish of a segment")
		}
	}
}

// lockLog takes the log lock of log l (fs.mu held on entry and return).
func (fs *FS) lockLog(l int) {
	if fs.lg.mu[l].TryLock() {
		return
	}
	fs.mu.Unlock()
	fs.lg.mu[l].Lock()
	fs.mu.Lock()
}

// appendBlocks writes n blocks (data holds n*bs bytes) to log li, possibly
// across segments, calling place(i, addr) for every block written. It holds
// one of the log's write lanes across the Write (appends to a zone are
// ordered by its write pointer) and releases fs.mu for it; place runs under
// fs.mu after the write; with fua every write is durable when it returns
// (Volume.Write's fua). data must not change meanwhile (the caller copied
// it, or holds the lock of the inode whose pages it is).
//
// Lane 0 is the log's own head under fs.lg.mu; a data log may have extra
// lanes (lanes.go), each writing its own segment, so that concurrent
// write-backs of one log are in flight on different zones at once.
func (fs *FS) appendBlocks(ctx context.Context, li int, data blockData, fua bool, place func(i int, a Addr) error) error {
	l := fs.logFor(li)
	j := fs.acquireLane(l)
	defer func() { fs.releaseLane(l, j) }()
	n := data.blocks(fs.bs)
	degraded := 0
	for i := 0; i < n; {
		s, ok, err := fs.appendHead(ctx, l, &j)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		off, k := appendRun(s, uint64(n-i))
		g := fs.m.logWrites.WithLabelValues(fs.logName(l))
		g.Inc()
		err = fs.unlocked(func() error { return fs.writeData(ctx, s.zone, off, data, i, i+int(k), fua) })
		g.Dec()
		if err != nil {
			adv, err := fs.appendFailed(ctx, l, j, s, off, err, &degraded, func(w int, a Addr) error { return place(i+w, a) })
			if err != nil {
				return err
			}
			i += adv
			continue
		}
		if s.tl {
			s.tlCur = off + k
		} else {
			s.wp += k
		}
		s.mtime = fs.count.nodeSeq
		fs.count.blocksWritten += k
		if fs.logIsNode(l) {
			fs.count.nodeBlocks += k
		}
		for j := 0; j < int(k); j++ {
			if err := place(i+j, MakeAddr(s.zone, off+uint64(j))); err != nil {
				return err
			}
		}
		i += int(k)
		if !s.tl && s.wp >= s.cap {
			s.closed = true
			fs.closeLane(ctx, l, j)
		}
	}
	return nil
}

// appendHead returns lane *j's head segment of log l when it takes writes
// (ok); otherwise it closes the head and opens the next one (or, for an
// extra lane with no room for another open zone, falls back to the log's
// own head: *j becomes 0), and the caller looks again.
func (fs *FS) appendHead(ctx context.Context, l int, j *int) (s *segment, ok bool, err error) {
	s = fs.laneHead(l, *j)
	if s != nil && s.tl && !s.closed {
		if _, run := s.tlNextRun(1); run == 0 {
			s.closed = true // no hole left
		}
	}
	if s != nil && !s.closed && (s.wp < s.cap || s.tl) {
		return s, true, nil
	}
	if s != nil {
		fs.closeLane(ctx, l, *j)
	}
	if *j == 0 {
		_, err = fs.openSeg(ctx, l, true)
		return nil, false, err
	}
	if s, err = fs.openLane(ctx, l, *j); s == nil && err == nil {
		// no room for another open zone: the log's own head
		fs.releaseLane(l, *j)
		*j = 0
		fs.lockLog(l)
	}
	return nil, false, err
}

// appendRun is where the next write into s goes and how many of want
// blocks it takes: at the write pointer up to the capacity, or the next
// run of holes of a TL segment.
func appendRun(s *segment, want uint64) (off, k uint64) {
	if s.tl {
		return s.tlNextRun(want)
	}
	return s.wp, min(want, s.cap-s.wp)
}

// appendFailed handles a failed write at off of segment s (lane j of log
// l): the zone is closed (its write pointer is unknown: never written
// again); a degraded zone's failure is ridden through (the blocks written
// are placed, their count returned, and the rest goes to a new segment)
// up to degradedTries times, any other is returned.
func (fs *FS) appendFailed(ctx context.Context, l, j int, s *segment, off uint64, err error, degraded *int, place func(w int, a Addr) error) (int, error) {
	var pw *PartialWriteError
	if errors.As(err, &pw) && !s.tl {
		s.wp += pw.Written
	}
	// closeLane finishes it (in the background: a degraded zone gives its
	// active resources back to the namespace at once); marking it closed
	// first skipped the finish, and after a node loss every degraded log
	// kept an active zone until the next mount, so the replacements ran out
	// of them.
	fs.closeLane(ctx, l, j)
	s.closed = true
	// A mirrored zone that lost a copy takes no more writes: the blocks not
	// written go to a new segment, placed on live nodes once the arbiter
	// sees the node gone (its lease, a few seconds): until then a new
	// segment may meet the same node, so the next tries wait 0.25, 0.5, 1,
	// then 2 s (about 10 s in all, fs.mu released) before giving up.
	if !zerr.IsDegraded(err) || *degraded >= degradedTries {
		return 0, err
	}
	if fs.degradedWait(ctx, *degraded) != nil {
		return 0, err
	}
	*degraded++
	if !errors.As(err, &pw) || s.tl || pw.Written == 0 {
		return 0, nil
	}
	for w := 0; w < int(pw.Written); w++ {
		if err := place(w, MakeAddr(s.zone, off+uint64(w))); err != nil {
			return 0, err
		}
	}
	fs.count.blocksWritten += pw.Written
	if fs.logIsNode(l) {
		fs.count.nodeBlocks += pw.Written
	}
	return int(pw.Written), nil
}

// blockData is what appendBlocks writes: one contiguous buffer (flat), or
// one buffer of a whole block per block (pages: a write-back's cached
// pages, which never change once cached, so they are written without a
// copy where the volume takes several buffers, VectorWriter).
type blockData struct {
	flat  []byte
	pages [][]byte
}

func (d blockData) blocks(bs int) int {
	if d.pages != nil {
		return len(d.pages)
	}
	return len(d.flat) / bs
}

// writeData writes blocks [i, j) of data to zone z at off (fs.mu not held):
// pages as they are where the volume takes several buffers, else gathered
// into a pooled buffer.
func (fs *FS) writeData(ctx context.Context, z ZoneID, off uint64, data blockData, i, j int, fua bool) error {
	bs := fs.bs
	if data.pages == nil {
		return fs.vol.Write(ctx, z, off, data.flat[i*bs:j*bs], fua)
	}
	if fs.lg.vecw != nil {
		return fs.lg.vecw.WriteV(ctx, z, off, data.pages[i:j], fua)
	}
	// A pooled buffer (bufpool): a fresh one per write-back cost more in
	// page faults and garbage collection than the copy. It goes back to
	// the pool only after a write that succeeded (see pkg/bufpool).
	buf := fs.lg.gather.Get((j - i) * bs)
	for k, p := range data.pages[i:j] {
		copy(buf[k*bs:(k+1)*bs], p)
	}
	err := fs.vol.Write(ctx, z, off, buf, fua)
	if err == nil {
		fs.lg.gather.Put(buf)
	}
	return err
}

// vectorWriter returns v's VectorWriter when its writes of several buffers
// need no gather copy (a retrying wrapper counts as its inner volume).
func vectorWriter(v Volume) VectorWriter {
	if r, ok := v.(*retrying); ok {
		if _, ok := r.Volume.(VectorWriter); !ok {
			return nil
		}
		return r
	}
	vw, _ := v.(VectorWriter)
	return vw
}

// readBlocks reads consecutive blocks at a with fs.mu released (held on
// entry and return). The segment is pinned meanwhile: a checkpoint that frees
// it waits for the pin before resetting the zone, so a reader that resolved a
// block before it was moved or overwritten still reads what it resolved.
func (fs *FS) readBlocks(ctx context.Context, a Addr, buf []byte) error {
	s := fs.segOf(a)
	if s != nil {
		s.pins++
	}
	err := fs.unlocked(func() error { return fs.vol.Read(ctx, a.Zone(), a.Off(), buf) })
	if s != nil {
		s.pins--
		if s.pins == 0 {
			fs.pinCond.Broadcast()
		}
	}
	return err
}

// errNoSpace is returned when the file system is full.
var errNoSpace = syscall.ENOSPC

// degradedTries bounds how often a write or checkpoint that met a degraded
// zone (a mirrored v-zone that lost a copy) moves on to a new zone.
const degradedTries = 8

// degradedWait is the pause before try n (from 0) of moving on from a
// degraded zone: none for the first, then 0.25 s doubling up to 2 s (about
// 10 s in all: the arbiter sees a lost node when its lease ends), with
// fs.mu released. It returns ctx's error if ctx ends meanwhile.
func (fs *FS) degradedWait(ctx context.Context, n int) error {
	if n == 0 || fs.clk.Kind() == clock.KindOff {
		return nil
	}
	wait := min(250*time.Millisecond<<(n-1), 2*time.Second)
	return fs.unlocked(func() error { return clock.Sleep(ctx, fs.clk, wait) })
}
