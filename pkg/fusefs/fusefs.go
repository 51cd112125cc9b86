// Package fusefs binds the log-structured file system (pkg/lfs) to the kernel
// through go-fuse's raw API. The kernel's node IDs are lfs inode numbers (the
// root is 1 on both sides, and lfs never reuses an inode number), so the
// binding keeps no inode table: every request names its inode and goes
// straight to the lfs call of the same name. Every error reaches the kernel
// through lfs.Errno, the one mapping of errors to errno.
//
// What the binding adds to lfs:
//   - directory handles: a listing is taken at opendir (and again at offset 0,
//     i.e. rewinddir) and served by index, so seekdir/telldir work;
//   - create of an existing name without O_EXCL opens it (racing creators);
//   - mknod of regular files, FIFOs, sockets and device nodes (lfs.Mknod);
//   - O_TMPFILE (lfs.CreateTmp) and renameat2 RENAME_EXCHANGE;
//   - fallocate (lfs.Fallocate: reservation, punch hole, zero range)
//     and lseek SEEK_DATA/SEEK_HOLE (lfs.Lseek);
//   - FOPEN_KEEP_CACHE: the kernel's page cache of a file survives close and
//     open, as on a local file system (all data changes pass through it);
//   - the read-only virtual attribute StatsXattr on the root directory,
//     which returns the mount's live counters as JSON (`zctl fs stat DIR`).
//
// Data path: WRITE returns once lfs copied the data into its page cache
// (lfs writes it back per log in the background of later operations, and
// fsync waits for it); requests of up to 1 MiB (MaxWrite); the kernel keeps
// up to 64 asynchronous requests in flight (MaxBackground) and reads ahead
// 1 MiB (MountOptions.ReadAheadKiB, set on the mount's backing device after
// INIT, which can only lower the kernel's 128 KiB default). A READ reply is
// written from lfs's page cache itself (lfs.ReadVec: one writev of the
// cached pages' slices, no copy into a reply buffer). lfs serves
// requests of different files in parallel (see the lfs package doc for its
// locks); go-fuse runs every request on its own goroutine. The kernel
// write-back cache is optional (MountOptions.WritebackCache, `zctl mount
// --writeback-cache`), off by default: it makes small writes far cheaper
// (a SQLite database: 2.2x) but reports a full file system at fsync or close
// instead of write(2).
//
// Privileges on write: the mount negotiates HANDLE_KILLPRIV_V2, so lfs, not
// the kernel, clears set-user/group-ID and file capabilities on write,
// truncate, fallocate and chown (the kernel flags the calls whose caller
// lacks CAP_FSETID: WRITE_KILL_SUIDGID, FATTR_KILL_SUIDGID,
// OPEN_KILL_SUIDGID; it flags nothing for fallocate, so the binding reads
// the caller's CAP_FSETID itself) and the kernel stops asking GETXATTR
// security.capability before every WRITE. The rules are Linux 6.2's for
// local file systems: set-group-ID also goes from a file that is not
// group-executable when the caller is not in its group; the caller's
// supplementary groups and capabilities come from /proc/<tid>/status, read
// only for such files (see caller). A WRITE, OPEN or FALLOCATE reply
// carries no attributes, so when lfs cleared something the binding
// invalidates the kernel's cached attributes of the file before replying
// (FS.killed): otherwise `stat` and exec would see the old set-user-ID bit
// until the attribute timeout. With ATOMIC_O_TRUNC and HANDLE_KILLPRIV an
// O_TRUNC open is one OPEN that truncates, without a SETATTR after it.
//
// Permissions are checked by the kernel: mounts use default_permissions.
// Requests run with context.Background(): an interrupted system call does
// not abandon an lfs operation half way.
package fusefs

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// StatsXattr is the virtual extended attribute of the mount's root directory
// holding the live counters (a JSON StatsInfo). It is not listed by
// listxattr and cannot be set.
const StatsXattr = "user.zonefleet.stats"

// StatsInfo is what StatsXattr returns.
type StatsInfo struct {
	Mount MountInfo `json:"mount"`
	Stats lfs.Stats `json:"stats"`
}

// MountInfo describes the mount process (filled by the caller of New).
type MountInfo struct {
	PID            int    `json:"pid"`
	Namespace      string `json:"namespace,omitempty"`
	Dir            string `json:"dir,omitempty"`
	GC             string `json:"gc,omitempty"`
	CachedWrite    bool   `json:"izc_cached_write,omitempty"`
	MetricsAddr    string `json:"metrics_addr,omitempty"`
	BackgroundGC   string `json:"background_gc,omitempty"`
	CheckpointEach string `json:"checkpoint_every,omitempty"`
	Started        string `json:"started,omitempty"`
}

// Config configures the binding.
type Config struct {
	// EntryTimeout and AttrTimeout are the kernel's caching of names and
	// attributes. All changes pass through this mount, so caching is safe;
	// 0 means one second.
	EntryTimeout, AttrTimeout time.Duration
	Info                      MountInfo
}

// FS is the raw FUSE file system over an lfs.FS.
type FS struct {
	fuse.RawFileSystem
	fs  *lfs.FS
	cfg Config
	// writeback: the kernel write-back cache is on (Mount sets it from
	// what INIT negotiated, before any request can name a file)
	writeback atomic.Bool
	// srv is the serving connection (Init), for attribute invalidations
	srv atomic.Pointer[fuse.Server]

	mu     sync.Mutex
	dirs   map[uint64]*dirHandle
	nextDH uint64
}

