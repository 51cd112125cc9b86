package lfs

import "slices"

// dirtyIndex is the numbers of the cached inodes that have dirty pages
// (inode.dirtyBlks not empty), in increasing order (FS.mu). Write-back takes
// the lowest-numbered dirty inode first (wbOne, writeBack, flushAll): the
// index gives it without scanning the inode cache, whose active inodes
// (every inode changed since the last checkpoint) far outnumber the dirty
// ones when many small files are written.
//
// A sorted slice: inode numbers are handed out in increasing order, so a new
// file's first dirty page appends, and write-back cleans the lowest first,
// which drops the head without moving the rest. Other changes (an fsync, a
// rewrite of an old file) move the entries past them: 8 bytes per dirty
// inode, far less than a scan of the cache.
type dirtyIndex struct {
	inos []uint64
}

// add records that ino has dirty pages.
func (d *dirtyIndex) add(ino uint64) {
	if n := len(d.inos); n == 0 || d.inos[n-1] < ino {
		d.inos = append(d.inos, ino)
		return
	}
	if i, ok := slices.BinarySearch(d.inos, ino); !ok {
		d.inos = slices.Insert(d.inos, i, ino)
	}
}

// remove records that ino has no dirty pages (or is no longer cached).
func (d *dirtyIndex) remove(ino uint64) {
	i, ok := slices.BinarySearch(d.inos, ino)
	switch {
	case !ok:
	case i == 0:
		d.inos = d.inos[1:]
	default:
		d.inos = slices.Delete(d.inos, i, i+1)
	}
}

// next returns the lowest dirty inode number at or above from. Callers that
// release FS.mu while walking the index go on from the last number they
// took plus one: entries added or removed meanwhile are then seen or
// skipped as they are, and none is taken twice.
func (d *dirtyIndex) next(from uint64) (uint64, bool) {
	i, _ := slices.BinarySearch(d.inos, from)
	if i == len(d.inos) {
		return 0, false
	}
	return d.inos[i], true
}

// len is the number of dirty inodes.
func (d *dirtyIndex) len() int { return len(d.inos) }

// markDirtyBlk records that p, the cached page of blk, is dirty (fs.mu held).
func (fs *FS) markDirtyBlk(in *inode, blk uint64, p *page) {
	if in.dirtyBlks == nil {
		in.dirtyBlks = map[uint64]*page{}
	}
	if len(in.dirtyBlks) == 0 {
		fs.ic.dirty.add(in.ino)
	}
	in.dirtyBlks[blk] = p
}

// cleanDirtyBlk records that blk of in has no dirty page any more (written
// back, or dropped) (fs.mu held).
func (fs *FS) cleanDirtyBlk(in *inode, blk uint64) {
	if _, ok := in.dirtyBlks[blk]; !ok {
		return
	}
	delete(in.dirtyBlks, blk)
	if len(in.dirtyBlks) == 0 {
		fs.ic.dirty.remove(in.ino)
	}
}
