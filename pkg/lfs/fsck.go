package lfs

import (
	"context"
	"fmt"
	"sort"
	"syscall"
)

// Problem is one violated invariant.
type Problem struct {
	Kind string // sit, ssa, nat, tree, nlink, dir, size, space, blocks, mode
	Msg  string
}

func (p Problem) String() string { return p.Kind + ": " + p.Msg }

// Report is the result of a check.
type Report struct {
	Problems    []Problem
	Inodes      int
	Dirs        int
	ValidBlocks uint64
	Segments    int
	Repaired    int // problems fixed (with repair)
}

func (r *Report) add(kind, format string, a ...any) {
	if len(r.Problems) < 1000 {
		r.Problems = append(r.Problems, Problem{Kind: kind, Msg: fmt.Sprintf(format, a...)})
	}
}

// Fsck checks the file system on vol. Without repair it reads the last
// checkpoint and changes nothing. With repair it mounts (rolling forward),
// fixes what it can (SIT/SSA rebuilt from the tree, link counts, dangling
// entries, unreachable inodes moved to /lost+found), checkpoints and checks again.
func Fsck(ctx context.Context, vol Volume, repair bool) (Report, error) {
	if !repair {
		fs, _, _, err := loadFS(ctx, vol, Options{})
		if err != nil {
			return Report{}, err
		}
		fs.used, fs.nodes = 0, uint64(len(fs.nat))
		for _, s := range fs.segs {
			fs.used += s.nvalid
		}
		fs.mu.Lock()
		rep, err := fs.check(ctx, false)
		fs.mu.Unlock()
		rep.Problems = append(fs.loadProblems, rep.Problems...)
		return rep, err
	}
	fs, err := mount(ctx, vol, Options{}, true)
	if err != nil {
		return Report{}, err
	}
	fs.cpMu.Lock()
	fs.mu.Lock()
	rep, err := fs.check(ctx, true)
	rep.Problems = append(fs.loadProblems, rep.Problems...)
	rep.Repaired += len(fs.loadProblems)
	if err == nil && rep.Repaired > 0 {
		fs.cpCause = "fsck"
		if err = fs.checkpoint(ctx, true); err == nil {
			var again Report
			again, err = fs.check(ctx, false)
			again.Repaired = rep.Repaired
			rep = again
		}
	}
	fs.mu.Unlock()
	fs.cpMu.Unlock()
	if e := fs.Unmount(ctx); err == nil {
		err = e
	}
	return rep, err
}

// Fsck checkpoints a mounted file system and checks every invariant.
func (fs *FS) Fsck(ctx context.Context) (Report, error) {
	fs.cpMu.Lock()
	defer fs.cpMu.Unlock()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.cpCause = "fsck"
	if err := fs.checkpoint(ctx, false); err != nil {
		return Report{}, err
	}
	return fs.check(ctx, false)
}

