package lfs

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
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
	// ReservedRootPercent is the share of the user blocks only root may
	// fill (rootreserve.go; ext4's mkfs -m): 0 means none, otherwise
	// RootReserveBlocks of it. At most 50.
	ReservedRootPercent float64
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
	// CachedChunks forces the chunk policy of ZNS+ §3.2.1 (Table 4) instead
	// of the cost choice: CachedChunksFromHost (IZC-H) writes every chunk
	// whose valid blocks are all cached on the host from the host,
	// CachedChunksOnDevice (IZC-D) copies every clean block on the device.
	// The zero value, CachedChunksByCost, uses FlashReadCost and
	// HostWriteCost when both are set and copies on the device otherwise.
	// CachedWrite, when set, takes precedence (every clean cached block from
	// the host).
	CachedChunks CachedChunkPolicy
	// HSRCopyCost and HSRWriteCost, when both are set, calibrate the
	// hybrid segment recycling cost model (zns+, tl.go): the cost of one
	// block copied inside the drives (f_copy; plugging is 90 % of it) and of
	// one node or metadata block written by the host (f_write). Unset, both
	// count one program each (f_write = f_copy).
	HSRCopyCost, HSRWriteCost time.Duration
	// ThetaPIBlocks is θ_PI under threaded logging (zns+, tl.go): the
	// pre-invalid blocks that trigger a checkpoint (periodic
	// checkpointing). 0: the paper's 128 MiB of 16 GiB scaled to this file
	// system (1/128 of its user blocks, at least a quarter zone). Smaller
	// values checkpoint more often (more node and metadata writes, more
	// segments threaded logging may reuse); larger ones the reverse.
	ThetaPIBlocks uint64
	// NoHSR turns hybrid segment recycling's cost model off (zns+):
	// threaded logging reuses a segment whenever it finds a candidate,
	// whatever compaction would have cost. For experiments (ZNS+ §3.3.2).
	NoHSR bool
	// PGCWorkers is P-GC (seeds/004 Algorithm 1): host copy splits the reads
	// of a victim whose valid blocks exceed half of its blocks across this
	// many workers that read their shares in parallel (0: DefaultPGCWorkers,
	// the paper's 2; 1 or negative: off). The moves are committed as
	// without it. On a virtual clock the reads are split only if it is an
	// lfs.TurnClock (pgcclock.go), whose workers take turns in modelled time.
	PGCWorkers int
	// IPUFsyncBlocks: an fsync of at most this many dirty pages, all
	// overwriting blocks the file has, updates them in place when the
	// Volume is an Overwriter and the drives' budget allows (ipu.go; ZMS's
	// budget-based in-place update; F2FS's min_fsync_blocks is 8). 0: off.
	IPUFsyncBlocks int
	// IOTailor cuts write-backs under memory pressure at the superpage
	// boundaries of the log heads (iotailor.go; ZMS's IOTailor), when the
	// Volume reports its superpage.
	IOTailor bool
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
	// Atime is when reads update the access time (atime.go; the zero
	// value is relatime); checkpoints persist the changes.
	Atime AtimeMode
	// ReservedRootPercent overrides the superblock's root-reserved share
	// for this mount (rootreserve.go): 0 keeps it, negative means none,
	// positive reserves RootReserveBlocks of that percent (at most 50).
	ReservedRootPercent float64
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
	// The components, each with its own lock where it has one; the locks
	// in the order they are taken (doc.go): gc.mu, cp.mu, renameMu, an
	// inode's, lg.mu[i], mu (leaf). bg.mu guards only the timer.
	gc       recycler     // victim choice, moves, threaded logging (gc.go, move.go, tl.go)
	cp       checkpointer // NAT/SIT deltas, metadata zones, checkpoints (checkpoint.go)
	lg       logSet       // log heads, write lanes, appends (seg.go, lanes.go)
	wb       wbScheduler  // write-back and admission to the dirty budget (writeback.go)
	bg       background   // ticks, background goroutines and their errors (metrics.go, health.go)
	renameMu rankedMutex  // renames (the directory tree's shape)
	mu       rankedMutex  // the tables (leaf lock): never held across a Volume call
	pinCond  *sync.Cond   // on mu: a segment's readers left (pins 0), or its in-place updates
	ipu      ipuState     // in-place updates in flight (ipu.go; mu)
	inflight atomic.Int64 // operations running (the virtual clock's tick skips a busy FS)

	vol  Volume
	geo  VolumeGeometry
	bs   int
	sb   superblock
	opts Options
	clk  clock.Clock
	m    *metrics

	// The tables (mu).
	segs  map[ZoneID]*segment
	nat   map[uint64]Addr
	ic    inodeCache
	files openFiles
	count counters
	// prealloc is the blocks each inode's fallocate reservation still
	// needs (space.go); their sum is count.resv, part of count.used.
	prealloc map[uint64]uint64
	// wbFull is the files whose write-back needed the write-back reserve
	// (wbspace.go).
	wbFull map[uint64]bool
	// atimes is the inodes whose atime reads changed since the last
	// checkpoint (atime.go).
	atimes map[uint64]struct{}

	failed   error
	deferred []deferredOp // Finish/Reset calls that failed while a node was unavailable (retried)
	closed   bool
	stats    Stats
}

