package lfs

import (
	"context"
	"log/slog"
	"math"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Attr is an inode's attributes (times in nanoseconds since the Unix epoch).
type Attr struct {
	Ino     uint64
	Mode    uint32 // type and permission bits (syscall.S_IF*)
	Nlink   uint32
	UID     uint32
	GID     uint32
	Size    uint64
	Blocks  uint64 // 512-byte sectors allocated
	Blksize uint32
	Rdev    uint64 // device number of character and block devices
	Atime   int64
	Mtime   int64
	Ctime   int64
}

// DirEntry is one Readdir entry ("." and ".." included).
type DirEntry struct {
	Name string
	Ino  uint64
	Mode uint32 // file type bits only
}

// Handle is an open file.
type Handle uint64

type handle struct {
	ino   uint64
	flags int
	root  bool // opened by a caller that may fill the root-reserved share
}

// SetattrMask says which fields of SetattrIn apply.
type SetattrMask uint32

const (
	SetMode SetattrMask = 1 << iota
	SetUID
	SetGID
	SetSize
	SetAtime
	SetMtime
	SetCtime
	// SetKillSUIDGID: the change is made by a caller without CAP_FSETID
	// (a truncate), or is a chown (FUSE's FATTR_KILL_SUIDGID with
	// HANDLE_KILLPRIV_V2): clear the set-user-ID bit, and the set-group-ID
	// bit of a group-executable file or of a file whose group
	// SetattrIn.Caller is not in, as the kernel does on other file systems.
	SetKillSUIDGID
)

// xattrCaps is the file capabilities attribute, which every write, truncate
// and chown of the file drops (as on other Linux file systems: the kernel
// leaves it to the file system when FUSE's HANDLE_KILLPRIV_V2 is on).
const xattrCaps = "security.capability"

// Caller is who makes a change, as far as clearing set-user/group-ID needs
// to know (the FUSE binding reads it from the request's header and
// /proc). A nil Caller is a privileged one: only the kill flags and the
// group-execute bit decide, as FUSE's HANDLE_KILLPRIV_V2 describes it.
type Caller interface {
	// InGroup reports whether gid is the caller's file-system group ID or
	// one of its supplementary groups.
	InGroup(gid uint32) bool
	// CapFSetID reports whether the caller holds CAP_FSETID.
	CapFSetID() bool
	// Killed is told that the change cleared set-user/group-ID or file
	// capabilities: a kernel that caches the file's attributes must learn
	// it (the FUSE binding invalidates them), or it goes on showing, and
	// honouring on exec, the old mode. It runs under lfs's locks and must
	// not call back into lfs.
	Killed()
}

// killPriv clears what a write, truncate, fallocate or chown takes from a
// file: its file capabilities always, and with suidgid (a caller without
// CAP_FSETID, or a chown) the set-user-ID bit and the set-group-ID bit of a
// group-executable file, or of any file whose group the caller is neither
// in nor holds CAP_FSETID for (Linux 6.2's setattr_should_drop_sgid: what
// the kernel does on local file systems). It reports whether anything
// changed (the caller updates ctime and marks the inode dirty).
func (in *inode) killPriv(suidgid bool, c Caller) bool {
	changed := false
	if len(in.body.Xattrs) > 0 {
		if i := in.xattrIndex(xattrCaps); i >= 0 {
			in.body.Xattrs = append(in.body.Xattrs[:i:i], in.body.Xattrs[i+1:]...)
			changed = true
		}
	}
	if suidgid && !in.isDir() {
		m := in.body.Mode
		if m&syscall.S_ISUID != 0 {
			m &^= syscall.S_ISUID
		}
		if m&syscall.S_ISGID != 0 && (m&syscall.S_IXGRP != 0 || (c != nil && !c.InGroup(in.body.GID) && !c.CapFSetID())) {
			m &^= syscall.S_ISGID
		}
		if m != in.body.Mode {
			in.body.Mode = m
			changed = true
		}
	}
	if changed && c != nil {
		c.Killed()
	}
	return changed
}

// SetattrIn is the argument of Setattr.
type SetattrIn struct {
	Valid        SetattrMask
	Mode         uint32 // permission bits
	UID, GID     uint32
	Size         uint64
	Atime, Mtime int64 // ns since the epoch
	Ctime        int64
	Caller       Caller // who makes the change (SetKillSUIDGID); nil: privileged
}

// StatfsOut is the result of Statfs.
type StatfsOut struct {
	Bsize   uint32
	Blocks  uint64 // user-visible capacity
	Bfree   uint64
	Bavail  uint64
	Files   uint64
	Ffree   uint64
	NameLen uint32
}

const maxNameLen = 255

// Xattr flags (as in setxattr(2)).
const (
	XattrCreate  = 1
	XattrReplace = 2
)

// opKind says which locks an operation takes.
type opKind int

const (
	opRead    opKind = iota // fs.mu only, released for I/O: never waits for writers, GC or checkpoints
	opWrite                 // housekeeping first, then the checkpoint lock shared and inode locks
	opRelease               // like opWrite without housekeeping and on a failed FS (close must work)
)

// op is one running operation: what it holds, for done to release.
type op struct {
	fs       *FS
	name     string
	t0       time.Duration
	kind     opKind
	locked   []*inode
	renaming bool
	after    func() error // runs with nothing held (a checkpoint fsync asked for)
}

// begin starts an operation. It returns with fs.mu held (and, for mutating
// kinds, the checkpoint lock shared); the operation takes inode locks with
// op.lock in the documented order and calls done at the end.
func (fs *FS) begin(ctx context.Context, name string, kind opKind) (*op, error) {
	fs.inflight.Add(1)
	o, err := fs.begin1(ctx, name, kind)
	if err != nil {
		fs.inflight.Add(-1)
	}
	return o, err
}

func (fs *FS) begin1(ctx context.Context, name string, kind opKind) (*op, error) {
	if kind == opWrite {
		if err := fs.housekeep(ctx); err != nil {
			return nil, err
		}
	}
	if kind != opRead {
		fs.cp.mu.RLock()
	}
	fs.mu.Lock()
	if fs.closed || kind == opWrite && fs.failed != nil {
		err := fs.refuse()
		fs.mu.Unlock()
		if kind != opRead {
			fs.cp.mu.RUnlock()
		}
		return nil, err
	}
	o := &op{fs: fs, name: name, t0: fs.now(), kind: kind}
	if kind == opWrite {
		// Write-back: once a batch is dirty and not yet in flight the
		// write-back goroutines are kicked (the operation goes on: a
		// WRITE returns after its copy). Writes wait for room in the
		// dirty budget before begin, with nothing held (admit); without
		// write-back goroutines (virtual clock) the operation writes
		// back itself past the budget.
		soft, _ := fs.wbBudget()
		fs.kickWriteBack()
		if fs.wb.kick == nil && fs.ic.dirtyPages > soft {
			if err := fs.writeBack(ctx); err != nil {
				o.done(&err)
				return nil, err
			}
		}
	}
	return o, nil
}

// done ends the operation: metrics, then every lock it took.
func (o *op) done(errp *error) {
	fs := o.fs
	var err error
	if errp != nil {
		err = *errp
	}
	d := fs.since(o.t0)
	fs.bg.lastOp = fs.clk.Now()
	for _, in := range o.locked {
		in.busy--
	}
	fs.mu.Unlock()
	fs.m.op(o.name, d, err) // (the metrics have their own locks: not under fs.mu)
	for i := len(o.locked) - 1; i >= 0; i-- {
		o.locked[i].mu.Unlock()
	}
	if o.renaming {
		fs.renameMu.Unlock()
	}
	if o.kind != opRead {
		fs.cp.mu.RUnlock()
	}
	if o.after != nil && err == nil {
		if e := o.after(); e != nil && errp != nil {
			*errp = e
		}
	}
	fs.inflight.Add(-1)
}

// unlockAll releases the inode locks of o (fs.mu held).
func (o *op) unlockAll() {
	for i := len(o.locked) - 1; i >= 0; i-- {
		o.fs.unlockIn(o.locked[i])
	}
	o.locked = nil
}

// lock returns inode ino with its lock held until done (fs.mu held on entry
// and return; it may be released while waiting, so the caller revalidates
// what other inode locks do not protect).
func (o *op) lock(ctx context.Context, ino uint64) (*inode, error) {
	fs := o.fs
	for {
		in, err := fs.getInode(ctx, ino)
		if err != nil {
			return nil, err
		}
		for _, l := range o.locked {
			if l == in {
				return in, nil
			}
		}
		if fs.lockIn(in) {
			o.locked = append(o.locked, in)
			return in, nil
		}
	}
}

// lockDir locks directory ino and loads its index.
func (o *op) lockDir(ctx context.Context, ino uint64) (*inode, *dirIndex, error) {
	in, err := o.lock(ctx, ino)
	if err != nil {
		return nil, nil, err
	}
	if !in.isDir() {
		return nil, nil, syscall.ENOTDIR
	}
	d, err := o.fs.loadDir(ctx, in)
	return in, d, err
}

// housekeep checkpoints and recycles before a mutating operation so that the
// operation itself never runs out of segments. It runs with no lock held.
func (fs *FS) housekeep(ctx context.Context) error {
	fs.mu.Lock()
	if fs.closed || fs.failed != nil {
		err := fs.refuse()
		fs.mu.Unlock()
		return err
	}
	fs.evictCache()
	fs.evictInodes()
	cause := ""
	switch {
	case fs.ic.dirtyNodes > int(fs.geo.ZoneBlocks) || fs.ic.dirtyNodes > 4096:
		cause = "dirty_nodes"
	case fs.tlOn() && fs.gc.tl.wantCP:
		cause = "tl" // exhausted threaded-logging segments wait to be finished
	case fs.tlOn() && fs.gc.tl.preInvalid >= fs.gc.tl.thetaPI:
		cause = "pre_invalid" // periodic checkpointing (ZNS+ §3.3.2)
	}
	needGC := fs.freeSegments() < fs.gcReserve()
	fs.mu.Unlock()
	if cause != "" {
		if err := fs.exclusiveCheckpoint(ctx, false, cause); err != nil {
			return err
		}
	}
	if needGC {
		return fs.foregroundGC(ctx)
	}
	return nil
}

// checkpointAfter returns what an operation that needs a checkpoint (an
// fsync after names changed, a directory's fsync, syncfs) runs once it has
// released its locks: a checkpoint, unless one begun after the operation's
// changes (they were all made when after runs) has committed meanwhile —
// then that one made them durable too. Concurrent requests thus share
// checkpoints (group commit): n threads each creating a file and fsyncing
// it wait for about two checkpoints, not n in a row, and an application
// fsyncing its directory in a loop no longer stalls every other writer of
// the mount for one exclusive checkpoint per call.
func (fs *FS) checkpointAfter(ctx context.Context, cause string) func() error {
	return func() error {
		fs.mu.Lock()
		t := fs.cp.begun
		fs.mu.Unlock()
		return fs.checkpointSince(ctx, false, cause, t)
	}
}

// exclusiveCheckpoint takes a checkpoint under the checkpoint lock held
// exclusively (no mutating operation runs; readers do).
func (fs *FS) exclusiveCheckpoint(ctx context.Context, force bool, cause string) error {
	return fs.checkpointSince(ctx, force, cause, math.MaxUint64)
}

// checkpointSince is exclusiveCheckpoint, unless a checkpoint begun after
// the t-th one has committed by the time the checkpoint lock is taken.
func (fs *FS) checkpointSince(ctx context.Context, force bool, cause string, t uint64) error {
	fs.cp.mu.Lock()
	defer fs.cp.mu.Unlock()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.cp.committed > t {
		// (also the unmount's checkpoint, if the mount closed meanwhile)
		fs.stats.CheckpointsShared++
		fs.m.cpShared.Inc()
		return nil
	}
	if fs.closed {
		return syscall.EIO
	}
	fs.cp.cause = cause
	return fs.checkpoint(ctx, force)
}

func (fs *FS) attr(in *inode) Attr {
	bs := uint64(fs.bs)
	// space used: the data blocks mapped plus the dirty pages over holes
	// (charged against the free space already, as delayed allocation);
	// a count not known yet (see countBlocks) is estimated from the size
	blocks := in.body.Blocks + in.holes + fs.prealloc[in.ino] // reserved blocks count, as preallocated ones do elsewhere
	if !in.body.BlocksKnown {
		blocks = (in.body.Size + bs - 1) / bs
	}
	return Attr{Ino: in.ino, Mode: in.body.Mode, Nlink: in.body.Nlink, UID: in.body.UID, GID: in.body.GID,
		Size: in.body.Size, Blocks: blocks * (bs / 512), Blksize: uint32(fs.bs),
		Atime: in.body.Atime, Mtime: in.body.Mtime, Ctime: in.body.Ctime, Rdev: in.body.Rdev}
}

func nowNs() int64 { return time.Now().UnixNano() }

// touchInode updates mtime/ctime (mtime too when data changed).
func (fs *FS) touchInode(in *inode, data bool) {
	t := nowNs()
	in.body.Ctime = t
	if data {
		in.body.Mtime = t
	}
	fs.markDirty(in)
}

func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') || strings.ContainsRune(name, 0) {
		return syscall.EINVAL
	}
	if len(name) > maxNameLen {
		return syscall.ENAMETOOLONG
	}
	return nil
}

