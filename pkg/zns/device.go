package zns

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/ondisk"
	"github.com/zonefleet/zonefleet/pkg/vfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

type zone struct {
	mu         sync.RWMutex
	idx, start uint64
	fcg        int
	state      ZoneState
	wp         uint64 // zone-relative
	gen        uint64
	fbg        int // FBG index in the FCG, -1 when none (for a TL zone: the LogFBG)
	slotSeq    uint64
	jgen       uint64        // generation whose journal record is known durable
	jn         atomic.Uint64 // number of the zone's last state record in the journal (journal.n)
	pend       int64         // write-cache bytes of a partially filled chunk
	pendChip   int           // the chip of that chunk
	compacting bool
	tl         *tlState
	ipuPages   map[uint32]uint32 // offset -> IPU slot (page map)
	ipuChunks  map[uint32]uint32 // chunk -> first IPU slot (chunk map, 4 contiguous slots)
}

type fcgAlloc struct {
	mu     sync.Mutex
	erases []uint64
	used   []bool
	// cleanAt[b]: the FBG holds no old data once the data file's synced
	// write count reaches this value (it was hole-punched before); dirtyFBG:
	// it may hold old data and has not been punched.
	cleanAt []uint64
	// inHeld marks the FBGs in Device.held (guarded by Device.heldMu).
	inHeld []bool
	// punching counts FBGs marked used only while allocFBG punches them
	// for another allocation; an allocation that finds no free FBG waits
	// on punched for them rather than failing.
	punching int
	punched  *sync.Cond
	// logs counts the FBGs held as LogFBGs by TL_opened zones: at most the
	// group's spare FBGs (takeLogFBG).
	logs int
}

// SetBeforeDataSync makes every fdatasync of the data file (Flush, FUA
// writes, the sync before a reset, the scrub of a reused FBG) run fn first,
// in the same round: a failure of fn fails that sync like an I/O error of the
// file (the device goes read-only). The node uses it to make the zone owner
// records it wrote without waiting durable before any data written after
// them is. fn must not call back into the device.
func (d *Device) SetBeforeDataSync(fn func() error) { d.beforeSync.Store(&fn) }

type stats struct {
	hostW, hostR, nandProg, nandRead atomic.Uint64
	cbChunks, rpBlocks               atomic.Uint64
	plugDemand, plugBG, plugCB       atomic.Uint64
	erases                           atomic.Uint64
	checkpoints                      atomic.Uint64
	checkpointFailures               atomic.Uint64
	ioErrors                         atomic.Uint64
	zonesFailed                      atomic.Uint64
	tailDropped                      atomic.Uint64
	dataSyncs, journalSyncs          atomic.Uint64
	kicks                            atomic.Uint64
}

// Device is an emulated ZNS+ SSD backed by a file. All methods are safe for
// concurrent use; I/O to different zones does not share a lock.
type Device struct {
	path       string
	beforeSync atomic.Pointer[func() error] // SetBeforeDataSync
	cfg        flash.Config                 // as created/opened: the geometry
	live       atomic.Pointer[flash.Config]
	g          flash.Geometry
	lay        layout
	clk        clock.Clock
	model      *flash.Model // nil with the off clock
	fs         vfs.FS
	log        *slog.Logger
	f          *syncFile
	syncs      syncOrder
	j          *journal
	uuid       [16]byte

	zones []*zone
	fcgs  []*fcgAlloc
	// held: FBGs this process released without punching them, oldest
	// first, for allocFBG to punch (punchHeld); an entry taken or punched
	// since is skipped when it comes up. heldMu is taken before an
	// fcgAlloc's mu, never while holding one.
	heldMu sync.Mutex
	held   []heldFBG

	resMu          sync.Mutex
	nOpen, nActive int

	ipu *ipuRegion
	l2p *l2pCache // the L2P cache model (WithL2P), nil without it
	wb  *wbufs    // the write-buffer model (WithWriteBuffers), nil without it
	st  stats

	cbCount []atomic.Uint32 // consecutive copyback count per physical page

	cmu      sync.Mutex
	comps    map[uint64]*compaction
	nextComp uint64
	jobs     map[*job]struct{} // long operations still being booked (sched.go)
	bg       sync.WaitGroup

	closed atomic.Bool
	failed atomic.Pointer[error] // set after an I/O error that leaves the device read-only
}

func (d *Device) conf() flash.Config { return *d.live.Load() }

// Option configures Create and Open.
type Option func(*options)

type options struct {
	fs    vfs.FS
	log   *slog.Logger
	fresh bool // Create: every FBG is known to be empty
	kick  int64
	l2p   *L2PConfig
	wbufs int
	syncs syncOrder
}

// syncOrder is how a Flush or FUA write runs its two fdatasyncs when the
// journal has records to sync (see syncAll).
type syncOrder uint8

const (
	syncConcurrent   syncOrder = iota // the data file and the journal at once
	syncJournalFirst                  // tests: one after the other, the journal first
	syncDataFirst                     // tests: one after the other, the data file first
)

// withSyncOrder runs syncAll's fdatasyncs one after the other (tests: a
// crashable file system's crash hook sees them in a fixed order, so a seed
// replays exactly, and a crash between them is one of its points).
func withSyncOrder(s syncOrder) Option { return func(o *options) { o.syncs = s } }

// DefaultWritebackKick is how many bytes written to a device's data file
// start the write-back of its dirty pages (WithWritebackKick) by default.
const DefaultWritebackKick = 4 << 20

// WithWritebackKick makes the device start the write-back of its data
// file's dirty pages to the disk, without waiting, every n bytes written
// (0: never; the kernel then writes them at the next Flush or by its own
// thresholds). A Flush after a large write then has less left to write;
// durability does not change. Default DefaultWritebackKick.
func WithWritebackKick(n int64) Option { return func(o *options) { o.kick = max(n, 0) } }

// WithFS runs the device on fs instead of the operating system's file
// system (tests: vfs.NewCrashableMem, vfs.WithErrors).
func WithFS(fs vfs.FS) Option { return func(o *options) { o.fs = fs } }

// WithLogger sets the logger for I/O errors and recovery notes
// (slog.Default() otherwise).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

func getOptions(opts []Option) options {
	o := options{fs: vfs.Default, log: slog.Default(), kick: DefaultWritebackKick}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Create makes a new device at path (data file path, journal path+".journal").
// It fails if path exists.
func Create(path string, cfg flash.Config, clk clock.Clock, opts ...Option) (*Device, error) {
	d, err := create(path, cfg, clk, opts)
	return d, typedOpenErr(path, "create", err)
}

func create(path string, cfg flash.Config, clk clock.Clock, opts []Option) (*Device, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := getOptions(opts)
	cfg = cfg.Resolved()
	lay := newLayout(cfg)
	if _, err := o.newL2P(lay); err != nil {
		return nil, err
	}
	f, err := o.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, &zerr.AlreadyExistsError{Kind: "device file", Name: path}
		}
		return nil, err
	}
	uuid := newUUID()
	fail := func(err error) (*Device, error) {
		f.Close()
		o.fs.Remove(path)
		o.fs.Remove(path + ".journal")
		return nil, err
	}
	if err := f.Truncate(lay.size); err != nil {
		return fail(err)
	}
	if _, err := f.WriteAt(encodeHeader(cfg, uuid, newFeatures), 0); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	jf, err := writeJournalFile(o.fs, path+".journal", uuid, 1, nil)
	if err != nil {
		return fail(err)
	}
	jf.Close()
	f.Close()
	return open(path, cfg, clk, append(opts, func(o *options) { o.fresh = true }))
}

