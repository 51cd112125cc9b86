package vfs

import (
	"os"
	"strings"
	"sync"
)

// OpKind names a file operation an Injector can fail.
type OpKind uint8

// Operation kinds.
const (
	OpOpen OpKind = iota
	OpRead
	OpWrite
	OpSync // Sync and Datasync
	OpTruncate
	OpPunch
	OpSize
	OpStat
	OpRename
	OpRemove
	OpSyncDir
	OpClose
)

var opNames = [...]string{"open", "read", "write", "sync", "truncate", "punch", "size", "stat", "rename", "remove", "syncdir", "close"}

func (k OpKind) String() string {
	if int(k) < len(opNames) {
		return opNames[k]
	}
	return "op?"
}

// Op describes one operation about to run.
type Op struct {
	Kind OpKind
	Path string
	Off  int64
	Len  int
}

// Injector decides whether an operation fails: a non-nil error is returned
// to the caller instead of running the operation.
type Injector interface {
	MaybeError(Op) error
}

// InjectorFunc adapts a function to an Injector.
type InjectorFunc func(Op) error

// MaybeError implements Injector.
func (f InjectorFunc) MaybeError(o Op) error { return f(o) }

// OnPredicate fails every operation for which pred is true.
func OnPredicate(pred func(Op) bool) Injector {
	return InjectorFunc(func(o Op) error {
		if pred(o) {
			return pathErr(o.Kind.String(), o.Path, ErrInjected)
		}
		return nil
	})
}

// Nth fails the Nth (1-based) operation of a kind on files whose path ends
// with Suffix ("" matches all); later ones succeed unless Sticky.
type Nth struct {
	Kind   OpKind
	Suffix string
	N      int
	Sticky bool // fail every matching op from the Nth on

	mu    sync.Mutex
	seen  int
	fired int
}

// OnNth returns an Injector failing the nth matching operation.
func OnNth(kind OpKind, suffix string, n int) *Nth { return &Nth{Kind: kind, Suffix: suffix, N: n} }

// MaybeError implements Injector.
func (x *Nth) MaybeError(o Op) error {
	if o.Kind != x.Kind || !strings.HasSuffix(o.Path, x.Suffix) {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.seen++
	if x.seen == x.N || (x.Sticky && x.seen > x.N) {
		x.fired++
		return pathErr(o.Kind.String(), o.Path, ErrInjected)
	}
	return nil
}

// Fired reports how many operations were failed.
func (x *Nth) Fired() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.fired
}

// Counter counts operations per kind (an Injector that never fails), to
// enumerate the call sites a workload reaches.
type Counter struct {
	mu sync.Mutex
	n  map[OpKind]int
}

// MaybeError implements Injector.
func (c *Counter) MaybeError(o Op) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[OpKind]int{}
	}
	c.n[o.Kind]++
	return nil
}

// Count is the number of operations of kind seen.
func (c *Counter) Count(k OpKind) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

// WithErrors wraps fs so that inj can fail any operation.
func WithErrors(fs FS, inj Injector) FS { return &errFS{fs: fs, inj: inj} }

type errFS struct {
	fs  FS
	inj Injector
}

type errFile struct {
	f    File
	name string
	inj  Injector
}

func (e *errFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if err := e.inj.MaybeError(Op{Kind: OpOpen, Path: name}); err != nil {
		return nil, err
	}
	f, err := e.fs.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &errFile{f: f, name: name, inj: e.inj}, nil
}

func (e *errFS) Stat(name string) (int64, error) {
	if err := e.inj.MaybeError(Op{Kind: OpStat, Path: name}); err != nil {
		return 0, err
	}
	return e.fs.Stat(name)
}

func (e *errFS) Rename(o, n string) error {
	if err := e.inj.MaybeError(Op{Kind: OpRename, Path: o}); err != nil {
		return err
	}
	return e.fs.Rename(o, n)
}

func (e *errFS) Remove(name string) error {
	if err := e.inj.MaybeError(Op{Kind: OpRemove, Path: name}); err != nil {
		return err
	}
	return e.fs.Remove(name)
}

func (e *errFS) SyncDir(dir string) error {
	if err := e.inj.MaybeError(Op{Kind: OpSyncDir, Path: dir}); err != nil {
		return err
	}
	return e.fs.SyncDir(dir)
}

func (f *errFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.inj.MaybeError(Op{Kind: OpRead, Path: f.name, Off: off, Len: len(p)}); err != nil {
		return 0, err
	}
	return f.f.ReadAt(p, off)
}

func (f *errFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.inj.MaybeError(Op{Kind: OpWrite, Path: f.name, Off: off, Len: len(p)}); err != nil {
		return 0, err
	}
	return f.f.WriteAt(p, off)
}

// WriteAtV is one write of all of bufs for the injector, passed on as one
// vectored write.
func (f *errFile) WriteAtV(bufs [][]byte, off int64) (int, error) {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	if err := f.inj.MaybeError(Op{Kind: OpWrite, Path: f.name, Off: off, Len: n}); err != nil {
		return 0, err
	}
	return WriteAtV(f.f, bufs, off)
}

func (f *errFile) Truncate(size int64) error {
	if err := f.inj.MaybeError(Op{Kind: OpTruncate, Path: f.name, Off: size}); err != nil {
		return err
	}
	return f.f.Truncate(size)
}

func (f *errFile) Sync() error {
	if err := f.inj.MaybeError(Op{Kind: OpSync, Path: f.name}); err != nil {
		return err
	}
	return f.f.Sync()
}

func (f *errFile) Datasync() error {
	if err := f.inj.MaybeError(Op{Kind: OpSync, Path: f.name}); err != nil {
		return err
	}
	return f.f.Datasync()
}

func (f *errFile) PunchHole(off, n int64) error {
	if err := f.inj.MaybeError(Op{Kind: OpPunch, Path: f.name, Off: off, Len: int(n)}); err != nil {
		return err
	}
	return f.f.PunchHole(off, n)
}

func (f *errFile) Size() (int64, error) {
	if err := f.inj.MaybeError(Op{Kind: OpSize, Path: f.name}); err != nil {
		return 0, err
	}
	return f.f.Size()
}

func (f *errFile) Close() error {
	if err := f.inj.MaybeError(Op{Kind: OpClose, Path: f.name}); err != nil {
		f.f.Close()
		return err
	}
	return f.f.Close()
}