func (fs *FS) dirOf(ctx context.Context, ino uint64) (*inode, *dirIndex, error) {
	in, err := fs.getInode(ctx, ino)
	if err != nil {
		return nil, nil, err
	}
	if !in.isDir() {
		return nil, nil, syscall.ENOTDIR
	}
	d, err := fs.loadDir(ctx, in)
	return in, d, err
}

// Lookup finds name in directory parent.
func (fs *FS) Lookup(ctx context.Context, parent uint64, name string) (a Attr, err error) {
	o, err := fs.begin(ctx, "lookup", opRead)
	if err != nil {
		return a, err
	}
	defer o.done(&err)
	if len(name) > maxNameLen {
		return a, syscall.ENAMETOOLONG
	}
	pin, d, err := fs.dirOf(ctx, parent)
	if err != nil {
		return a, err
	}
	switch name {
	case ".":
		return fs.attr(pin), nil
	case "..":
		in, err := fs.getInode(ctx, pin.body.Parent)
		if err != nil {
			return a, err
		}
		return fs.attr(in), nil
	}
	e, ok := fs.lookupEnt(d, name)
	if !ok {
		return a, syscall.ENOENT
	}
	in, err := fs.getInode(ctx, e.Ino)
	if err != nil {
		return a, err
	}
	if err := fs.countBlocks(ctx, in); err != nil {
		return a, err
	}
	return fs.attr(in), nil
}

