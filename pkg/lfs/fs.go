package lfs

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"github.com/zonefleet/zonefleet/pkg/bufpool"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/ondisk"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// RootIno is the inode number of the root directory.
const RootIno = 1

// MkfsOptions configures Mkfs.
type MkfsOptions struct {
	// OPPercent is the over-provisioning: the share of the data segments users
	// can never fill, so that recycling always finds invalid blocks. 0 means 10.
	OPPercent int
	// Force formats a namespace that already holds a file system or data.
	Force bool
}

// MoveMethod is how recycling moves a victim's valid blocks.
type MoveMethod int

const (
	// HostCopy reads valid blocks to the client and writes them back (the ZNS baseline).
	HostCopy MoveMethod = iota
	// Compact offloads the copy to the drives (IZC, ZNS+ zone_compaction).
	Compact
)

func (m MoveMethod) String() string {
	if m == Compact {
		return "izc"
	}
	return "host_copy"
}

// Options configures Mount.
type Options struct {
	Clock    clock.Clock           // nil means clock.Off (no background work)
	Registry prometheus.Registerer // nil: metrics are kept but not registered
	// Policy chooses victims and how to move them; nil means DefaultPolicy(Move).
	Policy RecyclePolicy
	// Move is the default policy's method: HostCopy or Compact (IZC).
	Move MoveMethod
	// Mode selects the recycling mode (zns, izc, zns+; tl.go). The zero
	// value, ModeMove, keeps Move and never uses threaded logging; ModeZNS
	// and ModeIZC set Move; ModeZNSPlus adds threaded logging and hybrid
	// segment recycling when the Volume implements TLOpener (else izc).
	Mode Mode
	// CachedWrite (IZC-H) writes blocks cached clean on the host from the host
	// instead of copying them on the device (IZC-D, the default). Dirty cached
	// blocks are always written from the host.
	CachedWrite bool
	// FlashReadCost and HostWriteCost, when both are set and CachedWrite is
	// not, choose per block between IZC-H and IZC-D (ZNS+ §3.2.1, Table 4):
	// the clean cached blocks of a chunk whose valid blocks are all cached
	// are written from the host when that costs less than the flash read a
	// device copy needs (FlashReadCost: the chip read of the chunk, with its
	// transfer when copyback is impossible; HostWriteCost: the host's
	// request handling and the link transfer of a whole chunk, pro rata for
	// fewer blocks); a block of a chunk the device reads anyway is copied
	// on the device.
	FlashReadCost, HostWriteCost time.Duration
	// HSRCopyCost and HSRWriteCost, when both are set, calibrate the
	// hybrid segment recycling cost model (zns+, tl.go): the cost of one
	// block copied inside the drives (f_copy; plugging is 90 % of it) and of
	// one node or metadata block written by the host (f_write). Unset, both
	// count one program each (f_write = f_copy).
	HSRCopyCost, HSRWriteCost time.Duration
	// PGCWorkers is P-GC (seeds/004 Algorithm 1): host copy splits the reads
	// of a victim whose valid blocks exceed half of its blocks across this
	// many workers that read their shares in parallel (0: DefaultPGCWorkers,
	// the paper's 2; 1 or negative: off). The moves are committed as
	// without it. On the virtual clock the reads are never split (gc.go).
	PGCWorkers int
	// NoCopybackAware turns off ZNS+ copyback-aware allocation of IZC destinations.
	NoCopybackAware bool
	// BackgroundGC runs one recycling round after this much idle (modelled)
	// time; 0 disables it. Needs a Clock other than Off.
	BackgroundGC time.Duration
	// CheckpointEvery takes a checkpoint at this (modelled) period when
	// something changed; 0 disables it. Needs a Clock other than Off.
	CheckpointEvery time.Duration
	// CacheBlocks bounds the host page cache (0: DefaultCacheBlocks); dirty
	// pages are written back when they exceed a quarter of it (at most one
	// zone). Clean pages (written back, or read) stay cached up to the bound,
	// so a file that fits is read from memory, as a local file system reads
	// from the kernel's page cache.
	CacheBlocks int
	// CacheInodes bounds the inode cache (0: 65536); clean closed inodes are dropped.
	CacheInodes int
	// ReadAheadBlocks is the read-ahead window on sequential reads (0: 256
	// blocks; negative: none). Prefetched blocks are clean cached pages.
	ReadAheadBlocks int
	// WriteLanes is how many write-backs of one data log may be in flight
	// at once, each on its own segment (lanes.go; 0: DefaultWriteLanes; 1:
	// one). Always 1 on the virtual clock.
	WriteLanes int
	// Retries of a Volume call failing with zerr.ErrUnavailable with the off
	// clock (0: 3); other clocks retry until RetryDeadline.
	Retries int
	// RetryDeadline bounds how long one Volume call is retried while a node is
	// unavailable (clock time; 0: DefaultRetryDeadline); then it fails (EIO).
	RetryDeadline time.Duration
	// WriteReserveBlocks is the space kept for write-back of pages dirtied
	// through shared mappings (WriteBack), which cannot be refused at the
	// store (FUSE has no page_mkwrite): Write gets ENOSPC when it would dip
	// into it. 0: DefaultWriteReserve; negative: none.
	WriteReserveBlocks int
}

// DefaultCacheBlocks is the default bound of the host page cache in blocks:
// 256 MiB with 4 KiB blocks (it was 4096 blocks, 16 MiB, which held a
// quarter of `zctl bench fs`'s 64 MiB file, so every re-read went to the
// nodes).
const DefaultCacheBlocks = 65536