// check verifies: SIT counts = bitmaps, every valid block owned exactly once
// (SSA = NAT / direct nodes), every NAT entry reachable from the root,
// directories consistent (types, parents, link counts), no block past EOF,
// used-block accounting. With repair it fixes what it found.
func (fs *FS) check(ctx context.Context, repair bool) (Report, error) {
	var r Report
	r.Segments = len(fs.segs)
	// 1. SIT counts = bitmaps, valid only below the write pointer
	for z, s := range fs.segs {
		if pc := s.popcount(); pc != s.nvalid {
			r.add("sit", "segment %d: count %d, bitmap has %d", z, s.nvalid, pc)
			if repair {
				s.nvalid = pc
				r.Repaired++
			}
		}
		for off := s.wp; off < s.cap; off++ {
			if s.isValid(off) {
				r.add("sit", "segment %d: block %d valid above the write pointer %d", z, off, s.wp)
			}
		}
		if z == fs.metaZone && fs.hasMeta {
			r.add("sit", "segment %d is the metadata zone", z)
		}
		r.ValidBlocks += s.nvalid
	}
	// 2. walk the tree from the root
	refs := map[uint64]uint32{} // ino -> links found
	subdirs := map[uint64]uint32{}
	isDir := map[uint64]bool{}
	claimed := map[Addr]string{}
	claim := func(a Addr, owner uint64, ofs uint32, what string) {
		if a == 0 {
			return
		}
		if prev, dup := claimed[a]; dup {
			r.add("ssa", "block %v owned twice: %s and %s", a, prev, what)
			return
		}
		claimed[a] = what
		s := fs.segOf(a)
		switch {
		case s == nil:
			r.add("ssa", "%s points at %v, in no segment", what, a)
		case !s.isValid(a.Off()):
			r.add("sit", "%s points at %v, which the SIT marks invalid", what, a)
			if repair {
				_ = fs.setValid(a, owner, ofs)
				r.Repaired++
			}
		case s.owner[a.Off()] != owner || s.ofs[a.Off()] != ofs:
			r.add("ssa", "%s points at %v, whose summary says %#x/%d", what, a, s.owner[a.Off()], s.ofs[a.Off()])
			if repair {
				s.owner[a.Off()], s.ofs[a.Off()] = owner, ofs
				r.Repaired++
			}
		}
	}
	var lost []uint64
	queue := []uint64{RootIno}
	refs[RootIno] = 1
	seen := map[uint64]bool{RootIno: true}
	for len(queue) > 0 {
		ino := queue[0]
		queue = queue[1:]
		in, err := fs.getInode(ctx, ino)
		if err != nil {
			r.add("tree", "inode %d: %v", ino, err)
			continue
		}
		if !in.isDir() {
			continue
		}
		isDir[ino] = true
		d, err := fs.loadDir(ctx, in)
		if err != nil {
			r.add("dir", "directory %d: %v", ino, err)
			continue
		}
		names := make([]string, 0, len(d.ents))
		for n := range d.ents {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			e, _ := fs.lookupEnt(d, n)
			child, err := fs.getInode(ctx, e.Ino)
			if err != nil {
				r.add("dir", "directory %d: entry %q points at missing inode %d", ino, n, e.Ino)
				if repair && fs.removeEnt(ctx, in, n) == nil {
					r.Repaired++
				}
				continue
			}
			if modeType(child.body.Mode) != e.Type {
				r.add("dir", "directory %d: entry %q type %d, inode %d has mode %o", ino, n, e.Type, e.Ino, child.body.Mode)
				if repair && fs.setEnt(ctx, in, n, e.Ino, modeType(child.body.Mode)) == nil {
					r.Repaired++
				}
			}
			refs[e.Ino]++
			if child.isDir() {
				subdirs[ino]++
				if child.body.Parent != ino {
					r.add("dir", "directory %d (%q) has parent %d, found in %d", e.Ino, n, child.body.Parent, ino)
					if repair {
						child.body.Parent = ino
						fs.markDirty(child)
						r.Repaired++
					}
				}
				if refs[e.Ino] > 1 {
					r.add("dir", "directory %d linked twice", e.Ino)
				}
			}
			if !seen[e.Ino] {
				seen[e.Ino] = true
				queue = append(queue, e.Ino)
			}
		}
	}
	// 3. NAT: every node reachable, every node block owned once
	nids := make([]uint64, 0, len(fs.nat))
	for nid := range fs.nat {
		nids = append(nids, nid)
	}
	sort.Slice(nids, func(i, j int) bool { return nids[i] < nids[j] })
	inodes := map[uint64]bool{}
	natMax := map[uint64]uint32{} // ino -> highest direct node in the NAT
	for _, nid := range nids {
		if idx := nidIdx(nid); idx > natMax[nidIno(nid)] {
			natMax[nidIno(nid)] = idx
		}
	}
	for _, nid := range nids {
		if nidIdx(nid) == 0 {
			inodes[nidIno(nid)] = true
		}
	}
	for ino := range fs.inodes {
		inodes[ino] = true
	}
	for _, nid := range nids {
		ino := nidIno(nid)
		claim(fs.nat[nid], nid, ofsNode, fmt.Sprintf("node %d/%d", ino, nidIdx(nid)))
		if !inodes[ino] {
			r.add("nat", "direct node %d of inode %d, which does not exist", nidIdx(nid), ino)
		}
	}
	inoList := make([]uint64, 0, len(inodes))
	for ino := range inodes {
		inoList = append(inoList, ino)
	}
	sort.Slice(inoList, func(i, j int) bool { return inoList[i] < inoList[j] })
	epd := fs.epd()
	bs := uint64(fs.bs)
	for _, ino := range inoList {
		in, err := fs.getInode(ctx, ino)
		if err != nil {
			r.add("nat", "inode %d: %v", ino, err)
			continue
		}
		r.Inodes++
		if in.isDir() {
			r.Dirs++
		}
		_, orphan := fs.orphans[ino]
		if !seen[ino] && !orphan {
			r.add("nat", "inode %d is not reachable from the root", ino)
			lost = append(lost, ino)
		}
		if seen[ino] {
			want := refs[ino]
			if in.isDir() {
				want = 2 + subdirs[ino]
			}
			if in.body.Nlink != want {
				r.add("nlink", "inode %d: nlink %d, %d links found", ino, in.body.Nlink, want)
				if repair {
					in.body.Nlink = want
					fs.markDirty(in)
					r.Repaired++
				}
			}
		}
		// data blocks: owned by their direct node, none past EOF
		end := (in.body.Size + bs - 1) / bs
		maxIdx := natMax[ino]
		for idx := range in.dn {
			maxIdx = max(maxIdx, idx)
		}
		var nmapped uint64
		for idx := uint32(1); idx <= maxIdx; idx++ {
			d, err := fs.getDnode(ctx, in, idx, false)
			if err != nil {
				r.add("nat", "inode %d direct node %d: %v", ino, idx, err)
				continue
			}
			if d == nil {
				continue
			}
			for e, a := range d.addrs {
				if a == 0 {
					continue
				}
				nmapped++
				blk := uint64(idx-1)*epd + uint64(e)
				claim(a, mkNid(ino, idx), uint32(e), fmt.Sprintf("inode %d block %d", ino, blk))
				if blk >= end {
					r.add("size", "inode %d: block %d mapped past the end (size %d)", ino, blk, in.body.Size)
				}
			}
		}
		// the file type is one lfs makes; only devices carry a device number
		switch in.body.Mode & syscall.S_IFMT {
		case syscall.S_IFREG, syscall.S_IFDIR, syscall.S_IFLNK, syscall.S_IFIFO, syscall.S_IFSOCK:
			if in.body.Rdev != 0 {
				r.add("mode", "inode %d: mode %o with device number %#x", ino, in.body.Mode, in.body.Rdev)
				if repair {
					in.body.Rdev = 0
					fs.markDirty(in)
					r.Repaired++
				}
			}
			if in.body.Mode&syscall.S_IFMT != syscall.S_IFREG && in.body.Mode&syscall.S_IFMT != syscall.S_IFDIR &&
				in.body.Mode&syscall.S_IFMT != syscall.S_IFLNK && nmapped > 0 {
				r.add("size", "inode %d: special file (mode %o) maps %d data blocks", ino, in.body.Mode, nmapped)
			}
		case syscall.S_IFCHR, syscall.S_IFBLK:
			if nmapped > 0 {
				r.add("size", "inode %d: device (mode %o) maps %d data blocks", ino, in.body.Mode, nmapped)
			}
		default:
			r.add("mode", "inode %d: unknown file type in mode %o", ino, in.body.Mode)
		}
		// the block count (st_blocks) matches the mapping
		if in.body.BlocksKnown && in.holes == 0 && in.body.Blocks != nmapped {
			r.add("blocks", "inode %d: block count %d, %d blocks mapped", ino, in.body.Blocks, nmapped)
			if repair {
				in.body.Blocks = nmapped
				fs.markDirty(in)
				r.Repaired++
			}
		}
	}
	// 4. every valid block is claimed
	for z, s := range fs.segs {
		for off := uint64(0); off < s.wp; off++ {
			if !s.isValid(off) {
				continue
			}
			a := MakeAddr(z, off)
			if _, ok := claimed[a]; !ok {
				r.add("ssa", "block %v is valid (summary %#x/%d) but nothing points at it", a, s.owner[off], s.ofs[off])
				if repair {
					fs.invalidate(a)
					r.Repaired++
				}
			}
		}
	}
	// 5. space accounting
	var valid uint64
	for _, s := range fs.segs {
		valid += s.nvalid
	}
	if fs.dirtyNodes == 0 && fs.nodes != uint64(len(fs.nat)) {
		r.add("space", "node count %d, NAT holds %d", fs.nodes, len(fs.nat))
		if repair {
			fs.nodes = uint64(len(fs.nat))
			r.Repaired++
		}
	}
	if fs.dirtyPages == 0 && fs.dirtyNodes == 0 && fs.used != valid {
		r.add("space", "used blocks %d, valid blocks %d", fs.used, valid)
		if repair {
			fs.used = valid
			r.Repaired++
		}
	}
	if repair && len(lost) > 0 {
		if err := fs.toLostFound(ctx, lost); err != nil {
			return r, err
		}
		r.Repaired += len(lost)
	}
	sort.SliceStable(r.Problems, func(i, j int) bool { return r.Problems[i].Kind < r.Problems[j].Kind })
	return r, nil
}

