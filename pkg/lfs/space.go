package lfs

import (
	"context"
	"sort"
	"syscall"
)

// Space reservations (fallocate(2) modes 0 and KEEP_SIZE).
//
// A log-structured file system allocates a block when it is written, so
// fallocate cannot hand out blocks ahead of time; what it promises is that a
// later write into the range will not find the file system full. So the
// range is recorded in the inode (inodeBody.Prealloc: sorted, disjoint
// ranges of file blocks) and every hole in it, and every direct node the
// range still lacks, is counted as used at once (fs.count.used includes
// fs.count.resv): free space drops by what the range will take, and every
// other allocation (of any file) sees the space gone. A write that fills a
// hole of a reserved range (holePage) or creates a direct node in it
// (getDnode) takes its block from the inode's reservation instead of the
// free space, so it never gets ENOSPC. Punching a hole in a range, or
// truncating below it, releases that part; deleting the inode releases all
// of it; once every block of the ranges is written the ranges are dropped.
//
// The count per inode is derived, never stored: recountPrealloc walks the
// ranges (cached pages and direct nodes). What persists is the ranges, in
// the inode (written by fsync and by every checkpoint with the inode), and
// the list of inodes holding reservations, in every checkpoint record
// (FeaturePrealloc, incompat). Mount loads the listed inodes and those
// roll-forward recovered and recounts their reservations, so after a crash
// the reservation is exactly the holes of the ranges the recovered inode
// names; fsck checks that the checkpoint's list and the inodes agree
// (prealloc-list) and that the reservations fit (used-blocks).

// FeaturePrealloc (incompat) says inodes may carry reserved ranges and
// checkpoint records a list of the inodes holding them. An older build
// would neither count the reservations (and promise their space to others)
// nor read such a checkpoint record: it must refuse the image. Set by Mkfs
// and by every writable mount.
const FeaturePrealloc = 1 << 1

// maxPreallocRanges bounds the reserved ranges of one inode (they live in
// the inode block, beside the xattrs); more are merged, the nearest first.
const maxPreallocRanges = 16

// maxPreallocInodes bounds the inodes holding reservations at once: each
// takes 8 bytes of every checkpoint snapshot, which must fit in one
// metadata zone. A fallocate that would reserve for one more is ENOSPC.
const maxPreallocInodes = 1024

// blkRange is a range of file blocks [From, To).
type blkRange struct{ From, To uint64 }

// addRange returns rs with r added (merged with what it touches), at most
// maxPreallocRanges long (the nearest ranges merged).
func addRange(rs []blkRange, r blkRange) []blkRange {
	out := append(append([]blkRange(nil), rs...), r)
	sort.Slice(out, func(i, j int) bool { return out[i].From < out[j].From })
	merged := out[:0]
	for _, x := range out {
		if n := len(merged); n > 0 && x.From <= merged[n-1].To {
			merged[n-1].To = max(merged[n-1].To, x.To)
			continue
		}
		merged = append(merged, x)
	}
	for len(merged) > maxPreallocRanges {
		best := 1
		for i := 2; i < len(merged); i++ {
			if merged[i].From-merged[i-1].To < merged[best].From-merged[best-1].To {
				best = i
			}
		}
		merged[best-1].To = merged[best].To
		merged = append(merged[:best], merged[best+1:]...)
	}
	return merged
}

// cutRange returns rs without [from, to).
func cutRange(rs []blkRange, from, to uint64) []blkRange {
	var out []blkRange
	for _, x := range rs {
		if x.To <= from || x.From >= to {
			out = append(out, x)
			continue
		}
		if x.From < from {
			out = append(out, blkRange{x.From, from})
		}
		if x.To > to {
			out = append(out, blkRange{to, x.To})
		}
	}
	return out
}

// inRanges reports whether file block blk is in one of rs.
func inRanges(rs []blkRange, blk uint64) bool {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].To > blk })
	return i < len(rs) && rs[i].From <= blk
}

// countPrealloc returns the blocks the ranges rs of in still need: every
// block that is a hole with no cached page, and every direct node that does
// not exist (fs.mu held; released while a direct node loads).
func (fs *FS) countPrealloc(ctx context.Context, in *inode, rs []blkRange) (uint64, error) {
	epd := fs.epd()
	n, counted := uint64(0), uint64(0) // counted: the last direct node counted (ranges are sorted)
	for _, r := range rs {
		for blk := r.From; blk < r.To; {
			idx := blk/epd + 1
			end := min(r.To, idx*epd)
			if idx > maxDirect {
				return 0, syscall.EFBIG
			}
			d, err := fs.getDnode(ctx, in, uint32(idx), false)
			if err != nil {
				return 0, err
			}
			if d == nil && idx != counted {
				n++ // the direct node, once for all ranges it maps
				counted = idx
			}
			for b := blk; b < end; b++ {
				if in.pages.get(b) == nil && (d == nil || d.addrs[b%epd] == 0) {
					n++
				}
			}
			blk = end
		}
	}
	return n, nil
}