type dirHandle struct {
	mu   sync.Mutex
	ino  uint64
	h    lfs.Handle // keeps a directory removed while open alive (fstat works)
	ents []lfs.DirEntry
}

// New returns the binding of fs.
func New(fs *lfs.FS, cfg Config) *FS {
	if cfg.EntryTimeout == 0 {
		cfg.EntryTimeout = time.Second
	}
	if cfg.AttrTimeout == 0 {
		cfg.AttrTimeout = time.Second
	}
	return &FS{RawFileSystem: fuse.NewDefaultRawFileSystem(), fs: fs, cfg: cfg, dirs: map[uint64]*dirHandle{}, nextDH: 1}
}

// status maps an error to the kernel's status: through lfs.Errno only.
func status(err error) fuse.Status {
	if err == nil {
		return fuse.OK
	}
	return fuse.Status(lfs.Errno(err))
}

func bg() context.Context { return context.Background() }

// ctxOf is the context of a request that may allocate: a caller of uid 0
// (the request's file-system uid) may fill the root-reserved share
// (lfs.WithRootReserve). The kernel's write-back of cached pages counts as
// the handle's opener (lfs.WriteBack), whatever its request carries.
func ctxOf(h *fuse.InHeader) context.Context {
	if h.Uid == 0 {
		return lfs.WithRootReserve(bg())
	}
	return bg()
}

func (f *FS) String() string { return "zonefleet" }

// Init implements fuse.RawFileSystem: it keeps the server, to tell the
// kernel about attribute changes it did not ask for.
func (f *FS) Init(s *fuse.Server) { f.srv.Store(s) }

// killed tells the kernel that a write, O_TRUNC open or fallocate by c
// changed ino's mode or capabilities (HANDLE_KILLPRIV_V2: lfs clears them,
// the reply carries no attributes): its cached attributes are invalidated
// (FUSE_NOTIFY_INVAL_INODE, offset -1: attributes only, no page cache, so
// it is safe from within the request), before the reply. Otherwise the
// kernel would show, and honour on exec, the old set-user-ID bit until its
// attribute timeout.
func (f *FS) killed(c *caller, ino uint64) {
	if c == nil || !c.killed {
		return
	}
	if s := f.srv.Load(); s != nil {
		_ = s.InodeNotify(ino, -1, 0) // ENOENT: the kernel holds no attributes of it
	}
}

func fillAttr(a lfs.Attr, out *fuse.Attr) {
	out.Ino = a.Ino
	out.Size = a.Size
	out.Blocks = a.Blocks
	out.Atime, out.Atimensec = nsTs(a.Atime)
	out.Mtime, out.Mtimensec = nsTs(a.Mtime)
	out.Ctime, out.Ctimensec = nsTs(a.Ctime)
	out.Mode = a.Mode
	out.Nlink = a.Nlink
	out.Uid, out.Gid = a.UID, a.GID
	out.Rdev = uint32(a.Rdev)
	out.Blksize = a.Blksize
}

func (f *FS) entry(a lfs.Attr, out *fuse.EntryOut) {
	out.NodeId = a.Ino
	out.Generation = 1
	out.SetEntryTimeout(f.cfg.EntryTimeout)
	out.SetAttrTimeout(f.cfg.AttrTimeout)
	fillAttr(a, &out.Attr)
}

func (f *FS) attrOut(a lfs.Attr, out *fuse.AttrOut) {
	out.SetTimeout(f.cfg.AttrTimeout)
	fillAttr(a, &out.Attr)
}

// owner returns the uid and gid of a new inode in parent: the caller's, with
// the parent's group when the parent is set-group-ID (and S_ISGID inherited
// by directories).
func (f *FS) owner(parent uint64, c fuse.Caller, mode uint32) (uid, gid, m uint32, err error) {
	pa, err := f.fs.Getattr(bg(), parent)
	if err != nil {
		return 0, 0, 0, err
	}
	uid, gid, m = c.Uid, c.Gid, mode
	if pa.Mode&syscall.S_ISGID != 0 {
		gid = pa.GID
		if mode&syscall.S_IFMT == syscall.S_IFDIR {
			m |= syscall.S_ISGID
		}
	}
	return uid, gid, m, nil
}

// Lookup implements fuse.RawFileSystem.
func (f *FS) Lookup(_ <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	a, err := f.fs.Lookup(bg(), h.NodeId, name)
	if err != nil {
		return status(err)
	}
	f.entry(a, out)
	return fuse.OK
}

// Forget implements fuse.RawFileSystem: lfs keeps no lookup counts.
func (f *FS) Forget(nodeid, nlookup uint64) {}

// GetAttr implements fuse.RawFileSystem.
//
// With the kernel write-back cache, a GETATTR through a handle is the one
// request the kernel sends before a write(2) into its cache (when the
// attributes expired or were invalidated), and it returns a GETATTR error
// from write(2): so a writable handle of a file whose write-back had to
// use the write-back reserve gets ENOSPC here while the file system stays
// full (lfs.NoSpaceFor), and the writer stops at write(2) instead of
// filling the kernel's cache with pages that cannot be stored.
func (f *FS) GetAttr(_ <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	if in.Flags()&fuse.FUSE_GETATTR_FH != 0 && f.writeback.Load() {
		if err := f.fs.NoSpaceFor(lfs.Handle(in.Fh())); err != nil {
			return status(err)
		}
	}
	a, err := f.fs.Getattr(bg(), in.NodeId)
	if err != nil {
		return status(err)
	}
	f.attrOut(a, out)
	return fuse.OK
}

