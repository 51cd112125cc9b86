package lfs

import (
	"context"
	"errors"
	"slices"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// In-place update for tiny fsyncs (ZMS §4.2, budget-based in-place update).
//
// An fsync whose dirty pages are few (Options.IPUFsyncBlocks) and all
// overwrite blocks the file already has writes them where they are, through
// the Volume's optional Overwriter (the drives' Flags.Overwrite), instead of
// appending them to a data log: their addresses do not change, so no direct
// node is written, and an fdatasync that changed no size writes no inode
// either. The drives bound the in-place updated blocks by their budget; when
// it is spent (zerr.IPUBudgetError) the pages go to the log as without the
// option. A power loss during an in-place update leaves each block its old
// or its new contents (the drive's slot is durable before its mapping, see
// pkg/zns).
//
// Recycling never moves a block while an in-place update of it is in
// flight: updates skip victim and threaded-logging segments, and a victim's
// move first waits for the updates already in flight into it
// (ipuQuiesce), so neither a host copy nor a device copy can carry the old
// contents past the new ones. The update itself runs with fs.mu released
// and the inode lock held: nothing else changes the file's pages or
// addresses meanwhile.

// Overwriter is the optional Volume interface of in-place updates.
type Overwriter interface {
	// Overwrite replaces blocks [off, off+len(data)/BlockSize) of zone z,
	// all below its write pointer, in place. The new contents are durable
	// against power loss when it returns; a power loss during it leaves
	// each block old or new. It returns a zerr.IPUBudgetError, changing
	// nothing, when the drives' in-place update budget is spent, and a
	// zerr.InvalidArgumentError or zerr.ZoneStateError when the volume
	// cannot update these blocks in place (its redundancy, a zone being
	// filled by a compaction); the file system then logs them.
	Overwrite(ctx context.Context, z ZoneID, off uint64, data []byte) error
}

// ipuState is the in-place update bookkeeping (fs.mu).
type ipuState struct {
	busy map[*segment]int // in-place updates in flight per segment
}

// ipuFsync writes in's dirty pages in place when the fsync qualifies (in.mu
// and fs.mu held, no write-back of in in flight). It reports whether every
// dirty page was written so; pages it could not (a spent budget) stay
// dirty for the log. It returns an error only when an update failed
// otherwise.
func (fs *FS) ipuFsync(ctx context.Context, in *inode) (bool, error) {
	ow := overwriter(fs.vol)
	if ow == nil || fs.opts.IPUFsyncBlocks <= 0 || len(in.dirtyBlks) == 0 || len(in.dirtyBlks) > fs.opts.IPUFsyncBlocks || !in.isReg() {
		return false, nil
	}
	// Only while the size is the one the last fsync-marked inode recorded:
	// an update in place is visible after a crash without any node, so it
	// must not come with a new size that a crash could lose (the block
	// would then read as neither version of the file).
	if !in.ipu.sizeOK || in.ipu.size != in.body.Size || in.needCP {
		return false, nil
	}
	runs, ok, err := fs.ipuRuns(ctx, in)
	if err != nil || !ok {
		return false, err
	}
	for _, r := range runs {
		done, err := fs.ipuRun(ctx, ow, in, r)
		if err != nil || !done {
			return false, err
		}
	}
	return true, nil
}

// ipuBlock is one dirty page to update in place.
type ipuBlock struct {
	blk uint64
	p   *page
	gen uint64
}

// ipuRunT is a run of dirty pages at consecutive addresses of one segment.
type ipuRunT struct {
	s      *segment
	a      Addr
	blocks []ipuBlock
}

// ipuRuns plans the update: every dirty page must be mapped to a block of a
// segment that recycling and threaded logging leave alone (fs.mu held).
func (fs *FS) ipuRuns(ctx context.Context, in *inode) ([]ipuRunT, bool, error) {
	blks := make([]uint64, 0, len(in.dirtyBlks))
	for b, p := range in.dirtyBlks {
		if !p.dirty || p.inflight {
			return nil, false, nil
		}
		blks = append(blks, b)
	}
	slices.Sort(blks)
	var runs []ipuRunT
	for _, b := range blks {
		a, err := fs.blockAddr(ctx, in, b)
		if err != nil {
			return nil, false, err
		}
		p := in.pages.get(b)
		if a == 0 || p == nil || !p.dirty || p.inflight || p.cold || len(p.b) != fs.bs {
			// a hole (a new block), changed while a node loaded, or moved
			// by recycling (its victim waits for it to leave)
			return nil, false, nil
		}
		s := fs.segOf(a)
		if s == nil || s.victim || s.tl || a.Off() >= s.wp {
			return nil, false, nil
		}
		if n := len(runs); n > 0 && runs[n-1].s == s && runs[n-1].a+Addr(len(runs[n-1].blocks)) == a {
			runs[n-1].blocks = append(runs[n-1].blocks, ipuBlock{b, p, p.gen})
			continue
		}
		runs = append(runs, ipuRunT{s: s, a: a, blocks: []ipuBlock{{b, p, p.gen}}})
	}
	return runs, len(runs) > 0, nil
}

// ipuRun updates one run in place (fs.mu held, released for the write) and
// cleans its pages. It reports false when the run was not written (the
// budget is spent, or recycling took the segment meanwhile).
func (fs *FS) ipuRun(ctx context.Context, ow Overwriter, in *inode, r ipuRunT) (bool, error) {
	if r.s.victim || r.s.tl || fs.segs[r.a.Zone()] != r.s {
		return false, nil
	}
	buf := make([]byte, 0, len(r.blocks)*fs.bs)
	for _, b := range r.blocks {
		buf = append(buf, b.p.b...)
	}
	if fs.ipu.busy == nil {
		fs.ipu.busy = map[*segment]int{}
	}
	fs.ipu.busy[r.s]++
	r.s.pins++ // no Reset of its zone meanwhile
	err := fs.unlocked(func() error { return ow.Overwrite(ctx, r.a.Zone(), r.a.Off(), buf) })
	r.s.pins--
	if fs.ipu.busy[r.s]--; fs.ipu.busy[r.s] == 0 {
		delete(fs.ipu.busy, r.s)
	}
	fs.pinCond.Broadcast()
	if err != nil {
		// a spent budget, or blocks the volume will not update in place
		// now (a zone a device compaction still fills, a redundancy
		// without in-place updates): nothing changed, the log takes them
		if errors.Is(err, zerr.ErrIPUBudget) || errors.Is(err, zerr.ErrInvalidArgument) || errors.Is(err, zerr.ErrZoneState) || errors.Is(err, zerr.ErrTLViolation) {
			fs.stats.IPUFallbacks++
			return false, nil
		}
		return false, err
	}
	for _, b := range r.blocks {
		if b.p.gen == b.gen && b.p.dirty && in.pages.get(b.blk) == b.p {
			b.p.dirty = false
			fs.ic.dirtyPages--
			fs.cleanDirtyBlk(in, b.blk)
		}
	}
	fs.stats.IPUBlocks += uint64(len(r.blocks))
	fs.count.blocksWritten += uint64(len(r.blocks))
	fs.count.userBlocks += uint64(len(r.blocks))
	fs.count.userData += uint64(len(r.blocks))
	fs.m.blocks("ipu", len(r.blocks))
	return true, nil
}

// ipuQuiesce waits until no in-place update into s is in flight (fs.mu
// held; s is already a victim, so no new one starts).
func (fs *FS) ipuQuiesce(s *segment) {
	for fs.ipu.busy[s] > 0 {
		fs.pinCond.Wait()
	}
}

// ipuInode is what an inode knows of its durable size (fs.mu).
type ipuInode struct {
	size      uint64 // the size the drives hold, if sizeOK
	sizeOK    bool
	cpSize    uint64 // the size a running checkpoint wrote, if cpPending
	cpPending bool
}

// wrote notes that an inode node recording size was written: durable now
// when it carried the fsync mark (written with FUA), else once the
// checkpoint that wrote it commits (ipuCheckpointed).
func (u *ipuInode) wrote(size uint64, marked bool) {
	if marked {
		u.size, u.sizeOK = size, true
		return
	}
	u.sizeOK = false
	u.cpSize, u.cpPending = size, true
}

// ipuCheckpointed runs when a checkpoint ended (fs.mu held, the checkpoint
// lock exclusive: no fsync wrote a marked inode meanwhile): the inodes it
// wrote have the sizes it recorded durable if it committed; if it failed,
// unknown ones.
func (fs *FS) ipuCheckpointed(committed bool) {
	for _, in := range fs.cp.wrote {
		if in.ipu.cpPending {
			in.ipu.cpPending = false
			if committed {
				in.ipu.size, in.ipu.sizeOK = in.ipu.cpSize, true
			}
		}
	}
}

// ipuNodesDone reports whether an fdatasync whose pages all went in place
// is complete without writing nodes: no direct node is dirty (the size is
// the durable one, see ipuFsync; in.mu and fs.mu held). Timestamps are not
// data (fdatasync(2)).
func (fs *FS) ipuNodesDone(in *inode) bool {
	for _, d := range in.dn {
		if d.dirty {
			return false
		}
	}
	return true
}

// overwriter returns v's Overwriter (with the retries of a retrying
// volume), nil when it has none.
func overwriter(v Volume) Overwriter {
	r, ok := v.(*retrying)
	if !ok {
		ow, _ := v.(Overwriter)
		return ow
	}
	ow, ok := r.Volume.(Overwriter)
	if !ok {
		return nil
	}
	return retryingOverwriter{r, ow}
}

type retryingOverwriter struct {
	r  *retrying
	ow Overwriter
}

func (o retryingOverwriter) Overwrite(ctx context.Context, z ZoneID, off uint64, data []byte) error {
	return o.r.do(ctx, "write", func(ctx context.Context) error { return o.ow.Overwrite(ctx, z, off, data) })
}
