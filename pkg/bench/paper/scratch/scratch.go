// Package scratch is an in-memory, sparse vfs.FS for the simulated drives of
// the paper benchmarks (packages paper and znsplus), whose backing files are
// scratch space: nothing survives the run, nothing needs to be durable.
//
// A drive's data file is as large as its flash (gigabytes for the eZNS
// figures) and the eZNS experiments write zeros, so the file keeps only the
// 4 KiB pages that hold a non-zero byte: a write of zeros over a hole costs
// a comparison, no memory and no system call. On the operating system's file
// system the same runs spent most of their wall time in pwrite (70 % of
// Fig. 29b's CPU profile). Reads, writes, truncation and hole punching have
// the semantics of a sparse file, so the drive model (pkg/zns) behaves — and
// models time — exactly as on disk; only the wall time changes.
//
// # Concurrency and failure
//
// Safe for concurrent use (one mutex per file, one for the name space).
// Sync, Datasync and SyncDir do nothing; a missing name fails with an
// *os.PathError wrapping os.ErrNotExist, an O_EXCL create of an existing one
// with os.ErrExist. Memory is bounded by the non-zero data written.
package scratch

import (
	"io"
	"os"
	"sync"

	"github.com/zonefleet/zonefleet/pkg/vfs"
)

const pageSize = 4096

var zeroPage [pageSize]byte

// FS is an in-memory sparse file system. The zero value is not usable; use New.
type FS struct {
	mu    sync.Mutex
	files map[string]*file
}

var _ vfs.FS = (*FS)(nil)

// New returns an empty file system.
func New() *FS { return &FS{files: map[string]*file{}} }

type file struct {
	mu    sync.Mutex
	size  int64
	pages map[int64]*[pageSize]byte // page index -> contents (absent: zeros)
}

// OpenFile opens or creates name (O_CREATE, O_EXCL and O_TRUNC are honoured).
func (fs *FS) OpenFile(name string, flag int, _ os.FileMode) (vfs.File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f, ok := fs.files[name]
	switch {
	case ok && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrExist}
	case !ok && flag&os.O_CREATE == 0:
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
	case !ok:
		f = &file{pages: map[int64]*[pageSize]byte{}}
		fs.files[name] = f
	}
	if flag&os.O_TRUNC != 0 {
		if err := f.Truncate(0); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// Stat reports the size of name.
func (fs *FS) Stat(name string) (int64, error) {
	fs.mu.Lock()
	f, ok := fs.files[name]
	fs.mu.Unlock()
	if !ok {
		return 0, &os.PathError{Op: "stat", Path: name, Err: os.ErrNotExist}
	}
	return f.Size()
}

// Rename replaces newname by oldname.
func (fs *FS) Rename(oldname, newname string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f, ok := fs.files[oldname]
	if !ok {
		return &os.PathError{Op: "rename", Path: oldname, Err: os.ErrNotExist}
	}
	delete(fs.files, oldname)
	fs.files[newname] = f
	return nil
}

// Remove deletes name; open files keep their contents.
func (fs *FS) Remove(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if _, ok := fs.files[name]; !ok {
		return &os.PathError{Op: "remove", Path: name, Err: os.ErrNotExist}
	}
	delete(fs.files, name)
	return nil
}

// SyncDir does nothing.
func (*FS) SyncDir(string) error { return nil }

// ReadAt reads like io.ReaderAt: io.EOF when p reaches past the end.
func (f *file) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, &os.PathError{Op: "read", Path: "scratch", Err: os.ErrInvalid}
	}
	if len(p) == 0 {
		return 0, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if off >= f.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), f.size-off))
	for done := 0; done < n; {
		pos := off + int64(done)
		pi, po := pos/pageSize, int(pos%pageSize)
		k := min(pageSize-po, n-done)
		if pg := f.pages[pi]; pg != nil {
			copy(p[done:done+k], pg[po:po+k])
		} else {
			clear(p[done : done+k])
		}
		done += k
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt writes p at off, growing the file; zeros over a hole allocate nothing.
func (f *file) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, &os.PathError{Op: "write", Path: "scratch", Err: os.ErrInvalid}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for done := 0; done < len(p); {
		pos := off + int64(done)
		pi, po := pos/pageSize, int(pos%pageSize)
		k := min(pageSize-po, len(p)-done)
		src := p[done : done+k]
		pg := f.pages[pi]
		switch {
		case pg != nil:
			copy(pg[po:po+k], src)
		case !allZero(src):
			pg = new([pageSize]byte)
			copy(pg[po:po+k], src)
			f.pages[pi] = pg
		}
		done += k
	}
	f.size = max(f.size, off+int64(len(p)))
	return len(p), nil
}

// Truncate sets the size; bytes past it read as zeros if it grows again.
func (f *file) Truncate(size int64) error {
	if size < 0 {
		return &os.PathError{Op: "truncate", Path: "scratch", Err: os.ErrInvalid}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if size < f.size {
		f.zero(size, f.size-size)
	}
	f.size = size
	return nil
}

// PunchHole makes [off, off+n) read as zeros without changing the size.
func (f *file) PunchHole(off, n int64) error {
	if off < 0 || n < 0 {
		return &os.PathError{Op: "punch", Path: "scratch", Err: os.ErrInvalid}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.zero(off, min(n, max(f.size-off, 0)))
	return nil
}

// zero clears [off, off+n), dropping whole pages (f.mu held).
func (f *file) zero(off, n int64) {
	end := off + n
	if len(f.pages) < int(n/pageSize) { // few pages: visit them, not the range
		for pi, pg := range f.pages {
			lo, hi := max(pi*pageSize, off), min((pi+1)*pageSize, end)
			switch {
			case lo >= hi:
			case hi-lo == pageSize:
				delete(f.pages, pi)
			default:
				clear(pg[lo-pi*pageSize : hi-pi*pageSize])
			}
		}
		return
	}
	for pos := off; pos < end; {
		pi, po := pos/pageSize, pos%pageSize
		k := min(pageSize-po, end-pos)
		if pg := f.pages[pi]; pg != nil {
			if k == pageSize {
				delete(f.pages, pi)
			} else {
				clear(pg[po : po+k])
			}
		}
		pos += k
	}
}

// Size is the current size.
func (f *file) Size() (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.size, nil
}

// Sync does nothing: scratch data need not be durable.
func (*file) Sync() error { return nil }

// Datasync does nothing.
func (*file) Datasync() error { return nil }

// Close does nothing; the contents stay until the name is removed.
func (*file) Close() error { return nil }