// DefaultWriteReserve returns the default write-back reserve of a file
// system of userBlocks blocks of bs bytes: 1/32 of it, at most 64 MiB (the
// kernel keeps a FUSE mount's dirty pages to a small share of its dirty
// limit, so this covers the pages that can be dirty at once on usual
// machines; past it a write-back fails and fsync reports it).
func DefaultWriteReserve(userBlocks uint64, bs int) uint64 {
	return min(userBlocks/32, uint64(64<<20)/uint64(bs))
}

// writeReserve is the reserve in blocks.
func (fs *FS) writeReserve() uint64 {
	switch r := fs.opts.WriteReserveBlocks; {
	case r < 0:
		return 0
	case r > 0:
		return min(uint64(r), fs.sb.UserBlocks)
	}
	return DefaultWriteReserve(fs.sb.UserBlocks, fs.bs)
}

// FS is a mounted file system. All methods are safe for concurrent use.
type FS struct {
	// Locks, in the order they are taken (see doc.go):
	gcMu     sync.Mutex           // one recycling round at a time
	cpMu     sync.RWMutex         // checkpoint lock: mutating ops R, checkpoints W; readers never
	renameMu sync.Mutex           // renames (the directory tree's shape)
	logMu    [numTemps]sync.Mutex // appends to one log (a zone takes writes only at its write pointer)
	mu       sync.Mutex           // the tables (leaf lock): never held across a Volume call
	pinCond  *sync.Cond           // on mu: a segment's readers left (pins 0)
	laneCond *sync.Cond           // on mu: an extra write lane was released
	xl       [numTemps][]xlane    // extra write lanes of the data logs (lanes.go)
	lanes    int                  // write lanes per data log
	gather   bufpool.Pool         // write-back buffers of a volume without VectorWriter (writeData), recycled after a write that landed
	vecw     VectorWriter         // the volume's vectored write, if it has one (write-back sends the pages as they are)
	opening  int                  // OpenZone calls in flight (counted as used segments)
	inflight atomic.Int64         // operations running (the virtual clock's tick skips a busy FS)
	bgWG     sync.WaitGroup
	wb       wbScheduler // write-back and admission to the dirty budget (writeback.go)
	vol      Volume
	geo      VolumeGeometry
	bs       int
	sb       superblock
	opts     Options
	clk      clock.Clock
	pol      RecyclePolicy
	m        *metrics

	nlogs int
	segs  map[ZoneID]*segment
	logs  []*segment

	nat      map[uint64]Addr
	natDirty map[uint64]struct{}
	touched  touchLog // validity changes since the last checkpoint (and the validity at it)

	inodes  map[uint64]*inode
	active  map[uint64]*inode // inodes with dirty pages or nodes, or changed names, since the last checkpoint
	handles map[Handle]*handle
	nextFH  Handle
	orphans map[uint64]struct{}

	cpVer   uint64
	cpLogs  []ZoneID // log heads (zone+1) of the last checkpoint
	cpLogWP []uint64
	cpTL    []ZoneID // TL-opened log heads of the loaded checkpoint (recover)
	nodeSeq uint64
	nextIno uint64
	used    uint64 // user blocks in use: data blocks (mapped or dirty holes) + nodes
	nodes   uint64 // nodes (inodes + direct nodes) in use, bounded by the superblock's MaxNodes

	cachePages, dirtyPages, dirtyNodes int

	metaZone           ZoneID
	metaWP, metaEpoch  uint64
	metaSeq, sinceSnap uint64
	hasMeta            bool
	blocksWritten      uint64 // all blocks written to the drives (incl. meta and moves)
	userBlocks         uint64 // blocks written on behalf of users (data + nodes)
	inGC, inCP         bool
	cpWrote            map[uint64]*inode // inodes with nodes the checkpoint in progress wrote (see checkpoint)
	failed             error
	deferred           []deferredOp           // Finish/Reset calls that failed while a node was unavailable (retried)
	bgErr              *prometheus.CounterVec // background errors by task (health.go)
	bgLog              bgLog
	closed             bool
	lastOp             time.Duration
	stopTimer          func() bool // guarded by tmu
	tmu                sync.Mutex
	down               atomic.Bool // unmounted or abandoned: no more ticks
	stats              Stats
	lastCPWrite        time.Duration // the last checkpoint's data write-back (compaction phases)
	lastCPFlush        time.Duration // the last checkpoint's Flush (waits for the drives' copies and writes)
	lastCPData         uint64        // data blocks the last checkpoint's write-back wrote (α excludes them)
	loadProblems       []Problem     // SIT/SSA disagreements found at load
	gauges             *gaugeCollector
	sitRepaired        bool
	tl                 tlState // threaded logging (tl.go)
	cpCause            string  // why the next checkpoint is taken (metrics; "" = other)
	// cpBegun numbers the checkpoints begun, cpCommitted is the number of
	// the last one that committed (fs.mu): a request for a checkpoint is
	// answered by any checkpoint begun after it (checkpointAfter).
	cpBegun, cpCommitted uint64
}

// unlocked runs f (one Volume call) with fs.mu released: the table lock is
// never held across I/O. The caller holds fs.mu; it holds it again on return,
// and must not rely on table state it did not protect otherwise (an inode
// lock, a log lock, the checkpoint lock, a pin). Retrying
// zerr.ErrUnavailable is done once, in the retrying wrapper every entry point
// puts around the Volume.
func (fs *FS) unlocked(f func() error) error {
	fs.mu.Unlock()
	defer fs.mu.Lock()
	return f()
}

