// Package vfs is the file layer under the drive store (pkg/zns): the few file
// operations the store needs, behind an interface so tests can run the drive
// on a file system that loses power or fails.
//
// # Implementations
//
//   - OS (Default) is the real operating system: *os.File, fdatasync,
//     fallocate(ZERO_RANGE), else fallocate(PUNCH_HOLE), else zero writes.
//     Production uses it; behaviour is unchanged from calling package os
//     directly.
//   - NewCrashableMem is an in-memory file system that remembers what has
//     been made durable: file contents at their last Sync/Datasync, directory
//     entries at the last SyncDir of their directory. CrashClone returns the
//     file system as a machine would find it after a power loss at that
//     instant: every write, truncate or hole punch not yet synced is, with a
//     seeded random choice, applied, dropped or torn. An overwrite of blocks
//     that were already allocated ends up old or new per 512-byte sector (a
//     file system never turns them into zeros); a write to new blocks (past
//     the durable size) may also vanish with the file left longer and a
//     zero-filled tail, become zeros, or become stale garbage (what ext4/XFS
//     can leave behind). Names created or renamed since the last SyncDir may
//     vanish or revert. The same seed and the same operation sequence give the
//     same result.
//   - WithErrors wraps any FS and fails operations chosen by an Injector
//     (the Nth read/write/sync of a file, or any predicate) with ErrInjected,
//     the way Pebble's errorfs does.
//
// # Concurrency
//
// All implementations are safe for concurrent use. The in-memory file system
// serializes operations with one mutex (it is a test vehicle); CrashClone
// observes a state between two operations.
//
// # Failure behaviour
//
// Errors are returned as *os.PathError wrapping the cause, so errors.Is
// works with os.ErrNotExist, os.ErrExist and ErrInjected.
package vfs

import (
	"errors"
	"io"
	"os"
	"path/filepath"
)

// File is an open file.
type File interface {
	io.ReaderAt
	io.WriterAt
	// Truncate changes the size of the file.
	Truncate(size int64) error
	// Sync makes data and metadata durable (fsync).
	Sync() error
	// Datasync makes data durable (fdatasync): what a power loss keeps.
	Datasync() error
	// PunchHole makes [off, off+n) read as zeros without changing the size.
	PunchHole(off, n int64) error
	// Size is the current size of the file.
	Size() (int64, error)
	Close() error
}

// WritebackStarter is implemented by a File that can start writing its
// dirty pages to the disk without waiting for them (the operating system's
// files: Default). It is a hint: it makes nothing durable, and files without
// it (the in-memory and fault-injecting ones of the tests) simply skip it.
type WritebackStarter interface {
	StartWriteback() error
}

// VectorWriter is implemented by a File that writes several buffers back
// to back at one offset in one call (pwritev(2): the operating system's
// files, Default). WriteAtV is the way to call it.
type VectorWriter interface {
	WriteAtV(bufs [][]byte, off int64) (int, error)
}

// WriteAtV writes bufs back to back at off and returns the bytes written:
// one call where f is a VectorWriter, else one WriteAt per buffer (the
// in-memory and fault-injecting files of the tests). As with WriteAt, a
// short count comes with an error.
func WriteAtV(f File, bufs [][]byte, off int64) (int, error) {
	if len(bufs) == 1 {
		return f.WriteAt(bufs[0], off)
	}
	if vw, ok := f.(VectorWriter); ok {
		return vw.WriteAtV(bufs, off)
	}
	total := 0
	for _, b := range bufs {
		n, err := f.WriteAt(b, off)
		total += n
		off += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// FS is the set of file system calls the drive store makes.
type FS interface {
	// OpenFile opens name with os.O_* flags (O_RDONLY, O_RDWR, O_WRONLY,
	// O_CREATE, O_EXCL, O_TRUNC are honoured).
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Stat reports the size of name, or an error wrapping os.ErrNotExist.
	Stat(name string) (int64, error)
	// Rename atomically replaces newname by oldname.
	Rename(oldname, newname string) error
	// Remove deletes name.
	Remove(name string) error
	// SyncDir makes the directory entries of dir durable.
	SyncDir(dir string) error
}

// ErrInjected is the cause of every error made by an Injector.
var ErrInjected = errors.New("injected I/O error")

// ReadFile reads a whole file through fs.
func ReadFile(fs FS, name string) ([]byte, error) {
	f, err := fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}

// WriteFileAtomic replaces name with data durably: write a temporary file,
// fsync it, rename it over name and fsync the directory.
func WriteFileAtomic(fs FS, name string, data []byte) error {
	tmp := name + ".tmp"
	f, err := fs.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fs.Rename(tmp, name); err != nil {
		return err
	}
	return fs.SyncDir(filepath.Dir(name))
}