// inodeCache is the inode and page cache's bookkeeping (FS.mu).
type inodeCache struct {
	inodes     map[uint64]*inode
	active     map[uint64]*inode // inodes with dirty pages or nodes, or changed names, since the last checkpoint
	pages      int               // cached pages
	dirtyPages int
	dirtyNodes int
	dirty      dirtyIndex // the inodes with dirty pages, by number (dirtyidx.go)
}

// openFiles is the open handles and the unlinked inodes they keep (FS.mu).
type openFiles struct {
	handles map[Handle]*handle
	nextFH  Handle
	orphans map[uint64]struct{}
}

// counters is the allocation and space counters (FS.mu).
type counters struct {
	nodeSeq       uint64
	nextIno       uint64
	used          uint64 // user blocks in use: data blocks (mapped or dirty holes) + nodes
	nodes         uint64 // nodes (inodes + direct nodes) in use, bounded by the superblock's MaxNodes
	blocksWritten uint64 // all blocks written to the drives (incl. meta and moves)
	tornBatches   uint64 // marked inodes roll-forward did not take: their batch was torn (recover.go)
	userBlocks    uint64 // blocks written on behalf of users (data + nodes)
	nodeBlocks    uint64 // blocks appended to the node logs (any reason: fsync, write-back, checkpoint, moves)
	metaBlocks    uint64 // metadata zone blocks: checkpoint records and snapshots
	userData      uint64 // data pages written on behalf of users (no moves, no nodes)
	resv          uint64 // blocks fallocate reserved and not written yet (included in used)
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
		segs: map[ZoneID]*segment{}, nat: map[uint64]Addr{}, prealloc: map[uint64]uint64{},
		ic:    inodeCache{inodes: map[uint64]*inode{}, active: map[uint64]*inode{}},
		files: openFiles{handles: map[Handle]*handle{}, orphans: map[uint64]struct{}{}, nextFH: 1}}
	fs.bs = fs.geo.BlockSize
	fs.cp.natDirty = map[uint64]struct{}{}
	fs.cp.touched = newTouchLog()
	fs.setRanks()
	fs.lg.vecw = vectorWriter(vol)
	fs.pinCond = sync.NewCond(&fs.mu)
	fs.wb.flight = sync.NewCond(&fs.mu)
	fs.wb.admitGone = map[uint64]bool{}
	fs.lg.laneCond = sync.NewCond(&fs.mu)
	fs.lg.lanes = 1
	fs.gc.pol = opts.Policy
	if fs.gc.pol == nil {
		fs.gc.pol = DefaultPolicy(opts.Move)
	}
	fs.m = newMetrics(opts.Registry)
	fs.bg.errs = bgCounter(opts.Registry)
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
	if err := checkRootPercent(opts.ReservedRootPercent); err != nil {
		return err
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
		Features: ondisk.Features{Compat: FeatureInodeRdev, Incompat: FeaturePrealloc | FeatureFsyncBatch}}
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
	if sb.RootReserve = RootReserveBlocks(sb.UserBlocks, g.BlockSize, opts.ReservedRootPercent); sb.RootReserve > 0 {
		sb.Features.Compat |= FeatureRootReserve
	}
	fs := newFS(vol, Options{})
	fs.sb = sb
	fs.sb.Features.Compat |= FeatureInodeRdev // written with the next superblock
	fs.lg.n = int(sb.Logs)
	fs.lg.heads = make([]*segment, fs.lg.n)
	fs.count.nextIno = RootIno + 1
	now := time.Now().UnixNano()
	root := fs.newInode(RootIno, syscall.S_IFDIR|0o755, 0, 0, now)
	root.body.Nlink = 2
	root.body.Parent = RootIno
	root.dir = &dirIndex{ents: map[string]int{}}
	fs.count.used++
	fs.count.nodes++
	fs.cp.mu.Lock()
	fs.mu.Lock()
	fs.cp.cause = "mkfs"
	err = fs.checkpoint(ctx, true)
	fs.mu.Unlock()
	fs.cp.mu.Unlock()
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
	if opts.CachedChunks > CachedChunksOnDevice {
		return nil, &zerr.InvalidArgumentError{Field: "cached_chunks", Reason: fmt.Sprintf("%v is not by-cost, izc-h or izc-d", opts.CachedChunks)}
	}
	if opts.ReservedRootPercent > 0 {
		if err := checkRootPercent(opts.ReservedRootPercent); err != nil {
			return nil, err
		}
	}
	fs, zones, ml, err := loadFS(ctx, vol, opts)
	if err != nil {
		return nil, err
	}
	if repair && len(fs.cp.loadProblems) > 0 {
		fs.repairSIT()
	} else if len(fs.cp.loadProblems) > 0 {
		return nil, corrupt("file system", "%d inconsistencies, first: %v (run fsck with repair)", len(fs.cp.loadProblems), fs.cp.loadProblems[0])
	}
	fs.cp.mu.Lock()
	fs.mu.Lock()
	err = fs.recover(ctx, zones, ml)
	// threaded logging only once the mount's snapshot, under a superblock
	// with FeatureThreadedLog, is on the drives
	fs.gc.tl.ready = err == nil
	fs.mu.Unlock()
	fs.cp.mu.Unlock()
	if err != nil && errors.Is(err, zerr.ErrCorrupt) && !repair {
		// The drives disagree with the checkpoint (roll-forward found a
		// block missing, a write pointer behind the data): mount the newest
		// checkpoint read-only, so what it holds can be read and copied
		// off, rather than refuse the whole file system.
		if ro, _, _, e := loadFS(ctx, vol, opts); e == nil && len(ro.cp.loadProblems) == 0 {
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
	fs.sb.Features.Incompat |= FeaturePrealloc | FeatureFsyncBatch
	if fs.tlOn() && sb.Features.Incompat&FeatureThreadedLog == 0 && fs.geo.MaxOpen-int(sb.Logs)-2 < 1 {
		// A TL segment stays open until a checkpoint records it, beside the
		// log heads and two metadata zones: with no open zone to spare,
		// every TL_open would be over budget (tlTry).
		slog.Warn("threaded logging needs an open zone beyond the logs and the metadata zones: mode zns+ falls back to izc",
			"max_open", fs.geo.MaxOpen, "logs", sb.Logs, "need_at_least", int(sb.Logs)+3)
		fs.gc.tl.vol = nil
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
	fs.lg.n = int(sb.Logs)
	fs.lg.heads = make([]*segment, fs.lg.n)
	fs.cp.metaZone, fs.cp.metaEpoch, fs.cp.hasMeta, fs.cp.metaWP = ml.zone, ml.epoch, true, ml.wp
	for _, cp := range ml.cps {
		if err := fs.applyCheckpoint(cp); err != nil {
			return nil, nil, nil, err
		}
	}
	fs.cp.touched.reset()
	fs.cp.natDirty = map[uint64]struct{}{}
	fs.gc.tl.preInvalid = 0
	fs.mu.Lock()
	probs, err := fs.rebuildSSA(ctx)
	fs.mu.Unlock()
	if err != nil {
		return nil, nil, nil, err
	}
	fs.cp.loadProblems = probs
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
	fs.cp.sitRepaired = true
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

// Unmount writes everything back, takes a final checkpoint and stops
// background work. The FS cannot be used afterwards.
func (fs *FS) Unmount(ctx context.Context) error {
	fs.stopBackground()
	fs.cp.mu.Lock()
	defer fs.cp.mu.Unlock()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return &zerr.ClosedError{What: "file system"}
	}
	// Open files are closed: their orphans can go now.
	for h, of := range fs.files.handles {
		delete(fs.files.handles, h)
		if in := fs.ic.inodes[of.ino]; in != nil {
			in.opens--
		}
	}
	for o := range fs.files.orphans {
		if err := fs.maybeDelete(ctx, o); err != nil {
			return err
		}
	}
	fs.cp.cause = "unmount"
	err := fs.checkpoint(ctx, false)
	if e := fs.shutdown(ctx); err == nil {
		err = e
	}
	return err
}

func (fs *FS) shutdown(ctx context.Context) error {
	fs.closed = true
	if fs.m.gauges != nil && fs.opts.Registry != nil {
		fs.opts.Registry.Unregister(fs.m.gauges)
		fs.m.gauges = nil
	}
	fs.stopBackground()
	for i := range fs.lg.heads {
		fs.lg.heads[i] = nil
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
