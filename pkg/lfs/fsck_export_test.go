package lfs

import (
	"context"
	"fmt"
	"syscall"
)

// FsckCheckNames lists fsck's named invariant checks in order.
func FsckCheckNames() []string {
	names := make([]string, len(fsckChecks))
	for i, c := range fsckChecks {
		names[i] = c.name
	}
	return names
}

// FsckOnly checks the last checkpoint on vol with one named check (the
// others report nothing); it changes nothing.
func FsckOnly(ctx context.Context, vol Volume, check string) (Report, error) {
	fs, _, _, err := loadFS(ctx, vol, Options{})
	if err != nil {
		return Report{}, err
	}
	fs.count.used, fs.count.nodes = 0, uint64(len(fs.nat))
	for _, s := range fs.segs {
		fs.count.used += s.nvalid
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.checkOnly(ctx, false, map[string]bool{check: true})
}

// CheckOnly runs one named check on the mounted file system as it is in
// memory (no checkpoint first).
func (fs *FS) CheckOnly(check string) (Report, error) {
	fs.cp.mu.Lock()
	defer fs.cp.mu.Unlock()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.checkOnly(context.Background(), false, map[string]bool{check: true})
}

// CorruptFor breaks the invariant check names in the mounted file system,
// using the file ino (a regular file with data, in directory dir, with
// another file's blocks freed beside them). With persist it checkpoints the
// damage (an offline fsck sees it); without, the damage is in memory only
// (an invariant a load recomputes; CheckOnly sees it). Undo, if not nil,
// restores what a later Abandon must not trip over.
func (fs *FS) CorruptFor(check string, dir, ino uint64, persist bool) (undo func(), err error) {
	fs.cp.mu.Lock()
	defer fs.cp.mu.Unlock()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	ctx := context.Background()
	if err := fs.checkpoint(ctx, false); err != nil {
		return nil, err
	}
	in, err := fs.getInode(ctx, ino)
	if err != nil {
		return nil, err
	}
	d, err := fs.getInode(ctx, dir)
	if err != nil {
		return nil, err
	}
	root, _, err := fs.dirOf(ctx, RootIno)
	if err != nil {
		return nil, err
	}
	dn, err := fs.getDnode(ctx, in, 1, false)
	if err != nil || dn == nil {
		return nil, fmt.Errorf("no data: %v", err)
	}
	data := dn.addrs[0]
	ds := fs.segOf(data)
	switch check {
	case "sit-count":
		ds.nvalid++
		fs.count.used++
	case "sit-write-pointer":
		s := fs.lg.heads[fs.logFor(logWarmData)]
		if s == nil || s.wp >= s.cap {
			return nil, fmt.Errorf("no open data log")
		}
		s.valid[s.wp/64] |= 1 << (s.wp % 64)
	case "sit-meta-zone":
		z := fs.cp.metaZone
		fs.segs[z] = newSegment(z, ds.cap)
		undo = func() { delete(fs.segs, z) }
	case "dir-readable":
		fs.nat[mkNid(RootIno, 0)] = data // the root's inode reads as file data
		fs.cp.natDirty[mkNid(RootIno, 0)] = struct{}{}
	case "dir-entry-inode":
		err = fs.addEnt(ctx, root, dentry{Name: "ghost", Ino: 999999, Type: dtReg})
	case "dir-entry-type":
		err = fs.setEnt(ctx, root, "d", dir, dtReg)
	case "dir-parent":
		d.body.Parent = ino
		fs.markDirty(d)
	case "dir-single-link":
		err = fs.addEnt(ctx, root, dentry{Name: "d2", Ino: dir, Type: dtDir})
	case "node-owner-inode":
		fs.nat[mkNid(999999, 1)] = fs.nat[mkNid(ino, 1)]
		fs.cp.natDirty[mkNid(999999, 1)] = struct{}{}
	case "block-owner":
		ds.owner[data.Off()]++
	case "inode-readable":
		fs.nat[mkNid(ino, 0)] = data // the file's inode reads as its data
		fs.cp.natDirty[mkNid(ino, 0)] = struct{}{}
	case "inode-reachable":
		err = fs.removeEnt(ctx, d, "f")
	case "nlink":
		in.body.Nlink++
		fs.markDirty(in)
	case "size":
		in.body.Size = 0
		fs.markDirty(in)
	case "rdev":
		in.body.Rdev = 0x0103
		fs.markDirty(in)
	case "special-data":
		in.body.Mode = syscall.S_IFIFO | 0o644
		fs.markDirty(in)
	case "file-type":
		in.body.Mode = 0o030000 | 0o644
		fs.markDirty(in)
	case "blocks":
		in.body.Blocks += 3
		fs.markDirty(in)
	case "prealloc-list":
		// ranges the checkpoint's list does not name
		in.body.Prealloc = []blkRange{{From: 1 << 20, To: 1<<20 + 8}}
		fs.markDirty(in)
	case "unclaimed":
		a, ok := fs.invalidBlock(ds)
		if !ok {
			return nil, fmt.Errorf("no overwritten block")
		}
		if err := fs.setValid(a, 0, 0); err != nil {
			return nil, err
		}
		fs.count.used++
	case "node-count":
		fs.count.nodes++
		undo = func() { fs.count.nodes-- }
	case "used-blocks":
		fs.count.used++
		undo = func() { fs.count.used-- }
	case "root-reserve":
		old := fs.sb.RootReserve
		fs.sb.RootReserve = fs.sb.UserBlocks
		undo = func() { fs.sb.RootReserve = old }
	default:
		return nil, fmt.Errorf("no corruption for %q", check)
	}
	if err != nil || !persist {
		return undo, err
	}
	return undo, fs.checkpoint(ctx, true)
}

// invalidBlock is a written, invalid block of a segment (s first).
func (fs *FS) invalidBlock(s *segment) (Addr, bool) {
	for _, t := range append([]*segment{s}, fs.segList()...) {
		for off := uint64(0); off < t.wp; off++ {
			if !t.isValid(off) {
				return MakeAddr(t.zone, off), true
			}
		}
	}
	return 0, false
}

func (fs *FS) segList() []*segment {
	var l []*segment
	for _, s := range fs.segs {
		l = append(l, s)
	}
	return l
}