// Getattr returns an inode's attributes.
func (fs *FS) Getattr(ctx context.Context, ino uint64) (a Attr, err error) {
	o, err := fs.begin(ctx, "getattr", opRead)
	if err != nil {
		return a, err
	}
	defer o.done(&err)
	in, err := fs.getInode(ctx, ino)
	if err != nil {
		return a, err
	}
	if err := fs.countBlocks(ctx, in); err != nil {
		return a, err
	}
	return fs.attr(in), nil
}

// Setattr changes mode, owner, size (truncate up or down) and times.
func (fs *FS) Setattr(ctx context.Context, ino uint64, s SetattrIn) (a Attr, err error) {
	o, err := fs.begin(ctx, "setattr", opWrite)
	if err != nil {
		return a, err
	}
	defer o.done(&err)
	in, err := o.lock(ctx, ino)
	if err != nil {
		return a, err
	}
	if s.Valid&SetSize != 0 {
		if in.isDir() {
			return a, syscall.EISDIR
		}
		if !in.isReg() {
			return a, syscall.EINVAL
		}
		if err := fs.truncate(ctx, in, s.Size); err != nil {
			return a, err
		}
		fs.touchInode(in, true)
	}
	if s.Valid&(SetSize|SetUID|SetGID|SetKillSUIDGID) != 0 && s.Valid&SetMode == 0 {
		// a truncate or chown drops the file capabilities; the caller's
		// kill flag says whether it also clears set-user/group-ID (an
		// explicit mode in the same call wins)
		in.killPriv(s.Valid&SetKillSUIDGID != 0, s.Caller)
	}
	if s.Valid&SetMode != 0 {
		in.body.Mode = in.body.Mode&syscall.S_IFMT | s.Mode&0o7777
	}
	if s.Valid&SetUID != 0 {
		in.body.UID = s.UID
	}
	if s.Valid&SetGID != 0 {
		in.body.GID = s.GID
	}
	if s.Valid&SetAtime != 0 {
		in.body.Atime = s.Atime
	}
	if s.Valid&SetMtime != 0 {
		in.body.Mtime = s.Mtime
	}
	in.body.Ctime = nowNs()
	if s.Valid&SetCtime != 0 {
		in.body.Ctime = s.Ctime
	}
	fs.markDirty(in)
	return fs.attr(in), nil
}

// mknode creates an inode named name in parent.
func (fs *FS) mknode(ctx context.Context, o *op, parent uint64, name string, mode, uid, gid uint32) (*inode, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	pin, d, err := o.lockDir(ctx, parent)
	if err != nil {
		return nil, err
	}
	if pin.body.Nlink == 0 {
		return nil, syscall.ENOENT
	}
	if _, ok := d.ents[name]; ok {
		return nil, syscall.EEXIST
	}
	if fs.count.used+3 > fs.userLimit(mayUseRootReserve(ctx)) || fs.count.nodes+2 > fs.sb.MaxNodes {
		return nil, errNoSpace
	}
	if fs.count.nextIno > maxIno {
		return nil, syscall.ENOSPC
	}
	ino := fs.count.nextIno
	fs.count.nextIno++
	in := fs.newInode(ino, mode, uid, gid, nowNs())
	in.body.Parent = parent
	fs.lockIn(in) // new: never contended
	o.locked = append(o.locked, in)
	fs.count.used++
	fs.count.nodes++
	if err := fs.addEnt(ctx, pin, dentry{Name: name, Ino: ino, Type: modeType(mode)}); err != nil {
		fs.count.used--
		fs.count.nodes--
		fs.ic.dirtyNodes--
		in.gone = true
		delete(fs.ic.inodes, ino)
		delete(fs.ic.active, ino)
		return nil, err
	}
	if in.isDir() {
		in.body.Nlink = 2
		in.dir = &dirIndex{ents: map[string]int{}}
		pin.body.Nlink++
	}
	return in, nil
}

// Create creates and opens a regular file (O_EXCL semantics: EEXIST if present).
func (fs *FS) Create(ctx context.Context, parent uint64, name string, mode, uid, gid uint32, flags int) (a Attr, h Handle, err error) {
	o, err := fs.begin(ctx, "create", opWrite)
	if err != nil {
		return a, 0, err
	}
	defer o.done(&err)
	in, err := fs.mknode(ctx, o, parent, name, syscall.S_IFREG|mode&0o7777, uid, gid)
	if err != nil {
		return a, 0, err
	}
	return fs.attr(in), fs.open(ctx, in, flags), nil
}

// Mknod creates a special file: a FIFO, a Unix socket, a character or a block
// device (rdev is its device number, kept for devices only), or an empty
// regular file. Its permissions and ownership are those of a regular file;
// it has no data (the kernel serves FIFOs, sockets and devices itself).
func (fs *FS) Mknod(ctx context.Context, parent uint64, name string, mode uint32, rdev uint64, uid, gid uint32) (a Attr, err error) {
	o, err := fs.begin(ctx, "mknod", opWrite)
	if err != nil {
		return a, err
	}
	defer o.done(&err)
	switch mode & syscall.S_IFMT {
	case 0:
		mode |= syscall.S_IFREG
		rdev = 0
	case syscall.S_IFREG, syscall.S_IFIFO, syscall.S_IFSOCK:
		rdev = 0
	case syscall.S_IFCHR, syscall.S_IFBLK:
	case syscall.S_IFDIR:
		return a, syscall.EPERM // mkdir(2), not mknod
	default:
		return a, syscall.EINVAL
	}
	in, err := fs.mknode(ctx, o, parent, name, mode&(syscall.S_IFMT|0o7777), uid, gid)
	if err != nil {
		return a, err
	}
	in.body.Rdev = rdev
	return fs.attr(in), nil
}