// OpenOrCreate opens path if it exists, else creates it.
func OpenOrCreate(path string, cfg flash.Config, clk clock.Clock, opts ...Option) (*Device, error) {
	if _, err := getOptions(opts).fs.Stat(path); err == nil {
		return Open(path, cfg, clk, opts...)
	}
	return Create(path, cfg, clk, opts...)
}

// Open reopens a device: checks the header (foreign file, other geometry or
// unknown ro_compat/incompat feature bits are refused), replays the journal
// (its torn, zeroed or garbage tail is dropped), verifies the write
// pointers, and rewrites a compacted journal. Zones that were open come back
// closed. A version 1 device is upgraded to the current format.
func Open(path string, cfg flash.Config, clk clock.Clock, opts ...Option) (*Device, error) {
	d, err := open(path, cfg, clk, opts)
	return d, typedOpenErr(path, "open", err)
}

// open reopens the device at path in named phases: the header
// (readHeader), the journal (readJournal, replayJournal), the write
// pointers (verifyZones), the in-place updates, the open zones
// (settleZones), the format upgrade (upgradeHeader) and the compacted
// journal.
func open(path string, cfg flash.Config, clk clock.Clock, opts []Option) (*Device, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := getOptions(opts)
	if clk == nil {
		clk = clock.Off()
	}
	cfg = cfg.Resolved()
	lay := newLayout(cfg)
	l2p, err := o.newL2P(lay)
	if err != nil {
		return nil, err
	}
	f, err := o.fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, &zerr.NotFoundError{Kind: "device file", Name: path}
		}
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	uuid, version, feat, err := readHeader(f, path, cfg, &lay)
	if err != nil {
		return nil, err
	}
	jc, recs, err := readJournal(o.fs, path, uuid)
	if err != nil {
		return nil, err
	}
	d := newOpenedDevice(path, cfg, lay, clk, o, uuid, f)
	d.l2p = l2p
	if jc.dropped > 0 {
		d.st.tailDropped.Add(1)
		d.log.Warn("zns: journal tail dropped (torn, zeroed or garbage: writes after the last flush)",
			"device", path, "records", len(jc.recs), "dropped_bytes", jc.dropped)
	}
	ipus, err := d.replayJournal(recs)
	if err != nil {
		return nil, err
	}
	if err := d.verifyZones(f); err != nil {
		return nil, err
	}
	for _, r := range ipus {
		d.replayIPU(r)
	}
	// Records written while finishing the open (TL finalization) go to the
	// old journal after its last valid record; the rewrite below replaces it.
	jf0, err := o.fs.OpenFile(path+".journal", os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	d.j = &journal{path: path + ".journal", f: newSyncFile(jf0, &d.st.journalSyncs), off: jc.end, epoch: jc.epoch, seq: jc.seq, limit: journalLimit}
	if err := d.settleZones(); err != nil {
		return nil, err
	}
	if version < formatVersion {
		if err := d.upgradeHeader(f, feat, version); err != nil {
			return nil, err
		}
	}
	// Compacted journal.
	if err := d.rewriteJournal(); err != nil {
		if d.j.f != nil {
			d.j.f.Close()
		}
		return nil, err
	}
	d.j.checkpoint = d.checkpoint
	ok = true
	return d, nil
}

// readHeader reads and checks the header of the device file f (foreign
// file, other geometry, unknown feature bits) and that the file is as long
// as the geometry needs; it sets lay's FBG interleaving from the features.
func readHeader(f vfs.File, path string, cfg flash.Config, lay *layout) (uuid [16]byte, version uint32, feat ondisk.Features, err error) {
	hdr := make([]byte, headerSize)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		if !errors.Is(err, io.EOF) {
			return uuid, 0, feat, err // an I/O error, not a short file
		}
		return uuid, 0, feat, &zerr.CorruptError{Path: path, Reason: "cannot read header: " + err.Error()}
	}
	uuid, version, feat, err = checkHeader(path, hdr, cfg)
	if err != nil {
		return uuid, 0, feat, err
	}
	lay.interleaved = feat.Incompat&featFBGInterleaved != 0
	if sz, err := f.Size(); err != nil {
		return uuid, 0, feat, err
	} else if sz < lay.size {
		return uuid, 0, feat, &zerr.CorruptError{Path: path, Reason: fmt.Sprintf("file is shorter than the geometry needs (%d bytes)", lay.size)}
	}
	return uuid, version, feat, nil
}

// readJournal reads the journal of the device at path and decodes its
// records (a torn, zeroed or garbage tail is dropped, jc.dropped says how
// much).
func readJournal(fsys vfs.FS, path string, uuid [16]byte) (jcontent, []any, error) {
	jb, err := vfs.ReadFile(fsys, path+".journal")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return jcontent{}, nil, &zerr.CorruptError{Path: path + ".journal", Reason: "journal missing"}
		}
		return jcontent{}, nil, err
	}
	jc, err := parseJournal(path+".journal", jb, uuid)
	if err != nil {
		return jcontent{}, nil, err
	}
	recs, err := decodeAll(path+".journal", jc)
	if err != nil {
		return jcontent{}, nil, err
	}
	return jc, recs, nil
}

// newOpenedDevice builds the device's state before the journal replay:
// every zone empty, every FBG free (and, unless the file is fresh, maybe
// holding old data).
func newOpenedDevice(path string, cfg flash.Config, lay layout, clk clock.Clock, o options, uuid [16]byte, f vfs.File) *Device {
	g := lay.g
	d := &Device{path: path, cfg: cfg, g: g, lay: lay, clk: clk, fs: o.fs, log: o.log, uuid: uuid, comps: map[uint64]*compaction{}, jobs: map[*job]struct{}{}}
	d.f = newSyncFile(f, &d.st.dataSyncs)
	d.f.kickEvery, d.f.kicks = o.kick, &d.st.kicks
	d.syncs = o.syncs
	d.f.before = func() error {
		if fn := d.beforeSync.Load(); fn != nil {
			return (*fn)()
		}
		return nil
	}
	d.live.Store(&cfg)
	if clk.Kind() != clock.KindOff {
		d.model = flash.NewModel(cfg)
	}
	d.cbCount = make([]atomic.Uint32, g.Chips*cfg.BlocksPerChip*cfg.PagesPerBlock)
	d.fcgs = make([]*fcgAlloc, g.NFCG)
	for i := range d.fcgs {
		d.fcgs[i] = &fcgAlloc{erases: make([]uint64, g.FBGsPerFCG), used: make([]bool, g.FBGsPerFCG), cleanAt: make([]uint64, g.FBGsPerFCG), inHeld: make([]bool, g.FBGsPerFCG)}
		d.fcgs[i].punched = sync.NewCond(&d.fcgs[i].mu)
		for b := range d.fcgs[i].cleanAt {
			if !o.fresh {
				d.fcgs[i].cleanAt[b] = dirtyFBG // after a restart any free FBG may hold old data
			}
		}
	}
	d.zones = make([]*zone, g.Zones)
	for i := range d.zones {
		d.zones[i] = &zone{idx: uint64(i), start: uint64(i) * g.ZoneSize, fcg: g.FCG(uint64(i)), fbg: -1,
			ipuPages: map[uint32]uint32{}, ipuChunks: map[uint32]uint32{}}
	}
	d.ipu = newIPURegion(cfg.IPURegionBlocks)
	d.wb = newWbufs(o.wbufs, uint64(g.ChunkBlocks*g.DZone))
	return d
}

