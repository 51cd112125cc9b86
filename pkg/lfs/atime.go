package lfs

import (
	"fmt"
	"time"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// AtimeMode is when a read updates a file's access time (the mount options
// relatime, noatime and strictatime). FUSE marks every inode S_NOATIME in
// the kernel, so the kernel never updates atime of a FUSE file: lfs does,
// on Read and ReadVec of a regular file.
type AtimeMode int

const (
	// AtimeRelative (relatime, the default): a read updates atime when it
	// is not after mtime or ctime, or is more than a day old — so a program
	// asking "read since the last change?" gets the answer, and a file read
	// over and over changes its inode once a day at most.
	AtimeRelative AtimeMode = iota
	// AtimeNever (noatime): reads never update atime.
	AtimeNever
	// AtimeStrict (strictatime): every read updates atime.
	AtimeStrict
)

// relatimeAge is how old relatime lets atime get before a read updates it.
const relatimeAge = 24 * time.Hour

// ParseAtime parses a mount option: relatime, noatime or strictatime.
func ParseAtime(s string) (AtimeMode, error) {
	switch s {
	case "", "relatime":
		return AtimeRelative, nil
	case "noatime":
		return AtimeNever, nil
	case "strictatime":
		return AtimeStrict, nil
	}
	return 0, &zerr.InvalidArgumentError{Field: "atime", Reason: fmt.Sprintf("%q is not relatime, noatime or strictatime", s)}
}

func (m AtimeMode) String() string {
	switch m {
	case AtimeNever:
		return "noatime"
	case AtimeStrict:
		return "strictatime"
	}
	return "relatime"
}

// noteAccess updates in's atime after a read, per Options.Atime (fs.mu
// held). The change is persisted lazily: a read holds neither the inode's
// lock nor the checkpoint lock (reads never wait for checkpoints or
// recycling), so it does not dirty the inode itself; it records the inode,
// and the next checkpoint marks it dirty and writes it (markAtimes). A
// crash before that, or the inode leaving the cache first, loses only the
// access time. A read-only file system keeps it.
func (fs *FS) noteAccess(in *inode) {
	if fs.opts.Atime == AtimeNever || fs.failed != nil || !in.isReg() {
		return
	}
	now := nowNs()
	if fs.opts.Atime == AtimeRelative && !atimeStale(in, now) || in.body.Atime == now {
		return
	}
	in.body.Atime = now
	if fs.atimes == nil {
		fs.atimes = map[uint64]struct{}{}
	}
	fs.atimes[in.ino] = struct{}{}
}

// markAtimes marks dirty the inodes whose atime reads changed, so the
// checkpoint writes them (the checkpoint holds cp.mu exclusively and
// fs.mu: no operation is changing them).
func (fs *FS) markAtimes() {
	for ino := range fs.atimes {
		if in := fs.ic.inodes[ino]; in != nil && !in.gone {
			fs.markDirty(in)
		}
	}
	fs.atimes = nil
}

// AtimeDue reports whether the next read of ino would update its atime.
// The binding opens such a file without keeping the kernel's cached pages,
// so the first read reaches lfs (a read the kernel serves from its cache
// never does) and updates it.
func (fs *FS) AtimeDue(ino uint64) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	in := fs.ic.inodes[ino]
	if in == nil || fs.opts.Atime == AtimeNever || !in.isReg() {
		return false
	}
	return fs.opts.Atime == AtimeStrict || atimeStale(in, nowNs())
}

// atimeStale is relatime's rule: atime not after mtime or ctime, or older
// than relatimeAge.
func atimeStale(in *inode, now int64) bool {
	a := in.body.Atime
	return a <= in.body.Mtime || a <= in.body.Ctime || now-a >= int64(relatimeAge)
}