// CreateTmp creates and opens an unnamed regular file in directory parent
// (open(2) O_TMPFILE): it has no link and is an orphan (deleted at its last
// close, or at the next mount after a crash) until Link gives it a name,
// which O_EXCL forbids.
func (fs *FS) CreateTmp(ctx context.Context, parent uint64, mode, uid, gid uint32, flags int) (a Attr, h Handle, err error) {
	o, err := fs.begin(ctx, "create", opWrite)
	if err != nil {
		return a, 0, err
	}
	defer o.done(&err)
	pin, _, err := o.lockDir(ctx, parent)
	if err != nil {
		return a, 0, err
	}
	if pin.body.Nlink == 0 {
		return a, 0, syscall.ENOENT
	}
	if fs.count.used+3 > fs.userLimit(mayUseRootReserve(ctx)) || fs.count.nodes+2 > fs.sb.MaxNodes {
		return a, 0, errNoSpace
	}
	if fs.count.nextIno > maxIno {
		return a, 0, syscall.ENOSPC
	}
	ino := fs.count.nextIno
	fs.count.nextIno++
	in := fs.newInode(ino, syscall.S_IFREG|mode&0o7777, uid, gid, nowNs())
	in.body.Parent = parent
	in.body.Nlink = 0
	in.tmpfile = flags&syscall.O_EXCL == 0
	fs.lockIn(in) // new: never contended
	o.locked = append(o.locked, in)
	fs.count.used++
	fs.count.nodes++
	fs.files.orphans[ino] = struct{}{}
	return fs.attr(in), fs.open(ctx, in, flags), nil
}

// Mkdir creates a directory.
func (fs *FS) Mkdir(ctx context.Context, parent uint64, name string, mode, uid, gid uint32) (a Attr, err error) {
	o, err := fs.begin(ctx, "mkdir", opWrite)
	if err != nil {
		return a, err
	}
	defer o.done(&err)
	in, err := fs.mknode(ctx, o, parent, name, syscall.S_IFDIR|mode&0o7777, uid, gid)
	if err != nil {
		return a, err
	}
	return fs.attr(in), nil
}

// Symlink creates a symbolic link to target.
func (fs *FS) Symlink(ctx context.Context, parent uint64, name, target string, uid, gid uint32) (a Attr, err error) {
	o, err := fs.begin(ctx, "symlink", opWrite)
	if err != nil {
		return a, err
	}
	defer o.done(&err)
	if len(target) == 0 || len(target) >= 4096 {
		return a, syscall.ENAMETOOLONG
	}
	in, err := fs.mknode(ctx, o, parent, name, syscall.S_IFLNK|0o777, uid, gid)
	if err != nil {
		return a, err
	}
	if _, err := fs.writeAt(ctx, in, 0, []byte(target)); err != nil {
		return a, err
	}
	return fs.attr(in), nil
}

// Readlink returns a symlink's target.
func (fs *FS) Readlink(ctx context.Context, ino uint64) (s string, err error) {
	o, err := fs.begin(ctx, "readlink", opRead)
	if err != nil {
		return "", err
	}
	defer o.done(&err)
	in, err := fs.getInode(ctx, ino)
	if err != nil {
		return "", err
	}
	if in.body.Mode&syscall.S_IFMT != syscall.S_IFLNK {
		return "", syscall.EINVAL
	}
	buf := make([]byte, in.body.Size)
	n, err := fs.readAt(ctx, in, 0, buf)
	return string(buf[:n]), err
}

// Link adds a hard link newName in newParent to ino.
func (fs *FS) Link(ctx context.Context, ino, newParent uint64, newName string) (a Attr, err error) {
	o, err := fs.begin(ctx, "link", opWrite)
	if err != nil {
		return a, err
	}
	defer o.done(&err)
	if err := checkName(newName); err != nil {
		return a, err
	}
	pin, d, err := o.lockDir(ctx, newParent)
	if err != nil {
		return a, err
	}
	in, err := o.lock(ctx, ino)
	if err != nil {
		return a, err
	}
	if in.isDir() {
		return a, syscall.EPERM
	}
	if in.body.Nlink == 0 && !in.tmpfile {
		return a, syscall.ENOENT
	}
	if pin.body.Nlink == 0 {
		return a, syscall.ENOENT
	}
	if _, ok := d.ents[newName]; ok {
		return a, syscall.EEXIST
	}
	if err := fs.addEnt(ctx, pin, dentry{Name: newName, Ino: ino, Type: modeType(in.body.Mode)}); err != nil {
		return a, err
	}
	if in.body.Nlink == 0 { // an O_TMPFILE file gets its first name
		delete(fs.files.orphans, in.ino)
		in.tmpfile = false
		in.body.Parent = newParent
	}
	in.body.Nlink++
	in.needCP = true
	fs.touchInode(in, false)
	return fs.attr(in), nil
}

// dropLink decrements in's link count and deletes it when unused.
func (fs *FS) dropLink(ctx context.Context, in *inode) error {
	if in.isDir() {
		in.body.Nlink = 0
	} else if in.body.Nlink > 0 {
		in.body.Nlink--
	}
	in.needCP = true
	fs.touchInode(in, false)
	if in.body.Nlink == 0 {
		if in.opens > 0 {
			fs.files.orphans[in.ino] = struct{}{}
			return nil
		}
		return fs.maybeDelete(ctx, in.ino)
	}
	return nil
}

// Unlink removes a non-directory name.
func (fs *FS) Unlink(ctx context.Context, parent uint64, name string) (err error) {
	o, err := fs.begin(ctx, "unlink", opWrite)
	if err != nil {
		return err
	}
	defer o.done(&err)
	return fs.remove(ctx, o, parent, name, false)
}

// Rmdir removes an empty directory.
func (fs *FS) Rmdir(ctx context.Context, parent uint64, name string) (err error) {
	o, err := fs.begin(ctx, "rmdir", opWrite)
	if err != nil {
		return err
	}
	defer o.done(&err)
	return fs.remove(ctx, o, parent, name, true)
}

func (fs *FS) remove(ctx context.Context, o *op, parent uint64, name string, dir bool) error {
	if name == "." || name == ".." {
		return syscall.EINVAL
	}
	if len(name) > maxNameLen {
		return syscall.ENAMETOOLONG
	}
	pin, d, err := o.lockDir(ctx, parent)
	if err != nil {
		return err
	}
	e, ok := fs.lookupEnt(d, name)
	if !ok {
		return syscall.ENOENT
	}
	in, err := o.lock(ctx, e.Ino)
	if err != nil {
		return err
	}
	if dir {
		if !in.isDir() {
			return syscall.ENOTDIR
		}
		cd, err := fs.loadDir(ctx, in)
		if err != nil {
			return err
		}
		if len(cd.ents) > 0 {
			return syscall.ENOTEMPTY
		}
	} else if in.isDir() {
		return syscall.EISDIR
	}
	if err := fs.removeEnt(ctx, pin, name); err != nil {
		return err
	}
	if in.isDir() {
		pin.body.Nlink--
	}
	return fs.dropLink(ctx, in)
}

// isAncestor reports whether a is b or an ancestor of b.
func (fs *FS) isAncestor(ctx context.Context, a, b uint64) (bool, error) {
	for i := 0; i < 1<<20; i++ {
		if a == b {
			return true, nil
		}
		if b == RootIno {
			return false, nil
		}
		in, err := fs.getInode(ctx, b)
		if err != nil {
			return false, err
		}
		b = in.body.Parent
	}
	return false, corrupt("directory tree", "parent loop at inode %d", b)
}