// badJournal is a corrupt-journal error.
func (d *Device) badJournal(format string, a ...any) error {
	return &zerr.CorruptError{Path: d.path + ".journal", Reason: fmt.Sprintf(format, a...)}
}

// replayJournal applies the zone and FBG records (range-checked) and
// returns the in-place-update records, replayed once the write pointers
// are known.
func (d *Device) replayJournal(recs []any) ([]ipuRec, error) {
	g := d.g
	var ipus []ipuRec
	for _, r := range recs {
		switch r := r.(type) {
		case zoneRec:
			if r.zone >= g.Zones || r.state > StateOffline || r.wp > g.ZoneCap ||
				r.fbg < -1 || int(r.fbg) >= g.FBGsPerFCG || r.logFBG < -1 || int(r.logFBG) >= g.FBGsPerFCG {
				return nil, d.badJournal("zone record out of range: zone %d state %d wp %d", r.zone, r.state, r.wp)
			}
			z := d.zones[r.zone]
			z.state, z.wp, z.gen, z.fbg = r.state, r.wp, r.gen, int(r.fbg)
			z.tl = nil
			if r.tl {
				if uint64(len(r.bitmap)) != (g.ZoneCap+7)/8 {
					return nil, d.badJournal("zone %d: bad TL record", r.zone)
				}
				z.tl = &tlState{orig: int(r.logFBG), mode: r.tlMode, bitmap: r.bitmap, plugged: map[uint64]bool{}}
			}
		case fbgRec:
			if int(r.fcg) >= g.NFCG || int(r.fbg) >= g.FBGsPerFCG {
				return nil, d.badJournal("FBG record out of range")
			}
			d.fcgs[r.fcg].erases[r.fbg] = r.erases
		case ipuRec:
			ipus = append(ipus, r)
		}
	}
	return ipus, nil
}

// verifyZones checks FBG ownership (no FBG mapped twice) and brings every
// zone's write pointer up to its newest valid slot in f.
func (d *Device) verifyZones(f vfs.File) error {
	for _, z := range d.zones {
		a := d.fcgs[z.fcg]
		for _, b := range []int{z.fbg, z.origFBG()} {
			if b < 0 {
				continue
			}
			if a.used[b] {
				return d.badJournal("FBG %d of chip group %d mapped twice", b, z.fcg)
			}
			a.used[b] = true
			if b == z.origFBG() {
				a.logs++ // a TL_opened zone holds a LogFBG besides its original
			}
		}
		best, err := d.readSlots(f, z)
		if err != nil {
			return err
		}
		if err := d.verifyWP(z, best); err != nil {
			return err
		}
	}
	return nil
}

// readSlots reads zone z's two write-pointer slots and returns the newest
// valid one of its generation (nil: none); it raises z.slotSeq to the
// newest sequence seen.
func (d *Device) readSlots(f vfs.File, z *zone) (*slot, error) {
	var best *slot
	for k := 0; k < 2; k++ {
		buf := make([]byte, slotSize)
		if _, err := f.ReadAt(buf, d.lay.slotBase+int64(z.idx*2+uint64(k))*slotSize); err != nil {
			return nil, err
		}
		s, written, valid := decodeSlot(buf)
		if !written {
			continue
		}
		if !valid {
			continue
		}
		if s.seq > z.slotSeq {
			z.slotSeq = s.seq
		}
		if s.gen == z.gen && (best == nil || s.seq > best.seq) {
			sc := s
			best = &sc
		}
	}
	return best, nil
}

// verifyWP moves z's write pointer to its slot's when that is ahead, and
// checks the result against the zone's state.
func (d *Device) verifyWP(z *zone, best *slot) error {
	g, path := d.g, d.path
	if best != nil {
		if best.wp > g.ZoneCap {
			return &zerr.CorruptError{Path: path, Reason: fmt.Sprintf("zone %d: write pointer %d past capacity %d", z.idx, best.wp, g.ZoneCap)}
		}
		if best.wp > z.wp {
			if z.state == StateEmpty || z.state == StateOffline || z.fbg < 0 {
				// The journal record that opened the zone was not flushed
				// (a power loss), so neither was the data: not acknowledged
				// as durable, dropped. The zone moves to a new generation
				// (recorded by the journal rewrite below, synced before
				// Open returns) so that the slot never matches again: a
				// later incarnation that loses its own slot must not fall
				// back to this one.
				d.log.Warn("zns: write pointer slot ahead of an unflushed zone open, ignored",
					"device", path, "zone", z.idx, "slot_wp", best.wp, "state", z.state.String())
				z.gen++
			} else {
				z.wp = best.wp
			}
		}
	}
	if z.state == StateEmpty && z.wp != 0 {
		return &zerr.CorruptError{Path: path, Reason: fmt.Sprintf("zone %d: empty with write pointer %d", z.idx, z.wp)}
	}
	if z.state == StateFull {
		z.wp = g.ZoneCap
	}
	return nil
}

// settleZones brings open zones back closed (or empty) and finalizes
// threaded-logging zones; the journal rewrite that follows records them.
func (d *Device) settleZones() error {
	for _, z := range d.zones {
		if z.state.open() {
			z.state = StateClosed
		}
		if z.tl != nil && z.state != StateOffline {
			if err := d.tlRecover(z); err != nil {
				return err
			}
		}
		if z.tl != nil && z.state == StateClosed {
			if err := d.tlFinalize(z); err != nil {
				return err
			}
		}
		if z.state == StateClosed && z.wp == 0 && z.tl == nil && len(z.ipuPages)+len(z.ipuChunks) == 0 {
			if z.fbg >= 0 {
				d.fcgs[z.fcg].used[z.fbg] = false
				z.fbg = -1
			}
			z.state = StateEmpty
		}
		if z.state.active() {
			d.nActive++
		}
		z.jgen = z.gen // the journal is rewritten and synced below
	}
	return nil
}

// upgradeHeader rewrites an older version's header in the current format
// (the drive's own features: a version 1 drive has the older layout).
func (d *Device) upgradeHeader(f vfs.File, feat ondisk.Features, version uint32) error {
	if _, err := f.WriteAt(encodeHeader(d.cfg, d.uuid, feat), 0); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	d.log.Info("zns: device upgraded", "device", d.path, "from_version", version, "to_version", formatVersion)
	return nil
}