func newFS(vol Volume, opts Options) *FS {
	if opts.Clock == nil {
		opts.Clock = clock.Off()
	}
	vol = withRetries(vol, opts)
	if opts.CacheBlocks <= 0 {
		opts.CacheBlocks = DefaultCacheBlocks
	}
	if opts.CacheInodes <= 0 {
		opts.CacheInodes = 65536
	}
	fs := &FS{vol: vol, geo: vol.Geometry(), opts: opts, clk: opts.Clock,
		segs: map[ZoneID]*segment{}, nat: map[uint64]Addr{}, natDirty: map[uint64]struct{}{},
		touched: newTouchLog(), inodes: map[uint64]*inode{}, active: map[uint64]*inode{}, handles: map[Handle]*handle{},
		orphans: map[uint64]struct{}{}, nextFH: 1}
	fs.bs = fs.geo.BlockSize
	fs.vecw = vectorWriter(vol)
	fs.pinCond = sync.NewCond(&fs.mu)
	fs.wb.flight = sync.NewCond(&fs.mu)
	fs.wb.admitGone = map[uint64]bool{}
	fs.laneCond = sync.NewCond(&fs.mu)
	fs.lanes = 1
	fs.pol = opts.Policy
	if fs.pol == nil {
		fs.pol = DefaultPolicy(opts.Move)
	}
	fs.m = newMetrics(opts.Registry)
	fs.bgErr = bgCounter(opts.Registry)
	fs.setupMode(vol)
	return fs
}

func checkGeometry(g VolumeGeometry) error {
	switch {
	case g.BlockSize < 512 || g.BlockSize > 1<<20 || g.BlockSize&(g.BlockSize-1) != 0:
		return &zerr.InvalidArgumentError{Field: "block_size", Reason: fmt.Sprintf("%d is not a power of two in [512, 1M]", g.BlockSize)}
	case g.ZoneBlocks < 16 || g.ZoneBlocks >= 1<<32:
		return &zerr.InvalidArgumentError{Field: "zone_blocks", Reason: fmt.Sprintf("%d is not in [16, 2^32)", g.ZoneBlocks)}
	case g.MaxOpen < 4:
		return &zerr.InvalidArgumentError{Field: "max_open", Reason: fmt.Sprintf("the file system needs at least 4 open zones, volume allows %d", g.MaxOpen)}
	}
	return nil
}

// mkfsLogs is how many logs mkfs formats for a volume with maxOpen open
// zones: the six (hot/warm/cold × node/data) only when zns+ (the default
// mode) still has an open zone for threaded logging beside them and the two
// metadata zones (Mount's check, tlTry's budget), so at least 9; two
// otherwise (8 open zones with six logs would fall back to izc at mount).
func mkfsLogs(maxOpen int) uint32 {
	if maxOpen < numTemps+3 {
		return 2
	}
	return numTemps
}

// Mkfs formats vol. It refuses a namespace that holds a file system or any
// data (zerr.AlreadyExistsError) unless opts.Force.
func Mkfs(ctx context.Context, vol Volume, opts MkfsOptions) error {
	vol = withRetries(vol, Options{})
	g := vol.Geometry()
	if err := checkGeometry(g); err != nil {
		return err
	}
	op := opts.OPPercent
	if op == 0 {
		op = 10
	}
	if op < 0 || op > 50 {
		return &zerr.InvalidArgumentError{Field: "op_percent", Reason: fmt.Sprintf("%d is not in [1, 50]", op)}
	}
	zones, err := vol.Zones(ctx)
	if err != nil {
		return err
	}
	if len(zones) > 0 && !opts.Force {
		for _, z := range zones {
			if z.WP == 0 {
				continue
			}
			if _, _, err := readSuper(ctx, vol, z.ID); err == nil {
				return &zerr.AlreadyExistsError{Kind: "file system", Name: fmt.Sprintf("in v-zone %d", z.ID)}
			}
		}
		return &zerr.AlreadyExistsError{Kind: "data", Name: fmt.Sprintf("%d non-empty v-zones", len(zones))}
	}
	for _, z := range zones {
		if err := vol.Reset(ctx, z.ID); err != nil {
			return err
		}
	}
	sb := superblock{Version: FormatVersion, BlockSize: uint32(g.BlockSize), ZoneBlocks: g.ZoneBlocks,
		MaxZones: uint32(g.MaxZones), OPPercent: uint32(op), Logs: 6,
		Features: ondisk.Features{Compat: FeatureInodeRdev}}
	_, _ = rand.Read(sb.UUID[:])
	sb.Logs = mkfsLogs(g.MaxOpen)
	sb.ReserveSegs = sb.Logs + 4
	dataSegs := g.MaxZones - metaZonesReserved
	if dataSegs <= int(sb.ReserveSegs)+2 {
		return &zerr.NoResourcesError{Resource: "v-zones (volume too small)", Requested: uint64(sb.ReserveSegs) + 3 + metaZonesReserved, Available: uint64(g.MaxZones)}
	}
	sb.UserBlocks = uint64(dataSegs-int(sb.ReserveSegs)) * g.ZoneBlocks * uint64(100-op) / 100
	// A snapshot must fit in one metadata zone: that bounds the nodes (the
	// NAT, 16 bytes each, plus 8 when the node is an orphan inode).
	room := int64(g.ZoneBlocks)*int64(g.BlockSize) - 3*int64(g.BlockSize) - 256 -
		int64(dataSegs)*int64(24+(g.ZoneBlocks+7)/8) - 12*int64(sb.Logs)
	if room < 64*24 {
		return &zerr.NoResourcesError{Resource: "metadata zone bytes (zones too small for the snapshot)", Requested: 64 * 24, Available: uint64(max(room, 0))}
	}
	sb.MaxNodes = uint64(room / 24)
	fs := newFS(vol, Options{})
	fs.sb = sb
	fs.sb.Features.Compat |= FeatureInodeRdev // written with the next superblock
	fs.nlogs = int(sb.Logs)
	fs.logs = make([]*segment, fs.nlogs)
	fs.nextIno = RootIno + 1
	now := time.Now().UnixNano()
	root := fs.newInode(RootIno, syscall.S_IFDIR|0o755, 0, 0, now)
	root.body.Nlink = 2
	root.body.Parent = RootIno
	root.dir = &dirIndex{ents: map[string]int{}}
	fs.used++
	fs.nodes++
	fs.cpMu.Lock()
	fs.mu.Lock()
	fs.cpCause = "mkfs"
	err = fs.checkpoint(ctx, true)
	fs.mu.Unlock()
	fs.cpMu.Unlock()
	if err != nil {
		return err
	}
	return fs.shutdown(ctx)
}