// tsNs is a FUSE timestamp (seconds as a two's complement int64, so before
// 1970 too) in nanoseconds since the epoch, the file system's unit: times
// outside what that holds (about 1678 to 2262) are clamped to its ends, as
// the kernel clamps a timestamp to a file system's range (ext4's ends are
// 1901 and 2446), instead of wrapping around.
func tsNs(sec uint64, nsec uint32) int64 {
	const maxSec, minSec = math.MaxInt64/1_000_000_000 - 1, math.MinInt64/1_000_000_000 + 1
	s := int64(sec)
	switch {
	case s > maxSec:
		return math.MaxInt64
	case s < minSec:
		return math.MinInt64
	}
	return s*1e9 + int64(min(nsec, 999_999_999))
}

// nsTs splits nanoseconds since the epoch into FUSE's seconds (two's
// complement) and nanoseconds in [0, 1e9): floored, so that a time before
// 1970 with a fraction of a second is not off by a second or garbage.
func nsTs(ns int64) (uint64, uint32) {
	sec, rem := ns/1e9, ns%1e9
	if rem < 0 {
		sec, rem = sec-1, rem+1e9
	}
	return uint64(sec), uint32(rem)
}

// SetAttr implements fuse.RawFileSystem.
func (f *FS) SetAttr(_ <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	var s lfs.SetattrIn
	now := time.Now().UnixNano()
	if in.Valid&fuse.FATTR_MODE != 0 {
		s.Valid |= lfs.SetMode
		s.Mode = in.Mode
	}
	if in.Valid&fuse.FATTR_UID != 0 {
		s.Valid |= lfs.SetUID
		s.UID = in.Uid
	}
	if in.Valid&fuse.FATTR_GID != 0 {
		s.Valid |= lfs.SetGID
		s.GID = in.Gid
	}
	if in.Valid&fuse.FATTR_SIZE != 0 {
		s.Valid |= lfs.SetSize
		s.Size = in.Size
	}
	if in.Valid&fuse.FATTR_ATIME != 0 {
		s.Valid |= lfs.SetAtime
		s.Atime = tsNs(in.Atime, in.Atimensec)
		if in.Valid&fuse.FATTR_ATIME_NOW != 0 {
			s.Atime = now
		}
	}
	if in.Valid&fuse.FATTR_MTIME != 0 {
		s.Valid |= lfs.SetMtime
		s.Mtime = tsNs(in.Mtime, in.Mtimensec)
		if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
			s.Mtime = now
		}
	}
	if in.Valid&fuse.FATTR_CTIME != 0 {
		s.Valid |= lfs.SetCtime
		s.Ctime = tsNs(in.Ctime, in.Ctimensec)
	}
	if in.Valid&fuse.FATTR_KILL_SUIDGID != 0 {
		// HANDLE_KILLPRIV_V2: a truncate by a caller without CAP_FSETID,
		// or a chown of a file
		s.Valid |= lfs.SetKillSUIDGID
		s.Caller = newCaller(&in.InHeader)
	}
	a, err := f.fs.Setattr(ctxOf(&in.InHeader), in.NodeId, s)
	if err != nil {
		return status(err)
	}
	f.attrOut(a, out)
	return fuse.OK
}

// Mknod implements fuse.RawFileSystem: regular files, FIFOs, Unix sockets
// (bind(2)), character and block devices (the device number is stored; the
// kernel opens FIFOs, sockets and devices itself, devices only on a mount
// without nodev).
func (f *FS) Mknod(_ <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	uid, gid, mode, err := f.owner(in.NodeId, in.Caller, in.Mode)
	if err != nil {
		return status(err)
	}
	a, err := f.fs.Mknod(ctxOf(&in.InHeader), in.NodeId, name, mode&(syscall.S_IFMT|0o7777), uint64(in.Rdev), uid, gid)
	if err != nil {
		return status(err)
	}
	f.entry(a, out)
	return fuse.OK
}

// Mkdir implements fuse.RawFileSystem.
func (f *FS) Mkdir(_ <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	uid, gid, mode, err := f.owner(in.NodeId, in.Caller, in.Mode|syscall.S_IFDIR)
	if err != nil {
		return status(err)
	}
	a, err := f.fs.Mkdir(ctxOf(&in.InHeader), in.NodeId, name, mode&0o7777, uid, gid)
	if err != nil {
		return status(err)
	}
	f.entry(a, out)
	return fuse.OK
}

// Unlink implements fuse.RawFileSystem.
func (f *FS) Unlink(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return status(f.fs.Unlink(bg(), h.NodeId, name))
}

// Rmdir implements fuse.RawFileSystem.
func (f *FS) Rmdir(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return status(f.fs.Rmdir(bg(), h.NodeId, name))
}

// Rename implements fuse.RawFileSystem (RENAME_NOREPLACE and
// RENAME_EXCHANGE; RENAME_WHITEOUT is EINVAL: lfs has no whiteouts, which
// only overlay file systems need on their upper layer).
func (f *FS) Rename(_ <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	if in.Flags&^uint32(lfs.RenameNoReplace|lfs.RenameExchange) != 0 {
		return status(syscall.EINVAL) // RENAME_WHITEOUT: no whiteouts in lfs
	}
	return status(f.fs.Rename(ctxOf(&in.InHeader), in.NodeId, oldName, in.Newdir, newName, in.Flags))
}