// snapshot returns journal records describing the whole current state.
// The caller excludes every journal writer.
func (d *Device) snapshot() [][]byte {
	var out [][]byte
	for fi, a := range d.fcgs {
		a.mu.Lock()
		for b, e := range a.erases {
			if e > 0 {
				out = append(out, fbgRec{uint32(fi), uint32(b), e}.encode())
			}
		}
		a.mu.Unlock()
	}
	for _, z := range d.zones {
		if z.state != StateEmpty || z.gen != 0 {
			out = append(out, d.zoneRecord(z).encode())
		}
		for _, r := range d.zoneIPURecs(z) {
			out = append(out, r.encode())
		}
	}
	return out
}

// writeJournalFile writes a fresh journal holding recs to path+".tmp",
// fdatasyncs it and returns it open (not yet renamed).
func writeJournalTmp(fs vfs.FS, path string, uuid [16]byte, epoch uint64, recs [][]byte) (vfs.File, int64, error) {
	f, err := fs.OpenFile(path+".tmp", os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
	if err != nil {
		return nil, 0, err
	}
	var buf bytes.Buffer
	buf.Write(journalHeader(uuid, epoch))
	for i, r := range recs {
		buf.Write(frame(epoch, uint64(i+1), r))
	}
	if _, err := f.WriteAt(buf.Bytes(), 0); err != nil {
		f.Close()
		return nil, 0, err
	}
	if err := f.Datasync(); err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, int64(buf.Len()), nil
}

// installJournal renames path+".tmp" over path and syncs the directory.
func installJournal(fs vfs.FS, path string) error {
	if err := fs.Rename(path+".tmp", path); err != nil {
		return err
	}
	return fs.SyncDir(filepath.Dir(path))
}

// writeJournalFile atomically replaces path with a journal holding recs and
// returns it open for appending.
func writeJournalFile(fs vfs.FS, path string, uuid [16]byte, epoch uint64, recs [][]byte) (vfs.File, error) {
	f, _, err := writeJournalTmp(fs, path, uuid, epoch, recs)
	if err != nil {
		return nil, err
	}
	if err := installJournal(fs, path); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// rewriteJournal atomically replaces the journal with a snapshot (the next
// epoch) and reopens it for appending. Open only: no journal writer runs.
func (d *Device) rewriteJournal() error {
	recs := d.snapshot()
	epoch := d.j.epoch + 1
	jf, err := writeJournalFile(d.fs, d.j.path, d.uuid, epoch, recs)
	if err != nil {
		return err
	}
	old := d.j.f
	d.j.f, d.j.epoch, d.j.seq = newSyncFile(jf, &d.st.journalSyncs), epoch, uint64(len(recs))
	if old != nil {
		_ = old.Close()
	}
	d.j.off, err = jf.Size()
	d.j.base = d.j.off
	return err
}

// checkpoint compacts the journal in the background once it outgrows its
// limit. The snapshot is taken with every zone locked (in index order, so no
// record can be appended meanwhile) and the journal offset noted; the locks
// are then dropped and the new file is written and fdatasynced while writers
// go on appending to the old journal. Only the final step holds the journal
// lock: the records appended since the snapshot are copied over, the file is
// synced, renamed over the journal and the directory synced. Any failure
// before the rename leaves the old journal in use (logged, counted in
// checkpointFailures, not in checkpoints); a failure after it (directory
// sync) fails the device read-only, since the rename may not survive a power
// loss.
func (d *Device) checkpoint() {
	if d.closed.Load() || d.failed.Load() != nil || !d.j.ckptRunning.CompareAndSwap(false, true) {
		return
	}
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		err := d.runCheckpoint()
		d.j.ckptRunning.Store(false)
		if err != nil {
			d.st.checkpointFailures.Add(1)
			d.log.Error("zns: journal checkpoint failed; the old journal stays in use", "device", d.path, "err", err)
			return
		}
		// appends made while it ran may have filled the journal again
		d.j.mu.Lock()
		again := d.j.due()
		d.j.mu.Unlock()
		if again {
			d.checkpoint()
		}
	}()
}

func (d *Device) runCheckpoint() error {
	for _, z := range d.zones {
		z.mu.Lock()
	}
	d.j.mu.Lock()
	run := !d.closed.Load() && d.j.due()
	snapOff, oldEpoch, oldSeq := d.j.off, d.j.epoch, d.j.seq
	var recs [][]byte
	if run {
		recs = d.snapshot()
	}
	d.j.mu.Unlock()
	for _, z := range d.zones {
		z.mu.Unlock()
	}
	if !run {
		return nil
	}
	epoch := oldEpoch + 1
	f, size, err := writeJournalTmp(d.fs, d.j.path, d.uuid, epoch, recs)
	if err != nil {
		d.fs.Remove(d.j.path + ".tmp")
		return err
	}
	abort := func(err error) error {
		f.Close()
		d.fs.Remove(d.j.path + ".tmp")
		return err
	}
	d.j.syncs.Lock() // no sync on the file this swaps out
	defer d.j.syncs.Unlock()
	d.j.mu.Lock()
	defer d.j.mu.Unlock()
	if d.closed.Load() {
		return abort(nil)
	}
	// Records appended since the snapshot, renumbered into the new epoch.
	seq := uint64(len(recs))
	if n := d.j.off - snapOff; n > 0 {
		tail := make([]byte, n)
		if _, err := d.j.f.ReadAt(tail, snapOff); err != nil {
			return abort(err)
		}
		var buf bytes.Buffer
		want := oldSeq
		for p := 0; p < len(tail); {
			l := int(binary.LittleEndian.Uint32(tail[p:]))
			want++
			if p+frameHdr+l > len(tail) || binary.LittleEndian.Uint64(tail[p+4:]) != want {
				return abort(fmt.Errorf("journal tail since the snapshot does not parse at %d", snapOff+int64(p)))
			}
			seq++
			buf.Write(frame(epoch, seq, tail[p+frameHdr:p+frameHdr+l]))
			p += frameHdr + l
		}
		if _, err := f.WriteAt(buf.Bytes(), size); err != nil {
			return abort(err)
		}
		size += int64(buf.Len())
		if err := f.Datasync(); err != nil {
			return abort(err)
		}
	}
	if err := d.fs.Rename(d.j.path+".tmp", d.j.path); err != nil {
		return abort(err)
	}
	old := d.j.f
	d.j.f, d.j.off, d.j.epoch, d.j.seq, d.j.base = newSyncFile(f, &d.st.journalSyncs), size, epoch, seq, size
	_ = old.Close()
	if err := d.fs.SyncDir(filepath.Dir(d.j.path)); err != nil {
		d.deviceFail("journal directory sync", err)
		return err
	}
	d.j.durable.Store(d.j.n) // the new file holds every record, synced, and is the journal now
	d.st.checkpoints.Add(1)
	return nil
}

// Close stops the device: waits for compactions, syncs and closes the files.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return &zerr.ClosedError{What: "device " + d.path}
	}
	d.bg.Wait()
	d.flushJobs()
	e1 := d.f.Datasync()
	e2 := d.j.sync()
	e3 := d.f.Close()
	d.j.syncs.Lock()
	e4 := d.j.f.Close()
	d.j.syncs.Unlock()
	return typedOpenErr(d.path, "close", errors.Join(e1, e2, e3, e4))
}

