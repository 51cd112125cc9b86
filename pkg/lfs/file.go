package lfs

import (
	"bytes"
	"context"
	"math"
	"slices"
	"sort"
	"sync"
	"syscall"
)

// inode is an in-memory inode with its direct nodes and cached pages. Its
// fields are guarded by fs.mu; mu serializes the operations that change it
// (held across their I/O, see doc.go), busy keeps it in the inode cache while
// an operation holds or waits for mu, gone says it was deleted.
type inode struct {
	mu         sync.Mutex
	busy       int
	gone       bool
	flights    int    // write-backs in flight (their pages marked inflight)
	raLast     uint64 // end of the last read (sequential detection)
	raUntil    uint64 // blocks prefetched up to here
	raBusy     bool   // a read-ahead of this inode runs
	ino        uint64
	body       inodeBody
	dirty      bool // inode node must be written
	dn         map[uint32]*dnode
	pages      pageTable
	dirtyBlks  map[uint64]*page // the dirty pages by block (write-back scans only these; each is in pages)
	dir        *dirIndex        // loaded directory index (directories only)
	opens      int
	wbErr      error    // a write-back (WriteBack) failed: fsync returns it until the last close
	staleCache bool     // a write-back failed: the kernel's cached pages are stale (StaleCache)
	tmpfile    bool     // O_TMPFILE without O_EXCL: no link yet, but Link may give it one
	holes      uint64   // dirty pages over holes: blocks charged, not mapped yet (st_blocks counts them)
	needCP     bool     // created/linked/renamed/unlinked since the last checkpoint: fsync checkpoints
	cold       bool     // GC moved it: write its node to the cold node log
	coldFile   bool     // user.lfs.cold set: its data goes to the cold data log
	ipu        ipuInode // the durable size, for in-place fsyncs (ipu.go)
}

type dnode struct {
	addrs []Addr
	dirty bool
	cold  bool
}

type page struct {
	b        []byte
	gen      uint64 // bumped at every change (a write-back in flight compares it)
	inflight bool   // being written back with the inode lock released
	dirty    bool
	cold     bool // moved by recycling: write to the cold data log
}

func (in *inode) isDir() bool { return in.body.Mode&syscall.S_IFMT == syscall.S_IFDIR }
func (in *inode) isReg() bool { return in.body.Mode&syscall.S_IFMT == syscall.S_IFREG }

func (fs *FS) newInode(ino uint64, mode, uid, gid uint32, now int64) *inode {
	in := &inode{ino: ino, body: inodeBody{Mode: mode, UID: uid, GID: gid, Nlink: 1, Atime: now, Mtime: now, Ctime: now, BlocksKnown: true},
		dirty: true, dn: map[uint32]*dnode{}, needCP: true}
	fs.ic.inodes[ino] = in
	fs.ic.active[ino] = in
	fs.ic.dirtyNodes++
	return in
}

func (fs *FS) markDirty(in *inode) {
	fs.ic.active[in.ino] = in
	if !in.dirty {
		in.dirty = true
		fs.ic.dirtyNodes++
	}
}

func (fs *FS) markDnDirty(in *inode, d *dnode) {
	fs.ic.active[in.ino] = in
	if !d.dirty {
		d.dirty = true
		fs.ic.dirtyNodes++
	}
}

// readNode reads the node block of nid.
func (fs *FS) readNode(ctx context.Context, nid uint64) ([]byte, error) {
	a, ok := fs.nat[nid]
	if !ok {
		return nil, syscall.ENOENT
	}
	b := make([]byte, fs.bs)
	if err := fs.readBlocks(ctx, a, b); err != nil {
		return nil, err
	}
	return b, nil
}

// getInode returns the inode, loading it through the NAT.
//
// A miss reads the node with fs.mu released; afterwards the inode another
// goroutine loaded meanwhile wins, and a NAT entry that moved (the node was
// rewritten or recycled) means reading again.
func (fs *FS) getInode(ctx context.Context, ino uint64) (*inode, error) {
	for {
		in, again, err := fs.loadInode(ctx, ino)
		if !again {
			return in, err
		}
	}
}

func (fs *FS) loadInode(ctx context.Context, ino uint64) (*inode, bool, error) {
	if in := fs.ic.inodes[ino]; in != nil {
		return in, false, nil
	}
	if ino == 0 || ino > maxIno {
		return nil, false, syscall.ENOENT
	}
	nid := mkNid(ino, 0)
	a := fs.nat[nid]
	b, err := fs.readNode(ctx, nid)
	if err != nil {
		return nil, false, err
	}
	if in := fs.ic.inodes[ino]; in != nil {
		return in, false, nil
	}
	if fs.nat[nid] != a {
		return nil, true, nil
	}
	in, err := fs.decodeLoaded(ino, b)
	return in, false, err
}

func (fs *FS) decodeLoaded(ino uint64, b []byte) (*inode, error) {
	h, body, err := decodeInode(b)
	if err != nil {
		return nil, err
	}
	if h.Ino != ino {
		return nil, corrupt("inode", "NAT entry of %d points at inode %d", ino, h.Ino)
	}
	in := &inode{ino: ino, body: *body, dn: map[uint32]*dnode{}}
	in.coldFile = in.xattrIndex("user.lfs.cold") >= 0
	fs.ic.inodes[ino] = in
	return in, nil
}

// getDnode returns direct node idx of in; with create it makes an empty one.
func (fs *FS) getDnode(ctx context.Context, in *inode, idx uint32, create bool) (*dnode, error) {
	for {
		d, again, err := fs.loadDnode(ctx, in, idx, create)
		if !again {
			return d, err
		}
	}
}

