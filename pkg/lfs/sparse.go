package lfs

import (
	"context"
	"syscall"
)

// Whence values of Lseek (lseek(2)'s SEEK_DATA and SEEK_HOLE).
const (
	SeekData = 3
	SeekHole = 4
)

// Fallocate modes (fallocate(2)).
const (
	FallocKeepSize  = 0x01 // FALLOC_FL_KEEP_SIZE
	FallocPunchHole = 0x02 // FALLOC_FL_PUNCH_HOLE (with KEEP_SIZE only)
	FallocZeroRange = 0x10 // FALLOC_FL_ZERO_RANGE
)

// hasData reports whether file block blk holds data: a cached page (dirty or
// clean) or a mapped block.
func (fs *FS) hasData(ctx context.Context, in *inode, blk uint64) (bool, error) {
	if in.pages.get(blk) != nil {
		return true, nil
	}
	a, err := fs.blockAddr(ctx, in, blk)
	return a != 0, err
}

// Lseek finds the next data (SeekData) or hole (SeekHole) at or after off,
// at block granularity; the end of the file counts as a hole. An offset at
// or past the end is ENXIO, as is SeekData with no data after off. A whole
// direct node that does not exist is skipped at once, so a search over a
// large hole costs one NAT lookup per 2 MiB-ish of file (one node's reach).
func (fs *FS) Lseek(ctx context.Context, ino uint64, off uint64, whence int) (pos uint64, err error) {
	o, err := fs.begin(ctx, "lseek", opRead)
	if err != nil {
		return 0, err
	}
	defer o.done(&err)
	in, err := fs.getInode(ctx, ino)
	if err != nil {
		return 0, err
	}
	if !in.isReg() {
		return 0, syscall.EINVAL
	}
	if whence != SeekData && whence != SeekHole {
		return 0, syscall.EINVAL
	}
	size := in.body.Size
	if off >= size {
		return 0, syscall.ENXIO
	}
	bs, epd := uint64(fs.bs), fs.epd()
	end := (size + bs - 1) / bs
	for blk := off / bs; blk < end; {
		// skip a direct node's whole reach when it does not exist and
		// no page of it is cached
		idx := blk/epd + 1
		if idx > maxDirect {
			break
		}
		d, err := fs.getDnode(ctx, in, uint32(idx), false)
		if err != nil {
			return 0, err
		}
		if d == nil && !in.hasPagesIn(idx*epd-epd, idx*epd) {
			if whence == SeekHole {
				return max(off, blk*bs), nil
			}
			blk = idx * epd
			continue
		}
		data, err := fs.hasData(ctx, in, blk)
		if err != nil {
			return 0, err
		}
		if data == (whence == SeekData) {
			return max(off, blk*bs), nil
		}
		blk++
	}
	if whence == SeekHole {
		return size, nil
	}
	return 0, syscall.ENXIO
}

// hasPagesIn reports whether a page of blocks [from, to) is cached.
func (in *inode) hasPagesIn(from, to uint64) bool {
	return in.pages.any(from, to)
}