// abandon closes the file descriptors without syncing or waiting, like a
// killed process (tests only).
func (d *Device) abandon() {
	d.closed.Store(true)
	d.bg.Wait()
	d.flushJobs()
	d.f.Close()
	d.j.syncs.Lock()
	d.j.f.Close()
	d.j.syncs.Unlock()
}

// Path is the backing file.
func (d *Device) Path() string { return d.path }

// ioErr turns a file error caused by a concurrent Close into a ClosedError.
func (d *Device) ioErr(err error) error {
	if err != nil && d.closed.Load() {
		var ce *zerr.ClosedError
		if !errors.As(err, &ce) {
			return &zerr.ClosedError{What: "device " + d.path}
		}
	}
	return err
}

func (d *Device) checkOpen() error {
	if d.closed.Load() {
		return &zerr.ClosedError{What: "device " + d.path}
	}
	return nil
}

// Config returns the current configuration.
func (d *Device) Config() flash.Config { return d.conf() }

// SetConfig changes run-time knobs (limits, timings, cache size, IPU budget,
// copyback threshold). Geometry fields must equal the device's.
func (d *Device) SetConfig(cfg flash.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.Resolved()
	for i, f := range geomFields(cfg) {
		if have := geomFields(d.cfg)[i]; have.v != f.v {
			return &zerr.GeometryMismatchError{Field: f.name, Have: fmt.Sprint(have.v), Want: fmt.Sprint(f.v)}
		}
	}
	d.live.Store(&cfg)
	if d.model != nil {
		d.model.SetConfig(cfg)
	}
	return nil
}

// Drained is the modelled time at which every chip finishes the work booked
// so far (0 with the off clock). Long operations still being booked piece by
// piece (compactions, TL-finish plugging) are booked to their end first.
func (d *Device) Drained() time.Duration {
	d.flushJobs() // long operations still being booked: book the rest now
	var t time.Duration
	if d.model != nil {
		for c := 0; c < d.g.Chips; c++ {
			t = max(t, d.model.ChipFree(c))
		}
	}
	return t
}

// Clock is the device's clock.
func (d *Device) Clock() clock.Clock { return d.clk }

// Model is the device's flash timing model (nil with the off clock): its
// chips, channels, host link and write cache in time. Another device over
// the same chips books its operations on it (fdp.WithModel), so that the
// two contend for the chips as namespaces of one drive do; the zoned
// device's own bookings do not change.
func (d *Device) Model() *flash.Model { return d.model }

// Identify describes the device.
func (d *Device) Identify() Identify {
	c := d.conf()
	return Identify{Zones: d.g.Zones, ZoneSize: d.g.ZoneSize, ZoneCapacity: d.g.ZoneCap, BlockSize: d.g.BlockSize,
		TotalLBAs: d.g.TotalLBAs, MaxOpen: c.MaxOpenZones, MaxActive: c.MaxActiveZones, Chips: d.g.Chips,
		Channels: d.g.Channels, DZone: d.g.DZone, PageSize: d.g.PageSize, Media: c.Media, IPUBudget: c.IPUBudgetBlocks,
		UUID: hex.EncodeToString(d.uuid[:])}
}

// CopyCosts returns the current model's copy costs (zero with the off clock).
func (d *Device) CopyCosts() CopyCosts {
	c := CopyCosts{ChunkBlocks: d.g.ChunkBlocks}
	if d.model == nil {
		return c
	}
	cf := d.conf()
	c.FlashReadBlock = cf.ReadLatency + cf.DMALatency/time.Duration(d.g.ChunkBlocks)
	c.HostTransferBlock = time.Duration(float64(d.g.BlockSize) / float64(cf.HostLinkBytesPerSec) * 1e9)
	c.CopybackChunk = d.model.CopybackLatency()
	c.ReadProgramChunk = d.model.ReadProgramLatency()
	c.ReadProgramChipChunk = d.model.ReadProgramChipTime()
	return c
}

// IdentifyMapping returns the chunk-address bit fields (ZNS+ identify_mapping).
func (d *Device) IdentifyMapping() flash.Mapping { return d.g.Mapping() }

// Geometry is the derived geometry.
func (d *Device) Geometry() flash.Geometry { return d.g }

func (d *Device) now() time.Duration {
	if d.model == nil {
		return 0
	}
	return d.clk.Now()
}

type noWaitKey struct{}

// NoWait returns a context under which device calls do not wait on the
// clock for their modelled completion; they return at once with the modelled
// IOResult. Benchmarks use it to submit many requests at the same modelled
// time (queue depth > 1 on the virtual clock) and then advance the clock.
func NoWait(ctx context.Context) context.Context { return context.WithValue(ctx, noWaitKey{}, true) }

func (d *Device) wait(ctx context.Context, t time.Duration) error {
	if d.model == nil || ctx.Value(noWaitKey{}) != nil {
		return nil
	}
	return d.clk.WaitUntil(ctx, t)
}

func (z *zone) origFBG() int {
	if z.tl == nil {
		return -1
	}
	return z.tl.orig
}

func (z *zone) desc(g flash.Geometry) Zone {
	return Zone{Index: z.idx, Start: z.start, Size: g.ZoneSize, Capacity: g.ZoneCap, WP: z.start + z.wp, State: z.state, TL: z.tl != nil}
}

// ReportZones lists up to max zones (0 = all) from startZone whose state
// matches filter (StateAny for all).
func (d *Device) ReportZones(filter ZoneState, startZone uint64, max int) ([]Zone, error) {
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	if startZone >= d.g.Zones {
		return nil, &zerr.OutOfRangeError{LBA: startZone, Count: 1, Limit: d.g.Zones}
	}
	if filter > StateOffline && filter != StateAny {
		return nil, &zerr.InvalidArgumentError{Field: "filter", Reason: fmt.Sprintf("unknown zone state %d", filter)}
	}
	var out []Zone
	for _, z := range d.zones[startZone:] {
		z.mu.RLock()
		dz := z.desc(d.g)
		z.mu.RUnlock()
		if filter == StateAny || dz.State == filter {
			out = append(out, dz)
			if max > 0 && len(out) >= max {
				break
			}
		}
	}
	return out, nil
}

// ---- state machine ----

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// setState moves z to state to, enforcing MAR and MOR. Caller holds z.mu.
func (d *Device) setState(z *zone, to ZoneState) error {
	from := z.state
	if from == to {
		return nil
	}
	c := d.conf()
	dOpen := b2i(to.open()) - b2i(from.open())
	dAct := b2i(to.active()) - b2i(from.active())
	d.resMu.Lock()
	if dAct > 0 && c.MaxActiveZones > 0 && d.nActive+dAct > c.MaxActiveZones {
		d.resMu.Unlock()
		return &zerr.TooManyActiveError{Limit: uint32(c.MaxActiveZones)}
	}
	if dOpen > 0 && c.MaxOpenZones > 0 && d.nOpen+dOpen > c.MaxOpenZones {
		d.resMu.Unlock()
		return &zerr.TooManyOpenError{Limit: uint32(c.MaxOpenZones)}
	}
	d.nOpen += dOpen
	d.nActive += dAct
	d.resMu.Unlock()
	z.state = to
	return nil
}

