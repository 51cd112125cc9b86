package vfs

import (
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

const (
	pageSize   = 4096
	sectorSize = 512
)

type page = [pageSize]byte

// contents is a sparse file image. Pages are never modified once stored in a
// map (copy on write), so copying the map snapshots the image.
type contents struct {
	size  int64
	pages map[int64]*page
}

func (c contents) clone() contents {
	m := make(map[int64]*page, len(c.pages))
	for k, v := range c.pages {
		m[k] = v
	}
	return contents{size: c.size, pages: m}
}

func (c *contents) writeAt(p []byte, off int64) {
	for len(p) > 0 {
		pi, po := off/pageSize, off%pageSize
		np := new(page)
		if old := c.pages[pi]; old != nil {
			*np = *old
		}
		k := copy(np[po:], p)
		c.pages[pi] = np
		p, off = p[k:], off+int64(k)
	}
	if off > c.size {
		c.size = off
	}
}

func (c *contents) readAt(p []byte, off int64) int {
	if off >= c.size {
		return 0
	}
	if rem := c.size - off; int64(len(p)) > rem {
		p = p[:rem]
	}
	n := len(p)
	for len(p) > 0 {
		pi, po := off/pageSize, off%pageSize
		var k int
		if pg := c.pages[pi]; pg != nil {
			k = copy(p, pg[po:])
		} else {
			k = min(len(p), pageSize-int(po))
			clear(p[:k])
		}
		p, off = p[k:], off+int64(k)
	}
	return n
}

// zero makes [off, off+n) zeros (within the current size).
func (c *contents) zero(off, n int64) {
	end := min(off+n, c.size)
	for off < end {
		pi, po := off/pageSize, off%pageSize
		k := min(end-off, pageSize-po)
		if old := c.pages[pi]; old != nil {
			if po == 0 && k == pageSize {
				delete(c.pages, pi)
			} else {
				np := new(page)
				*np = *old
				clear(np[po : po+k])
				c.pages[pi] = np
			}
		}
		off += k
	}
}

func (c *contents) truncate(size int64) {
	if size < c.size {
		c.zero(size, c.size-size)
		for k := range c.pages {
			if k*pageSize >= size {
				delete(c.pages, k)
			}
		}
	}
	c.size = size
}

type opKind uint8

const (
	opWrite opKind = iota
	opTruncate
	opPunch
)

// pending is one change not yet made durable.
type pending struct {
	kind opKind
	off  int64
	n    int64
	data []byte
}

type inode struct {
	cur     contents
	durable contents
	log     []pending
}

// MemFS is the crashable in-memory file system (see the package doc).
type MemFS struct {
	mu      sync.Mutex
	names   map[string]*inode // current directory entries
	durable map[string]*inode // entries as of the last SyncDir of their dir
	dirty   map[string]bool   // directories with unsynced entry changes
}

// NewCrashableMem returns an empty crashable in-memory file system.
func NewCrashableMem() *MemFS {
	return &MemFS{names: map[string]*inode{}, durable: map[string]*inode{}, dirty: map[string]bool{}}
}

type memFile struct {
	fs     *MemFS
	ino    *inode
	name   string
	write  bool
	closed bool
}

func pathErr(op, name string, err error) error { return &os.PathError{Op: op, Path: name, Err: err} }

// OpenFile implements FS.
func (m *MemFS) OpenFile(name string, flag int, _ os.FileMode) (File, error) {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	ino := m.names[name]
	if ino == nil {
		if flag&os.O_CREATE == 0 {
			return nil, pathErr("open", name, os.ErrNotExist)
		}
		ino = &inode{cur: contents{pages: map[int64]*page{}}, durable: contents{pages: map[int64]*page{}}}
		m.names[name] = ino
		m.dirty[filepath.Dir(name)] = true
	} else if flag&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL {
		return nil, pathErr("open", name, os.ErrExist)
	}
	w := flag&(os.O_WRONLY|os.O_RDWR) != 0
	if flag&os.O_TRUNC != 0 && w {
		ino.cur.truncate(0)
		ino.log = append(ino.log, pending{kind: opTruncate, n: 0})
	}
	return &memFile{fs: m, ino: ino, name: name, write: w}, nil
}

// Stat implements FS.
func (m *MemFS) Stat(name string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ino := m.names[filepath.Clean(name)]
	if ino == nil {
		return 0, pathErr("stat", name, os.ErrNotExist)
	}
	return ino.cur.size, nil
}

// Rename implements FS.
func (m *MemFS) Rename(oldname, newname string) error {
	oldname, newname = filepath.Clean(oldname), filepath.Clean(newname)
	m.mu.Lock()
	defer m.mu.Unlock()
	ino := m.names[oldname]
	if ino == nil {
		return pathErr("rename", oldname, os.ErrNotExist)
	}
	delete(m.names, oldname)
	m.names[newname] = ino
	m.dirty[filepath.Dir(oldname)] = true
	m.dirty[filepath.Dir(newname)] = true
	return nil
}

// Remove implements FS.
func (m *MemFS) Remove(name string) error {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.names[name] == nil {
		return pathErr("remove", name, os.ErrNotExist)
	}
	delete(m.names, name)
	m.dirty[filepath.Dir(name)] = true
	return nil
}

// SyncDir implements FS.
func (m *MemFS) SyncDir(dir string) error {
	dir = filepath.Clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	for n := range m.durable {
		if filepath.Dir(n) == dir {
			delete(m.durable, n)
		}
	}
	for n, ino := range m.names {
		if filepath.Dir(n) == dir {
			m.durable[n] = ino
		}
	}
	delete(m.dirty, dir)
	return nil
}

// CrashClone returns the file system a machine would find after a power
// loss now (see the package doc); m itself is unchanged and keeps working.
// The outcome is a function of seed and of the operations done so far.
func (m *MemFS) CrashClone(seed uint64) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := NewCrashableMem()
	// Directory entries: per directory, the unsynced changes all reached
	// the disk or none did (a journaling file system commits them in order).
	dirs := map[string]bool{}
	for d := range m.dirty {
		dirs[d] = true
	}
	keepCur := map[string]bool{}
	for _, d := range sortedKeys(dirs) {
		keepCur[d] = rng.IntN(2) == 0
	}
	ents := map[string]*inode{}
	for n, ino := range m.durable {
		if !(m.dirty[filepath.Dir(n)] && keepCur[filepath.Dir(n)]) {
			ents[n] = ino
		}
	}
	for n, ino := range m.names {
		if m.dirty[filepath.Dir(n)] && keepCur[filepath.Dir(n)] {
			ents[n] = ino
		}
	}
	done := map[*inode]*inode{}
	for _, n := range sortedKeys(ents) {
		ino := ents[n]
		c, ok := done[ino]
		if !ok {
			img := crashImage(ino, rng)
			c = &inode{cur: img, durable: img.clone()}
			done[ino] = c
		}
		out.names[n] = c
		out.durable[n] = c
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}

// crashImage replays the unsynced changes of ino over its durable image.
// Within the durable size (an overwrite of allocated blocks) each aligned
// 512-byte sector of a write ends up old or new; beyond it (new blocks) a
// write may also be lost with the file still extended (a zero-filled tail),
// turn into zeros, or into stale garbage. Truncates and hole punches are
// applied or not.
func crashImage(ino *inode, rng *rand.Rand) contents {
	img := ino.durable.clone()
	base := img.size
	for _, p := range ino.log {
		switch p.kind {
		case opTruncate:
			if rng.IntN(2) == 0 {
				img.truncate(p.n)
			}
		case opPunch:
			if rng.IntN(2) == 0 {
				img.zero(p.off, p.n)
			}
		case opWrite:
			crashWrite(&img, p, base, rng)
		}
	}
	return img
}

// crashWrite applies one unsynced write to img with a random fate.
func crashWrite(img *contents, p pending, base int64, rng *rand.Rand) {
	end := p.off + int64(len(p.data))
	fate := rng.IntN(100)
	if fate < 45 { // reached the disk
		img.writeAt(p.data, p.off)
		return
	}
	if fate < 60 && end <= base { // lost entirely
		return
	}
	extend := rng.IntN(2) == 0 // a lost extension leaves a zero-filled tail
	// sector by sector
	for s := p.off - p.off%sectorSize; s < end; s += sectorSize {
		lo, hi := max(s, p.off), min(s+sectorSize, end)
		chunk := p.data[lo-p.off : hi-p.off]
		if lo < base { // allocated before: old or new
			if fate >= 60 && rng.IntN(2) == 0 {
				img.writeAt(chunk, lo)
			}
			continue
		}
		switch {
		case fate < 60: // lost; the extension may survive as zeros
			if extend && hi > img.size {
				img.truncate(hi)
			}
		case fate < 75: // torn
			if rng.IntN(2) == 0 {
				img.writeAt(chunk, lo)
			} else if hi > img.size {
				img.truncate(hi)
			}
		case fate < 95: // zeros
			if hi > img.size {
				img.truncate(hi)
			}
			img.zero(lo, hi-lo)
		default: // stale garbage
			g := make([]byte, len(chunk))
			for i := range g {
				g[i] = byte(rng.Uint32())
			}
			img.writeAt(g, lo)
		}
	}
}

func (f *memFile) check(write bool) error {
	if f.closed {
		return pathErr("io", f.name, os.ErrClosed)
	}
	if write && !f.write {
		return pathErr("write", f.name, os.ErrPermission)
	}
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("read", f.name, os.ErrInvalid)
	}
	n := f.ino.cur.readAt(p, off)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("write", f.name, os.ErrInvalid)
	}
	f.ino.cur.writeAt(p, off)
	f.ino.log = append(f.ino.log, pending{kind: opWrite, off: off, data: append([]byte(nil), p...)})
	return len(p), nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(true); err != nil {
		return err
	}
	f.ino.cur.truncate(size)
	f.ino.log = append(f.ino.log, pending{kind: opTruncate, n: size})
	return nil
}

func (f *memFile) PunchHole(off, n int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(true); err != nil {
		return err
	}
	f.ino.cur.zero(off, n)
	f.ino.log = append(f.ino.log, pending{kind: opPunch, off: off, n: n})
	return nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(false); err != nil {
		return err
	}
	f.ino.durable = f.ino.cur.clone()
	f.ino.log = nil
	return nil
}

func (f *memFile) Datasync() error { return f.Sync() }

func (f *memFile) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(false); err != nil {
		return 0, err
	}
	return f.ino.cur.size, nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathErr("close", f.name, os.ErrClosed)
	}
	f.closed = true
	return nil
}

// Clone returns the file system as a restarted process would find it after
// a kill (the page cache survives): every write, synced or not, and every
// directory entry. m is unchanged.
func (m *MemFS) Clone() *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := NewCrashableMem()
	done := map[*inode]*inode{}
	for n, ino := range m.names {
		c, ok := done[ino]
		if !ok {
			img := ino.cur.clone()
			c = &inode{cur: img, durable: img.clone()}
			done[ino] = c
		}
		out.names[n] = c
		out.durable[n] = c
	}
	return out
}
