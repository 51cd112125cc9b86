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
		fs.count.used, fs.count.nodes = 0, uint64(len(fs.nat))
		for _, s := range fs.segs {
			fs.count.used += s.nvalid
		}
		fs.mu.Lock()
		if err := fs.loadPrealloc(ctx, nil); err != nil {
			fs.mu.Unlock()
			return Report{}, err
		}
		rep, err := fs.check(ctx, false)
		fs.mu.Unlock()
		rep.Problems = append(fs.cp.loadProblems, rep.Problems...)
		return rep, err
	}
	fs, err := mount(ctx, vol, Options{}, true)
	if err != nil {
		return Report{}, err
	}
	fs.cp.mu.Lock()
	fs.mu.Lock()
	rep, err := fs.check(ctx, true)
	rep.Problems = append(fs.cp.loadProblems, rep.Problems...)
	rep.Repaired += len(fs.cp.loadProblems)
	if err == nil && rep.Repaired > 0 {
		fs.cp.cause = "fsck"
		if err = fs.checkpoint(ctx, true); err == nil {
			var again Report
			again, err = fs.check(ctx, false)
			again.Repaired = rep.Repaired
			rep = again
		}
	}
	fs.mu.Unlock()
	fs.cp.mu.Unlock()
	if e := fs.Unmount(ctx); err == nil {
		err = e
	}
	return rep, err
}

// Fsck checkpoints a mounted file system and checks every invariant.
func (fs *FS) Fsck(ctx context.Context) (Report, error) {
	fs.cp.mu.Lock()
	defer fs.cp.mu.Unlock()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.cp.cause = "fsck"
	if err := fs.checkpoint(ctx, false); err != nil {
		return Report{}, err
	}
	return fs.check(ctx, false)
}

// check verifies every named invariant (fsckChecks) over the whole file
// system; with repair it fixes what it found. The checks run in one walk:
// segment checks per segment, entry checks per directory entry (breadth
// first from the root), node checks per NAT entry, inode checks per inode,
// then the whole-volume checks; problems are sorted stably by kind.
func (fs *FS) check(ctx context.Context, repair bool) (Report, error) {
	return fs.checkOnly(ctx, repair, nil)
}

// fsckCheck is one named invariant of the file system.
type fsckCheck struct {
	name string
	doc  string
}

// The invariants fsck verifies, in the order a check reports them.
var fsckChecks = []fsckCheck{
	{"sit-count", "a segment's valid count equals its bitmap's population"},
	{"sit-write-pointer", "no block is valid at or above its segment's write pointer"},
	{"sit-meta-zone", "the metadata zone is no segment"},
	{"dir-entry-inode", "every directory entry names an inode that exists"},
	{"dir-entry-type", "an entry's type is its inode's file type"},
	{"dir-parent", "a directory's parent is the directory holding its entry"},
	{"dir-single-link", "a directory has one name"},
	{"node-owner-inode", "every direct node in the NAT belongs to an inode that exists"},
	{"block-owner", "a block points at a valid block of a segment, owned by it alone (SIT and SSA agree)"},
	{"dir-readable", "every directory reached from the root reads back"},
	{"inode-readable", "every inode and direct node in the NAT reads back"},
	{"inode-reachable", "every inode but an orphan is reachable from the root"},
	{"nlink", "a link count is the number of names (directories: 2 + subdirectories)"},
	{"size", "no data block is mapped past the end of its file"},
	{"rdev", "only devices carry a device number"},
	{"special-data", "devices, FIFOs and sockets map no data blocks"},
	{"file-type", "an inode's mode is a file type lfs makes"},
	{"blocks", "a known block count (st_blocks) is the number of mapped blocks"},
	{"unclaimed", "every valid block is pointed at"},
	{"node-count", "the node count is the NAT's size"},
	{"used-blocks", "the used-block count is the sum of the segments' valid counts and the reservations, within the user blocks"},
	{"prealloc-list", "an inode with reserved ranges is in the checkpoint's list of them"},
	{"root-reserve", "the root-reserved share is at most half of the user blocks"},
}

// fsckRun is the state of one check: the facts the walk gathers (links
// found, blocks claimed, inodes seen) and the report.
type fsckRun struct {
	fs     *FS
	ctx    context.Context
	repair bool
	only   map[string]bool // nil: every check reports
	r      Report

	refs    map[uint64]uint32 // ino -> links found
	subdirs map[uint64]uint32 // directory ino -> subdirectories found
	seen    map[uint64]bool   // reached from the root
	claimed map[Addr]string   // block -> its owner's description
	natMax  map[uint64]uint32 // ino -> highest direct node in the NAT
	inodes  map[uint64]bool   // inodes named by the NAT or cached
	lost    []uint64          // unreachable inodes (to /lost+found with repair)
}