func (d *Device) zoneRecord(z *zone) zoneRec {
	r := zoneRec{zone: z.idx, state: z.state, wp: z.wp, gen: z.gen, fbg: int32(z.fbg), logFBG: -1}
	if z.tl != nil {
		r.tl, r.tlMode, r.bitmap, r.logFBG = true, z.tl.mode, z.tl.bitmap, int32(z.tl.orig)
	}
	return r
}

func (d *Device) journalZone(z *zone) error { return d.jappendZone(z, d.zoneRecord(z).encode()) }

// takeLogFBG reserves one of chip group fcg's spare FBGs for a TL_open's
// LogFBG (dropLogFBG gives it back when threaded logging ends). A group
// has one FBG per zone plus its spares; a LogFBG beyond the spares would
// take the FBG an empty zone of the group opens on, and that zone's first
// write — which a zoned drive refuses only for the open and active limits —
// would fail for want of flash. So TL_open is refused (NoResources,
// nothing changed) once every spare of the group holds a LogFBG; the host
// then logs to a fresh zone instead.
func (d *Device) takeLogFBG(fcg int) error {
	a := d.fcgs[fcg]
	spares := d.g.FBGsPerFCG - d.g.ZonesPerFCG
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.logs >= spares {
		return &zerr.NoResourcesError{Resource: fmt.Sprintf("spare flash block groups in chip group %d (all %d hold TL_opened zones' LogFBGs)", fcg, spares), Requested: 1}
	}
	a.logs++
	return nil
}

// dropLogFBG returns the reservation of takeLogFBG.
func (d *Device) dropLogFBG(fcg int) {
	a := d.fcgs[fcg]
	a.mu.Lock()
	a.logs--
	a.mu.Unlock()
}

// allocFBG takes the least-erased free FBG of an FCG (wear levelling).
//
// Released FBGs are punched here, not at release (releaseFBGAt): a punch
// frees the FBG's page cache, and the zone about to be written allocates as
// many pages again. Freed just before, they are taken straight back; freed
// at release, seconds or minutes earlier, a VM with free page reporting
// (pkg/bench/hostenv) has handed them to its host by then and every page
// faults there, several to twenty times the cost of the copy into it. So
// the allocation punches the FBG it takes when that holds old data (and
// syncs, scrubFBG), or else — the FBG is clean, e.g. never written — the
// oldest FBG released and not yet punched, of any chip group, whose pages
// the new zone's writes then reuse (punchHeld; no sync: it is clean once a
// later sync covers the punch, as scrubFBG checks when it is taken).
func (d *Device) allocFBG(fcg int) (int, error) {
	a := d.fcgs[fcg]
	a.mu.Lock()
	defer a.mu.Unlock()
	best := a.leastErased()
	for best < 0 && a.punching > 0 {
		a.punched.Wait()
		best = a.leastErased()
	}
	if best < 0 {
		return -1, &zerr.NoResourcesError{Resource: fmt.Sprintf("free flash block groups in chip group %d", fcg), Requested: 1}
	}
	a.used[best] = true
	at := a.cleanAt[best]
	a.cleanAt[best] = dirtyFBG // about to be written
	a.mu.Unlock()
	var err error
	if at != dirtyFBG {
		err = d.punchHeld()
	}
	if err == nil {
		err = d.scrubFBG(fcg, best, at)
	}
	a.mu.Lock()
	if err != nil {
		a.used[best] = false
		return -1, err
	}
	return best, nil
}

const dirtyFBG = ^uint64(0)

// heldFBG is an FBG released without being punched (Device.held).
type heldFBG struct{ fcg, fbg int }

// punchHeld punches the oldest FBG released and not punched since, of
// any chip group (page cache is the machine's, not a chip group's), if
// there is one: allocFBG calls it for a new zone's writes to reuse the
// pages. The FBG is marked used while it is punched, so that no zone takes
// it meanwhile; it is clean once a later sync covers the punch.
func (d *Device) punchHeld() error {
	d.heldMu.Lock()
	y, a := heldFBG{-1, -1}, (*fcgAlloc)(nil)
	for y.fbg < 0 && len(d.held) > 0 {
		h := d.held[0]
		d.held = d.held[1:]
		ha := d.fcgs[h.fcg]
		ha.inHeld[h.fbg] = false
		ha.mu.Lock()
		if !ha.used[h.fbg] && ha.cleanAt[h.fbg] == dirtyFBG {
			y, a = h, ha
			ha.used[h.fbg] = true
			ha.punching++
		}
		ha.mu.Unlock()
	}
	d.heldMu.Unlock()
	if a == nil {
		return nil
	}
	at := dirtyFBG
	err := d.punchFBG(y.fcg, y.fbg)
	if err == nil {
		at = d.f.g.Seq()
	}
	a.mu.Lock()
	a.used[y.fbg] = false
	a.cleanAt[y.fbg] = at
	a.punching--
	a.punched.Broadcast()
	a.mu.Unlock()
	return err
}

// leastErased is the free FBG allocFBG takes (the first of the least
// erased), -1 if none is free. Called with a.mu held.
func (a *fcgAlloc) leastErased() int {
	best := -1
	for b, u := range a.used {
		if !u && (best < 0 || a.erases[b] < a.erases[best]) {
			best = b
		}
	}
	return best
}

// scrubFBG makes sure a newly allocated FBG holds no data of its earlier
// life, durably, before any block of the new zone is written: after a power
// loss the write pointer may be ahead of data that never reached the disk,
// and those blocks must read as zeros, not as old (possibly well-formed)
// blocks. An FBG that may hold old data (released since its last punch, or
// of unknown content after a restart) is punched and synced here; one
// punched earlier (allocFBG) is clean if a sync since covers the punch,
// else one fdatasync here.
func (d *Device) scrubFBG(fcg, b int, cleanAt uint64) error {
	if cleanAt == dirtyFBG {
		if err := d.punchFBG(fcg, b); err != nil {
			return err
		}
	} else if d.f.g.Synced() >= cleanAt {
		return nil
	}
	if err := d.f.Datasync(); err != nil {
		return d.deviceFail("fdatasync data file", err)
	}
	return nil
}

func (d *Device) punchFBG(fcg, b int) error {
	for _, r := range d.lay.fbgRanges(fcg, b) {
		if err := d.f.PunchHole(r[0], r[1]); err != nil {
			return d.deviceFail("punch flash block", err)
		}
	}
	return nil
}

// releaseFBG erases an FBG lazily: the host does not wait and the chips are
// booked for the erase in the background. The file's blocks are hole-punched
// (no sync); see scrubFBG for when that becomes durable.
func (d *Device) releaseFBG(fcg, b int, written bool) error {
	return d.releaseFBGAt(fcg, b, written, -1)
}