// toLostFound links unreachable inodes into /lost+found as "#ino".
func (fs *FS) toLostFound(ctx context.Context, inos []uint64) error {
	root, rd, err := fs.dirOf(ctx, RootIno)
	if err != nil {
		return err
	}
	var lf *inode
	if e, ok := fs.lookupEnt(rd, "lost+found"); ok {
		if lf, err = fs.getInode(ctx, e.Ino); err != nil {
			return err
		}
	} else {
		o := &op{fs: fs} // the checkpoint lock is held exclusively: nothing contends
		lf, err = fs.mknode(ctx, o, RootIno, "lost+found", syscall.S_IFDIR|0o700, 0, 0)
		o.unlockAll()
		if err != nil {
			return err
		}
	}
	if _, err := fs.loadDir(ctx, lf); err != nil {
		return err
	}
	_ = root
	for _, ino := range inos {
		in, err := fs.getInode(ctx, ino)
		if err != nil {
			return err
		}
		if err := fs.addEnt(ctx, lf, dentry{Name: fmt.Sprintf("#%d", ino), Ino: ino, Type: modeType(in.body.Mode)}); err != nil {
			return err
		}
		if in.isDir() {
			in.body.Parent = lf.ino
			in.body.Nlink = 2
			lf.body.Nlink++
		} else {
			in.body.Nlink = 1
		}
		fs.markDirty(in)
	}
	return nil
}