func (fs *FS) loadDnode(ctx context.Context, in *inode, idx uint32, create bool) (*dnode, bool, error) {
	if d := in.dn[idx]; d != nil {
		return d, false, nil
	}
	nid := mkNid(in.ino, idx)
	if a, ok := fs.nat[nid]; ok {
		b, err := fs.readNode(ctx, nid)
		if err != nil {
			return nil, false, err
		}
		if d := in.dn[idx]; d != nil {
			return d, false, nil
		}
		if fs.nat[nid] != a {
			return nil, true, nil
		}
		h, addrs, err := decodeDirect(b)
		if err != nil {
			return nil, false, err
		}
		if h.Nid != nid {
			return nil, false, corrupt("direct node", "NAT entry of %#x points at node %#x", nid, h.Nid)
		}
		d := &dnode{addrs: addrs}
		in.dn[idx] = d
		return d, false, nil
	}
	if !create {
		return nil, false, nil
	}
	if fs.count.nodes+1 > fs.sb.MaxNodes || (!fs.takePreallocNode(in, idx) && fs.count.used+1 > fs.sb.UserBlocks) {
		return nil, false, errNoSpace
	}
	fs.count.used++
	fs.count.nodes++
	d := &dnode{addrs: make([]Addr, directEntries(fs.bs))}
	in.dn[idx] = d
	fs.markDnDirty(in, d)
	return d, false, nil
}

func (fs *FS) epd() uint64 { return uint64(directEntries(fs.bs)) }

// blockAddr returns the address of file block blk (0 for a hole).
func (fs *FS) blockAddr(ctx context.Context, in *inode, blk uint64) (Addr, error) {
	idx := blk/fs.epd() + 1
	if idx > maxDirect {
		return 0, syscall.EFBIG
	}
	d, err := fs.getDnode(ctx, in, uint32(idx), false)
	if err != nil || d == nil {
		return 0, err
	}
	return d.addrs[blk%fs.epd()], nil
}

// getPage returns the cached page of blk, reading it if needed. A page that
// does not exist yet (a hole) is created only with create, counting a new
// block against the free space.
func (fs *FS) getPage(ctx context.Context, in *inode, blk uint64, create bool) (*page, error) {
	if p := in.pages.get(blk); p != nil {
		return p, nil
	}
	a, err := fs.blockAddr(ctx, in, blk)
	if err != nil {
		return nil, err
	}
	if a == 0 {
		if !create {
			return &page{b: make([]byte, fs.bs)}, nil // a hole, not cached
		}
		return fs.holePage(ctx, in, blk, make([]byte, fs.bs))
	}
	p := &page{b: make([]byte, fs.bs)}
	if err := fs.readBlocks(ctx, a, p.b); err != nil {
		return nil, err
	}
	if q := in.pages.get(blk); q != nil {
		return q, nil
	}
	in.pages.set(blk, p)
	fs.ic.pages++
	return p, nil
}

// holePage caches b as the dirty page of blk, a hole, counting a new block
// against the free space (fs.mu held; released while a direct node loads).
func (fs *FS) holePage(ctx context.Context, in *inode, blk uint64, b []byte) (*page, error) {
	if _, err := fs.getDnode(ctx, in, uint32(blk/fs.epd()+1), true); err != nil {
		return nil, err
	}
	if q := in.pages.get(blk); q != nil {
		return q, nil // cached meanwhile (the caller writes it)
	}
	if !fs.takePrealloc(in, blk) && fs.count.used+1 > fs.sb.UserBlocks {
		return nil, errNoSpace
	}
	p := &page{b: b}
	fs.count.used++
	in.holes++
	p.dirty = true
	fs.ic.dirtyPages++
	fs.markDirtyBlk(in, blk, p)
	fs.ic.active[in.ino] = in
	in.pages.set(blk, p)
	fs.ic.pages++
	return p, nil
}

// setPage replaces the contents of p with b. Page contents are never changed
// in place once a page is cached, and a page buffer is never reused (no
// pool): a reader takes p.b under the table lock and copies from it with no
// lock held (readAt) or hands it out (ReadVec, whose caller writes it to the
// kernel after the operation ended), and a write-back hands it to the
// volume as it is (prepareFlush), which may read it after the write-back
// ended (an abandoned network attempt).
func setPage(p *page, b []byte) { p.b = b }

// clonePage returns a copy of p's contents to change and then set (setPage).
func (fs *FS) clonePage(p *page) []byte {
	b := make([]byte, fs.bs)
	copy(b, p.b)
	return b
}

func (fs *FS) dirtyPage(in *inode, blk uint64, p *page) {
	p.gen++
	fs.ic.active[in.ino] = in
	if !p.dirty {
		p.dirty = true
		fs.ic.dirtyPages++
		fs.markDirtyBlk(in, blk, p)
	}
}

// dropPage removes the cached page of blk (fs.mu held).
func (fs *FS) dropPage(in *inode, blk uint64) {
	in.pages.del(blk)
	fs.cleanDirtyBlk(in, blk)
	fs.ic.pages--
}

// flushPlan is one write-back of an inode's dirty pages: the pages (marked
// in flight), their contents copied into one buffer per log, their versions
// at the copy, and the addresses they got.
type flushPlan struct {
	in     *inode
	groups []flushGroup
	pages  int // pages in flight (wbScheduler.pages)
}

type flushGroup struct {
	log   int
	blks  []uint64
	pages []*page
	gens  []uint64
	bufs  [][]byte // the pages' contents when planned (p.b: never changed in place)
	addrs []Addr
}