// releaseFBGAt is releaseFBG with the erase booked from eraseAt (-1: now;
// -2: not booked, the caller books it with bookErase).
func (d *Device) releaseFBGAt(fcg, b int, written bool, eraseAt time.Duration) error {
	if b < 0 {
		return nil
	}
	a := d.fcgs[fcg]
	// Erase: the old data stays in the file (and its pages in the page
	// cache) until allocFBG punches it, just before a new zone's writes
	// need as many pages.
	a.mu.Lock()
	a.used[b] = false
	var e uint64
	if written {
		a.erases[b]++
		e = a.erases[b]
		a.cleanAt[b] = dirtyFBG
	}
	a.mu.Unlock()
	if !written {
		return nil
	}
	d.heldMu.Lock()
	if !a.inHeld[b] {
		a.inHeld[b] = true
		d.held = append(d.held, heldFBG{fcg, b})
	}
	d.heldMu.Unlock()
	if err := d.jappend(fbgRec{uint32(fcg), uint32(b), e}.encode()); err != nil {
		return err
	}
	if eraseAt == -1 {
		d.bookErase(fcg, d.now())
	}
	for c := 0; c < d.g.DZone; c++ {
		chip := fcg*d.g.DZone + c
		for p := 0; p < d.cfg.PagesPerBlock; p++ {
			d.cbCount[d.pageIndex(chip, b, p)].Store(0)
		}
	}
	d.st.erases.Add(uint64(d.g.DZone))
	return nil
}

// bookErase books the erase of one FBG of fcg on its chips from t.
func (d *Device) bookErase(fcg int, t time.Duration) {
	if d.model == nil {
		return
	}
	for c := 0; c < d.g.DZone; c++ {
		d.model.Erase(t, fcg*d.g.DZone+c)
	}
}

// zeroRange makes blocks [a, b) of an FBG of z read as zeros: partial chunks
// are overwritten with zeros, whole pages are hole-punched per chip.
func (d *Device) zeroRange(z *zone, fbg int, a, b uint64) error {
	if fbg < 0 || a >= b {
		return nil
	}
	cb := uint64(d.g.ChunkBlocks)
	zero := make([]byte, d.g.BlockSize)
	for a < b && a%cb != 0 {
		if _, err := d.f.WriteAt(zero, d.flashLoc(z, fbg, a).off); err != nil {
			return d.zoneFail(z, "zero-fill", err)
		}
		a++
	}
	for b > a && b%cb != 0 {
		b--
		if _, err := d.f.WriteAt(zero, d.flashLoc(z, fbg, b).off); err != nil {
			return d.zoneFail(z, "zero-fill", err)
		}
	}
	if a >= b {
		return nil
	}
	ja, jb := a/cb, b/cb // whole chunks [ja, jb)
	if d.lay.interleaved {
		// the zone's chunks are back to back in the file
		if err := d.f.PunchHole(d.flashLoc(z, fbg, ja*cb).off, int64(jb-ja)*int64(d.g.PageSize)); err != nil {
			return d.zoneFail(z, "punch", err)
		}
		return nil
	}
	D := uint64(d.g.DZone)
	for ch := uint64(0); ch < D; ch++ {
		first := ja + (ch+D-ja%D)%D
		if first >= jb {
			continue
		}
		last := jb - 1 - (jb-1+D-ch)%D
		l := d.g.Locate(z.fcg, first*cb)
		pages := int64(last/D-first/D) + 1
		if err := d.f.PunchHole(d.lay.off(l.Chip, fbg, l.Page, 0), pages*int64(d.g.PageSize)); err != nil {
			return d.zoneFail(z, "punch", err)
		}
	}
	return nil
}

func (d *Device) pageIndex(chip, blk, page int) int {
	return (chip*d.cfg.BlocksPerChip+blk)*d.cfg.PagesPerBlock + page
}

func (d *Device) stateErr(z *zone, op string) error {
	st := z.state.String()
	if z.compacting {
		st += " (zone_compaction destination in progress)"
	}
	return &zerr.ZoneStateError{Zone: z.idx, State: st, Op: op}
}

// openForWrite makes z writable (implicit open). Caller holds z.mu.
func (d *Device) openForWrite(z *zone, explicit bool) error {
	to := StateImplicitOpen
	if explicit || z.state == StateExplicitOpen {
		to = StateExplicitOpen
	}
	switch z.state {
	case StateImplicitOpen, StateExplicitOpen:
		if z.state == to {
			return nil
		}
		z.state = to // implicit -> explicit: counts unchanged
		return d.journalZone(z)
	case StateEmpty, StateClosed:
	default:
		return d.stateErr(z, "open")
	}
	from := z.state
	if err := d.setState(z, to); err != nil {
		return err
	}
	if z.fbg < 0 {
		b, err := d.allocFBG(z.fcg)
		if err != nil {
			z.state = from
			d.undoState(from, to)
			return err
		}
		z.fbg = b
	}
	return d.journalZone(z)
}

func (d *Device) undoState(from, to ZoneState) {
	d.resMu.Lock()
	d.nOpen -= b2i(to.open()) - b2i(from.open())
	d.nActive -= b2i(to.active()) - b2i(from.active())
	d.resMu.Unlock()
}

// ZoneMgmt applies a zone management action to one zone, or with selectAll
// to every zone in a state the action applies to (zone is then ignored).
func (d *Device) ZoneMgmt(ctx context.Context, zoneIdx uint64, action Action, selectAll bool) (IOResult, error) {
	if err := d.checkWritable(); err != nil {
		return IOResult{}, err
	}
	if action > ActionReadOnly {
		return IOResult{}, &zerr.InvalidArgumentError{Field: "action", Reason: fmt.Sprintf("unknown zone action %d", action)}
	}
	t0 := d.now()
	res := IOResult{Submitted: t0, Completed: t0}
	if action == ActionReset && d.model != nil {
		res.Completed = t0 + d.conf().ResetLatency
	}
	if !selectAll {
		if zoneIdx >= d.g.Zones {
			return IOResult{}, &zerr.OutOfRangeError{LBA: zoneIdx, Count: 1, Limit: d.g.Zones}
		}
		z := d.zones[zoneIdx]
		z.mu.Lock()
		err := d.mgmtLocked(z, action)
		z.mu.Unlock()
		if err != nil {
			return IOResult{}, err
		}
		return res, d.wait(ctx, res.Completed)
	}
	if action == ActionReadOnly {
		return IOResult{}, &zerr.InvalidArgumentError{Field: "select_all", Reason: "not allowed with set read-only"}
	}
	var first error
	for _, z := range d.zones {
		z.mu.Lock()
		var applies bool
		switch action {
		case ActionOpen:
			applies = z.state == StateClosed
		case ActionClose:
			applies = z.state.open()
		case ActionFinish:
			applies = z.state.active()
		case ActionReset:
			applies = z.state.active() || z.state == StateFull
		case ActionOffline:
			applies = z.state == StateReadOnly
		}
		if applies {
			if err := d.mgmtLocked(z, action); err != nil && first == nil {
				first = err
			}
		}
		z.mu.Unlock()
	}
	if first != nil {
		return IOResult{}, first
	}
	return res, d.wait(ctx, res.Completed)
}

