package lfs

import (
	"context"
	"fmt"
	"slices"

	"github.com/zonefleet/zonefleet/pkg/ondisk"
)

// MkfsLogs is how many logs Mkfs formats for maxOpen open zones.
func MkfsLogs(maxOpen int) int { return int(mkfsLogs(maxOpen)) }

// Logs is how many logs the mounted file system has.
func (fs *FS) Logs() int { return fs.lg.n }

// Abandon drops the FS without writing anything: a simulated crash.
func (fs *FS) Abandon() { fs.abandon() }

// Corrupt damages a mounted file system on purpose and checkpoints the damage
// (tests of fsck). kind: sit (a valid data block marked invalid), nlink (a
// file's link count off by one), blocks (its block count off), rdev (a
// device number on a regular file), dangling (a name pointing at no inode),
// unreachable (a file's only name removed, the inode kept).
func (fs *FS) Corrupt(kind string, ino uint64) error {
	fs.cp.mu.Lock()
	defer fs.cp.mu.Unlock()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	ctx := context.Background()
	if err := fs.checkpoint(ctx, false); err != nil {
		return err
	}
	in, err := fs.getInode(ctx, ino)
	if err != nil {
		return err
	}
	switch kind {
	case "sit":
		d, err := fs.getDnode(ctx, in, 1, false)
		if err != nil || d == nil {
			return fmt.Errorf("no data: %v", err)
		}
		s := fs.segOf(d.addrs[0])
		off := d.addrs[0].Off()
		s.valid[off/64] &^= 1 << (off % 64)
		s.nvalid--
		fs.count.used--
		fs.touch(d.addrs[0], true)
	case "nlink":
		in.body.Nlink++
		fs.markDirty(in)
	case "blocks":
		in.body.Blocks += 3
		fs.markDirty(in)
	case "rdev":
		in.body.Rdev = 0x0103
		fs.markDirty(in)
	case "dangling":
		root, err := fs.getInode(ctx, RootIno)
		if err != nil {
			return err
		}
		if _, err := fs.loadDir(ctx, root); err != nil {
			return err
		}
		if err := fs.addEnt(ctx, root, dentry{Name: "ghost", Ino: 999999, Type: dtReg}); err != nil {
			return err
		}
	case "unreachable":
		p, err := fs.getInode(ctx, in.body.Parent)
		if err != nil {
			return err
		}
		d, err := fs.loadDir(ctx, p)
		if err != nil {
			return err
		}
		for name, b := range d.ents {
			for _, e := range d.blocks[b].ents {
				if e.Name == name && e.Ino == ino {
					if err := fs.removeEnt(ctx, p, name); err != nil {
						return err
					}
				}
			}
		}
	}
	return fs.checkpoint(ctx, true)
}

// ForgetBlockCount makes ino's block count unknown, as on an inode written
// by a build without the field, and writes it so (a checkpoint).
func (fs *FS) ForgetBlockCount(ino uint64) error {
	fs.cp.mu.Lock()
	defer fs.cp.mu.Unlock()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	ctx := context.Background()
	in, err := fs.getInode(ctx, ino)
	if err != nil {
		return err
	}
	in.body.Blocks, in.body.BlocksKnown = 0, false
	fs.markDirty(in)
	return fs.checkpoint(ctx, false)
}

// SuperFeatures returns the feature bits of the newest superblock on vol.
func SuperFeatures(ctx context.Context, vol Volume) (ondisk.Features, error) {
	zs, err := vol.Zones(ctx)
	if err != nil {
		return ondisk.Features{}, err
	}
	var best superblock
	var epoch uint64
	for _, z := range zs {
		if z.WP == 0 {
			continue
		}
		sb, rec, err := readSuper(ctx, vol, z.ID)
		if err == nil && rec.Epoch >= epoch {
			best, epoch = sb, rec.Epoch
		}
	}
	return best.Features, nil
}

// MixedSegments counts segments holding valid node and valid data blocks
// at once (threaded logging must not mix block types, ZNS+ §3.3.1).
func (fs *FS) MixedSegments() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n := 0
	for _, s := range fs.segs {
		var node, data bool
		for off := uint64(0); off < s.wp; off++ {
			if s.isValid(off) {
				if s.ofs[off] == ofsNode {
					node = true
				} else {
					data = true
				}
			}
		}
		if node && data {
			n++
		}
	}
	return n
}

// DirectNodeAddrs returns the block addresses a direct node block names, and
// false for any other block.
func DirectNodeAddrs(b []byte) ([]Addr, bool) {
	h, err := decodeNodeHeader(b)
	if err != nil || h.Kind != nodeDirect {
		return nil, false
	}
	_, addrs, err := decodeDirect(b)
	return addrs, err == nil
}

// IsNodeBlock reports whether b is a node block (inode or direct node).
func IsNodeBlock(b []byte) bool {
	_, err := decodeNodeHeader(b)
	return err == nil
}

// WriteLanes is how many write lanes a data log of the mounted file system has.
func (fs *FS) WriteLanes() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.lg.lanes
}

// DirtyIndex returns the dirty-inode index (dirtyidx.go) and, as references,
// the inodes with dirty pages found by scanning the active inodes and the
// whole inode cache, each in increasing order.
func (fs *FS) DirtyIndex() (index, active, cached []uint64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	index = append([]uint64{}, fs.ic.dirty.inos...)
	scan := func(m map[uint64]*inode) []uint64 {
		inos := []uint64{}
		for ino, in := range m {
			if len(in.dirtyBlks) > 0 {
				inos = append(inos, ino)
			}
		}
		slices.Sort(inos)
		return inos
	}
	return index, scan(fs.ic.active), scan(fs.ic.inodes)
}