// flag reports a violation of check and says whether to repair it (with
// repair, and check selected).
func (c *fsckRun) flag(check, kind, format string, a ...any) bool {
	if c.only != nil && !c.only[check] {
		return false
	}
	c.r.add(kind, format, a...)
	return c.repair
}

// fixed counts one repair.
func (c *fsckRun) fixed() { c.r.Repaired++ }

// checkOnly runs the checks named in only (every check when nil); the walk
// is the same, the other checks report nothing and repair nothing.
func (fs *FS) checkOnly(ctx context.Context, repair bool, only map[string]bool) (Report, error) {
	c := &fsckRun{fs: fs, ctx: ctx, repair: repair, only: only,
		refs: map[uint64]uint32{}, subdirs: map[uint64]uint32{}, seen: map[uint64]bool{},
		claimed: map[Addr]string{}, natMax: map[uint64]uint32{}, inodes: map[uint64]bool{}}
	c.r.Segments = len(fs.segs)
	for z, s := range fs.segs {
		c.checkSegment(z, s)
	}
	c.walkTree()
	c.checkNodes()
	for _, ino := range c.inodeList() {
		c.checkInode(ino)
	}
	c.checkUnclaimed()
	c.checkSpace()
	if c.repair && len(c.lost) > 0 && (only == nil || only["inode-reachable"]) {
		if err := fs.toLostFound(ctx, c.lost); err != nil {
			return c.r, err
		}
		c.r.Repaired += len(c.lost)
	}
	sort.SliceStable(c.r.Problems, func(i, j int) bool { return c.r.Problems[i].Kind < c.r.Problems[j].Kind })
	return c.r, nil
}

// checkSegment: sit-count, sit-write-pointer, sit-meta-zone.
func (c *fsckRun) checkSegment(z ZoneID, s *segment) {
	if pc := s.popcount(); pc != s.nvalid {
		if c.flag("sit-count", "sit", "segment %d: count %d, bitmap has %d", z, s.nvalid, pc) {
			s.nvalid = pc
			c.fixed()
		}
	}
	for off := s.wp; off < s.cap; off++ {
		if s.isValid(off) {
			c.flag("sit-write-pointer", "sit", "segment %d: block %d valid above the write pointer %d", z, off, s.wp)
		}
	}
	if z == c.fs.cp.metaZone && c.fs.cp.hasMeta {
		c.flag("sit-meta-zone", "sit", "segment %d is the metadata zone", z)
	}
	c.r.ValidBlocks += s.nvalid
}

// claim records that what (owner/ofs) points at a: block-owner.
func (c *fsckRun) claim(a Addr, owner uint64, ofs uint32, what string) {
	if a == 0 {
		return
	}
	if prev, dup := c.claimed[a]; dup {
		c.flag("block-owner", "ssa", "block %v owned twice: %s and %s", a, prev, what)
		return
	}
	c.claimed[a] = what
	s := c.fs.segOf(a)
	switch {
	case s == nil:
		c.flag("block-owner", "ssa", "%s points at %v, in no segment", what, a)
	case !s.isValid(a.Off()):
		if c.flag("block-owner", "sit", "%s points at %v, which the SIT marks invalid", what, a) {
			_ = c.fs.setValid(a, owner, ofs)
			c.fixed()
		}
	case s.owner[a.Off()] != owner || s.ofs[a.Off()] != ofs:
		if c.flag("block-owner", "ssa", "%s points at %v, whose summary says %#x/%d", what, a, s.owner[a.Off()], s.ofs[a.Off()]) {
			s.owner[a.Off()], s.ofs[a.Off()] = owner, ofs
			c.fixed()
		}
	}
}

// walkTree visits the directories breadth first from the root, counting
// links: dir-entry-inode, dir-entry-type, dir-parent, dir-single-link.
func (c *fsckRun) walkTree() {
	queue := []uint64{RootIno}
	c.refs[RootIno] = 1
	c.seen[RootIno] = true
	for len(queue) > 0 {
		ino := queue[0]
		queue = queue[1:]
		in, err := c.fs.getInode(c.ctx, ino)
		if err != nil {
			c.flag("dir-readable", "tree", "inode %d: %v", ino, err)
			continue
		}
		if !in.isDir() {
			continue
		}
		d, err := c.fs.loadDir(c.ctx, in)
		if err != nil {
			c.flag("dir-readable", "dir", "directory %d: %v", ino, err)
			continue
		}
		names := make([]string, 0, len(d.ents))
		for n := range d.ents {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if child, ok := c.checkEntry(in, d, n); ok && !c.seen[child] {
				c.seen[child] = true
				queue = append(queue, child)
			}
		}
	}
}