// Link implements fuse.RawFileSystem.
func (f *FS) Link(_ <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	a, err := f.fs.Link(ctxOf(&in.InHeader), in.Oldnodeid, in.NodeId, name)
	if err != nil {
		return status(err)
	}
	f.entry(a, out)
	return fuse.OK
}

// Symlink implements fuse.RawFileSystem.
func (f *FS) Symlink(_ <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	uid, gid, _, err := f.owner(h.NodeId, h.Caller, syscall.S_IFLNK)
	if err != nil {
		return status(err)
	}
	a, err := f.fs.Symlink(ctxOf(h), h.NodeId, name, target, uid, gid)
	if err != nil {
		return status(err)
	}
	f.entry(a, out)
	return fuse.OK
}

// Readlink implements fuse.RawFileSystem.
func (f *FS) Readlink(_ <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	s, err := f.fs.Readlink(bg(), h.NodeId)
	if err != nil {
		return nil, status(err)
	}
	return []byte(s), fuse.OK
}

// xattrReply answers getxattr/listxattr size probes and short buffers.
func xattrReply(v []byte, dest []byte) (uint32, fuse.Status) {
	if len(dest) == 0 {
		return uint32(len(v)), fuse.OK
	}
	if len(dest) < len(v) {
		return uint32(len(v)), fuse.ERANGE
	}
	return uint32(copy(dest, v)), fuse.OK
}

// GetXAttr implements fuse.RawFileSystem (and the virtual StatsXattr).
func (f *FS) GetXAttr(_ <-chan struct{}, h *fuse.InHeader, name string, dest []byte) (uint32, fuse.Status) {
	if h.NodeId == lfs.RootIno && name == StatsXattr {
		b, err := json.Marshal(StatsInfo{Mount: f.cfg.Info, Stats: f.fs.Stats()})
		if err != nil {
			return 0, status(err)
		}
		return xattrReply(b, dest)
	}
	v, err := f.fs.Getxattr(bg(), h.NodeId, name)
	if err != nil {
		return 0, status(err)
	}
	return xattrReply(v, dest)
}

// ListXAttr implements fuse.RawFileSystem.
func (f *FS) ListXAttr(_ <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	names, err := f.fs.Listxattr(bg(), h.NodeId)
	if err != nil {
		return 0, status(err)
	}
	var b []byte
	for _, n := range names {
		b = append(append(b, n...), 0)
	}
	return xattrReply(b, dest)
}

// The POSIX ACL xattrs, which this file system does not enforce.
const (
	aclAccess  = "system.posix_acl_access"
	aclDefault = "system.posix_acl_default"
)

// xattrNamespace checks a name to set against the namespaces a Linux disk
// file system stores (user., trusted., security.; the kernel checks who
// may use each). FUSE passes any name through; as on ext4, anything else
// (other system.* names, a made-up prefix) is EOPNOTSUPP and a bare prefix
// is EINVAL.
func xattrNamespace(name string) error {
	for _, p := range []string{"user.", "trusted.", "security."} {
		if strings.HasPrefix(name, p) {
			if len(name) == len(p) {
				return syscall.EINVAL
			}
			return nil
		}
	}
	return syscall.EOPNOTSUPP
}

// SetXAttr implements fuse.RawFileSystem.
func (f *FS) SetXAttr(_ <-chan struct{}, in *fuse.SetXAttrIn, name string, data []byte) fuse.Status {
	if in.NodeId == lfs.RootIno && name == StatsXattr {
		return status(syscall.EPERM)
	}
	if in.NodeId == lfs.RootIno && name == DropCachesXattr {
		return f.dropCaches(in, data)
	}
	if name == aclAccess || name == aclDefault {
		// The kernel checks permissions from the mode bits alone (no
		// FUSE_POSIX_ACL): a stored ACL would not be enforced, so that
		// `setfacl -m o::- secret` would report success and leave the
		// file readable. Refused, as by a file system mounted noacl.
		return status(syscall.EOPNOTSUPP)
	}
	if err := xattrNamespace(name); err != nil {
		return status(err)
	}
	return status(f.fs.Setxattr(bg(), in.NodeId, name, data, int(in.Flags)))
}

// RemoveXAttr implements fuse.RawFileSystem.
func (f *FS) RemoveXAttr(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return status(f.fs.Removexattr(bg(), h.NodeId, name))
}

// Create implements fuse.RawFileSystem. Without O_EXCL an existing name is
// opened (two creators racing on one name both succeed, as on a local FS).
func (f *FS) Create(_ <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	uid, gid, mode, err := f.owner(in.NodeId, in.Caller, in.Mode)
	if err != nil {
		return status(err)
	}
	flags := f.openFlags(in.Flags)
	a, h, err := f.fs.Create(ctxOf(&in.InHeader), in.NodeId, name, mode&0o7777, uid, gid, flags)
	if lfs.Errno(err) == syscall.EEXIST && flags&syscall.O_EXCL == 0 {
		// an existing file: its O_TRUNC by a caller without CAP_FSETID
		// clears set-user/group-ID (HANDLE_KILLPRIV_V2); a file this call
		// created keeps its mode
		if a, err = f.fs.Lookup(bg(), in.NodeId, name); err == nil {
			if a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				return status(syscall.EISDIR)
			}
			if h, err = f.open(&in.InHeader, a.Ino, flags, in.OpenFlags); err == nil {
				a, err = f.fs.Getattr(bg(), a.Ino)
			}
		}
	}
	if err != nil {
		return status(err)
	}
	f.entry(a, &out.EntryOut)
	out.Fh = uint64(h)
	out.OpenFlags = fuse.FOPEN_KEEP_CACHE
	return fuse.OK
}

