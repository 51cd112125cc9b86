package vfs

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Default is the real operating system file system.
var Default FS = osFS{}

type osFS struct{}

type osFile struct{ *os.File }

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Stat(name string) (int64, error) {
	st, err := os.Stat(name)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (osFS) Rename(o, n string) error { return os.Rename(o, n) }
func (osFS) Remove(name string) error { return os.Remove(name) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (f osFile) Datasync() error {
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
	}
	return nil
}

func (f osFile) Size() (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// iovMax is the most buffers one pwritev takes (IOV_MAX on Linux).
const iovMax = 1024

// WriteAtV writes bufs back to back at off with pwritev(2): one call for up
// to iovMax buffers however they are cut, so a write received as many
// network frames costs the host file system one call instead of a copy into
// one buffer first. Short writes and EINTR are continued.
func (f osFile) WriteAtV(bufs [][]byte, off int64) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	total := 0
	var werr error
	// (Control holds the descriptor: a Close meanwhile waits for it)
	cerr := rc.Control(func(fd uintptr) {
		for len(bufs) > 0 {
			batch := bufs[:min(len(bufs), iovMax)]
			n, err := unix.Pwritev(int(fd), batch, off)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				werr = err
				return
			}
			if n == 0 {
				werr = io.ErrShortWrite
				return
			}
			total += n
			off += int64(n)
			// drop what was written, cutting a buffer written in part
			for n > 0 && len(bufs) > 0 {
				if n >= len(bufs[0]) {
					n -= len(bufs[0])
					bufs = bufs[1:]
					continue
				}
				rest := append([][]byte{bufs[0][n:]}, bufs[1:]...)
				bufs, n = rest, 0
			}
			for len(bufs) > 0 && len(bufs[0]) == 0 {
				bufs = bufs[1:]
			}
		}
	})
	if cerr != nil {
		return total, &os.PathError{Op: "pwritev", Path: f.Name(), Err: fmt.Errorf("%w (%v)", os.ErrClosed, cerr)}
	}
	if werr != nil {
		return total, &os.PathError{Op: "pwritev", Path: f.Name(), Err: werr}
	}
	return total, nil
}

// PunchHole makes the range read as zeros: FALLOC_FL_ZERO_RANGE where the
// file system has it (ext4, XFS: the blocks stay allocated as unwritten
// extents), else FALLOC_FL_PUNCH_HOLE (tmpfs), else it writes zeros.
//
// Zero range first because the drive store zeroes a flash block group
// before every reuse while other zones of the same file are written:
// on ext4 a punch frees the blocks (a discard at the next journal commit
// with -o discard) and the rewrite allocates them again, and a punch took
// about 15 ms under that load while holding the inode lock every buffered
// write of the file waits for; zero range frees nothing and measured 10 to
// 20 % more sequential write throughput over the cluster
// (BenchmarkSeqWriteCluster). The cost: a backing file's disk usage is its
// high-water mark, as a real drive's NAND is.
func (f osFile) PunchHole(off, n int64) error {
	if unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, off, n) == nil {
		return nil
	}
	if unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n) == nil {
		return nil
	}
	z := make([]byte, 64<<10)
	for n > 0 {
		c := min(int64(len(z)), n)
		if _, err := f.WriteAt(z[:c], off); err != nil {
			return err
		}
		off += c
		n -= c
	}
	return nil
}

// StartWriteback starts writing the file's dirty pages to the disk and
// returns without waiting for them (sync_file_range(2) with
// SYNC_FILE_RANGE_WRITE over the whole file). It makes nothing durable: a
// later Datasync still must run, and has less left to write.
func (f osFile) StartWriteback() error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	// (Control holds the descriptor: a Close meanwhile waits for it)
	if err := rc.Control(func(fd uintptr) { serr = unix.SyncFileRange(int(fd), 0, 0, unix.SYNC_FILE_RANGE_WRITE) }); err != nil {
		// (Control fails only when the descriptor is closed or closing)
		return &os.PathError{Op: "sync_file_range", Path: f.Name(), Err: fmt.Errorf("%w (%v)", os.ErrClosed, err)}
	}
	if serr != nil {
		return &os.PathError{Op: "sync_file_range", Path: f.Name(), Err: serr}
	}
	return nil
}