// checkEntry checks entry n of directory in and counts its link; it returns
// the inode the entry names, false when there is none.
func (c *fsckRun) checkEntry(in *inode, d *dirIndex, n string) (uint64, bool) {
	fs, ino := c.fs, in.ino
	e, _ := fs.lookupEnt(d, n)
	child, err := fs.getInode(c.ctx, e.Ino)
	if err != nil {
		if c.flag("dir-entry-inode", "dir", "directory %d: entry %q points at missing inode %d", ino, n, e.Ino) && fs.removeEnt(c.ctx, in, n) == nil {
			c.fixed()
		}
		return 0, false
	}
	if modeType(child.body.Mode) != e.Type {
		if c.flag("dir-entry-type", "dir", "directory %d: entry %q type %d, inode %d has mode %o", ino, n, e.Type, e.Ino, child.body.Mode) &&
			fs.setEnt(c.ctx, in, n, e.Ino, modeType(child.body.Mode)) == nil {
			c.fixed()
		}
	}
	c.refs[e.Ino]++
	if child.isDir() {
		c.subdirs[ino]++
		if child.body.Parent != ino {
			if c.flag("dir-parent", "dir", "directory %d (%q) has parent %d, found in %d", e.Ino, n, child.body.Parent, ino) {
				child.body.Parent = ino
				fs.markDirty(child)
				c.fixed()
			}
		}
		if c.refs[e.Ino] > 1 {
			c.flag("dir-single-link", "dir", "directory %d linked twice", e.Ino)
		}
	}
	return e.Ino, true
}

// checkNodes claims every NAT entry's node block (block-owner) and checks
// its inode exists (node-owner-inode).
func (c *fsckRun) checkNodes() {
	fs := c.fs
	nids := make([]uint64, 0, len(fs.nat))
	for nid := range fs.nat {
		nids = append(nids, nid)
	}
	sort.Slice(nids, func(i, j int) bool { return nids[i] < nids[j] })
	for _, nid := range nids {
		if idx := nidIdx(nid); idx > c.natMax[nidIno(nid)] {
			c.natMax[nidIno(nid)] = idx
		}
	}
	for _, nid := range nids {
		if nidIdx(nid) == 0 {
			c.inodes[nidIno(nid)] = true
		}
	}
	for ino := range fs.ic.inodes {
		c.inodes[ino] = true
	}
	for _, nid := range nids {
		ino := nidIno(nid)
		c.claim(fs.nat[nid], nid, ofsNode, fmt.Sprintf("node %d/%d", ino, nidIdx(nid)))
		if !c.inodes[ino] {
			c.flag("node-owner-inode", "nat", "direct node %d of inode %d, which does not exist", nidIdx(nid), ino)
		}
	}
}

// inodeList is every inode the NAT names or the cache holds, in order.
func (c *fsckRun) inodeList() []uint64 {
	inoList := make([]uint64, 0, len(c.inodes))
	for ino := range c.inodes {
		inoList = append(inoList, ino)
	}
	sort.Slice(inoList, func(i, j int) bool { return inoList[i] < inoList[j] })
	return inoList
}

// checkInode runs the inode checks on ino: inode-readable,
// inode-reachable, nlink, then its blocks (block-owner, size), its type
// (rdev, special-data, file-type) and its block count (blocks).
func (c *fsckRun) checkInode(ino uint64) {
	fs := c.fs
	in, err := fs.getInode(c.ctx, ino)
	if err != nil {
		c.flag("inode-readable", "nat", "inode %d: %v", ino, err)
		return
	}
	c.r.Inodes++
	if in.isDir() {
		c.r.Dirs++
	}
	_, orphan := fs.files.orphans[ino]
	if !c.seen[ino] && !orphan {
		c.flag("inode-reachable", "nat", "inode %d is not reachable from the root", ino)
		c.lost = append(c.lost, ino)
	}
	if c.seen[ino] {
		c.checkNlink(in)
	}
	c.checkPrealloc(in)
	nmapped := c.checkData(in)
	c.checkType(in, nmapped)
	if in.body.BlocksKnown && in.holes == 0 && in.body.Blocks != nmapped {
		if c.flag("blocks", "blocks", "inode %d: block count %d, %d blocks mapped", ino, in.body.Blocks, nmapped) {
			in.body.Blocks = nmapped
			fs.markDirty(in)
			c.fixed()
		}
	}
}

// checkNlink: nlink.
func (c *fsckRun) checkNlink(in *inode) {
	want := c.refs[in.ino]
	if in.isDir() {
		want = 2 + c.subdirs[in.ino]
	}
	if in.body.Nlink != want {
		if c.flag("nlink", "nlink", "inode %d: nlink %d, %d links found", in.ino, in.body.Nlink, want) {
			in.body.Nlink = want
			c.fs.markDirty(in)
			c.fixed()
		}
	}
}