// Tmpfile implements fuse.RawFileSystem: open(2) with O_TMPFILE makes an
// unnamed file in the directory (lfs.CreateTmp); linkat(2) with
// AT_EMPTY_PATH names it unless it was opened with O_EXCL.
func (f *FS) Tmpfile(_ <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	uid, gid, mode, err := f.owner(in.NodeId, in.Caller, in.Mode)
	if err != nil {
		return status(err)
	}
	a, h, err := f.fs.CreateTmp(ctxOf(&in.InHeader), in.NodeId, mode&0o7777, uid, gid, int(in.Flags))
	if err != nil {
		return status(err)
	}
	f.entry(a, &out.EntryOut)
	out.Fh = uint64(h)
	out.OpenFlags = fuse.FOPEN_KEEP_CACHE
	return fuse.OK
}

// Open implements fuse.RawFileSystem.
// openFlags are the open flags lfs gets for a handle. With the kernel
// write-back cache the kernel owns the file size: it places O_APPEND writes
// at its own end of file and later writes the pages back at their offsets
// through any writable handle, so lfs must not move those writes to its end
// of file (libfuse's passthrough does the same).
func (f *FS) openFlags(fl uint32) int {
	flags := int(fl)
	if f.writeback.Load() {
		flags &^= syscall.O_APPEND
	}
	return flags
}

// open opens ino; openFlags are the kernel's OPEN_* flags: with
// OPEN_KILL_SUIDGID (HANDLE_KILLPRIV_V2: O_TRUNC by a caller without
// CAP_FSETID) the truncate also clears set-user/group-ID.
func (f *FS) open(h *fuse.InHeader, ino uint64, flags int, openFlags uint32) (lfs.Handle, error) {
	if openFlags&fuse.OPEN_KILL_SUIDGID != 0 {
		c := newCaller(h)
		fh, err := f.fs.OpenKillSUIDGID(ctxOf(h), ino, flags, c)
		f.killed(c, ino)
		return fh, err
	}
	return f.fs.Open(ctxOf(h), ino, flags)
}

func (f *FS) Open(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	h, err := f.open(&in.InHeader, in.NodeId, f.openFlags(in.Flags), in.Mode) // (OpenIn.Mode holds the open_flags)
	if err != nil {
		return status(err)
	}
	out.Fh = uint64(h)
	// Every change of file data passes through this mount's page cache
	// (lfs never changes data on its own; recycling moves blocks without
	// changing them), so the cache stays valid from one open to the next,
	// except after a failed write-back: the kernel still shows the pages
	// that could not be written, so this open drops them; and when a read
	// would update the access time (lfs.AtimeDue: FUSE inodes are
	// S_NOATIME in the kernel, lfs keeps atime), so the first read
	// reaches lfs instead of the kernel's cache.
	readable := in.Flags&syscall.O_ACCMODE != syscall.O_WRONLY
	if !f.fs.StaleCache(in.NodeId) && !(readable && f.fs.AtimeDue(in.NodeId)) {
		out.OpenFlags = fuse.FOPEN_KEEP_CACHE
	}
	return fuse.OK
}

// Read implements fuse.RawFileSystem. The reply is written to the kernel
// straight from lfs's page cache (lfs.ReadVec, one writev(2) of the cached
// pages' slices): one memcpy per byte less than copying them into buf first.
// Only what lfs reads from the drives goes through buf.
func (f *FS) Read(_ <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	r := vecPool.Get().(*vecResult)
	vec, n, err := f.fs.ReadVec(bg(), lfs.Handle(in.Fh), int64(in.Offset), buf[:min(len(buf), int(in.Size))], r.vec[:0])
	r.vec, r.n = vec, n
	if err != nil {
		r.Done()
		return nil, status(err)
	}
	if len(vec) > maxReadPieces {
		// more pieces than writev takes (not with requests of at most
		// MaxWrite): one buffer
		b, _ := r.Bytes(buf)
		r.Done()
		return fuse.ReadResultData(b), fuse.OK
	}
	return r, fuse.OK
}

// maxReadPieces bounds the pieces of a vectored read reply (IOV_MAX is
// 1024; go-fuse adds two headers).
const maxReadPieces = 1000

// vecResult is a READ reply made of lfs.ReadVec's pieces: go-fuse writes
// them with one writev(2) (its withSlice interface, Slices) and calls Done
// after, which returns the result to vecPool.
type vecResult struct {
	vec [][]byte
	n   int
}

var vecPool = sync.Pool{New: func() any { return &vecResult{vec: make([][]byte, 0, 258)} }}

// Slices returns the pieces (go-fuse's vectored write).
func (r *vecResult) Slices() ([][]byte, fuse.Status) { return r.vec, fuse.OK }

// Size implements fuse.ReadResult.
func (r *vecResult) Size() int { return r.n }