// readSuper reads the superblock record at the start of zone z.
func readSuper(ctx context.Context, vol Volume, z ZoneID) (superblock, metaRecord, error) {
	bs := vol.Geometry().BlockSize
	b := make([]byte, bs)
	if err := vol.Read(ctx, z, 0, b); err != nil {
		return superblock{}, metaRecord{}, err
	}
	n, err := metaRecordLen(b, bs)
	if err != nil {
		return superblock{}, metaRecord{}, err
	}
	if n > 1 {
		return superblock{}, metaRecord{}, corrupt("superblock", "record of %d blocks", n)
	}
	r, err := decodeMetaRecord(b)
	if err != nil {
		return superblock{}, metaRecord{}, err
	}
	if r.Type != recSuper {
		return superblock{}, r, corrupt("superblock", "zone %d starts with record type %d", z, r.Type)
	}
	sb, err := decodeSuperblock(r.Payload)
	return sb, r, err
}

// metaLog is what Mount reads from one metadata zone.
type metaLog struct {
	zone  ZoneID
	epoch uint64
	sb    superblock
	cps   []*checkpoint // snapshot first, then deltas
	end   uint64        // blocks of valid records
	wp    uint64
}

func readMetaLog(ctx context.Context, vol Volume, zi ZoneInfo) (*metaLog, error) {
	sb, rec, err := readSuper(ctx, vol, zi.ID)
	if err != nil {
		return nil, err
	}
	bs := vol.Geometry().BlockSize
	ml := &metaLog{zone: zi.ID, epoch: rec.Epoch, sb: sb, end: 1, wp: zi.WP}
	for off := uint64(1); off < zi.WP; {
		first := make([]byte, bs)
		if err := vol.Read(ctx, zi.ID, off, first); err != nil {
			return nil, err
		}
		n, err := metaRecordLen(first, bs)
		if err != nil || off+uint64(n) > zi.WP {
			break // torn tail
		}
		b := make([]byte, n*bs)
		if err := vol.Read(ctx, zi.ID, off, b); err != nil {
			return nil, err
		}
		r, err := decodeMetaRecord(b)
		if err != nil || r.Epoch != rec.Epoch {
			break
		}
		cp, err := decodeCheckpoint(r.Payload)
		if err != nil {
			break
		}
		if (len(ml.cps) == 0) != (r.Type == recSnapshot) || cp.Full != (r.Type == recSnapshot) {
			break
		}
		ml.cps = append(ml.cps, cp)
		off += uint64(n)
		ml.end = off
	}
	if len(ml.cps) == 0 {
		return nil, corrupt("metadata zone", "zone %d (epoch %d) has no complete snapshot", zi.ID, rec.Epoch)
	}
	return ml, nil
}

// Mount mounts the file system on vol: it loads the newest checkpoint, rolls
// forward fsynced nodes written after it, deletes orphans, and takes a fresh
// checkpoint.
func Mount(ctx context.Context, vol Volume, opts Options) (*FS, error) {
	return mount(ctx, vol, opts, false)
}

func mount(ctx context.Context, vol Volume, opts Options, repair bool) (*FS, error) {
	fs, zones, ml, err := loadFS(ctx, vol, opts)
	if err != nil {
		return nil, err
	}
	if repair && len(fs.loadProblems) > 0 {
		fs.repairSIT()
	} else if len(fs.loadProblems) > 0 {
		return nil, corrupt("file system", "%d inconsistencies, first: %v (run fsck with repair)", len(fs.loadProblems), fs.loadProblems[0])
	}
	fs.cpMu.Lock()
	fs.mu.Lock()
	err = fs.recover(ctx, zones, ml)
	// threaded logging only once the mount's snapshot, under a superblock
	// with FeatureThreadedLog, is on the drives
	fs.tl.ready = err == nil
	fs.mu.Unlock()
	fs.cpMu.Unlock()
	if err != nil && errors.Is(err, zerr.ErrCorrupt) && !repair {
		// The drives disagree with the checkpoint (roll-forward found a
		// block missing, a write pointer behind the data): mount the newest
		// checkpoint read-only, so what it holds can be read and copied
		// off, rather than refuse the whole file system.
		if ro, _, _, e := loadFS(ctx, vol, opts); e == nil && len(ro.loadProblems) == 0 {
			ro.mu.Lock()
			_ = ro.goReadOnly("roll-forward", err)
			ro.mu.Unlock()
			ro.startTimer()
			return ro, nil
		}
	}
	if err != nil {
		return nil, err
	}
	fs.startTimer()
	return fs, nil
}