// prepareFlush takes in's dirty pages that are not already in flight into
// per-log groups and marks them in flight (in.mu and fs.mu held): the first
// limit of them by block number (0: all). A group holds the pages'
// buffers as they are now: page contents are never changed in place
// (setPage), so a write that changes a page meanwhile makes a new buffer
// and leaves the one being written alone — no copy of the batch is made.
func (fs *FS) prepareFlush(in *inode, limit int) *flushPlan {
	blks := make([]uint64, 0, len(in.dirtyBlks))
	for b, p := range in.dirtyBlks {
		if p.dirty && !p.inflight {
			blks = append(blks, b)
		}
	}
	if len(blks) == 0 {
		return nil
	}
	if limit > 0 && len(blks) > limit {
		// the limit lowest, without sorting them all: a file written
		// faster than it is written back has many batches dirty, and
		// each batch sorted the whole set (with the page lookups, half
		// of prepareFlush's CPU in BenchmarkSeqWriteCluster)
		selectLowest(blks, limit)
		blks = blks[:limit]
	}
	slices.Sort(blks)
	temp := logWarmData
	if in.isDir() {
		temp = logHotData
	} else if in.coldFile {
		temp = logColdData
	}
	plan := &flushPlan{in: in}
	idx := map[int]int{}
	for _, b := range blks {
		t := temp
		p := in.pages.get(b)
		if p.cold {
			t = logColdData // moved by recycling
		}
		gi, ok := idx[t]
		if !ok {
			gi = len(plan.groups)
			idx[t] = gi
			plan.groups = append(plan.groups, flushGroup{log: t})
		}
		g := &plan.groups[gi]
		g.blks = append(g.blks, b)
		g.pages = append(g.pages, p)
		g.gens = append(g.gens, p.gen)
		b := p.b
		if len(b) != fs.bs { // (pages are whole blocks; a short one would be zero-padded)
			b = append(append(make([]byte, 0, fs.bs), b...), make([]byte, fs.bs-len(b))...)
		}
		g.bufs = append(g.bufs, b)
		p.inflight = true
	}
	sort.Slice(plan.groups, func(i, j int) bool { return plan.groups[i].log < plan.groups[j].log })
	in.flights++
	plan.pages = len(blks)
	fs.wb.flights++
	fs.wb.pages += plan.pages
	return plan
}

// selectLowest reorders s so that its k lowest values come first (in no
// particular order): quickselect, linear on average.
func selectLowest(s []uint64, k int) {
	lo, hi := 0, len(s)-1
	for lo < hi {
		// median of three as the pivot, moved to hi
		mid := lo + (hi-lo)/2
		if s[mid] < s[lo] {
			s[mid], s[lo] = s[lo], s[mid]
		}
		if s[hi] < s[lo] {
			s[hi], s[lo] = s[lo], s[hi]
		}
		if s[mid] < s[hi] {
			s[mid], s[hi] = s[hi], s[mid]
		}
		pivot := s[hi]
		i := lo
		for j := lo; j < hi; j++ {
			if s[j] < pivot {
				s[i], s[j] = s[j], s[i]
				i++
			}
		}
		s[i], s[hi] = s[hi], s[i]
		switch {
		case i == k || i == k-1:
			return
		case i < k:
			lo = i + 1
		default:
			hi = i - 1
		}
	}
}