// Rename flags.
const (
	RenameNoReplace = 1
	RenameExchange  = 2
)

// Rename moves oldName in oldParent to newName in newParent, replacing an
// existing target (a file, or an empty directory when the source is one).
func (fs *FS) Rename(ctx context.Context, oldParent uint64, oldName string, newParent uint64, newName string, flags uint32) (err error) {
	o, err := fs.begin(ctx, "rename", opWrite)
	if err != nil {
		return err
	}
	defer o.done(&err)
	if err := checkRename(oldName, newName, flags); err != nil {
		return err
	}
	op, od, np, nd, err := fs.renameLock(ctx, o, oldParent, oldName, newParent, newName)
	if err != nil {
		return err
	}
	if np.body.Nlink == 0 {
		return syscall.ENOENT
	}
	se, ok := fs.lookupEnt(od, oldName)
	if !ok {
		return syscall.ENOENT
	}
	src, err := fs.getInode(ctx, se.Ino)
	if err != nil {
		return err
	}
	if src.isDir() {
		anc, err := fs.isAncestor(ctx, src.ino, newParent)
		if err != nil {
			return err
		}
		if anc {
			return syscall.EINVAL
		}
	}
	te, exists := fs.lookupEnt(nd, newName)
	if flags&RenameExchange != 0 {
		if !exists {
			return syscall.ENOENT
		}
		return fs.exchange(ctx, op, np, oldName, newName, src, te.Ino)
	}
	if exists {
		if flags&RenameNoReplace != 0 {
			return syscall.EEXIST
		}
		if te.Ino == se.Ino {
			return nil // same file: POSIX says do nothing
		}
		if err := fs.renameReplace(ctx, np, newName, src, te.Ino); err != nil {
			return err
		}
	} else {
		if err := fs.addEnt(ctx, np, dentry{Name: newName, Ino: src.ino, Type: modeType(src.body.Mode)}); err != nil {
			return err
		}
	}
	if err := fs.removeEnt(ctx, op, oldName); err != nil {
		return err
	}
	if src.isDir() && oldParent != newParent {
		op.body.Nlink--
		np.body.Nlink++
		src.body.Parent = newParent
	} else if !src.isDir() {
		src.body.Parent = newParent
	}
	src.needCP = true
	fs.touchInode(src, false)
	return nil
}

// checkRename checks a rename's flags and names.
func checkRename(oldName, newName string, flags uint32) error {
	if flags&^(RenameNoReplace|RenameExchange) != 0 || flags == RenameNoReplace|RenameExchange {
		return syscall.EINVAL
	}
	if len(oldName) > maxNameLen {
		return syscall.ENAMETOOLONG
	}
	if err := checkName(newName); err != nil {
		return err
	}
	if oldName == "." || oldName == ".." {
		return syscall.EINVAL
	}
	return nil
}

// renameLock takes a rename's locks and returns the two parents and their
// directory indexes. Lock order for rename: the rename lock (the tree's
// shape cannot change meanwhile), then the two parents, an ancestor before
// its descendant and otherwise by inode number, then the source and target
// by inode number.
func (fs *FS) renameLock(ctx context.Context, o *op, oldParent uint64, oldName string, newParent uint64, newName string) (op *inode, od *dirIndex, np *inode, nd *dirIndex, err error) {
	o.renaming = true
	if !fs.renameMu.TryLock() {
		fs.mu.Unlock()
		fs.renameMu.Lock()
		fs.mu.Lock()
	}
	first, second := oldParent, newParent
	if oldParent != newParent {
		up, err := fs.isAncestor(ctx, newParent, oldParent)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		down, err := fs.isAncestor(ctx, oldParent, newParent)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		if up || !down && newParent < oldParent {
			first, second = newParent, oldParent
		}
	}
	if _, _, err := o.lockDir(ctx, first); err != nil {
		return nil, nil, nil, nil, err
	}
	if _, _, err := o.lockDir(ctx, second); err != nil {
		return nil, nil, nil, nil, err
	}
	if op, od, err = fs.dirOf(ctx, oldParent); err != nil {
		return nil, nil, nil, nil, err
	}
	if np, nd, err = fs.dirOf(ctx, newParent); err != nil {
		return nil, nil, nil, nil, err
	}
	if se, ok := fs.lookupEnt(od, oldName); ok {
		kids := []uint64{se.Ino}
		if te, ok := fs.lookupEnt(nd, newName); ok {
			kids = append(kids, te.Ino)
			if te.Ino < se.Ino {
				kids[0], kids[1] = kids[1], kids[0]
			}
		}
		for _, k := range kids {
			if _, err := o.lock(ctx, k); err != nil {
				return nil, nil, nil, nil, err
			}
		}
	}
	return op, od, np, nd, nil
}

// renameReplace points newName in np at src in place of inode dstIno (a
// file, or an empty directory when src is one) and drops dst's link.
func (fs *FS) renameReplace(ctx context.Context, np *inode, newName string, src *inode, dstIno uint64) error {
	dst, err := fs.getInode(ctx, dstIno)
	if err != nil {
		return err
	}
	if dst.isDir() {
		if !src.isDir() {
			return syscall.EISDIR
		}
		dd, err := fs.loadDir(ctx, dst)
		if err != nil {
			return err
		}
		if len(dd.ents) > 0 {
			return syscall.ENOTEMPTY
		}
	} else if src.isDir() {
		return syscall.ENOTDIR
	}
	if err := fs.setEnt(ctx, np, newName, src.ino, modeType(src.body.Mode)); err != nil {
		return err
	}
	if dst.isDir() {
		np.body.Nlink--
	}
	return fs.dropLink(ctx, dst)
}

// exchange swaps oldName in op (naming src) and newName in np (naming dst)
// atomically (renameat2 RENAME_EXCHANGE): both names stay, each naming the
// other inode. The caller holds the rename lock and both parents', src's and
// dst's inode locks.
func (fs *FS) exchange(ctx context.Context, op, np *inode, oldName, newName string, src *inode, dstIno uint64) error {
	if dstIno == src.ino {
		return nil
	}
	dst, err := fs.getInode(ctx, dstIno)
	if err != nil {
		return err
	}
	if op != np {
		// a directory cannot move below itself
		if dst.isDir() {
			anc, err := fs.isAncestor(ctx, dst.ino, op.ino)
			if err != nil {
				return err
			}
			if anc {
				return syscall.EINVAL
			}
		}
	}
	if err := fs.setEnt(ctx, np, newName, src.ino, modeType(src.body.Mode)); err != nil {
		return err
	}
	if err := fs.setEnt(ctx, op, oldName, dst.ino, modeType(dst.body.Mode)); err != nil {
		return err
	}
	if op != np {
		if src.isDir() {
			op.body.Nlink--
			np.body.Nlink++
		}
		if dst.isDir() {
			np.body.Nlink--
			op.body.Nlink++
		}
		src.body.Parent, dst.body.Parent = np.ino, op.ino
	}
	for _, in := range []*inode{src, dst, op, np} {
		in.needCP = true
		fs.touchInode(in, false)
	}
	return nil
}