func (d *Device) mgmtLocked(z *zone, action Action) error {
	if z.compacting && action != ActionOpen {
		return d.stateErr(z, action.String())
	}
	switch action {
	case ActionOpen:
		return d.openForWrite(z, true)
	case ActionClose:
		switch z.state {
		case StateClosed:
			return nil
		case StateImplicitOpen, StateExplicitOpen:
		default:
			return d.stateErr(z, "close")
		}
		if z.tl != nil {
			if err := d.tlFinalize(z); err != nil {
				return err
			}
		}
		to := StateClosed
		if z.wp == 0 && len(z.ipuPages)+len(z.ipuChunks) == 0 {
			to = StateEmpty
		}
		_ = d.setState(z, to) // never needs new resources
		if to == StateEmpty {
			d.releasePend(z)
			if err := d.releaseFBG(z.fcg, z.fbg, false); err != nil {
				return err
			}
			z.fbg = -1
		}
		return d.journalZone(z)
	case ActionFinish:
		switch z.state {
		case StateFull:
			return nil
		case StateEmpty, StateImplicitOpen, StateExplicitOpen, StateClosed:
		default:
			return d.stateErr(z, "finish")
		}
		if z.tl != nil {
			if err := d.tlFinalize(z); err != nil {
				return err
			}
		}
		if err := d.zeroRange(z, z.fbg, z.wp, d.g.ZoneCap); err != nil {
			return err
		}
		_ = d.setState(z, StateFull)
		z.wp = d.g.ZoneCap
		d.releasePend(z)
		return d.journalZone(z)
	case ActionReset:
		switch z.state {
		case StateEmpty:
			return nil
		case StateReadOnly, StateOffline:
			return d.stateErr(z, "reset")
		}
		return d.resetLocked(z, StateEmpty)
	case ActionOffline:
		if z.state == StateOffline {
			return nil
		}
		return d.resetLocked(z, StateOffline)
	case ActionReadOnly:
		if z.state == StateOffline {
			return d.stateErr(z, "set read-only")
		}
		if z.tl != nil {
			if err := d.tlFinalize(z); err != nil {
				return err
			}
		}
		_ = d.setState(z, StateReadOnly)
		d.releasePend(z)
		return d.journalZone(z)
	}
	return nil
}

// resetLocked drops the zone's flash (lazily erased) and IPU blocks.
func (d *Device) resetLocked(z *zone, to ZoneState) error {
	// Every write acknowledged before the reset is made durable first: a
	// power loss that keeps the reset then keeps the data the host moved
	// out of the zone before resetting it (segment cleaning).
	if err := d.f.Datasync(); err != nil {
		return d.deviceFail("fdatasync data file", err)
	}
	// Journal first: a failed append leaves the zone (and its data) as it was.
	if err := d.jappendZone(z, zoneRec{zone: z.idx, state: to, gen: z.gen + 1, fbg: -1, logFBG: -1}.encode()); err != nil {
		return err
	}
	_ = d.setState(z, to)
	oldFBG, oldOrig := z.fbg, z.origFBG()
	z.fbg, z.tl, z.wp = -1, nil, 0
	if to == StateOffline {
		z.wp = 0
	}
	z.gen++
	d.dropIPU(z)
	d.releasePend(z)
	if err := d.releaseFBG(z.fcg, oldFBG, true); err != nil {
		return err
	}
	if oldOrig >= 0 {
		d.dropLogFBG(z.fcg)
	}
	if err := d.releaseFBG(z.fcg, oldOrig, true); err != nil {
		return err
	}
	// The reset is durable when it returns: one journal sync for its record
	// and the erase counts. It is cheap here (the data file was just synced,
	// nothing queues in front of it), and it frees the new generation's first
	// write from a journal sync of its own (see persistWP), which would wait
	// behind whatever write-back runs by then.
	if err := d.j.sync(); err != nil {
		return d.deviceFail("fdatasync journal", err)
	}
	z.jgen = z.gen
	return nil
}

func (d *Device) releasePend(z *zone) {
	if d.wb != nil {
		d.wb.drop(z.idx)
	}
	if z.pend > 0 && d.model != nil {
		d.model.CacheReleaseQueue(d.now(), z.pend, z.idx, z.pendChip)
	}
	z.pend = 0
}

// Log returns the statistics.
func (d *Device) Log() Log {
	c := d.conf()
	now := d.now()
	l := Log{Now: now, HostBlocksWritten: d.st.hostW.Load(), HostBlocksRead: d.st.hostR.Load(),
		NANDPagesProgrammed: d.st.nandProg.Load(), NANDPagesRead: d.st.nandRead.Load(),
		CopybackChunks: d.st.cbChunks.Load(), ReadProgramBlocks: d.st.rpBlocks.Load(),
		PluggedOnDemand: d.st.plugDemand.Load(), PluggedBackground: d.st.plugBG.Load(), PluggedCopyback: d.st.plugCB.Load(), Erases: d.st.erases.Load(),
		JournalCheckpoints: d.st.checkpoints.Load(), JournalCheckpointFailures: d.st.checkpointFailures.Load(),
		JournalTailsDropped: d.st.tailDropped.Load(), DataSyncs: d.st.dataSyncs.Load(), JournalSyncs: d.st.journalSyncs.Load(), WritebackKicks: d.st.kicks.Load(), IOErrors: d.st.ioErrors.Load(), ZonesFailed: d.st.zonesFailed.Load(),
		ReadOnly:      d.failed.Load() != nil,
		CacheCapacity: c.WriteCacheBytes, ZonesPerState: map[string]int{}, IPUBudget: uint64(c.IPUBudgetBlocks)}
	if l.HostBlocksWritten > 0 {
		l.WAF = float64(l.NANDPagesProgrammed*uint64(d.g.ChunkBlocks)) / float64(l.HostBlocksWritten)
	}
	if d.model != nil {
		l.CacheBytes = d.model.CacheUsed(now)
		l.CacheHighWater = d.model.CacheHighWater()
		l.CacheStalls = d.model.CacheStalls.Load()
		l.CacheStallTime = time.Duration(d.model.CacheStallTime.Load())
		for ch := 0; ch < d.g.Chips; ch++ {
			b := d.model.ChipBusy(ch)
			l.ChipBusy = append(l.ChipBusy, b)
			u := 0.0
			if now > 0 {
				u = float64(b) / float64(now)
			}
			l.ChipUtilization = append(l.ChipUtilization, u)
		}
	}
	for _, z := range d.zones {
		z.mu.RLock()
		l.ZonesPerState[z.state.String()]++
		l.IPUPageEntries += uint64(len(z.ipuPages))
		l.IPUChunkEntries += uint64(len(z.ipuChunks))
		z.mu.RUnlock()
	}
	d.resMu.Lock()
	l.OpenZones, l.ActiveZones = d.nOpen, d.nActive
	d.resMu.Unlock()
	l.IPUUsed = d.ipu.usedCount()
	if d.l2p != nil {
		l.L2PLookups, l.L2PMisses = d.l2p.counts()
	}
	if d.wb != nil {
		l.SLCBufferedBlocks, l.WriteBufferSwitches = d.wb.counts()
	}
	first := true
	for _, a := range d.fcgs {
		a.mu.Lock()
		for _, e := range a.erases {
			if first || e < l.EraseCountMin {
				l.EraseCountMin = e
			}
			if e > l.EraseCountMax {
				l.EraseCountMax = e
			}
			first = false
		}
		a.mu.Unlock()
	}
	return l
}