// Bytes implements fuse.ReadResult: the pieces concatenated into buf.
func (r *vecResult) Bytes(buf []byte) ([]byte, fuse.Status) {
	if cap(buf) < r.n {
		buf = make([]byte, r.n)
	}
	buf = buf[:0]
	for _, v := range r.vec {
		buf = append(buf, v...)
	}
	return buf, fuse.OK
}

// Done implements fuse.ReadResult: the reply was sent.
func (r *vecResult) Done() {
	clear(r.vec) // no references to pages or buffers stay in the pool
	r.vec, r.n = r.vec[:0], 0
	vecPool.Put(r)
}

// Write implements fuse.RawFileSystem. The kernel's write-back of cached
// pages (FUSE_WRITE_CACHE: pages dirtied through a shared mapping, whose
// stores cannot be refused) goes to lfs.WriteBack, which may use the space
// reserve and makes later fsyncs fail when it fails; write(2) goes to
// lfs.Write, which gets ENOSPC before the reserve.
func (f *FS) Write(_ <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	var n int
	var err error
	switch h := lfs.Handle(in.Fh); {
	case in.WriteFlags&fuse.WRITE_CACHE != 0:
		// the request carries the flusher's credentials: lfs counts
		// the write-back as the handle's opener (ctxOf)
		n, err = f.fs.WriteBack(bg(), h, int64(in.Offset), data)
		if f.writeback.Load() && f.fs.NoSpaceFor(h) != nil {
			// the kernel revalidates the attributes at the next
			// write(2), which GetAttr then fails with ENOSPC
			if s := f.srv.Load(); s != nil {
				_ = s.InodeNotify(in.NodeId, -1, 0)
			}
		}
	case in.WriteFlags&fuse.WRITE_KILL_SUIDGID != 0:
		// HANDLE_KILLPRIV_V2: a write by a caller without CAP_FSETID
		c := newCaller(&in.InHeader)
		n, err = f.fs.WriteKillSUIDGID(ctxOf(&in.InHeader), h, int64(in.Offset), data, c)
		f.killed(c, in.NodeId)
	default:
		n, err = f.fs.Write(ctxOf(&in.InHeader), h, int64(in.Offset), data)
	}
	if err != nil {
		return 0, status(err)
	}
	return uint32(n), fuse.OK
}

// Flush implements fuse.RawFileSystem (close(2) of a descriptor).
func (f *FS) Flush(_ <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	return status(f.fs.Flush(bg(), lfs.Handle(in.Fh)))
}

// Release implements fuse.RawFileSystem (the last close of an open file).
func (f *FS) Release(_ <-chan struct{}, in *fuse.ReleaseIn) {
	_ = f.fs.Release(bg(), lfs.Handle(in.Fh))
}

// Fsync implements fuse.RawFileSystem.
func (f *FS) Fsync(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	if in.Fh == 0 {
		return status(f.fs.FsyncIno(bg(), in.NodeId))
	}
	return status(f.fs.Fsync(bg(), lfs.Handle(in.Fh), in.FsyncFlags&1 != 0))
}

// Fallocate implements fuse.RawFileSystem through lfs.Fallocate: mode 0
// and KEEP_SIZE reserve the range (mode 0 also extends the size),
// PUNCH_HOLE (with KEEP_SIZE) and ZERO_RANGE deallocate it; collapse,
// insert and unshare are EOPNOTSUPP.
func (f *FS) Fallocate(_ <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	c := newCaller(&in.InHeader)
	err := f.fs.Fallocate(ctxOf(&in.InHeader), in.NodeId, in.Mode, in.Offset, in.Length, c)
	f.killed(c, in.NodeId)
	return status(err)
}

// Lseek implements fuse.RawFileSystem: SEEK_DATA and SEEK_HOLE (the kernel
// handles SEEK_SET, SEEK_CUR and SEEK_END itself). With the kernel
// write-back cache the kernel holds written pages (and the size) that lfs
// has not seen yet, and does not write them back before LSEEK: lfs would
// call a freshly written range a hole, or a position below the kernel's
// size past the end (ENXIO), and a program walking SEEK_DATA (a sparse
// copy, a backup tool) would skip data the writer holds open. So
// there it answers ENOSYS, and the kernel falls back, for good, to its own
// seek over its own size (every byte data: correct, no holes found).
func (f *FS) Lseek(_ <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	if f.writeback.Load() {
		return fuse.ENOSYS
	}
	pos, err := f.fs.Lseek(bg(), in.NodeId, in.Offset, int(in.Whence))
	if err != nil {
		return status(err)
	}
	out.Offset = pos
	return fuse.OK
}

// OpenDir implements fuse.RawFileSystem: the listing is taken now.
func (f *FS) OpenDir(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	ents, err := f.fs.Readdir(bg(), in.NodeId)
	if err != nil {
		return status(err)
	}
	h, err := f.fs.Open(bg(), in.NodeId, syscall.O_RDONLY)
	if err != nil {
		return status(err)
	}
	f.mu.Lock()
	id := f.nextDH
	f.nextDH++
	f.dirs[id] = &dirHandle{ino: in.NodeId, h: h, ents: ents}
	f.mu.Unlock()
	out.Fh = id
	return fuse.OK
}

func (f *FS) dir(fh uint64) *dirHandle {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dirs[fh]
}