func (fs *FS) open(ctx context.Context, in *inode, flags int) Handle {
	h := fs.files.nextFH
	fs.files.nextFH++
	fs.files.handles[h] = &handle{ino: in.ino, flags: flags, root: mayUseRootReserve(ctx)}
	in.opens++
	return h
}

// Open opens an inode; O_TRUNC truncates a regular file (and drops its
// file capabilities).
func (fs *FS) Open(ctx context.Context, ino uint64, flags int) (h Handle, err error) {
	return fs.openIno(ctx, ino, flags, false, nil)
}

// OpenKillSUIDGID is Open by caller c, which lacks CAP_FSETID (FUSE's
// OPEN_KILL_SUIDGID): its O_TRUNC also clears set-user/group-ID as a
// truncate does (see Caller).
func (fs *FS) OpenKillSUIDGID(ctx context.Context, ino uint64, flags int, c Caller) (h Handle, err error) {
	return fs.openIno(ctx, ino, flags, true, c)
}

func (fs *FS) openIno(ctx context.Context, ino uint64, flags int, killSUIDGID bool, c Caller) (h Handle, err error) {
	kind := opRead
	if flags&syscall.O_TRUNC != 0 {
		kind = opWrite
	}
	o, err := fs.begin(ctx, "open", kind)
	if err != nil {
		return 0, err
	}
	defer o.done(&err)
	var in *inode
	if kind == opWrite {
		in, err = o.lock(ctx, ino)
	} else {
		in, err = fs.getInode(ctx, ino)
	}
	if err != nil {
		return 0, err
	}
	if in.body.Nlink == 0 && !fs.isOrphan(ino) {
		return 0, syscall.ENOENT
	}
	if flags&syscall.O_TRUNC != 0 && in.isReg() && flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		if err := fs.truncate(ctx, in, 0); err != nil {
			return 0, err
		}
		in.killPriv(killSUIDGID, c) // a truncate drops the file capabilities
		fs.touchInode(in, true)
	}
	return fs.open(ctx, in, flags), nil
}

func (fs *FS) isOrphan(ino uint64) bool { _, ok := fs.files.orphans[ino]; return ok }

func (fs *FS) handleInode(ctx context.Context, h Handle) (*handle, *inode, error) {
	of := fs.files.handles[h]
	if of == nil {
		return nil, nil, syscall.EBADF
	}
	in, err := fs.getInode(ctx, of.ino)
	return of, in, err
}

// Read reads up to len(buf) bytes at off.
func (fs *FS) Read(ctx context.Context, h Handle, off int64, buf []byte) (n int, err error) {
	o, err := fs.begin(ctx, "read", opRead)
	if err != nil {
		return 0, err
	}
	defer o.done(&err)
	_, in, err := fs.handleInode(ctx, h)
	if err != nil {
		return 0, err
	}
	if in.isDir() {
		return 0, syscall.EISDIR
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	n, err = fs.readAt(ctx, in, uint64(off), buf)
	fs.m.bytes("read", n)
	if err == nil {
		fs.noteRead(in, uint64(off), n)
		fs.noteAccess(in) // atime.go
	}
	return n, err
}

// ReadVec is Read without the copy of cached data: it returns the bytes at
// off, up to len(buf), as pieces in order (appended to vec, which may be
// nil): slices of the page cache, which the caller must not change and may
// keep (cached contents are never changed in place), and slices of buf for
// what was read from the drives. The pieces are at most one per block, so a
// binding can hand them to writev(2) without another copy.
func (fs *FS) ReadVec(ctx context.Context, h Handle, off int64, buf []byte, vec [][]byte) (_ [][]byte, n int, err error) {
	o, err := fs.begin(ctx, "read", opRead)
	if err != nil {
		return vec, 0, err
	}
	defer o.done(&err)
	_, in, err := fs.handleInode(ctx, h)
	if err != nil {
		return vec, 0, err
	}
	if in.isDir() {
		return vec, 0, syscall.EISDIR
	}
	if off < 0 {
		return vec, 0, syscall.EINVAL
	}
	vec, n, err = fs.readVec(ctx, in, uint64(off), buf, vec)
	fs.m.bytes("read", n)
	if err == nil {
		fs.noteRead(in, uint64(off), n)
		fs.noteAccess(in) // atime.go
	}
	return vec, n, err
}

// Write writes data at off (at the end with O_APPEND) and returns the bytes
// written; it writes everything or returns an error. It gets ENOSPC before
// the write-back reserve (Options.WriteReserveBlocks) is touched. Like a
// write(2) on any Linux file system it drops the file's capabilities
// (security.capability); WriteKillSUIDGID also clears set-user/group-ID.
func (fs *FS) Write(ctx context.Context, h Handle, off int64, data []byte) (n int, err error) {
	return fs.write(ctx, h, off, data, false, false, nil)
}

// WriteKillSUIDGID is Write by caller c, which lacks CAP_FSETID (FUSE's
// WRITE_KILL_SUIDGID): it also clears set-user/group-ID as the kernel does
// on other file systems (see Caller).
func (fs *FS) WriteKillSUIDGID(ctx context.Context, h Handle, off int64, data []byte, c Caller) (n int, err error) {
	return fs.write(ctx, h, off, data, false, true, c)
}

// WriteBack is Write for the kernel's write-back of cached pages (pages
// dirtied through a shared mapping, FUSE_WRITE_CACHE): it may use the
// reserve, since the program's stores already succeeded. When it fails
// anyway, the error is kept on the inode (like the kernel's errseq): every
// later fsync of the file returns it until the file's last close, so a
// lost page is never acknowledged by fsync; StaleCache tells the binding
// that the kernel's page cache of the file shows data that was lost.
func (fs *FS) WriteBack(ctx context.Context, h Handle, off int64, data []byte) (n int, err error) {
	return fs.write(ctx, h, off, data, true, false, nil)
}

// StaleCache reports (once) whether a write-back of ino failed since the
// last call: the kernel's cached pages of the file hold data that is not in
// the file, so the next open must not keep them.
func (fs *FS) StaleCache(ino uint64) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	in := fs.ic.inodes[ino]
	if in == nil || !in.staleCache {
		return false
	}
	in.staleCache = false
	return true
}