// setPrealloc makes rs the reserved ranges of in, needing n blocks (as
// countPrealloc counted), and moves the difference from the last count
// into the used blocks (fs.mu held). Ranges needing nothing are dropped.
func (fs *FS) setPrealloc(in *inode, rs []blkRange, n uint64) {
	old := fs.prealloc[in.ino]
	fs.count.used = fs.count.used - old + n
	fs.count.resv = fs.count.resv - old + n
	if n == 0 {
		rs = nil
		delete(fs.prealloc, in.ino)
	} else {
		fs.prealloc[in.ino] = n
	}
	if len(rs) != len(in.body.Prealloc) || (len(rs) > 0 && !equalRanges(rs, in.body.Prealloc)) {
		in.body.Prealloc = rs
		fs.markDirty(in)
	}
}

func equalRanges(a, b []blkRange) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// recountPrealloc recounts in's reservation from its ranges (after a
// change of its blocks outside the write path: punch, truncate, mount).
func (fs *FS) recountPrealloc(ctx context.Context, in *inode) error {
	if len(in.body.Prealloc) == 0 && fs.prealloc[in.ino] == 0 {
		return nil
	}
	n, err := fs.countPrealloc(ctx, in, in.body.Prealloc)
	if err != nil {
		return err
	}
	fs.setPrealloc(in, in.body.Prealloc, n)
	return nil
}

// reserve adds [from, to) (file blocks) to in's reserved ranges: ENOSPC,
// changing nothing, when the holes and direct nodes it adds do not fit in
// the space write(2) may take.
func (fs *FS) reserve(ctx context.Context, in *inode, from, to uint64) error {
	_, had := fs.prealloc[in.ino]
	if !had && len(fs.prealloc) >= maxPreallocInodes {
		return errNoSpace
	}
	rs := addRange(in.body.Prealloc, blkRange{from, to})
	n, err := fs.countPrealloc(ctx, in, rs)
	if err != nil {
		return err
	}
	old := fs.prealloc[in.ino]
	if n > old {
		limit := fs.userLimit(mayUseRootReserve(ctx))
		limit -= min(limit, fs.writeReserve())
		if fs.count.used+(n-old) > limit {
			return errNoSpace
		}
	}
	body := in.body
	body.Prealloc = rs
	if len(body.encode()) > fs.bs-nodeHdrLen {
		return errNoSpace // no room in the inode block (xattrs fill it)
	}
	fs.setPrealloc(in, rs, n)
	return nil
}

// releasePrealloc drops [from, to) from in's reserved ranges (punch hole,
// zero range, truncate) and recounts what remains.
func (fs *FS) releasePrealloc(ctx context.Context, in *inode, from, to uint64) error {
	if len(in.body.Prealloc) == 0 || from >= to {
		return nil
	}
	in.body.Prealloc = cutRange(in.body.Prealloc, from, to)
	fs.markDirty(in)
	return fs.recountPrealloc(ctx, in)
}

// takePrealloc reports whether a new data block at blk of in comes out of
// in's reservation, and takes it (fs.mu held): the caller then counts the
// block as used without a free-space check (used already holds it).
func (fs *FS) takePrealloc(in *inode, blk uint64) bool {
	if fs.prealloc[in.ino] == 0 || !inRanges(in.body.Prealloc, blk) {
		return false
	}
	fs.takeOne(in)
	return true
}

// takePreallocNode is takePrealloc for direct node idx of in.
func (fs *FS) takePreallocNode(in *inode, idx uint32) bool {
	if fs.prealloc[in.ino] == 0 {
		return false
	}
	epd := fs.epd()
	from, to := (uint64(idx)-1)*epd, uint64(idx)*epd
	i := sort.Search(len(in.body.Prealloc), func(i int) bool { return in.body.Prealloc[i].To > from })
	if i == len(in.body.Prealloc) || in.body.Prealloc[i].From >= to {
		return false
	}
	fs.takeOne(in)
	return true
}

// takeOne moves one block of in's reservation to plain use: the caller
// increments used again.
func (fs *FS) takeOne(in *inode) {
	fs.count.used--
	fs.count.resv--
	if fs.prealloc[in.ino]--; fs.prealloc[in.ino] == 0 {
		// every block of the ranges is written: nothing left to keep
		delete(fs.prealloc, in.ino)
		in.body.Prealloc = nil
		fs.markDirty(in)
	}
}

