package fusefs

import (
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// DropCachesXattr is the write-only virtual extended attribute of the
// mount's root directory that empties lfs's page cache of clean pages
// (lfs.FS.DropCleanCache): setting it to "1" is to this file system's own
// cache what writing 1 to /proc/sys/vm/drop_caches is to the kernel's, so
// that a cold read measurement reads from the drives (`zctl fs drop-caches
// DIR`). Only root may set it, as only root may drop the kernel's caches:
// on a mount shared with --allow-other, another user could otherwise slow
// every reader down at will. It is not stored, not listed, and reads as
// absent.
const DropCachesXattr = "user.zonefleet.drop_caches"

// dropCaches handles a setxattr of DropCachesXattr on the root directory.
func (f *FS) dropCaches(in *fuse.SetXAttrIn, data []byte) fuse.Status {
	if in.Caller.Uid != 0 {
		return status(syscall.EPERM)
	}
	if string(data) != "1" {
		return status(syscall.EINVAL)
	}
	f.fs.DropCleanCache()
	return fuse.OK
}