func (fs *FS) write(ctx context.Context, h Handle, off int64, data []byte, writeBack, killSUIDGID bool, c Caller) (n int, err error) {
	pages := (len(data) + fs.bs - 1) / fs.bs
	if err := fs.admit(ctx, pages); err != nil {
		return 0, err
	}
	defer fs.admitted(pages)
	o, err := fs.begin(ctx, "write", opWrite)
	if err != nil {
		return 0, err
	}
	defer o.done(&err)
	of := fs.files.handles[h]
	if of == nil {
		return 0, syscall.EBADF
	}
	in, err := o.lock(ctx, of.ino)
	if err != nil {
		return 0, err
	}
	if in.isDir() {
		return 0, syscall.EISDIR
	}
	if of.flags&(syscall.O_WRONLY|syscall.O_RDWR) == 0 {
		return 0, syscall.EBADF
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	if of.flags&syscall.O_APPEND != 0 {
		off = int64(in.body.Size)
	}
	// check space up front so a write is never partial for lack of space
	bs := uint64(fs.bs)
	need, reserved := uint64(0), uint64(0)
	for b := uint64(off) / bs; b <= (uint64(off)+uint64(len(data))+bs-1)/bs && len(data) > 0; b++ {
		if in.pages.get(b) == nil {
			a, err := fs.blockAddr(ctx, in, b)
			if err != nil {
				return 0, err
			}
			if a == 0 && fs.preallocHas(in, b) {
				reserved++ // fallocate holds its block
			} else if a == 0 {
				need++
			}
		}
	}
	if writeBack && (wbExtendRefused(in, uint64(off)+uint64(len(data))) && len(data) > 0) {
		return 0, in.wbErr // not past a range already lost (wbspace.go)
	}
	// root's write(2), and the write-back of a handle root opened, may
	// fill the root-reserved share (rootreserve.go)
	priv := mayUseRootReserve(ctx) || (writeBack && of.root)
	if writeBack && need > 0 && !fs.fits(need, true, priv) {
		fs.markWBFull(in) // the reserve is in use: write(2) gets ENOSPC (wbspace.go)
	}
	if (need > 0 || reserved == 0) && !fs.fits(need, !writeBack, priv) {
		if writeBack {
			fs.writeBackFailed(in, errNoSpace)
		}
		return 0, errNoSpace
	}
	n, err = fs.writeAt(ctx, in, uint64(off), data)
	if err != nil && writeBack {
		fs.writeBackFailed(in, err)
	}
	if n > 0 {
		in.killPriv(killSUIDGID, c)
	}
	fs.touchInode(in, true)
	fs.m.bytes("write", n)
	return n, err
}

// writeBackFailed records a failed write-back of in (fs.mu held).
func (fs *FS) writeBackFailed(in *inode, err error) {
	if in.wbErr == nil {
		in.wbErr = err
		// the application learns it only at its next fsync or close
		slog.Warn("write-back of a file failed: its next fsync reports the error", "ino", in.ino, "err", err)
	}
	in.staleCache = true
}

// fits tells whether need new data blocks (and the node blocks that map
// them) fit in the space users may fill; withReserve leaves the write-back
// reserve out of it, as a write(2) or fallocate must; priv may fill the
// root-reserved share (fs.mu held).
func (fs *FS) fits(need uint64, withReserve, priv bool) bool {
	limit := fs.userLimit(priv)
	if withReserve {
		limit -= min(limit, fs.writeReserve())
	}
	return fs.count.used+need+need/fs.epd()+2 <= limit
}

// Fsync persists the file's data and nodes; fdatasync (datasync) skips the
// inode when only its timestamps changed and its pages went in place (ipu.go).
func (fs *FS) Fsync(ctx context.Context, h Handle, datasync bool) (err error) {
	o, err := fs.begin(ctx, "fsync", opWrite)
	if err != nil {
		return err
	}
	defer o.done(&err)
	of := fs.files.handles[h]
	if of == nil {
		return syscall.EBADF
	}
	in, err := o.lock(ctx, of.ino)
	if err != nil {
		return err
	}
	return fs.fsync(ctx, o, in, datasync)
}

// FsyncIno is Fsync by inode number (for callers without a handle).
func (fs *FS) FsyncIno(ctx context.Context, ino uint64) (err error) {
	o, err := fs.begin(ctx, "fsync", opWrite)
	if err != nil {
		return err
	}
	defer o.done(&err)
	in, err := o.lock(ctx, ino)
	if err != nil {
		return err
	}
	return fs.fsync(ctx, o, in, false)
}

// fsync writes in's pages and nodes with the fsync mark (roll-forward), or
// asks for a checkpoint (run when the operation has released its locks) when
// names changed.
func (fs *FS) fsync(ctx context.Context, o *op, in *inode, datasync bool) error {
	if in.wbErr != nil {
		return in.wbErr // a write-back of this file failed: its data is not all there
	}
	// a background write-back of in in flight commits first (fsync waits for
	// it: its blocks must be in the nodes written below)
	fs.waitFlights(in)
	if in.gone {
		return nil
	}
	if in.needCP || in.isDir() {
		o.after = fs.checkpointAfter(ctx, "fsync")
		return nil
	}
	inPlace, err := fs.ipuFsync(ctx, in)
	if err != nil {
		return err
	}
	if inPlace && datasync && fs.ipuNodesDone(in) {
		return nil
	}
	if err := fs.flushInode(ctx, in); err != nil {
		return err
	}
	if in.body.Nlink == 0 {
		// An open file without a name (unlinked, or O_TMPFILE not linked
		// yet): no crash can bring it back, so its nodes need not be
		// durable; its data goes to the drives and is flushed (a failed
		// write is reported here). The unlink itself was made durable by
		// the first fsync after it (needCP), and linkat gives an O_TMPFILE
		// file its name with needCP set. (Before, every such fsync took an
		// exclusive checkpoint: an unlinked scratch file fsynced in a loop
		// stalled the whole mount.)
		return fs.unlocked(func() error { return fs.vol.Flush(ctx) })
	}
	// The data must be durable before the nodes that name it: roll-forward
	// trusts their block addresses, and a power loss may keep any subset
	// of the blocks written since the last Flush (even a later block of
	// the same append without an earlier one). When all of the inode's
	// dirty nodes go to one node log, they and the marked inode go in one
	// write with FUA after that Flush: one write fewer than below, and
	// roll-forward takes the marked inode only with every node of its
	// batch (nodeFlagBatch).
	if fs.fsyncOneLog(in) {
		if err := fs.unlocked(func() error { return fs.vol.Flush(ctx) }); err != nil {
			return err
		}
		return fs.writeDirtyNodes(ctx, in, nodesFsyncBatch)
	}
	// Otherwise the direct nodes must also be durable before the inode
	// that carries the fsync mark: roll-forward trusts every node of the
	// inode up to the marked one.
	if err := fs.writeDirtyNodes(ctx, in, nodesFsyncDirect); err != nil {
		return err
	}
	if err := fs.unlocked(func() error { return fs.vol.Flush(ctx) }); err != nil {
		return err
	}
	// The marked inode goes with FUA: durable when its write returns, no
	// second Flush round (nothing else of the inode was written since the
	// Flush: the inode lock and the shared checkpoint lock are held).
	return fs.writeDirtyNodes(ctx, in, nodesFsyncInode)
}

// fsyncOneLog reports whether the dirty nodes an fsync of in writes (its
// dirty direct nodes and its inode) all go to one node log, so that they
// fit in one write (nodesFsyncBatch).
func (fs *FS) fsyncOneLog(in *inode) bool {
	if fs.sb.Features.Incompat&FeatureFsyncBatch == 0 {
		return false
	}
	want := nodeLog(nodeItem{in, 0})
	for idx, d := range in.dn {
		if d.dirty && nodeLog(nodeItem{in, idx}) != want {
			return false
		}
	}
	return true
}

// Flush is called on close(2) of a descriptor; data stays cached.
func (fs *FS) Flush(ctx context.Context, h Handle) (err error) {
	o, err := fs.begin(ctx, "flush", opRead)
	if err != nil {
		return err
	}
	defer o.done(&err)
	if fs.files.handles[h] == nil {
		return syscall.EBADF
	}
	return nil
}

// Release closes a handle; an unlinked file is deleted at its last close.
func (fs *FS) Release(ctx context.Context, h Handle) (err error) {
	o, err := fs.begin(ctx, "release", opRelease)
	if err != nil {
		return err
	}
	defer o.done(&err)
	of := fs.files.handles[h]
	if of == nil {
		return syscall.EBADF
	}
	in := fs.ic.inodes[of.ino]
	if in != nil && !fs.lockIn(in) {
		in = nil
	} else if in != nil {
		o.locked = append(o.locked, in)
	}
	if fs.files.handles[h] != of {
		return syscall.EBADF
	}
	delete(fs.files.handles, h)
	if in == nil {
		return nil
	}
	in.opens--
	if in.opens == 0 {
		in.wbErr = nil // reported to every fsync until the last close
	}
	if in.opens == 0 && in.body.Nlink == 0 && fs.failed == nil {
		delete(fs.files.orphans, in.ino)
		return fs.maybeDelete(ctx, in.ino)
	}
	return nil
}

// Readdir lists a directory, "." and ".." first.
func (fs *FS) Readdir(ctx context.Context, ino uint64) (out []DirEntry, err error) {
	o, err := fs.begin(ctx, "readdir", opRead)
	if err != nil {
		return nil, err
	}
	defer o.done(&err)
	in, d, err := fs.dirOf(ctx, ino)
	if err != nil {
		return nil, err
	}
	out = append(out, DirEntry{Name: ".", Ino: ino, Mode: syscall.S_IFDIR}, DirEntry{Name: "..", Ino: in.body.Parent, Mode: syscall.S_IFDIR})
	for _, b := range d.blocks {
		for _, e := range b.ents {
			out = append(out, DirEntry{Name: e.Name, Ino: e.Ino, Mode: dtMode(e.Type)})
		}
	}
	return out, nil
}

func dtMode(t uint8) uint32 {
	switch t {
	case dtDir:
		return syscall.S_IFDIR
	case dtLnk:
		return syscall.S_IFLNK
	case dtReg:
		return syscall.S_IFREG
	}
	return uint32(t) << 12
}

// Statfs reports the real free space (space.go, statfsLocked).
func (fs *FS) Statfs(ctx context.Context) (s StatfsOut, err error) {
	o, err := fs.begin(ctx, "statfs", opRead)
	if err != nil {
		return s, err
	}
	defer o.done(&err)
	return fs.statfsLocked(), nil
}

func (in *inode) xattrIndex(name string) int {
	for i, x := range in.body.Xattrs {
		if x.Name == name {
			return i
		}
	}
	return -1
}

// Getxattr returns an extended attribute (ENODATA when missing).
func (fs *FS) Getxattr(ctx context.Context, ino uint64, name string) (v []byte, err error) {
	o, err := fs.begin(ctx, "getxattr", opRead)
	if err != nil {
		return nil, err
	}
	defer o.done(&err)
	in, err := fs.getInode(ctx, ino)
	if err != nil {
		return nil, err
	}
	i := in.xattrIndex(name)
	if i < 0 {
		return nil, syscall.ENODATA
	}
	return append([]byte(nil), in.body.Xattrs[i].Value...), nil
}

// Listxattr lists attribute names (sorted).
func (fs *FS) Listxattr(ctx context.Context, ino uint64) (names []string, err error) {
	o, err := fs.begin(ctx, "listxattr", opRead)
	if err != nil {
		return nil, err
	}
	defer o.done(&err)
	in, err := fs.getInode(ctx, ino)
	if err != nil {
		return nil, err
	}
	for _, x := range in.body.Xattrs {
		names = append(names, x.Name)
	}
	sort.Strings(names)
	return names, nil
}

// Setxattr sets an attribute; XattrCreate/XattrReplace as setxattr(2).
// Attributes live in the inode block: when the inode's names and values
// (4 bytes of lengths each, plus the block count, device number and
// reserved ranges the inode carries) would exceed xattrSpace (3,986 bytes
// with 4 KiB blocks), a *zerr.NoResourcesError (ENOSPC, as ext4 gives when
// an inode's attributes fill their block) says how many bytes were asked
// and how many the block holds.
func (fs *FS) Setxattr(ctx context.Context, ino uint64, name string, value []byte, flags int) (err error) {
	o, err := fs.begin(ctx, "setxattr", opWrite)
	if err != nil {
		return err
	}
	defer o.done(&err)
	if name == "" || len(name) > 255 {
		return syscall.ERANGE
	}
	in, err := o.lock(ctx, ino)
	if err != nil {
		return err
	}
	i := in.xattrIndex(name)
	if i >= 0 && flags&XattrCreate != 0 {
		return syscall.EEXIST
	}
	if i < 0 && flags&XattrReplace != 0 {
		return syscall.ENODATA
	}
	total := 0
	for j, x := range in.body.Xattrs {
		if j != i {
			total += xattrLen(x.Name, x.Value)
		}
	}
	total += in.body.extLen()
	if need := total + xattrLen(name, value); need > xattrSpace(fs.bs) {
		return &zerr.NoResourcesError{Resource: "extended attribute bytes in the inode block", Requested: uint64(need), Available: uint64(xattrSpace(fs.bs))}
	}
	v := append([]byte(nil), value...)
	if i >= 0 {
		in.body.Xattrs[i].Value = v
	} else {
		in.body.Xattrs = append(in.body.Xattrs, xattr{Name: name, Value: v})
	}
	if name == "user.lfs.cold" {
		in.coldFile = true
	}
	fs.touchInode(in, false)
	return nil
}

// Removexattr removes an attribute.
func (fs *FS) Removexattr(ctx context.Context, ino uint64, name string) (err error) {
	o, err := fs.begin(ctx, "removexattr", opWrite)
	if err != nil {
		return err
	}
	defer o.done(&err)
	in, err := o.lock(ctx, ino)
	if err != nil {
		return err
	}
	i := in.xattrIndex(name)
	if i < 0 {
		return syscall.ENODATA
	}
	in.body.Xattrs = append(in.body.Xattrs[:i:i], in.body.Xattrs[i+1:]...)
	fs.touchInode(in, false)
	return nil
}

// Sync takes a checkpoint (syncfs).
func (fs *FS) Sync(ctx context.Context) (err error) {
	o, err := fs.begin(ctx, "sync", opWrite)
	if err != nil {
		return err
	}
	defer o.done(&err)
	o.after = fs.checkpointAfter(ctx, "sync")
	return nil
}
