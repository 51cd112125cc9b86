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
	// appendBlocks' pipeline: tail is closed when the last write allocated
	// in the zone is done (the next one waits for it: a zone's writes reach
	// its write pointer in order); broken: a write failed, the zone takes
	// no more (wp is back at what landed); finished: its finish was issued.
	tail     chan struct{}
	broken   bool
	finished bool
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
	if fs.nlogs == numTemps {
		return t
	}
	if t <= logColdNode {
		return 0
	}
	return 1
}

// logIsNode reports whether log li writes node blocks.
func (fs *FS) logIsNode(li int) bool {
	if fs.nlogs == numTemps {
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
	return fs.geo.MaxZones - metaZonesReserved - len(fs.segs) - fs.opening - fs.deferredResets()
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
	if _, ok := fs.touched[a]; !ok {
		fs.touched[a] = wasValid
	}
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
	if was, ok := fs.touched[a]; ok && was && fs.tl.preInvalid > 0 {
		fs.tl.preInvalid-- // valid again (roll-forward)
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
	if was, ok := fs.touched[a]; !ok || was {
		fs.tl.preInvalid++ // valid at the last checkpoint: pre-invalid until the next
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
	if fs.freeSegments() <= 0 {
		return nil, &zerr.NoResourcesError{Resource: "free segments", Requested: 1, Available: 0}
	}
	var z ZoneID
	fs.opening++
	err := fs.unlocked(func() error {
		var err error
		if lo, ok := fs.vol.(LikeOpener); ok && len(like) > 0 && !fs.opts.NoCopybackAware {
			z, err = lo.OpenZoneLike(ctx, like[0])
		} else {
			z, err = fs.vol.OpenZone(ctx)
		}
		return err
	})
	fs.opening--
	if err != nil {
		return nil, err
	}
	if old := fs.segs[z]; old != nil {
		return nil, corrupt("volume", "OpenZone returned zone %d which is in use", z)
	}
	s := newSegment(z, fs.geo.ZoneBlocks)
	s.log, s.kind = li, li
	fs.segs[z] = s
	fs.logs[li] = s
	fs.m.segOpened()
	return s, nil
}

// closeLog retires the head segment of log li.
func (fs *FS) closeLog(ctx context.Context, li int) {
	s := fs.logs[li]
	if s == nil {
		return
	}
	fs.logs[li] = nil
	s.log = -1
	if s.tl {
		s.closed = true
		fs.tlRetire(ctx, s)
		return
	}
	if !s.closed {
		s.closed = true
		if s.wp < s.cap {
			// no finish under a write still in flight (appendBlocks)
			fs.waitTail(s)
		}
		if s.wp < s.cap && !s.finished {
			// A zone left open counts against the volume's open zones
			// while the tables think it closed: read-only.
			s.finished = true
			fs.zoneOp(ctx, false, s.zone, "finish of a segment")
		}
	}
}

// waitTail waits, fs.mu released, until no write appendBlocks allocated in
// s is in flight (fs.mu held on entry and return).
func (fs *FS) waitTail(s *segment) {
	for s.tail != nil {
		t := s.tail
		fs.mu.Unlock()
		<-t
		fs.mu.Lock()
		if s.tail == t {
			s.tail = nil
		}
	}
}

// lockLog takes the log lock of log l (fs.mu held on entry and return).
func (fs *FS) lockLog(l int) {
	if fs.logMu[l].TryLock() {
		return
	}
	fs.mu.Unlock()
	fs.logMu[l].Lock()
	fs.mu.Lock()
}

// appendBlocks writes n blocks (data holds n*bs bytes) to log li, possibly
// across segments, calling place(i, addr) under fs.mu for every block
// written, once its write completed (the indexes may come out of order when
// a write is retried). data must not change meanwhile (the caller copied it,
// or holds the lock of the inode whose pages it is).
//
// The log's lock is held only to allocate: the blocks get their addresses
// (the segment's wp moves past them, its pending count keeps recycling away)
// and the Volume writes run after it is released, so the next append of the
// log (another write-back, the next segment) is in flight meanwhile. Writes
// to one zone must reach its write pointer in order: each waits for the
// write allocated before it in the same zone (s.tail), and skips, to be
// allocated again elsewhere, when that one failed. One call's writes go one
// at a time, in order (reproducible for the power-loss tests); different
// callers' writes to different zones run concurrently. A threaded-logging
// head falls back to appendBlocksSync (holes, written in order under the log
// lock).
func (fs *FS) appendBlocks(ctx context.Context, li int, data []byte, place func(i int, a Addr) error) error {
	l := fs.logFor(li)
	bs := fs.bs
	todo := []blockSpan{{0, len(data) / bs}}
	degraded := 0
	for len(todo) > 0 {
		fs.lockLog(l)
		var chunks []*appendChunk
		var locked []blockSpan // left for the log-locked path (threaded logging)
		var err error
	alloc:
		for ti, sp := range todo {
			for sp.n > 0 {
				s := fs.logs[l]
				if s == nil || s.closed || s.broken || s.wp >= s.cap && !s.tl {
					if s != nil {
						fs.closeLog(ctx, l)
					}
					if s, err = fs.openSeg(ctx, l, true); err != nil {
						break alloc
					}
					continue
				}
				if s.tl {
					locked = append([]blockSpan{sp}, todo[ti+1:]...)
					break alloc
				}
				k := min(uint64(sp.n), s.cap-s.wp)
				c := &appendChunk{s: s, off: s.wp, k: k, i: sp.i, prev: s.tail, done: make(chan struct{})}
				s.tail = c.done
				s.wp += k
				s.pending += int(k)
				chunks = append(chunks, c)
				sp.i += int(k)
				sp.n -= int(k)
				if s.wp >= s.cap {
					// full once its writes land (the volume finishes a
					// full zone itself): no finish here
					fs.closeLog(ctx, l)
				}
			}
		}
		todo = todo[:0]
		if len(locked) > 0 && err == nil {
			// still under the log lock: the threaded-logging path
			err = fs.appendBlocksSync(ctx, l, data, locked, place)
		}
		fs.logMu[l].Unlock()
		if len(chunks) > 0 {
			// one write at a time, in order (a caller's writes reach the
			// Volume in a reproducible order); other callers' run meanwhile
			fs.mu.Unlock()
			for _, c := range chunks {
				fs.writeChunk(ctx, c, data)
			}
			fs.mu.Lock()
		}
		var werr error
		for _, c := range chunks {
			s := c.s
			s.pending -= int(c.k)
			if c.written > 0 {
				s.mtime = fs.nodeSeq
				fs.blocksWritten += c.written
			}
			for j := 0; j < int(c.written); j++ {
				if e := place(c.i+j, MakeAddr(s.zone, c.off+uint64(j))); e != nil && err == nil {
					err = e
				}
			}
			if c.written < c.k {
				todo = append(todo, blockSpan{c.i + int(c.written), int(c.k - c.written)})
			}
			if c.err == nil {
				continue
			}
			// The zone's write pointer is now unknown: never write it
			// again. It is finished (in the background: a degraded zone
			// gives its active resources back to the namespace at once).
			if werr == nil || zerr.IsDegraded(werr) {
				werr = c.err
			}
			if fs.logs[l] == s {
				fs.closeLog(ctx, l)
			} else if !s.finished {
				s.finished = true
				fs.zoneOp(ctx, false, s.zone, "finish of a segment")
			}
			s.closed = true
		}
		if err != nil {
			return err
		}
		if werr != nil {
			// A mirrored zone that lost a copy takes no more writes: the
			// blocks not written go to a new segment, placed on live
			// nodes once the arbiter sees the node gone (its lease, a few
			// seconds): until then a new segment may meet the same node,
			// so the next tries wait 0.25, 0.5, 1, then 2 s (about 10 s
			// in all, fs.mu released) before giving up.
			if !zerr.IsDegraded(werr) || degraded >= degradedTries {
				return werr
			}
			if fs.degradedWait(ctx, degraded) != nil {
				return werr
			}
			degraded++
		}
	}
	return nil
}

// blockSpan is n blocks of an append's data from block i.
type blockSpan struct{ i, n int }

// appendChunk is one Volume write of appendBlocks: k blocks of data from
// block i at off of zone s.zone, after the write allocated before it in that
// zone (prev, closed when that one is done; nil for none).
type appendChunk struct {
	s       *segment
	off, k  uint64
	i       int
	prev    chan struct{}
	done    chan struct{}
	written uint64 // blocks that landed (k, or fewer after a failure)
	err     error  // the write failed (not set when skipped)
}

// writeChunk writes c (fs.mu not held): after the write before it in its
// zone, unless that one failed (then c skips: nothing written, to be
// allocated again). A failure marks the segment broken and puts its wp back
// at what landed before c's done wakes the next write of the zone.
func (fs *FS) writeChunk(ctx context.Context, c *appendChunk, data []byte) {
	if c.prev != nil {
		<-c.prev
	}
	bs := uint64(fs.bs)
	fs.mu.Lock()
	broken := c.s.broken
	fs.mu.Unlock()
	var err error
	if !broken {
		err = fs.vol.Write(ctx, c.s.zone, c.off, data[uint64(c.i)*bs:(uint64(c.i)+c.k)*bs], false)
	}
	fs.mu.Lock()
	switch {
	case broken:
	case err == nil:
		c.written = c.k
	default:
		c.err = err
		var pw *PartialWriteError
		if errors.As(err, &pw) {
			c.written = min(pw.Written, c.k)
		}
		c.s.broken = true
		c.s.wp = c.off + c.written
	}
	fs.mu.Unlock()
	close(c.done)
}

// appendBlocksSync is the log-locked path of appendBlocks for a threaded-
// logging head (its writes go into holes, in order): it writes the spans of
// data one Volume write at a time with the log's lock held (the caller holds
// it and fs.mu) and fs.mu released for each write; place runs under fs.mu
// after the write.
func (fs *FS) appendBlocksSync(ctx context.Context, l int, data []byte, spans []blockSpan, place func(i int, a Addr) error) error {
	for _, sp := range spans {
		if err := fs.appendSpanSync(ctx, l, data[sp.i*fs.bs:(sp.i+sp.n)*fs.bs], func(i int, a Addr) error { return place(sp.i+i, a) }); err != nil {
			return err
		}
	}
	return nil
}

// appendSpanSync writes data to log li (its lock held) as appendBlocks did
// before the pipeline: one Volume write at a time.
func (fs *FS) appendSpanSync(ctx context.Context, li int, data []byte, place func(i int, a Addr) error) error {
	bs := fs.bs
	n := len(data) / bs
	degraded := 0
	for i := 0; i < n; {
		s := fs.logs[li]
		if s != nil && s.tl && !s.closed {
			if _, run := s.tlNextRun(1); run == 0 {
				s.closed = true // no hole left
			}
		}
		if s == nil || s.closed || s.wp >= s.cap && !s.tl {
			if s != nil {
				fs.closeLog(ctx, li)
			}
			var err error
			if s, err = fs.openSeg(ctx, li, true); err != nil {
				return err
			}
			continue
		}
		k := uint64(n - i)
		var off uint64
		if s.tl {
			off, k = s.tlNextRun(k)
		} else {
			if r := s.cap - s.wp; k > r {
				k = r
			}
			off = s.wp
		}
		err := fs.unlocked(func() error { return fs.vol.Write(ctx, s.zone, off, data[i*bs:(i+int(k))*bs], false) })
		if err != nil {
			// The zone's write pointer is now unknown: never write it again.
			var pw *PartialWriteError
			if errors.As(err, &pw) && !s.tl {
				s.wp += pw.Written
			}
			// closeLog finishes it (in the background: a degraded zone
			// gives its active resources back to the namespace at once);
			// marking it closed first skipped the finish, and after a node
			// loss every degraded log kept an active zone until the next
			// mount, so the replacements ran out of them.
			fs.closeLog(ctx, li)
			s.closed = true
			// A mirrored zone that lost a copy takes no more writes: the
			// blocks not written go to a new segment, placed on live
			// nodes once the arbiter sees the node gone (its lease, a few
			// seconds): until then a new segment may meet the same node,
			// so the next tries wait 0.25, 0.5, 1, then 2 s (about 10 s
			// in all, fs.mu released) before giving up.
			if zerr.IsDegraded(err) && degraded < degradedTries {
				if fs.degradedWait(ctx, degraded) != nil {
					return err
				}
				degraded++
				var pw *PartialWriteError
				if errors.As(err, &pw) && !s.tl && pw.Written > 0 {
					for j := 0; j < int(pw.Written); j++ {
						if err := place(i+j, MakeAddr(s.zone, off+uint64(j))); err != nil {
							return err
						}
					}
					fs.blocksWritten += pw.Written
					i += int(pw.Written)
				}
				continue
			}
			return err
		}
		if s.tl {
			s.tlCur = off + k
		} else {
			s.wp += k
		}
		s.mtime = fs.nodeSeq
		fs.blocksWritten += k
		for j := 0; j < int(k); j++ {
			if err := place(i+j, MakeAddr(s.zone, off+uint64(j))); err != nil {
				return err
			}
		}
		i += int(k)
		if !s.tl && s.wp >= s.cap {
			s.closed = true
			fs.closeLog(ctx, li)
		}
	}
	return nil
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