// writePlan appends the plan's buffers to their logs (fs.mu held, released
// for the writes). The blocks are not valid yet: their segments count them
// as pending, so recycling leaves those segments alone until commitFlush.
func (fs *FS) writePlan(ctx context.Context, plan *flushPlan) error {
	for gi := range plan.groups {
		g := &plan.groups[gi]
		err := fs.appendBlocks(ctx, g.log, blockData{pages: g.bufs}, false, func(i int, a Addr) error {
			g.addrs = append(g.addrs, a)
			if s := fs.segOf(a); s != nil {
				s.pending++
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// commitFlush maps the written blocks (in.mu and fs.mu held): a page still
// cached at its block is repointed at its new address, and is clean unless it
// changed since the copy (then it stays dirty and is written again); a page
// truncated or deleted meanwhile leaves its block invalid. With failed, the
// pages just stop being in flight.
func (fs *FS) commitFlush(ctx context.Context, plan *flushPlan, failed bool) error {
	in := plan.in
	defer func() {
		in.flights--
		fs.wb.flights--
		fs.wb.pages -= plan.pages
		fs.wb.flight.Broadcast()
	}()
	var firstErr error
	for gi := range plan.groups {
		g := &plan.groups[gi]
		for _, a := range g.addrs {
			if s := fs.segOf(a); s != nil {
				s.pending--
			}
		}
		committed := 0
		for i, blk := range g.blks {
			p := g.pages[i]
			if in.pages.get(blk) == p {
				p.inflight = false
			}
			if failed || i >= len(g.addrs) || in.gone || in.pages.get(blk) != p || firstErr != nil {
				continue
			}
			a := g.addrs[i]
			di := uint32(blk/fs.epd() + 1)
			d, err := fs.getDnode(ctx, in, di, false)
			if err != nil {
				firstErr = err
				continue
			}
			if in.pages.get(blk) != p { // truncated while the node loaded
				continue
			}
			if d == nil {
				// dnode counted already at page creation; make it without recounting
				d = &dnode{addrs: make([]Addr, directEntries(fs.bs))}
				in.dn[di] = d
			}
			e := blk % fs.epd()
			if d.addrs[e] == 0 {
				fs.mapped(in, 1)
				in.holes = max(in.holes, 1) - 1
			}
			fs.invalidate(d.addrs[e])
			d.addrs[e] = a
			fs.markDnDirty(in, d)
			if g.log == logColdData {
				d.cold = true
			}
			gcMoved := p.cold
			if p.gen == g.gens[i] {
				p.dirty = false
				p.cold = false
				fs.ic.dirtyPages--
				fs.cleanDirtyBlk(in, blk)
			}
			if !gcMoved {
				fs.count.userBlocks++
				fs.count.userData++
			}
			if err := fs.setValid(a, mkNid(in.ino, di), uint32(e)); err != nil && firstErr == nil {
				firstErr = err
			}
			committed++
		}
		fs.m.blocks("data", committed)
	}
	return firstErr
}

// flushInode writes in's dirty pages to the data logs, holding in.mu
// throughout (fsync, checkpoints); it first waits for write-backs of in that
// are in flight, releasing in.mu meanwhile (the caller holds in.busy). The
// pages go in write-back batches (wbBudget), each committed before the next
// is copied. (Two batches at a time on the data logs' two write lanes
// measured no faster on BenchmarkSeqWriteCluster.)
func (fs *FS) flushInode(ctx context.Context, in *inode) error {
	fs.waitFlights(in)
	_, batch := fs.wbBudget()
	for {
		plan := fs.prepareFlush(in, batch)
		if plan == nil {
			return nil
		}
		err := fs.writePlan(ctx, plan)
		if e := fs.commitFlush(ctx, plan, err != nil); err == nil {
			err = e
		}
		if err != nil {
			return err
		}
	}
}

// waitFlights waits until no write-back of in is in flight. The caller holds
// in.mu (released while waiting: the write-back needs it to commit) and fs.mu.
func (fs *FS) waitFlights(in *inode) {
	for in.flights > 0 {
		in.mu.Unlock()
		fs.wb.flight.Wait()
		fs.mu.Unlock()
		in.mu.Lock()
		fs.mu.Lock()
	}
}

// lockIn takes in.mu (fs.mu held on entry and return; no other inode lock
// of the caller may come after in in the lock order). It reports false, with
// nothing held, when the inode was deleted or dropped from the cache meanwhile.
func (fs *FS) lockIn(in *inode) bool {
	in.busy++
	if !in.mu.TryLock() {
		fs.mu.Unlock()
		in.mu.Lock()
		fs.mu.Lock()
	}
	if in.gone || fs.ic.inodes[in.ino] != in {
		in.busy--
		in.mu.Unlock()
		return false
	}
	return true
}

// unlockIn releases what lockIn took (fs.mu held).
func (fs *FS) unlockIn(in *inode) {
	in.busy--
	in.mu.Unlock()
}

// writeBack writes back every dirty page, taking each inode's lock (the
// caller holds the checkpoint lock shared and no inode lock).
func (fs *FS) writeBack(ctx context.Context) error {
	for ino, ok := fs.ic.dirty.next(0); ok; ino, ok = fs.ic.dirty.next(ino + 1) {
		in := fs.ic.inodes[ino]
		if in == nil || !fs.lockIn(in) {
			continue
		}
		if _, err := fs.writeBackLocked(ctx, in, 0); err != nil {
			return err
		}
	}
	return nil
}

// writeBackLocked writes back up to batch dirty pages of in (0: all of
// them), whose lock the caller holds; it returns with the lock released.
// The pages are in flight meanwhile: writers of the file go on, and the
// inode stays cached (busy). wrote says whether there was anything to write.
func (fs *FS) writeBackLocked(ctx context.Context, in *inode, batch int) (wrote bool, err error) {
	var plan *flushPlan
	if b, ok := fs.tailorBatch(in, batch); ok { // IOTailor (iotailor.go)
		plan = fs.prepareFlush(in, b)
	}
	in.busy++ // stays cached (dirty anyway) while unlocked
	fs.unlockIn(in)
	if plan == nil {
		in.busy--
		return false, nil
	}
	err = fs.writePlan(ctx, plan)
	fs.lockInHeld(in)
	in.busy--
	if e := fs.commitFlush(ctx, plan, err != nil); err == nil {
		err = e
	}
	fs.unlockIn(in)
	return true, err
}

// lockInHeld takes in.mu of an inode the caller keeps cached (in.busy) even
// when it was deleted meanwhile (fs.mu held on entry and return).
func (fs *FS) lockInHeld(in *inode) {
	in.busy++
	if !in.mu.TryLock() {
		fs.mu.Unlock()
		in.mu.Lock()
		fs.mu.Lock()
	}
}

// flushAll writes back every dirty page (checkpoint lock held exclusively:
// no operation holds an inode lock).
func (fs *FS) flushAll(ctx context.Context) error {
	for ino, ok := fs.ic.dirty.next(0); ok; ino, ok = fs.ic.dirty.next(ino + 1) {
		if err := fs.flushInode(ctx, fs.ic.inodes[ino]); err != nil {
			return err
		}
	}
	return nil
}

// nodeWrite says which dirty nodes writeDirtyNodes writes.
type nodeWrite int

const (
	// nodesCheckpoint: every dirty node, no fsync mark (a checkpoint follows).
	nodesCheckpoint nodeWrite = iota
	// nodesFsyncDirect: fsync's first step, the inode's dirty direct nodes,
	// unmarked (roll-forward ignores them until a later marked inode); the
	// inode is marked dirty when there are any.
	nodesFsyncDirect
	// nodesFsyncInode: fsync's last step, the dirty inode with the fsync
	// mark, written only after its direct nodes are durable.
	nodesFsyncInode
	// nodesFsyncBatch: fsync's one node write when every dirty node of
	// the inode goes to one node log: its dirty direct nodes and then the
	// inode with the fsync mark and nodeFlagBatch, in one write with FUA,
	// after the data's Flush (roll-forward checks the batch is whole).
	nodesFsyncBatch
)

// nodeLog is the node log node it is written to.
func nodeLog(it nodeItem) int {
	switch {
	case it.cold():
		return logColdNode
	case it.in.isDir():
		return logHotNode
	}
	return logWarmNode
}

// writeDirtyNodes writes dirty nodes (of one inode when only != nil) to the
// node logs, per mode.
//
// nodesFsyncBatch puts the direct nodes and the marked inode in one write
// instead (the caller checked that they go to one log, fsyncOneLog): a
// power loss during it may keep any subset of them, and roll-forward takes
// the inode as an fsync point only when the Batch nodes before it in
// sequence are all there (recover.go), so the two-step order below is
// not needed; the data they name was flushed before.
//
// An fsync writes its nodes in two steps with a Flush between them, the
// marked inode with FUA (F2FS writes its last, marked node with PREFLUSH and
// FUA): roll-forward trusts every
// node of an inode up to its last fsync-marked one, and a power loss may
// keep any subset of the blocks written since the last Flush (a later block
// of one append can survive an earlier one), so the marked inode must not
// reach the disk before the direct nodes it covers.
func (fs *FS) writeDirtyNodes(ctx context.Context, only *inode, mode nodeWrite) error {
	items := fs.dirtyNodeItems(only, mode)
	if len(items) == 0 {
		return nil
	}
	// group by log
	groups := map[int][]nodeItem{}
	for _, it := range items {
		t := nodeLog(it)
		groups[t] = append(groups[t], it)
	}
	fua := mode == nodesFsyncInode || mode == nodesFsyncBatch
	for _, t := range []int{logHotNode, logWarmNode, logColdNode} {
		g := groups[t]
		if len(g) == 0 {
			continue
		}
		buf := make([]byte, 0, len(g)*fs.bs)
		gcNode := make([]bool, len(g))
		for i, it := range g {
			gcNode[i] = it.cold()
			buf = append(buf, fs.encodeNodeItem(it, mode, uint32(i))...)
		}
		err := fs.appendBlocks(ctx, t, blockData{flat: buf}, fua, func(i int, a Addr) error {
			return fs.placeNode(g[i], a, gcNode[i], mode)
		})
		if err != nil {
			return err
		}
		fs.m.blocks("node", len(g))
	}
	return nil
}

// nodeItem is one dirty node to write: inode in's inode block (idx 0) or
// its direct node idx.
type nodeItem struct {
	in  *inode
	idx uint32
}

// cold reports whether the node was moved by recycling (the cold node log).
func (it nodeItem) cold() bool {
	return it.idx == 0 && it.in.cold || it.idx > 0 && it.in.dn[it.idx].cold
}

// dirtyNodeItems lists the dirty nodes to write, per mode: of only, or of
// every active inode in inode order; direct nodes in index order before
// the inode.
func (fs *FS) dirtyNodeItems(only *inode, mode nodeWrite) []nodeItem {
	var items []nodeItem
	add := func(in *inode) {
		if mode != nodesFsyncInode {
			idxs := make([]uint32, 0, len(in.dn))
			for idx, d := range in.dn {
				if d.dirty {
					idxs = append(idxs, idx)
				}
			}
			sort.Slice(idxs, func(i, j int) bool { return idxs[i] < idxs[j] })
			for _, idx := range idxs {
				items = append(items, nodeItem{in, idx})
			}
			if mode == nodesFsyncDirect && len(idxs) > 0 {
				// the marked inode written next covers these nodes: it
				// stays due (dirty) until it is written, also if this
				// write or the Flush after it fails and a later fsync
				// finds them clean
				fs.markDirty(in)
			}
		}
		if mode != nodesFsyncDirect && in.dirty || mode == nodesFsyncBatch && len(items) > 0 {
			items = append(items, nodeItem{in, 0})
		}
	}
	if only != nil {
		add(only)
		return items
	}
	inos := make([]uint64, 0, len(fs.ic.active))
	for ino := range fs.ic.active {
		inos = append(inos, ino)
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	for _, ino := range inos {
		add(fs.ic.inodes[ino])
	}
	return items
}

// encodeNodeItem encodes the node block of it with the next node sequence
// (and the fsync mark for nodesFsyncInode; for the inode of
// nodesFsyncBatch, written after the batch direct nodes of its write, the
// mark and the batch).
func (fs *FS) encodeNodeItem(it nodeItem, mode nodeWrite, batch uint32) []byte {
	h := nodeHeader{Nid: mkNid(it.in.ino, it.idx), Ino: it.in.ino, CPVer: fs.cp.ver, Seq: fs.count.nodeSeq}
	fs.count.nodeSeq++
	switch {
	case mode == nodesFsyncInode:
		h.Flags |= nodeFlagFsync
	case mode == nodesFsyncBatch && it.idx == 0:
		h.Flags |= nodeFlagFsync | nodeFlagBatch
		h.Batch = batch
	}
	var body []byte
	if it.idx == 0 {
		h.Kind = nodeInode
		body = it.in.body.encode()
	} else {
		h.Kind = nodeDirect
		body = encodeDirect(it.in.dn[it.idx].addrs)
	}
	return encodeNode(h, body, fs.bs)
}

// placeNode records node it written at a (NAT, SIT/SSA) and cleans it.
func (fs *FS) placeNode(it nodeItem, a Addr, gcNode bool, mode nodeWrite) error {
	nid := mkNid(it.in.ino, it.idx)
	fs.invalidate(fs.nat[nid])
	fs.nat[nid] = a
	fs.cp.natDirty[nid] = struct{}{}
	if it.idx == 0 {
		if it.in.dirty {
			it.in.dirty = false
			fs.ic.dirtyNodes--
		}
		it.in.cold = false
		it.in.ipu.wrote(it.in.body.Size, mode == nodesFsyncInode || mode == nodesFsyncBatch)
	} else {
		d := it.in.dn[it.idx]
		if d.dirty {
			d.dirty = false
			fs.ic.dirtyNodes--
		}
		d.cold = false
	}
	if !gcNode {
		fs.count.userBlocks++
	}
	if mode == nodesCheckpoint && fs.cp.wrote != nil {
		fs.cp.wrote[it.in.ino] = it.in // unmarked: see checkpoint
	}
	return fs.setValid(a, nid, ofsNode)
}

// unlockedCopyBytes is the smallest copy from cached pages that readAt
// makes with fs.mu released.
const unlockedCopyBytes = 64 << 10

// readAt reads from in at off into buf; returns the bytes read (short at EOF).
//
// Cached pages are copied with fs.mu released (page contents never change
// once cached, see setPage): the references are taken under the lock, the
// copies run in batches of up to 64 pages (small ones under the lock), so readers of different files
// copy in parallel and a writer or the write-back is not held up by a
// reader's memcpy.
func (fs *FS) readAt(ctx context.Context, in *inode, off uint64, buf []byte) (int, error) {
	if off >= in.body.Size {
		return 0, nil
	}
	if rem := in.body.Size - off; uint64(len(buf)) > rem {
		buf = buf[:rem]
	}
	type pageCopy struct{ dst, src []byte }
	var batch [64]pageCopy
	copies := batch[:0]
	pending := 0
	flushCopies := func() {
		if len(copies) == 0 {
			return
		}
		if pending < unlockedCopyBytes {
			for _, c := range copies { // small: cheaper than releasing the lock
				copy(c.dst, c.src)
			}
		} else {
			fs.mu.Unlock()
			for _, c := range copies {
				copy(c.dst, c.src)
			}
			fs.mu.Lock()
		}
		copies, pending = copies[:0], 0
	}
	defer flushCopies()
	bs := uint64(fs.bs)
	n := 0
	for n < len(buf) {
		pos := off + uint64(n)
		blk, bo := pos/bs, pos%bs
		if p := in.pages.get(blk); p != nil {
			k := min(int(bs-bo), len(buf)-n)
			if len(copies) == cap(copies) {
				flushCopies()
			}
			copies = append(copies, pageCopy{dst: buf[n : n+k], src: p.b[bo : int(bo)+k]})
			pending += k
			n += k
			continue
		}
		c, err := fs.readUncached(ctx, in, blk, bo, buf[n:])
		n += c
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// readVec is readAt without the copy of cached pages: it appends to vec the
// pieces of [off, off+len(buf)) in order, slices of the cached pages (their
// contents never change once cached, see setPage, so they stay valid after
// fs.mu is released) and, for the blocks not cached, slices of buf, read
// there from the volume (holes zeroed). It returns vec and the bytes read
// (short at EOF). The caller sends the pieces on (writev) instead of
// copying them once more.
func (fs *FS) readVec(ctx context.Context, in *inode, off uint64, buf []byte, vec [][]byte) ([][]byte, int, error) {
	if off >= in.body.Size {
		return vec, 0, nil
	}
	if rem := in.body.Size - off; uint64(len(buf)) > rem {
		buf = buf[:rem]
	}
	bs := uint64(fs.bs)
	n := 0
	bufStart := -1 // where the last piece starts in buf when it is a slice of buf
	for n < len(buf) {
		pos := off + uint64(n)
		blk, bo := pos/bs, pos%bs
		if p := in.pages.get(blk); p != nil {
			k := min(int(bs-bo), len(buf)-n)
			vec = append(vec, p.b[bo:int(bo)+k:int(bo)+k])
			bufStart = -1
			n += k
			continue
		}
		c, err := fs.readUncached(ctx, in, blk, bo, buf[n:])
		if c > 0 {
			if bufStart >= 0 {
				vec[len(vec)-1] = buf[bufStart : n+c] // continues the last piece
			} else {
				bufStart = n
				vec = append(vec, buf[n:n+c])
			}
		}
		n += c
		if err != nil {
			return vec, n, err
		}
	}
	return vec, n, nil
}

// readUncached fills dst from block blk of in, which is not cached, from
// offset bo in the block: zeros for a hole, else the block and the
// physically consecutive uncached blocks after it that dst covers, in one
// volume read (fs.mu released meanwhile). It returns the bytes filled, at
// least min(len(dst), bs-bo) unless it fails.
func (fs *FS) readUncached(ctx context.Context, in *inode, blk, bo uint64, dst []byte) (int, error) {
	bs := uint64(fs.bs)
	k := min(int(bs-bo), len(dst))
	a, err := fs.blockAddr(ctx, in, blk)
	if err != nil {
		return 0, err
	}
	if a == 0 {
		clear(dst[:k])
		return k, nil
	}
	run := uint64(1)
	for bo+run*bs < uint64(len(dst)) && run < 256 {
		if in.pages.get(blk+run) != nil {
			break
		}
		a2, err := fs.blockAddr(ctx, in, blk+run)
		if err != nil || a2 != a+Addr(run) || a2.Zone() != a.Zone() {
			break
		}
		run++
	}
	if bo == 0 && uint64(len(dst)) >= run*bs {
		// whole blocks: straight into the caller's buffer
		if err := fs.readBlocks(ctx, a, dst[:run*bs]); err != nil {
			return 0, err
		}
		return int(run * bs), nil
	}
	tmp := make([]byte, run*bs)
	if err := fs.readBlocks(ctx, a, tmp); err != nil {
		return 0, err
	}
	return copy(dst, tmp[bo:]), nil
}

// writeAt writes data at off, extending the file as needed.
func (fs *FS) writeAt(ctx context.Context, in *inode, off uint64, data []byte) (int, error) {
	bs := uint64(fs.bs)
	end := off + uint64(len(data))
	if end/bs/fs.epd()+1 > maxDirect {
		return 0, syscall.EFBIG
	}
	n := 0
	for n < len(data) {
		pos := off + uint64(n)
		blk, bo := pos/bs, pos%bs
		k := int(bs - bo)
		if k > len(data)-n {
			k = len(data) - n
		}
		// The new contents go into a fresh buffer (setPage): readers copy
		// cached pages with no lock held.
		var p *page
		var err error
		if bo == 0 && uint64(k) == bs {
			b := bytes.Clone(data[n : n+k]) // (not zeroed first, unlike make+copy)
			p = in.pages.get(blk)
			if p == nil {
				a, err := fs.blockAddr(ctx, in, blk)
				if err != nil {
					return n, err
				}
				if q := in.pages.get(blk); q != nil {
					p = q // read-ahead cached it meanwhile
				} else if a == 0 {
					if p, err = fs.holePage(ctx, in, blk, b); err != nil {
						return n, err
					}
				} else {
					p = &page{b: b}
					in.pages.set(blk, p)
					fs.ic.pages++
				}
			}
			setPage(p, b)
		} else {
			if p, err = fs.getPage(ctx, in, blk, true); err != nil {
				return n, err
			}
			b := fs.clonePage(p)
			copy(b[bo:], data[n:n+k])
			setPage(p, b)
		}
		fs.dirtyPage(in, blk, p)
		n += k
		if pos+uint64(k) > in.body.Size {
			in.body.Size = pos + uint64(k)
		}
	}
	return n, nil
}

// truncate sets the size of in, freeing blocks past the new end.
func (fs *FS) truncate(ctx context.Context, in *inode, size uint64) error {
	bs := uint64(fs.bs)
	old := in.body.Size
	if size/bs/fs.epd()+1 > maxDirect {
		return syscall.EFBIG
	}
	if size < old {
		// zero the tail of the last partial block
		if size%bs != 0 {
			p, err := fs.getPage(ctx, in, size/bs, false)
			if err != nil {
				return err
			}
			if in.pages.get(size/bs) != nil {
				b := fs.clonePage(p)
				clear(b[size%bs:])
				setPage(p, b)
				fs.dirtyPage(in, size/bs, p)
			}
		}
		if err := fs.freeFrom(ctx, in, (size+bs-1)/bs, (old+bs-1)/bs); err != nil {
			return err
		}
	}
	if size <= old { // reservations past the new end go, as blocks preallocated there do
		if err := fs.releasePrealloc(ctx, in, (size+bs-1)/bs, math.MaxUint64); err != nil {
			return err
		}
	}
	in.body.Size = size
	return nil
}

// freeFrom frees file blocks [from, to) (and direct nodes wholly past from).
func (fs *FS) freeFrom(ctx context.Context, in *inode, from, to uint64) error {
	epd := fs.epd()
	for _, b := range in.pages.blocks(from, math.MaxUint64) {
		if p := in.pages.get(b); p != nil {
			if p.dirty {
				fs.ic.dirtyPages--
				a, err := fs.blockAddr(ctx, in, b)
				if err != nil {
					return err
				}
				if a == 0 {
					fs.count.used-- // a dirty hole page counted a block
					in.holes = max(in.holes, 1) - 1
				}
			}
			fs.dropPage(in, b)
		}
	}
	firstIdx := uint32(from/epd + 1)
	lastIdx := uint32((to+epd-1)/epd + 1)
	for idx := firstIdx; idx <= lastIdx && idx <= maxDirect; idx++ {
		d, err := fs.getDnode(ctx, in, idx, false)
		if err != nil {
			return err
		}
		if d == nil {
			continue
		}
		base := uint64(idx-1) * epd
		for e := range d.addrs {
			if base+uint64(e) >= from && d.addrs[e] != 0 {
				fs.invalidate(d.addrs[e])
				d.addrs[e] = 0
				fs.count.used--
				fs.mapped(in, -1)
				fs.markDnDirty(in, d)
			}
		}
		if base >= from {
			fs.dropDnode(in, idx)
		}
	}
	return nil
}

// mapped changes in's count of mapped data blocks by n (when it is known;
// an unknown count is taken from the direct nodes by countBlocks) and marks
// the inode dirty: the count is written with the direct nodes that changed,
// by the same fsync or checkpoint.
func (fs *FS) mapped(in *inode, n int64) {
	if !in.body.BlocksKnown {
		return
	}
	in.body.Blocks = uint64(max(int64(in.body.Blocks)+n, 0))
	fs.markDirty(in)
}

// countBlocks makes in's block count known (inodes written by builds without
// the field): it loads every direct node that may exist (fs.mu released for
// the reads) and counts their mapped entries in one pass under fs.mu, so the
// count agrees with the mapping at that instant; later changes keep it
// current through mapped. Readers call it (fs.mu held). A cache eviction between the loads and the count
// means loading again.
func (fs *FS) countBlocks(ctx context.Context, in *inode) error {
	for try := 0; !in.body.BlocksKnown && try < 8; try++ {
		bs := uint64(fs.bs)
		end := (in.body.Size + bs - 1) / bs
		if in.isDir() {
			end = max(end, uint64(len(in.dirBlocksOrNil())))
		}
		last := uint32(min(end/fs.epd()+1, maxDirect))
		for idx := uint32(1); idx <= last; idx++ {
			if _, err := fs.getDnode(ctx, in, idx, false); err != nil {
				return err
			}
		}
		if in.body.BlocksKnown {
			return nil
		}
		complete := true
		var n uint64
		for idx := uint32(1); idx <= last; idx++ {
			d, ok := in.dn[idx]
			if !ok {
				if _, onDisk := fs.nat[mkNid(in.ino, idx)]; onDisk {
					complete = false
					break
				}
				continue
			}
			if d == nil {
				continue
			}
			for _, a := range d.addrs {
				if a != 0 {
					n++
				}
			}
		}
		if complete {
			// not marked dirty (a reader must not dirty an inode): the
			// count is written with the inode's next change
			in.body.Blocks = n
			in.body.BlocksKnown = true
		}
	}
	return nil
}

// dropDnode removes direct node idx of in (all its entries already freed).
func (fs *FS) dropDnode(in *inode, idx uint32) {
	nid := mkNid(in.ino, idx)
	if d := in.dn[idx]; d != nil && d.dirty {
		fs.ic.dirtyNodes--
	}
	delete(in.dn, idx)
	if a, ok := fs.nat[nid]; ok {
		fs.invalidate(a)
		delete(fs.nat, nid)
		fs.cp.natDirty[nid] = struct{}{}
	}
	fs.count.used--
	fs.count.nodes--
}

// maybeDelete removes an inode that has no links and no open handles.
func (fs *FS) maybeDelete(ctx context.Context, ino uint64) error {
	in, err := fs.getInode(ctx, ino)
	if err != nil {
		if err == syscall.ENOENT {
			delete(fs.files.orphans, ino)
			return nil
		}
		return err
	}
	if in.body.Nlink > 0 || in.opens > 0 {
		return nil
	}
	fs.dropPrealloc(in)
	bs := uint64(fs.bs)
	end := in.body.Size
	if in.isDir() {
		end = uint64(len(in.dirBlocksOrNil())) * bs
		if end < in.body.Size {
			end = in.body.Size
		}
	}
	if err := fs.freeFrom(ctx, in, 0, (end+bs-1)/bs); err != nil {
		return err
	}
	// any dnode left (e.g. past the size after a crash) goes too
	for idx := range in.dn {
		fs.dropDnode(in, idx)
	}
	nid := mkNid(ino, 0)
	if a, ok := fs.nat[nid]; ok {
		fs.invalidate(a)
		delete(fs.nat, nid)
		fs.cp.natDirty[nid] = struct{}{}
	}
	if in.dirty {
		fs.ic.dirtyNodes--
	}
	fs.count.used--
	fs.count.nodes--
	in.gone = true
	delete(fs.ic.inodes, ino)
	fs.ic.dirty.remove(ino)
	delete(fs.ic.active, ino)
	delete(fs.files.orphans, ino)
	return nil
}

func (in *inode) dirBlocksOrNil() []dirBlock {
	if in.dir == nil {
		return nil
	}
	return in.dir.blocks
}

// evictCache drops clean pages when the cache is over its bound.
func (fs *FS) evictCache() {
	if fs.ic.pages <= fs.opts.CacheBlocks {
		return
	}
	target := fs.opts.CacheBlocks / 2
	// in inode order: which pages go does not depend on map order, so runs
	// on the virtual clock are reproducible
	for _, ino := range fs.sortedInodes() {
		in := fs.ic.inodes[ino]
		for _, b := range in.pages.blocks(0, math.MaxUint64) {
			if p := in.pages.get(b); p != nil && !p.dirty {
				fs.dropPage(in, b)
			}
		}
		if fs.ic.pages <= target {
			return
		}
	}
}

// sortedInodes returns the cached inode numbers in increasing order.
func (fs *FS) sortedInodes() []uint64 {
	inos := make([]uint64, 0, len(fs.ic.inodes))
	for ino := range fs.ic.inodes {
		inos = append(inos, ino)
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	return inos
}

// evictInodes drops clean, closed inodes when the inode cache is over its bound.
func (fs *FS) evictInodes() {
	if len(fs.ic.inodes) <= fs.opts.CacheInodes {
		return
	}
	// files first: a directory's index is costly to reload
	inos := fs.sortedInodes()
	for pass := 0; pass < 2; pass++ {
		for _, ino := range inos {
			in := fs.ic.inodes[ino]
			if in == nil {
				continue
			}
			if _, busy := fs.ic.active[ino]; busy || in.busy > 0 || in.opens > 0 || ino == RootIno || in.dirty || len(in.dirtyBlks) > 0 || (pass == 0 && in.isDir()) {
				continue
			}
			fs.ic.pages -= in.pages.len()
			delete(fs.ic.inodes, ino)
			if len(fs.ic.inodes) <= fs.opts.CacheInodes/2 {
				return
			}
		}
	}
}