// dropPrealloc releases all of in's reservation (the inode is deleted).
func (fs *FS) dropPrealloc(in *inode) {
	n := fs.prealloc[in.ino]
	fs.count.used -= n
	fs.count.resv -= n
	delete(fs.prealloc, in.ino)
	in.body.Prealloc = nil
}

// preallocList is the checkpoint's list of inodes holding reservations.
func (fs *FS) preallocList() []uint64 {
	out := make([]uint64, 0, len(fs.prealloc))
	for ino := range fs.prealloc {
		out = append(out, ino)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// loadPrealloc counts the reservations of the inodes the checkpoint lists
// and of those roll-forward recovered (mount, after used is recounted from
// the segments; fs.mu held). An inode gone since is skipped.
func (fs *FS) loadPrealloc(ctx context.Context, extra map[uint64]bool) error {
	inos := map[uint64]bool{}
	for _, ino := range fs.cp.prealloc {
		inos[ino] = true
	}
	for ino := range extra {
		inos[ino] = true
	}
	fs.prealloc = map[uint64]uint64{}
	fs.count.resv = 0
	list := make([]uint64, 0, len(inos))
	for ino := range inos {
		list = append(list, ino)
	}
	sort.Slice(list, func(i, j int) bool { return list[i] < list[j] })
	for _, ino := range list {
		if _, ok := fs.nat[mkNid(ino, 0)]; !ok {
			continue
		}
		in, err := fs.getInode(ctx, ino)
		if err == syscall.ENOENT {
			continue
		}
		if err != nil {
			return err
		}
		if err := fs.recountPrealloc(ctx, in); err != nil {
			return err
		}
	}
	return nil
}

// Reserved returns the blocks held by fallocate reservations.
func (fs *FS) Reserved() uint64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.count.resv
}

// checkPrealloc: prealloc-list. An inode with reserved ranges that the
// checkpoint does not list would have its reservation forgotten by the
// next mount; repair counts it.
func (c *fsckRun) checkPrealloc(in *inode) {
	if len(in.body.Prealloc) == 0 {
		return
	}
	if _, ok := c.fs.prealloc[in.ino]; ok {
		return
	}
	if c.flag("prealloc-list", "prealloc", "inode %d: %d reserved ranges, not in the checkpoint's list", in.ino, len(in.body.Prealloc)) {
		if err := c.fs.recountPrealloc(c.ctx, in); err == nil {
			c.fixed()
		}
	}
}

// preallocHas reports whether a hole at blk of in is covered by in's
// reservation (its block is held for it).
func (fs *FS) preallocHas(in *inode, blk uint64) bool {
	return fs.prealloc[in.ino] > 0 && inRanges(in.body.Prealloc, blk)
}

// statfsLocked derives statfs from what can really be stored (fs.mu held):
//   - Blocks are the user blocks (the data segments less the reserved
//     segments and the over-provisioning, fixed by Mkfs), Bfree those no
//     block, node or reservation holds;
//   - Bavail is what write(2) by anyone but root can still fill: the free
//     blocks less the write-back reserve and the root-reserved share
//     (rootreserve.go), less the direct nodes that map the data (one per
//     directEntries blocks) and the slack a write keeps (fits) — so one
//     file written until ENOSPC takes Bavail blocks (root's, Bavail plus
//     the share, as on ext4);
//   - Ffree is how many more inodes anyone but root can create: each
//     takes a node block (and a share of a dentry block), creation keeps a
//     few blocks of slack and leaves the root-reserved share, and the NAT
//     bounds the nodes (MaxNodes); Files is the nodes in use plus that, so
//     df -i's use is the nodes in use.
func (fs *FS) statfsLocked() StatfsOut {
	free := fs.sb.UserBlocks - min(fs.count.used, fs.sb.UserBlocks)
	open := free - min(free, fs.rootReserve())     // what all callers may fill
	avail := open - min(open, fs.writeReserve()+2) // the write-back reserve is not for write(2)
	epd := fs.epd()
	avail = avail * epd / (epd + 1)
	nodesFree := fs.sb.MaxNodes - min(fs.count.nodes, fs.sb.MaxNodes)
	ffree := min(nodesFree, open-min(open, createSlack))
	return StatfsOut{Bsize: uint32(fs.bs), Blocks: fs.sb.UserBlocks, Bfree: free, Bavail: avail,
		Files: min(fs.count.nodes, fs.sb.MaxNodes) + ffree, Ffree: ffree, NameLen: maxNameLen}
}

// createSlack is the free blocks Create and Mkdir keep beyond the new inode.
const createSlack = 3