// ReadDir implements fuse.RawFileSystem: entry i has offset i+1; offset 0
// (a new or rewound stream) takes a fresh listing.
func (f *FS) ReadDir(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	d := f.dir(in.Fh)
	if d == nil {
		return status(syscall.EBADF)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if in.Offset == 0 {
		ents, err := f.fs.Readdir(bg(), d.ino)
		if err != nil {
			return status(err)
		}
		d.ents = ents
	}
	for i := in.Offset; i < uint64(len(d.ents)); i++ {
		e := d.ents[i]
		if !out.AddDirEntry(fuse.DirEntry{Name: e.Name, Ino: e.Ino, Mode: e.Mode, Off: i + 1}) {
			break
		}
	}
	return fuse.OK
}

// ReleaseDir implements fuse.RawFileSystem.
func (f *FS) ReleaseDir(in *fuse.ReleaseIn) {
	f.mu.Lock()
	d := f.dirs[in.Fh]
	delete(f.dirs, in.Fh)
	f.mu.Unlock()
	if d != nil {
		_ = f.fs.Release(bg(), d.h)
	}
}

// FsyncDir implements fuse.RawFileSystem.
func (f *FS) FsyncDir(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	return status(f.fs.FsyncIno(bg(), in.NodeId))
}

// StatFs implements fuse.RawFileSystem.
func (f *FS) StatFs(_ <-chan struct{}, _ *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	s, err := f.fs.Statfs(bg())
	if err != nil {
		return status(err)
	}
	*out = fuse.StatfsOut{Blocks: s.Blocks, Bfree: s.Bfree, Bavail: s.Bavail, Files: s.Files, Ffree: s.Ffree,
		Bsize: s.Bsize, NameLen: s.NameLen, Frsize: s.Bsize}
	return fuse.OK
}

// MountOptions are the go-fuse options of a ZoneFleet mount.
type MountOptions struct {
	FsName     string // shown by df (e.g. zonefleet:NAMESPACE)
	AllowOther bool
	Debug      bool
	// Direct mounts with mount(2) (root only); otherwise through fusermount3.
	Direct bool
	// ReadAheadKiB is the kernel read-ahead of the mount (0: 1024). FUSE
	// negotiates at most the kernel's default (128 KiB) in INIT, so Mount
	// raises it afterwards through the mount's backing device
	// (/sys/class/bdi/MAJOR:MINOR/read_ahead_kb, root only; without root the
	// kernel default stays and Mount says so in the log). Negative: leave it.
	ReadAheadKiB int
	// WritebackCache enables the kernel write-back cache (FUSE
	// CAP_WRITEBACK_CACHE): write(2) returns once the kernel's page cache
	// has the data, and the kernel sends it in page-sized or larger WRITEs
	// later (on fsync, close, memory pressure or its write-back timer), so
	// many small writes cost a few FUSE requests instead of one each. The
	// kernel then owns the file size and times between flushes, applies
	// O_APPEND itself (the binding drops the flag before lfs sees it) and
	// reads through write-only handles to fill partial pages. Off by
	// default: a write that finds the file system full fails only when the
	// kernel writes it back — fsync and close report ENOSPC, write(2)
	// already returned — where without it write(2) itself fails.
	WritebackCache bool
	// Dev lets device nodes on the mount be opened (the mount option dev;
	// without it nodev, as fusermount3 mounts). Root only: a user who can
	// create device nodes would reach any device.
	Dev bool
	// ReadOnly mounts read-only (ro): the kernel refuses every change
	// with EROFS. lfs still rolls forward at mount, as ext4 replays its
	// journal on a read-only mount; give lfs Atime noatime.
	ReadOnly bool
	// Atime is the atime option the kernel shows for the mount (relatime,
	// noatime or strictatime). lfs applies it (lfs.Options.Atime): FUSE
	// inodes are S_NOATIME in the kernel.
	Atime lfs.AtimeMode
}

// mountFlags are the mount(2) flags and fusermount3 options of o.
func (o MountOptions) mountFlags() (uintptr, []string) {
	flags := uintptr(syscall.MS_NOSUID | syscall.MS_NODEV)
	opts := []string{"nosuid"}
	if o.Dev {
		flags &^= syscall.MS_NODEV
		opts = append(opts, "dev")
	} else {
		opts = append(opts, "nodev")
	}
	if o.ReadOnly {
		flags |= syscall.MS_RDONLY
		opts = append(opts, "ro")
	}
	switch o.Atime {
	case lfs.AtimeNever:
		flags |= syscall.MS_NOATIME
		opts = append(opts, "noatime")
	case lfs.AtimeStrict:
		flags |= syscall.MS_STRICTATIME
		opts = append(opts, "strictatime")
	default:
		flags |= syscall.MS_RELATIME
		opts = append(opts, "relatime")
	}
	return flags, opts
}

// maxBackground is the number of asynchronous requests (read-ahead, write-
// back) the kernel keeps in flight: enough for several 1 MiB read-aheads.
const maxBackground = 64

// Server is a mounted binding.
type Server struct {
	srv  *fuse.Server
	dir  string
	done chan struct{}
}

// Mount mounts the binding at dir and serves it in the background until
// Unmount or an unmount from outside (fusermount3 -u, umount).
func Mount(f *FS, dir string, o MountOptions) (*Server, error) {
	opts := &fuse.MountOptions{
		FsName:             o.FsName,
		Name:               "zonefleet",
		AllowOther:         o.AllowOther,
		Debug:              o.Debug,
		DirectMount:        o.Direct,
		MaxWrite:           1 << 20,
		MaxReadAhead:       1 << 20,
		MaxBackground:      maxBackground,
		DisableReadDirPlus: true,
		Options:            []string{"default_permissions"},
	}
	flags, fopts := o.mountFlags()
	if o.Direct {
		opts.DirectMountFlags = flags
	} else {
		opts.Options = append(opts.Options, fopts...)
	}
	if o.WritebackCache {
		opts.ExtraCapabilities |= fuse.CAP_WRITEBACK_CACHE
		// on from the first request (every kernel since 3.15 grants it);
		// corrected below if INIT did not
		f.writeback.Store(true)
	}
	// HANDLE_KILLPRIV_V2: lfs clears set-user/group-ID and file
	// capabilities on write, truncate and chown itself (the kernel says
	// when, per call), so the kernel no longer asks for
	// security.capability before every WRITE: one GETXATTR round trip per
	// write(2) less (random 4 KiB writes 35 % faster). ATOMIC_O_TRUNC:
	// OPEN carries O_TRUNC and lfs.Open truncates; with HANDLE_KILLPRIV
	// (v1) the kernel then sends no SETATTR after it (fuse_setattr's
	// ATTR_OPEN case), one round trip per O_TRUNC open less. (With v2
	// also on, the kernel takes every other kill decision by v2's rules.)
	opts.ExtraCapabilities |= fuse.CAP_HANDLE_KILLPRIV_V2 | fuse.CAP_ATOMIC_O_TRUNC | fuse.CAP_HANDLE_KILLPRIV
	if opts.FsName == "" {
		opts.FsName = "zonefleet"
	}
	srv, err := fuse.NewServer(f, dir, opts)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	s := &Server{srv: srv, dir: dir, done: make(chan struct{})}
	go func() {
		srv.Serve()
		close(s.done)
	}()
	if err := srv.WaitMount(); err != nil {
		_ = srv.Unmount()
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	if o.WritebackCache {
		on := srv.KernelSettings().Flags&fuse.CAP_WRITEBACK_CACHE != 0 // (INIT is done)
		f.writeback.Store(on)
		if !on {
			slog.Warn("fusefs: the kernel did not enable its write-back cache", "dir", dir)
		}
		// the kernel's dirty pages of this mount stay within half the
		// write-back reserve: when write(2) starts failing (GetAttr),
		// what the kernel still holds fits in the reserve
		if on {
			if err := SetDirtyLimit(dir, f.fs.WriteReserveBytes()/2); err != nil {
				slog.Warn("fusefs: the kernel's dirty-page limit of the mount stays at its default: write(2) may accept more than the file system can store, which fsync then reports", "dir", dir, "err", err)
			}
		}
	}
	if ra := o.ReadAheadKiB; ra >= 0 {
		if ra == 0 {
			ra = 1024
		}
		if err := SetReadAhead(dir, ra); err != nil {
			slog.Warn("fusefs: kernel read-ahead stays at its default", "dir", dir, "err", err)
		}
	}
	return s, nil
}

// SetReadAhead sets the kernel read-ahead of the mount at dir in KiB.
func SetReadAhead(dir string, kib int) error {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return err
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	return os.WriteFile(p, []byte(fmt.Sprintf("%d\n", kib)), 0o644)
}

// SetDirtyLimit lowers the kernel's bound on the dirty pages of the mount
// at dir (its backing device's max_bytes, root only) to at most limit
// bytes; a lower bound already set stays. The kernel turns the figure into
// a share of its global dirty limit, so it follows that limit as memory
// use changes; FUSE mounts have strict per-device limits, so writers are
// throttled at it.
func SetDirtyLimit(dir string, limit uint64) error {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return err
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/max_bytes", unix.Major(st.Dev), unix.Minor(st.Dev))
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	var cur uint64
	if _, err := fmt.Sscanf(string(b), "%d", &cur); err == nil && cur <= limit {
		return nil
	}
	return os.WriteFile(p, []byte(fmt.Sprintf("%d\n", max(limit, 1<<20))), 0o644)
}

// ReadAhead returns the kernel read-ahead of the mount at dir in KiB.
func ReadAhead(dir string) (int, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return 0, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		return 0, err
	}
	var kib int
	_, err = fmt.Sscanf(string(b), "%d", &kib)
	return kib, err
}

// Done is closed when the kernel has ended the mount (after Unmount, or an
// unmount from outside).
func (s *Server) Done() <-chan struct{} { return s.done }

// Unmount asks the kernel to unmount and waits until serving stopped. A busy
// mount (open files, a shell inside it) fails with EBUSY unless lazy, which
// detaches it now and ends serving when the last user leaves.
func (s *Server) Unmount(lazy bool) error {
	err := s.srv.Unmount()
	if err != nil && lazy {
		err = LazyUnmount(s.dir)
	}
	if err != nil {
		return err
	}
	<-s.done
	return nil
}

// LazyUnmount detaches the mount at dir (umount -l / fusermount3 -u -z).
// It also clears a dead mount whose process was killed.
func LazyUnmount(dir string) error {
	if os.Geteuid() == 0 {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err == nil {
			return nil
		}
	}
	out, err := exec.Command("fusermount3", "-u", "-z", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("fusermount3 -u -z %s: %v: %s", dir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Wait blocks until the mount ends.
func (s *Server) Wait() { <-s.done }
