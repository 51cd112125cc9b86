package lfs

import "syscall"

// The kernel's write-back cache and a full file system.
//
// With the kernel write-back cache, write(2) returns once the kernel's page
// cache holds the data; lfs sees it later, as write-backs (WriteBack), and
// a write-back that finds no space can only fail — the application hears of
// it at fsync or close, long after write(2) succeeded. Two rules keep what
// write(2) reports close to what is stored:
//
//   - WriteBack may use the write-back reserve (write(2) may not). The first
//     write-back of a file that needs the reserve marks the file: from then
//     on NoSpaceFor reports ENOSPC for its writable handles until write(2)
//     would fit again. The binding asks NoSpaceFor when the kernel revalidates
//     a file's attributes through a handle, which the kernel does before a
//     write(2) into its cache once the attributes expire or are invalidated
//     (the binding invalidates them at once), and the kernel returns that
//     error from write(2). The pages the kernel already holds dirty are
//     written into the reserve, which is sized to cover them
//     (DefaultWriteReserve).
//   - A file whose write-back failed is not extended by later write-backs
//     until the failure is reported: a file never grows past a range that
//     was lost, so it does not end up the length of everything written and
//     mostly holes.

// markWBFull records that a write-back of in needed the write-back reserve
// or failed for lack of space (fs.mu held).
func (fs *FS) markWBFull(in *inode) {
	if fs.wbFull == nil {
		fs.wbFull = map[uint64]bool{}
	}
	fs.wbFull[in.ino] = true
}

// NoSpaceFor returns ENOSPC when h is a writable handle of a file whose
// write-back needed the write-back reserve (or failed for lack of space)
// and a write(2) still would not fit: the binding returns it to the
// kernel's next write(2) through h. Once space is free again, nil.
func (fs *FS) NoSpaceFor(h Handle) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	of := fs.files.handles[h]
	if of == nil || of.flags&(syscall.O_WRONLY|syscall.O_RDWR) == 0 || !fs.wbFull[of.ino] {
		return nil
	}
	if fs.fits(1, true, of.root) {
		delete(fs.wbFull, of.ino)
		return nil
	}
	return errNoSpace
}

// wbExtendRefused reports whether a write-back of in ending at end must be
// refused: an earlier write-back of in failed and end is past its size.
func wbExtendRefused(in *inode, end uint64) bool {
	return in.wbErr != nil && end > in.body.Size
}

// WriteReserveBytes is the write-back reserve in bytes: the binding keeps
// the kernel's dirty pages of the mount below it (fusefs.SetDirtyLimit),
// so what the kernel holds when write(2) starts failing fits in it.
func (fs *FS) WriteReserveBytes() uint64 {
	return fs.writeReserve() * uint64(fs.bs)
}