// checkData claims the data blocks of in's direct nodes (block-owner) and
// checks none lies past the end (size); it returns how many are mapped.
func (c *fsckRun) checkData(in *inode) uint64 {
	fs, ino := c.fs, in.ino
	epd, bs := fs.epd(), uint64(fs.bs)
	end := (in.body.Size + bs - 1) / bs
	maxIdx := c.natMax[ino]
	for idx := range in.dn {
		maxIdx = max(maxIdx, idx)
	}
	var nmapped uint64
	for idx := uint32(1); idx <= maxIdx; idx++ {
		d, err := fs.getDnode(c.ctx, in, idx, false)
		if err != nil {
			c.flag("inode-readable", "nat", "inode %d direct node %d: %v", ino, idx, err)
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
			c.claim(a, mkNid(ino, idx), uint32(e), fmt.Sprintf("inode %d block %d", ino, blk))
			if blk >= end {
				c.flag("size", "size", "inode %d: block %d mapped past the end (size %d)", ino, blk, in.body.Size)
			}
		}
	}
	return nmapped
}

// checkType: the file type is one lfs makes (file-type); only devices carry
// a device number (rdev); only regular files, directories and symlinks map
// data (special-data).
func (c *fsckRun) checkType(in *inode, nmapped uint64) {
	ino, mode := in.ino, in.body.Mode
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG, syscall.S_IFDIR, syscall.S_IFLNK, syscall.S_IFIFO, syscall.S_IFSOCK:
		if in.body.Rdev != 0 {
			if c.flag("rdev", "mode", "inode %d: mode %o with device number %#x", ino, mode, in.body.Rdev) {
				in.body.Rdev = 0
				c.fs.markDirty(in)
				c.fixed()
			}
		}
		if t := mode & syscall.S_IFMT; t != syscall.S_IFREG && t != syscall.S_IFDIR && t != syscall.S_IFLNK && nmapped > 0 {
			c.flag("special-data", "size", "inode %d: special file (mode %o) maps %d data blocks", ino, mode, nmapped)
		}
	case syscall.S_IFCHR, syscall.S_IFBLK:
		if nmapped > 0 {
			c.flag("special-data", "size", "inode %d: device (mode %o) maps %d data blocks", ino, mode, nmapped)
		}
	default:
		c.flag("file-type", "mode", "inode %d: unknown file type in mode %o", ino, mode)
	}
}

// checkUnclaimed: every valid block below a write pointer is claimed
// (unclaimed).
func (c *fsckRun) checkUnclaimed() {
	for z, s := range c.fs.segs {
		for off := uint64(0); off < s.wp; off++ {
			if !s.isValid(off) {
				continue
			}
			a := MakeAddr(z, off)
			if _, ok := c.claimed[a]; !ok {
				if c.flag("unclaimed", "ssa", "block %v is valid (summary %#x/%d) but nothing points at it", a, s.owner[off], s.ofs[off]) {
					c.fs.invalidate(a)
					c.fixed()
				}
			}
		}
	}
}

// checkSpace: node-count, used-blocks (only when nothing is dirty: dirty
// nodes and pages are counted before they are written).
func (c *fsckRun) checkSpace() {
	fs := c.fs
	var valid uint64
	for _, s := range fs.segs {
		valid += s.nvalid
	}
	if fs.ic.dirtyNodes == 0 && fs.count.nodes != uint64(len(fs.nat)) {
		if c.flag("node-count", "space", "node count %d, NAT holds %d", fs.count.nodes, len(fs.nat)) {
			fs.count.nodes = uint64(len(fs.nat))
			c.fixed()
		}
	}
	if fs.ic.dirtyPages == 0 && fs.ic.dirtyNodes == 0 && fs.count.used != valid+fs.count.resv {
		if c.flag("used-blocks", "space", "used blocks %d, valid blocks %d, reserved %d", fs.count.used, valid, fs.count.resv) {
			fs.count.used = valid + fs.count.resv
			c.fixed()
		}
	}
	if fs.count.used > fs.sb.UserBlocks {
		c.flag("used-blocks", "space", "used blocks %d (reserved %d) exceed the %d user blocks", fs.count.used, fs.count.resv, fs.sb.UserBlocks)
	}
	if fs.sb.RootReserve > fs.sb.UserBlocks/2 {
		// Mkfs never writes more than half; the mount uses at most half
		c.flag("root-reserve", "space", "root-reserved share %d blocks exceeds half of the %d user blocks", fs.sb.RootReserve, fs.sb.UserBlocks)
	}
}

// toLostFound links unreachable inodes into /lost+found as "#ino".
func (fs *FS) toLostFound(ctx context.Context, inos []uint64) error {
	ctx = WithRootReserve(ctx) // repair may fill the root-reserved share
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
