package lfs

import (
	"context"
	"syscall"
)

// dirIndex is the in-memory index of a directory: name -> dentry block. The
// dentry blocks are the directory's data blocks; changing an entry rewrites
// one block, so creating in a directory of n entries costs O(1).
type dirIndex struct {
	ents   map[string]int // name -> block index
	blocks []dirBlock
	spacey []int // blocks that got room back (LIFO)
}

type dirBlock struct {
	ents []dentry
	used int
}

// DT_* types stored in dentries.
const (
	dtUnknown = 0
	dtDir     = 4
	dtReg     = 8
	dtLnk     = 10
)

func modeType(mode uint32) uint8 {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return dtDir
	case syscall.S_IFLNK:
		return dtLnk
	case syscall.S_IFREG:
		return dtReg
	}
	return uint8(mode & syscall.S_IFMT >> 12)
}

// loadDir reads a directory's dentry blocks into its index.
func (fs *FS) loadDir(ctx context.Context, in *inode) (*dirIndex, error) {
	if !in.isDir() {
		return nil, syscall.ENOTDIR
	}
	if in.dir != nil {
		return in.dir, nil
	}
	d := &dirIndex{ents: map[string]int{}}
	nb := in.body.Size / uint64(fs.bs)
	buf := make([]byte, fs.bs)
	for b := uint64(0); b < nb; b++ {
		n, err := fs.readAt(ctx, in, b*uint64(fs.bs), buf)
		if err != nil {
			return nil, err
		}
		if n != fs.bs {
			return nil, corrupt("directory", "dir %d: short block %d", in.ino, b)
		}
		ents, err := decodeDentries(buf, in.ino)
		if err != nil {
			return nil, err
		}
		db := dirBlock{ents: ents, used: dentryHdrLen}
		for _, e := range ents {
			if _, dup := d.ents[e.Name]; dup {
				return nil, corrupt("directory", "dir %d: name %q twice", in.ino, e.Name)
			}
			d.ents[e.Name] = int(b)
			db.used += dentryLen(e.Name)
		}
		d.blocks = append(d.blocks, db)
		if db.used < fs.bs/2 {
			d.spacey = append(d.spacey, int(b))
		}
	}
	in.dir = d
	return d, nil
}

func (fs *FS) lookupEnt(d *dirIndex, name string) (dentry, bool) {
	b, ok := d.ents[name]
	if !ok {
		return dentry{}, false
	}
	for _, e := range d.blocks[b].ents {
		if e.Name == name {
			return e, true
		}
	}
	return dentry{}, false
}

// writeDirBlock re-encodes block b of directory in into its page cache.
func (fs *FS) writeDirBlock(ctx context.Context, in *inode, b int) error {
	data := encodeDentries(in.ino, in.dir.blocks[b].ents, fs.bs)
	blk := uint64(b)
	p := in.pages.get(blk)
	if p == nil {
		var err error
		if p, err = fs.getPage(ctx, in, blk, true); err != nil {
			return err
		}
	}
	nb := fs.clonePage(p)
	copy(nb, data)
	setPage(p, nb)
	fs.dirtyPage(in, blk, p)
	if end := (blk + 1) * uint64(fs.bs); end > in.body.Size {
		in.body.Size = end
	}
	return nil
}

// addEnt adds name to directory in (which must be loaded).
func (fs *FS) addEnt(ctx context.Context, in *inode, e dentry) error {
	d := in.dir
	need := dentryLen(e.Name)
	b := -1
	for len(d.spacey) > 0 {
		c := d.spacey[len(d.spacey)-1]
		if c < len(d.blocks) && d.blocks[c].used+need <= fs.bs {
			b = c
			break
		}
		d.spacey = d.spacey[:len(d.spacey)-1]
	}
	if b < 0 {
		if n := len(d.blocks); n > 0 && d.blocks[n-1].used+need <= fs.bs {
			b = n - 1
		} else {
			// a new block: check space first so nothing changes on ENOSPC
			if fs.count.used+2 > fs.userLimit(mayUseRootReserve(ctx)) {
				return errNoSpace
			}
			d.blocks = append(d.blocks, dirBlock{used: dentryHdrLen})
			b = len(d.blocks) - 1
		}
	}
	d.blocks[b].ents = append(d.blocks[b].ents, e)
	d.blocks[b].used += need
	d.ents[e.Name] = b
	if err := fs.writeDirBlock(ctx, in, b); err != nil {
		// undo
		d.blocks[b].ents = d.blocks[b].ents[:len(d.blocks[b].ents)-1]
		d.blocks[b].used -= need
		delete(d.ents, e.Name)
		return err
	}
	fs.touchInode(in, true)
	return nil
}

// removeEnt removes name from directory in.
func (fs *FS) removeEnt(ctx context.Context, in *inode, name string) error {
	d := in.dir
	b, ok := d.ents[name]
	if !ok {
		return syscall.ENOENT
	}
	ents := d.blocks[b].ents
	for i, e := range ents {
		if e.Name == name {
			d.blocks[b].ents = append(ents[:i:i], ents[i+1:]...)
			d.blocks[b].used -= dentryLen(name)
			break
		}
	}
	delete(d.ents, name)
	d.spacey = append(d.spacey, b)
	if len(d.spacey) > 2*len(d.blocks)+8 {
		d.spacey = d.spacey[len(d.spacey)-len(d.blocks):]
	}
	fs.touchInode(in, true)
	return fs.writeDirBlock(ctx, in, b)
}

// setEnt changes the target of an existing name.
func (fs *FS) setEnt(ctx context.Context, in *inode, name string, ino uint64, typ uint8) error {
	d := in.dir
	b := d.ents[name]
	for i := range d.blocks[b].ents {
		if d.blocks[b].ents[i].Name == name {
			d.blocks[b].ents[i].Ino = ino
			d.blocks[b].ents[i].Type = typ
		}
	}
	fs.touchInode(in, true)
	return fs.writeDirBlock(ctx, in, b)
}