// loadFS reads the newest checkpoint into a new FS (nothing written).
func loadFS(ctx context.Context, vol Volume, opts Options) (*FS, []ZoneInfo, *metaLog, error) {
	if opts.Clock == nil {
		opts.Clock = clock.Off()
	}
	vol = withRetries(vol, opts)
	g := vol.Geometry()
	if err := checkGeometry(g); err != nil {
		return nil, nil, nil, err
	}
	zones, err := vol.Zones(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	var logs []*metaLog
	var lastErr error = &zerr.NotFoundError{Kind: "file system", Name: "superblock"}
	for _, z := range zones {
		if z.WP == 0 {
			continue
		}
		ml, err := readMetaLog(ctx, vol, z)
		if err != nil {
			if errors.Is(err, zerr.ErrCorrupt) {
				if _, _, e2 := readSuper(ctx, vol, z.ID); e2 == nil {
					lastErr = err
				}
				continue
			}
			return nil, nil, nil, err
		}
		logs = append(logs, ml)
	}
	if len(logs) == 0 {
		return nil, nil, nil, lastErr
	}
	sort.Slice(logs, func(i, j int) bool { return logs[i].epoch > logs[j].epoch })
	ml := logs[0]
	sb := ml.sb
	if uint64(sb.BlockSize) != uint64(g.BlockSize) || sb.ZoneBlocks != g.ZoneBlocks {
		return nil, nil, nil, &zerr.GeometryMismatchError{Field: "block_size/zone_blocks",
			Have: fmt.Sprintf("%d/%d", sb.BlockSize, sb.ZoneBlocks), Want: fmt.Sprintf("%d/%d", g.BlockSize, g.ZoneBlocks)}
	}
	fs := newFS(vol, opts)
	fs.sb = sb
	fs.sb.Features.Compat |= FeatureInodeRdev // written with the next superblock
	if fs.tlOn() && sb.Features.Incompat&FeatureThreadedLog == 0 && fs.geo.MaxOpen-int(sb.Logs)-2 < 1 {
		// A TL segment stays open until a checkpoint records it, beside the
		// log heads and two metadata zones: with no open zone to spare,
		// every TL_open would be over budget (tlTry).
		slog.Warn("threaded logging needs an open zone beyond the logs and the metadata zones: mode zns+ falls back to izc",
			"max_open", fs.geo.MaxOpen, "logs", sb.Logs, "need_at_least", int(sb.Logs)+3)
		fs.tl.vol = nil
		fs.opts.Mode = ModeIZC
	}
	if fs.tlOn() {
		// before anything is written: the mount's checkpoint rotates the
		// metadata zone, so every record from here on is under the bit
		fs.sb.Features.Incompat |= FeatureThreadedLog
	}
	fs.setThetaPI()
	// The segments are those the file system was formatted with: a volume that
	// offers more or fewer today (fsvol derives its figure from the cluster)
	// does not change the space promised to users. If it really holds fewer,
	// opening a segment fails with NoResources and writes get ENOSPC.
	if sb.MaxZones > 0 {
		fs.geo.MaxZones = int(sb.MaxZones)
	}
	fs.nlogs = int(sb.Logs)
	fs.logs = make([]*segment, fs.nlogs)
	fs.metaZone, fs.metaEpoch, fs.hasMeta, fs.metaWP = ml.zone, ml.epoch, true, ml.wp
	for _, cp := range ml.cps {
		if err := fs.applyCheckpoint(cp); err != nil {
			return nil, nil, nil, err
		}
	}
	fs.touched.reset()
	fs.natDirty = map[uint64]struct{}{}
	fs.tl.preInvalid = 0
	fs.mu.Lock()
	probs, err := fs.rebuildSSA(ctx)
	fs.mu.Unlock()
	if err != nil {
		return nil, nil, nil, err
	}
	fs.loadProblems = probs
	return fs, zones, ml, nil
}

// repairSIT makes the SIT agree with the nodes: a block is valid exactly
// when a node points at it (first claim wins).
func (fs *FS) repairSIT() {
	for _, s := range fs.segs {
		for off := uint64(0); off < s.cap; off++ {
			if s.isValid(off) && s.owner[off] == 0 {
				s.valid[off/64] &^= 1 << (off % 64)
			}
		}
		s.nvalid = s.popcount()
	}
	for nid, a := range fs.nat {
		if s := fs.segOf(a); s != nil && a.Off() < s.wp && !s.isValid(a.Off()) {
			s.valid[a.Off()/64] |= 1 << (a.Off() % 64)
			s.nvalid++
			s.owner[a.Off()], s.ofs[a.Off()] = nid, ofsNode
		}
	}
	fs.sitRepaired = true
}

// rebuildSSA fills every segment's summary from the nodes (the NAT for node
// blocks, direct nodes for data blocks) and reports where the SIT disagrees.
func (fs *FS) rebuildSSA(ctx context.Context) ([]Problem, error) {
	var probs []Problem
	add := func(kind, format string, a ...any) {
		if len(probs) < 1000 {
			probs = append(probs, Problem{Kind: kind, Msg: fmt.Sprintf(format, a...)})
		}
	}
	own := func(a Addr, owner uint64, ofs uint32) {
		s := fs.segOf(a)
		switch {
		case s == nil || a.Off() >= s.wp:
			add("nat", "%#x/%d points at %v, which is not written", owner, ofs, a)
		case !s.isValid(a.Off()):
			add("sit", "%#x/%d points at %v, which the SIT marks invalid", owner, ofs, a)
		case s.owner[a.Off()] != 0:
			add("ssa", "block %v owned by %#x/%d and %#x/%d", a, s.owner[a.Off()], s.ofs[a.Off()], owner, ofs)
		default:
			s.owner[a.Off()], s.ofs[a.Off()] = owner, ofs
		}
	}
	nids := make([]uint64, 0, len(fs.nat))
	for nid := range fs.nat {
		nids = append(nids, nid)
	}
	sort.Slice(nids, func(i, j int) bool { return nids[i] < nids[j] })
	for _, nid := range nids {
		own(fs.nat[nid], nid, ofsNode)
	}
	b := make([]byte, fs.bs)
	for _, nid := range nids {
		if nidIdx(nid) == 0 {
			continue
		}
		if err := fs.readBlocks(ctx, fs.nat[nid], b); err != nil {
			return nil, err
		}
		h, addrs, err := decodeDirect(b)
		if err != nil || h.Nid != nid {
			add("nat", "direct node %#x at %v: %v", nid, fs.nat[nid], err)
			continue
		}
		for e, a := range addrs {
			if a != 0 {
				own(a, nid, uint32(e))
			}
		}
	}
	for z, s := range fs.segs {
		for off := uint64(0); off < s.cap; off++ {
			if s.isValid(off) && s.owner[off] == 0 {
				add("sit", "block %v is valid but no node points at it", MakeAddr(z, off))
			}
		}
	}
	return probs, nil
}

func (fs *FS) applyCheckpoint(cp *checkpoint) error {
	if cp.Full {
		fs.segs = map[ZoneID]*segment{}
		fs.nat = map[uint64]Addr{}
	}
	fs.cpVer, fs.nodeSeq, fs.nextIno = cp.Version, cp.NextSeq, cp.NextIno
	old := fs.segs
	fs.segs = map[ZoneID]*segment{}
	for _, sr := range cp.Segments {
		s := old[sr.Zone]
		if s == nil {
			s = newSegment(sr.Zone, fs.geo.ZoneBlocks)
		}
		if sr.WP > s.cap {
			return corrupt("checkpoint", "segment %d write pointer %d past capacity %d", sr.Zone, sr.WP, s.cap)
		}
		s.wp, s.mtime, s.log = sr.WP, sr.Mtime, -1
		if cp.Full {
			if len(sr.Bitmap) != int((s.cap+7)/8) {
				return corrupt("checkpoint", "segment %d bitmap has %d bytes, want %d", sr.Zone, len(sr.Bitmap), (s.cap+7)/8)
			}
			for i := range s.valid {
				s.valid[i] = 0
			}
			for i, b := range sr.Bitmap {
				s.valid[i/8] |= uint64(b) << (8 * (i % 8))
			}
			s.nvalid = s.popcount()
		}
		fs.segs[sr.Zone] = s
	}
	fs.orphans = map[uint64]struct{}{}
	for _, o := range cp.Orphans {
		fs.orphans[o] = struct{}{}
	}
	for _, e := range cp.NAT {
		if e[1] == 0 {
			delete(fs.nat, e[0])
		} else {
			fs.nat[e[0]] = Addr(e[1])
		}
	}
	for _, a := range cp.Invalid {
		fs.invalidate(a)
	}
	for _, a := range cp.Valid {
		s := fs.segOf(a)
		if s == nil || a.Off() >= s.cap {
			return corrupt("checkpoint", "SIT delta marks %v valid, in no segment", a)
		}
		if !s.isValid(a.Off()) {
			s.valid[a.Off()/64] |= 1 << (a.Off() % 64)
			s.nvalid++
		}
	}
	fs.cpLogs, fs.cpLogWP, fs.cpTL = cp.Logs, cp.LogWP, cp.TL
	return nil
}

// checkpoint writes back every dirty page and node, then appends a checkpoint
// record (a full snapshot in a new metadata zone when needed), then resets the
// segments that hold no valid block any more.
//
// Its node writes carry no fsync mark: until the record is durable, only the
// record would make them count, and roll-forward ignores them. They mark
// the nodes clean all the same, so a checkpoint that fails after writing
// some (a record, Flush or node write that failed) marks the inodes it wrote
// nodes of dirty again (notRecorded): the next fsync of such an inode then
// writes it with the fsync mark (roll-forward applies every node of an inode
// up to its last marked one, also the unmarked nodes this checkpoint wrote),
// instead of finding nothing dirty and acknowledging state that only the
// lost record covered.
func (fs *FS) checkpoint(ctx context.Context, forceSnapshot bool) (err error) {
	if fs.failed != nil {
		return fs.failed
	}
	if fs.inCP {
		return nil
	}
	fs.inCP = true
	fs.cpWrote = map[uint64]*inode{}
	fs.cpBegun++
	seq := fs.cpBegun
	defer func() {
		if err != nil {
			fs.notRecorded()
		} else {
			fs.cpCommitted = seq
		}
		fs.inCP, fs.cpWrote = false, nil
	}()
	fs.retryDeferred(ctx)
	t0, b0 := fs.now(), fs.blocksWritten
	if err := fs.flushAll(ctx); err != nil {
		return err
	}
	fs.lastCPWrite, fs.lastCPData = fs.now()-t0, fs.blocksWritten-b0
	if err := fs.writeDirtyNodes(ctx, nil, nodesCheckpoint); err != nil {
		return err
	}
	tf := fs.now()
	if err := fs.unlocked(func() error { return fs.vol.Flush(ctx) }); err != nil {
		return err
	}
	fs.lastCPFlush = fs.now() - tf
	// Segments with no valid block that are not log heads are freed by this checkpoint.
	var free []ZoneID
	for z, s := range fs.segs {
		if s.nvalid == 0 && s.log < 0 {
			free = append(free, z)
		}
	}
	sort.Slice(free, func(i, j int) bool { return free[i] < free[j] }) // resets in a reproducible order
	cp := fs.buildCheckpoint(false, free)
	payload := cp.encode()
	need := uint64(metaBlocks(len(payload), fs.bs))
	snap := forceSnapshot || !fs.hasMeta || fs.sinceSnap >= 256 ||
		fs.metaWP+need+fs.snapshotReserve() > fs.geo.ZoneBlocks
	if snap {
		err = fs.rotateMeta(ctx, fs.buildCheckpoint(true, free))
	} else {
		rec := encodeMetaRecord(metaRecord{Type: recCheckpoint, Epoch: fs.metaEpoch, Seq: fs.metaSeq, Payload: payload}, fs.bs)
		mz, mwp := fs.metaZone, fs.metaWP
		err = fs.unlocked(func() error { return fs.vol.Write(ctx, mz, mwp, rec, true) })
		if err == nil {
			fs.metaWP += need
			fs.metaSeq++
			fs.sinceSnap++
			fs.blocksWritten += need
		} else {
			// The metadata zone's tail is unknown now: continue in a new one.
			fs.metaWP = fs.geo.ZoneBlocks
		}
	}
	// A mirrored metadata zone that lost a copy takes no more writes: the
	// checkpoint goes to a new metadata zone with a full snapshot at once
	// (the record may be on the live copies: a checkpoint of a state that
	// existed; the snapshot's higher epoch wins at a mount). New zones may
	// meet the lost node until the arbiter sees it gone: short waits.
	// The burst of replacement zones after a node loss can also meet the
	// namespace's active-zone limit while the degraded zones' finishes are
	// still giving their resources back: a rotation refused for want of
	// resources (nothing written) waits and tries again too.
	for tries := 0; err != nil && (zerr.IsDegraded(err) || tries > 0 && noResources(err)) && tries < degradedTries; tries++ {
		if fs.degradedWait(ctx, tries) != nil {
			break
		}
		err = fs.rotateMeta(ctx, fs.buildCheckpoint(true, free))
	}
	if err != nil {
		if transient(err) || noResources(err) {
			// No zone for a new metadata zone (nothing written), or a
			// node is unavailable: the record may or may not be on the
			// drives. Both are checkpoints of states that existed, and the
			// next checkpoint starts a new metadata zone with a full
			// snapshot (metaWP was set past the end). Until then the
			// segments this record frees must stay untouched (a mount from
			// it resets them): no threaded logging into them.
			for _, z := range free {
				if s := fs.segs[z]; s != nil {
					s.stable = false
				}
			}
			return err
		}
		// The record may or may not be on the drives and the drive is
		// failing: the tables cannot tell which checkpoint a mount would find.
		return fs.goReadOnly("checkpoint record write", err)
	}
	fs.cpVer = cp.Version
	fs.natDirty = map[uint64]struct{}{}
	fs.touched.reset()
	cause := fs.cpCause
	if cause == "" {
		cause = "other"
	}
	fs.cpCause = ""
	fs.stats.checkpointBy(cause)
	fs.tlAfterCheckpoint(ctx)
	fs.cpLogs, fs.cpLogWP = cp.Logs, cp.LogWP
	for _, in := range fs.active {
		in.needCP = false
	}
	fs.active = map[uint64]*inode{}
	for _, z := range free {
		s := fs.segs[z]
		delete(fs.segs, z)
		for s != nil && s.pins > 0 {
			fs.pinCond.Wait() // a reader still reads a block it resolved before
		}
	}
	// The zones are free in the checkpoint (a mount resets them); they are
	// reset together (one arbiter change for all over fsvol); a reset that
	// fails while a node is unavailable is retried (zoneOp).
	fs.resetZones(ctx, free, "reset of a freed segment")
	// closed segments are stable now: threaded logging may reuse their
	// holes (every block in them is older than this record)
	for _, s := range fs.segs {
		s.stable = s.closed && s.log < 0 && !s.tl
	}
	fs.stats.Checkpoints++
	fs.m.checkpoint(fs.since(t0), cause)
	return nil
}

// notRecorded runs when a checkpoint failed (fs.mu held): its record may
// not be on the drives, so the nodes it wrote (unmarked) may not count at a
// mount. Their inodes are dirty again: an fsync must write them with the
// fsync mark, and the next checkpoint writes them again. An inode deleted
// meanwhile is left alone (its NAT entries go with the next record).
func (fs *FS) notRecorded() {
	for ino, in := range fs.cpWrote {
		if in.gone || fs.inodes[ino] != in {
			continue
		}
		fs.markDirty(in)
	}
}

// snapshotReserve is the room kept in the metadata zone for the next snapshot estimate.
func (fs *FS) snapshotReserve() uint64 { return 2 }

func (fs *FS) buildCheckpoint(full bool, free []ZoneID) *checkpoint {
	isFree := map[ZoneID]bool{}
	for _, z := range free {
		isFree[z] = true
	}
	cp := &checkpoint{Full: full, Version: fs.cpVer + 1, NextSeq: fs.nodeSeq, NextIno: fs.nextIno, Used: fs.used,
		HasTL: fs.sb.Features.Incompat&FeatureThreadedLog != 0, TL: fs.tlZones()}
	zs := make([]ZoneID, 0, len(fs.segs))
	for z := range fs.segs {
		if !isFree[z] {
			zs = append(zs, z)
		}
	}
	sort.Slice(zs, func(i, j int) bool { return zs[i] < zs[j] })
	for _, z := range zs {
		s := fs.segs[z]
		cp.Segments = append(cp.Segments, segRec{Zone: z, WP: s.wp, Mtime: s.mtime})
	}
	for _, s := range fs.logs {
		if s == nil {
			cp.Logs = append(cp.Logs, 0)
			cp.LogWP = append(cp.LogWP, 0)
		} else if s.tl {
			cp.Logs = append(cp.Logs, s.zone+1)
			cp.LogWP = append(cp.LogWP, s.tlCur) // roll-forward scans from the log's cursor
		} else {
			cp.Logs = append(cp.Logs, s.zone+1)
			cp.LogWP = append(cp.LogWP, s.wp)
		}
	}
	for o := range fs.orphans {
		cp.Orphans = append(cp.Orphans, o)
	}
	sort.Slice(cp.Orphans, func(i, j int) bool { return cp.Orphans[i] < cp.Orphans[j] })
	if full {
		for nid, a := range fs.nat {
			cp.NAT = append(cp.NAT, [2]uint64{nid, uint64(a)})
		}
		for i := range cp.Segments {
			s := fs.segs[cp.Segments[i].Zone]
			bm := make([]byte, (s.cap+7)/8)
			for j := range bm {
				bm[j] = byte(s.valid[j/8] >> (8 * (j % 8)))
			}
			cp.Segments[i].Bitmap = bm
		}
	} else {
		for nid := range fs.natDirty {
			cp.NAT = append(cp.NAT, [2]uint64{nid, uint64(fs.nat[nid])})
		}
		fs.touched.each(func(a Addr, was bool) {
			s := fs.segOf(a)
			now := s != nil && s.isValid(a.Off())
			switch {
			case now && !was:
				cp.Valid = append(cp.Valid, a)
			case !now && was:
				cp.Invalid = append(cp.Invalid, a)
			}
		})
	}
	sort.Slice(cp.NAT, func(i, j int) bool { return cp.NAT[i][0] < cp.NAT[j][0] })
	sort.Slice(cp.Valid, func(i, j int) bool { return cp.Valid[i] < cp.Valid[j] })
	sort.Slice(cp.Invalid, func(i, j int) bool { return cp.Invalid[i] < cp.Invalid[j] })
	return cp
}

// rotateMeta opens a new metadata zone, writes the superblock and a snapshot
// there, and resets the previous metadata zone.
func (fs *FS) rotateMeta(ctx context.Context, cp *checkpoint) error {
	payload := cp.encode()
	epoch := fs.metaEpoch + 1
	sup := encodeMetaRecord(metaRecord{Type: recSuper, Epoch: epoch, Seq: 0, Payload: fs.sb.encode()}, fs.bs)
	snap := encodeMetaRecord(metaRecord{Type: recSnapshot, Epoch: epoch, Seq: 1, Payload: payload}, fs.bs)
	total := uint64((len(sup) + len(snap)) / fs.bs)
	if total > fs.geo.ZoneBlocks {
		return &zerr.NoResourcesError{Resource: "metadata zone blocks (snapshot too large)", Requested: total, Available: fs.geo.ZoneBlocks}
	}
	var z ZoneID
	if err := fs.unlocked(func() error {
		var err error
		z, err = fs.vol.OpenZone(ctx)
		return err
	}); err != nil {
		return err
	}
	buf := append(sup, snap...)
	if err := fs.unlocked(func() error { return fs.vol.Write(ctx, z, 0, buf, true) }); err != nil {
		fs.noteBackground(bgReset, fs.unlocked(func() error { return fs.vol.Reset(ctx, z) }))
		return err
	}
	fs.blocksWritten += total
	old, had := fs.metaZone, fs.hasMeta
	fs.metaZone, fs.metaWP, fs.metaEpoch, fs.metaSeq, fs.sinceSnap, fs.hasMeta = z, total, epoch, 2, 0, true
	if had {
		// The old metadata zone is no longer referenced (the checkpoint is
		// complete, so this call succeeds); a failed reset leaves it for the
		// next mount's sweep of unreferenced zones, but the volume still
		// counts it: go read-only rather than run on with a wrong count.
		fs.zoneOp(ctx, true, old, "reset of the previous metadata zone")
	}
	return nil
}

// Unmount writes everything back, takes a final checkpoint and stops
// background work. The FS cannot be used afterwards.
func (fs *FS) Unmount(ctx context.Context) error {
	fs.stopBackground()
	fs.cpMu.Lock()
	defer fs.cpMu.Unlock()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return &zerr.ClosedError{What: "file system"}
	}
	// Open files are closed: their orphans can go now.
	for h, of := range fs.handles {
		delete(fs.handles, h)
		if in := fs.inodes[of.ino]; in != nil {
			in.opens--
		}
	}
	for o := range fs.orphans {
		if err := fs.maybeDelete(ctx, o); err != nil {
			return err
		}
	}
	fs.cpCause = "unmount"
	err := fs.checkpoint(ctx, false)
	if e := fs.shutdown(ctx); err == nil {
		err = e
	}
	return err
}

func (fs *FS) shutdown(ctx context.Context) error {
	fs.closed = true
	if fs.gauges != nil && fs.opts.Registry != nil {
		fs.opts.Registry.Unregister(fs.gauges)
		fs.gauges = nil
	}
	fs.stopBackground()
	for i := range fs.logs {
		fs.logs[i] = nil
	}
	fs.dropLanes()
	return nil
}

// abandon drops the FS without writing anything (a simulated crash, tests).
func (fs *FS) abandon() {
	fs.stopBackground()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.closed = true
	fs.failed = &zerr.ClosedError{What: "file system"}
}

func (fs *FS) now() time.Duration {
	if fs.clk.Kind() == clock.KindOff {
		return time.Duration(time.Now().UnixNano())
	}
	return fs.clk.Now()
}

func (fs *FS) since(t0 time.Duration) time.Duration { return fs.now() - t0 }