// Fallocate implements fallocate(2) on a regular file:
//   - mode 0 and FallocKeepSize reserve the range (space.go): every hole
//     in it, and every direct node it lacks, is counted as used at once,
//     so free space drops and a later write into the range never gets
//     ENOSPC; ENOSPC, changing nothing, when that does not fit in the
//     space write(2) may take. Mode 0 also extends the size to off+length;
//   - FallocPunchHole|FallocKeepSize deallocates [off, off+length): whole
//     blocks are unmapped (invalidated in their segments, so recycling
//     reclaims them, and no longer counted in st_blocks) and released from
//     any reservation, the partial blocks at the edges are zeroed; the
//     size never changes;
//   - FallocZeroRange [|FallocKeepSize] does the same and, without
//     KEEP_SIZE, extends the size to off+length (the range reads as zeros,
//     and takes no space: as a punched hole, not as unwritten extents, so
//     unlike mode 0 it reserves nothing).
//
// Anything else (collapse, insert, unshare, punch without KEEP_SIZE) is
// EOPNOTSUPP.
//
// As on ext4, every fallocate that succeeds updates mtime and ctime and
// drops the file's capabilities, and one by a caller without CAP_FSETID
// clears set-user/group-ID as a write does (c says who calls; nil is a
// privileged caller). The kernel leaves this to FUSE file systems that
// handle killing privileges, and flags nothing for fallocate.
func (fs *FS) Fallocate(ctx context.Context, ino uint64, mode uint32, off, length uint64, c Caller) (err error) {
	o, err := fs.begin(ctx, "fallocate", opWrite)
	if err != nil {
		return err
	}
	defer o.done(&err)
	in, err := o.lock(ctx, ino)
	if err != nil {
		return err
	}
	if in.isDir() {
		return syscall.EISDIR
	}
	if !in.isReg() {
		return syscall.ENODEV
	}
	end := off + length
	if length == 0 || end < off || int64(end) < 0 {
		return syscall.EINVAL
	}
	bs := uint64(fs.bs)
	if end/bs/fs.epd()+1 > maxDirect {
		return syscall.EFBIG
	}
	defer func() { // (after any size change below: deferred later, runs first)
		if err == nil {
			kill := c != nil && in.body.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0 && !c.CapFSetID()
			in.killPriv(kill, c)
			fs.touchInode(in, true)
		}
	}()
	switch mode {
	case 0, FallocKeepSize:
		if err := fs.reserve(ctx, in, off/bs, (end+bs-1)/bs); err != nil {
			return err
		}
		if mode == 0 && end > in.body.Size {
			in.body.Size = end
		}
		return nil
	case FallocPunchHole | FallocKeepSize, FallocZeroRange, FallocZeroRange | FallocKeepSize:
	default:
		return syscall.EOPNOTSUPP
	}
	if mode&FallocKeepSize == 0 && end > in.body.Size {
		// the new range reads as zeros: a hole needs nothing but the size
		newSize := end
		defer func() {
			if err == nil {
				in.body.Size = newSize
			}
		}()
	}
	if off < in.body.Size {
		if err := fs.zeroRange(ctx, in, off, min(end, in.body.Size)); err != nil {
			return err
		}
	}
	// the whole blocks of the range leave any reservation: a punched or
	// zeroed range takes no space
	return fs.releasePrealloc(ctx, in, (off+bs-1)/bs, end/bs)
}

// zeroRange makes [off, end) of in (within its size) read as zeros: the
// partial blocks at the edges are zeroed in place, the whole blocks
// unmapped.
func (fs *FS) zeroRange(ctx context.Context, in *inode, off, end uint64) error {
	bs := uint64(fs.bs)
	first, last := (off+bs-1)/bs, end/bs // whole blocks [first, last)
	// the partial blocks at the edges: zeroed in place
	for _, blk := range []uint64{off / bs, end / bs} {
		lo, hi := max(off, blk*bs), min(end, blk*bs+bs)
		if lo >= hi || (lo == blk*bs && hi == blk*bs+bs) {
			continue
		}
		p, err := fs.getPage(ctx, in, blk, false)
		if err != nil {
			return err
		}
		if in.pages.get(blk) == p { // data there (a hole is zero already)
			b := fs.clonePage(p)
			clear(b[lo-blk*bs : hi-blk*bs])
			setPage(p, b)
			fs.dirtyPage(in, blk, p)
		}
		if blk == end/bs {
			break
		}
	}
	if first < last {
		if err := fs.unmapRange(ctx, in, first, last); err != nil {
			return err
		}
	}
	return nil
}

// unmapRange frees file blocks [from, to): cached pages are dropped (a page
// in flight stays unmapped: its commit sees the page gone), mapped blocks
// invalidated. Direct nodes stay (they may map blocks outside the range).
func (fs *FS) unmapRange(ctx context.Context, in *inode, from, to uint64) error {
	for _, b := range in.pages.blocks(from, to) {
		p := in.pages.get(b)
		if p == nil {
			continue
		}
		if p.dirty {
			fs.ic.dirtyPages--
			a, err := fs.blockAddr(ctx, in, b)
			if err != nil {
				return err
			}
			if a == 0 {
				fs.count.used-- // a dirty hole page counted a block
				in.holes = max(in.holes, 1) - 1
			}
		}
		fs.dropPage(in, b)
	}
	epd := fs.epd()
	for idx := from/epd + 1; idx <= (to-1)/epd+1 && idx <= maxDirect; idx++ {
		if !fs.natHas(in, uint32(idx)) {
			continue
		}
		d, err := fs.getDnode(ctx, in, uint32(idx), false)
		if err != nil {
			return err
		}
		if d == nil {
			continue
		}
		base := (idx - 1) * epd
		for e := range d.addrs {
			b := base + uint64(e)
			if b >= from && b < to && d.addrs[e] != 0 {
				fs.invalidate(d.addrs[e])
				d.addrs[e] = 0
				fs.count.used--
				fs.mapped(in, -1)
				fs.markDnDirty(in, d)
			}
		}
	}
	return nil
}

// natHas reports whether direct node idx of in exists (cached or on disk).
func (fs *FS) natHas(in *inode, idx uint32) bool {
	if _, ok := in.dn[idx]; ok {
		return true
	}
	_, ok := fs.nat[mkNid(in.ino, idx)]
	return ok
}
