package fdp

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/vfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Option configures Create and Open.
type Option func(*options)

type options struct {
	fs    vfs.FS
	log   *slog.Logger
	model *flash.Model
}

// WithModel books the device's flash operations on m, a timing model
// shared with another device over the same chips (a zoned drive's: one
// drive serving zoned and FDP namespaces), instead of a model of its own:
// host writes, reads, garbage-collection copies and erases then queue
// behind the other device's operations on each chip and channel, on the
// host link and in the write cache, and the reverse. m's timings apply
// (SetConfig on m changes both devices'); m must have the device's chip
// count, channels and chunk size, and both devices the same clock. The
// flash blocks stay the device's own (its backing file): the chips'
// time is shared, their blocks are partitioned. Ignored with the off
// clock.
func WithModel(m *flash.Model) Option { return func(o *options) { o.model = m } }

// WithFS sets the file system of the backing files (the operating
// system's by default).
func WithFS(fs vfs.FS) Option { return func(o *options) { o.fs = fs } }

// WithLogger sets the logger of recovery notes and I/O errors.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// Flags modify a write.
type Flags struct {
	FUA bool // force unit access: durable when the write returns
}

// IOResult is a command's modelled submission and completion time.
type IOResult struct {
	Submitted time.Duration
	Completed time.Duration
}

// Latency is the modelled latency.
func (r IOResult) Latency() time.Duration { return r.Completed - r.Submitted }

type noWaitKey struct{}

// NoWait makes calls with ctx return without waiting on the clock for
// their modelled completion (the IOResult still carries it).
func NoWait(ctx context.Context) context.Context { return context.WithValue(ctx, noWaitKey{}, true) }

// ru is a reclaim unit: one flash block on each of up to RUChips chips of
// a group, written chunk by chunk across its chips.
type ru struct {
	id       uint64
	group    int
	handle   int // placement handle; gcShared for the shared GC unit
	gc       bool
	blocks   []int // global block numbers (chip*blocksPerChip + index)
	written  int   // slots handed out
	valid    int
	inflight int // host writes with slots here not yet published
	open     bool
	stamp    uint64 // host writes done when it was last written (cost-benefit age)
}

func (r *ru) cap(g geometry) int { return len(r.blocks) * g.slotsPerBlock }

// handleState is one placement handle of one group.
type handleState struct {
	cur *ru
	// usage
	hostBytes, gcInBytes uint64
	rusUsed              uint64
}

// Device is an FDP SSD: a page-mapped FTL over the flash timing model.
// All methods are safe for concurrent use.
type Device struct {
	path  string
	cfg   Config
	g     geometry
	l     layout
	clk   clock.Clock
	model *flash.Model
	o     options
	uuid  [16]byte

	data, jnl vfs.File

	ops sync.WaitGroup // commands past the closed check

	mu      sync.Mutex
	closed  bool
	ruChips int
	victim  VictimPolicy
	l2p     []int32  // LBA -> slot, -1 unmapped
	seq     []uint64 // LBA -> sequence number of its current content (or trim)
	copies  []uint32 // LBA -> GC moves of its current content
	p2l     []int32  // slot -> LBA, -1 invalid
	blkRU   []*ru    // block -> its reclaim unit, nil when free
	erases  []uint32 // block -> erase count
	pins    []int32  // block -> readers between lookup and file read
	pending []bool   // block erased while pinned: freed by the last unpin
	free    [][]int  // chip -> free blocks
	nfree   []int    // group -> free blocks
	rus     map[uint64]*ru
	handles [][]handleState // group -> handle
	gcRU    [][]*ru         // group -> (handle index for persistently isolated, len(Handles) for the shared one)
	nextSeq uint64
	nextRU  uint64
	rotor   int
	jOff    int64
	hostW   uint64 // host writes, the cost-benefit clock
	mapped  uint64 // LBAs with a slot
	st      Stats
	events  []Event
	evSeq   uint64
	failed  error      // a failed file operation made the device read-only
	gcBusy  []bool     // group -> a collector is moving a victim's data (with d.mu released)
	gcDone  *sync.Cond // on d.mu: a collector finished

	collecting atomic.Int32 // collections in progress; read without d.mu (tests observe it from file operations)
}

// Create makes a new, empty device at path (the file must not exist).
func Create(path string, cfg Config, clk clock.Clock, opts ...Option) (*Device, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := getOptions(opts)
	if o.model != nil && clk.Kind() != clock.KindOff {
		if err := checkSharedModel(o.model, cfg); err != nil {
			return nil, err
		}
	}
	var uuid [16]byte
	_, _ = rand.Read(uuid[:])
	f, err := o.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, &zerr.AlreadyExistsError{Kind: "device file", Name: path}
		}
		return nil, ioErr("create", err)
	}
	g := cfg.geometry()
	l := newLayout(g)
	if err := f.Truncate(l.size); err != nil {
		f.Close()
		return nil, ioErr("create", err)
	}
	if _, err := f.WriteAt(encodeHeader(cfg, uuid, knownFeatures), 0); err != nil {
		f.Close()
		return nil, ioErr("create", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, ioErr("create", err)
	}
	f.Close()
	if err := vfs.WriteFileAtomic(o.fs, path+".journal", encodeJournalHeader(uuid)); err != nil {
		return nil, ioErr("create", err)
	}
	return Open(path, cfg, clk, opts...)
}

// Open opens an existing device and recovers its mapping from the flash
// (the out-of-band records) and the journal. cfg must have the geometry
// the device was created with; its run-time knobs (timings, RUChips,
// Victim, link) apply.
func Open(path string, cfg Config, clk clock.Clock, opts ...Option) (*Device, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := getOptions(opts)
	g := cfg.geometry()
	d := &Device{path: path, cfg: cfg, g: g, l: newLayout(g), clk: clk, o: o, ruChips: cfg.RUChips, victim: cfg.Victim}
	if clk.Kind() != clock.KindOff {
		d.model = o.model
		if d.model == nil {
			d.model = flash.NewModel(cfg.Flash)
		} else if err := checkSharedModel(d.model, cfg); err != nil {
			return nil, err
		}
	}
	f, err := o.fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, &zerr.NotFoundError{Kind: "device file", Name: path}
		}
		return nil, ioErr("open", err)
	}
	d.data = f
	hdr := make([]byte, headerSize)
	if _, err := f.ReadAt(hdr, 0); err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, ioErr("open", err)
	}
	if d.uuid, err = checkHeader(path, hdr, cfg); err != nil {
		f.Close()
		return nil, err
	}
	if err := d.recover(); err != nil {
		f.Close()
		return nil, err
	}
	return d, nil
}

func getOptions(opts []Option) options {
	o := options{fs: vfs.Default, log: slog.Default()}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// checkSharedModel refuses a shared timing model whose chips, channels or
// chunk size differ from cfg's.
func checkSharedModel(m *flash.Model, cfg Config) error {
	mg, g := m.Geometry(), cfg.Flash.Geometry()
	if mg.Chips != g.Chips || mg.Channels != g.Channels || mg.ChunkBlocks != g.ChunkBlocks || mg.BlockSize != g.BlockSize {
		return &zerr.InvalidArgumentError{Field: "model", Reason: fmt.Sprintf(
			"shared timing model has %d chips on %d channels, %d-LBA chunks of %d bytes; the device %d chips on %d channels, %d-LBA chunks of %d bytes",
			mg.Chips, mg.Channels, mg.ChunkBlocks, mg.BlockSize, g.Chips, g.Channels, g.ChunkBlocks, g.BlockSize)}
	}
	return nil
}

func ioErr(op string, err error) error {
	return &zerr.UnavailableError{What: "fdp device", Reason: op + ": " + err.Error()}
}

// Capacity is the number of LBAs.
func (d *Device) Capacity() uint64 { return d.g.lbas }

// BlockSize is the LBA size in bytes.
func (d *Device) BlockSize() int { return d.g.bs }

// Config is the device's configuration with the current run-time knobs.
func (d *Device) Config() Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.cfg
	c.Handles = append([]HandleType(nil), c.Handles...)
	c.RUChips, c.Victim = d.ruChips, d.victim
	return c
}

func (d *Device) chipOf(block int) int { return block / d.g.blocksPerChip }
func (d *Device) groupOfChip(chip int) int {
	return chip / d.g.chipsPerGroup
}

// slotAt is the slot of position j of r: chunk j/chunk on r's chip
// (j/chunk) mod width, page (j/chunk) div width.
func (d *Device) slotAt(r *ru, j int) int {
	c := j / d.g.chunk
	w := len(r.blocks)
	blk := r.blocks[c%w]
	return (blk*d.g.pagesPerBlock+c/w)*d.g.chunk + j%d.g.chunk
}

func (d *Device) blockOf(slot int) int { return slot / d.g.slotsPerBlock }
func (d *Device) pageOf(slot int) int  { return slot / d.g.chunk }

func (d *Device) width() int {
	if d.ruChips == 0 {
		return d.g.chipsPerGroup
	}
	return d.ruChips
}

func (d *Device) checkPID(p PlacementID) error {
	if int(p.Group) >= d.g.groups {
		return &zerr.InvalidArgumentError{Field: "placement_id", Reason: fmt.Sprintf("reclaim group %d does not exist (%d groups)", p.Group, d.g.groups)}
	}
	if int(p.Handle) >= len(d.cfg.Handles) {
		return &zerr.InvalidArgumentError{Field: "placement_id", Reason: fmt.Sprintf("placement handle %d does not exist (%d handles)", p.Handle, len(d.cfg.Handles))}
	}
	return nil
}

func (d *Device) checkRange(lba, n uint64) error {
	if n == 0 {
		return &zerr.InvalidArgumentError{Field: "count", Reason: "must be > 0"}
	}
	if lba >= d.g.lbas || n > d.g.lbas-lba {
		return &zerr.OutOfRangeError{LBA: lba, Count: n, Limit: d.g.lbas}
	}
	return nil
}

// enterLocked admits a command: refused once the device is closed, and a
// command that writes once it failed.
func (d *Device) enterLocked(write bool) error {
	if d.closed {
		return &zerr.ClosedError{What: "fdp device " + d.path}
	}
	if write && d.failed != nil {
		return &zerr.UnavailableError{What: "fdp device " + d.path, Reason: "read-only after an I/O error: " + d.failed.Error()}
	}
	d.ops.Add(1)
	return nil
}

func (d *Device) now() time.Duration {
	if d.model == nil {
		return 0
	}
	return d.clk.Now()
}

func (d *Device) wait(ctx context.Context, t time.Duration) error {
	if d.model == nil || ctx.Value(noWaitKey{}) != nil {
		return nil
	}
	return d.clk.WaitUntil(ctx, t)
}

// ---- allocation ----

// allocRU opens a new reclaim unit in group for handle (gcShared for the
// shared GC unit): one least-erased free block on each of up to width
// chips of the group, the chips with the most free blocks first.
func (d *Device) allocRU(group, handle int, gc bool) (*ru, error) {
	w := d.width()
	cpg := d.g.chipsPerGroup
	chips := make([]int, 0, cpg)
	for i := range cpg {
		c := group*cpg + (i+d.rotor)%cpg
		if len(d.free[c]) > 0 {
			chips = append(chips, c)
		}
	}
	d.rotor++
	if len(chips) == 0 {
		return nil, &zerr.NoResourcesError{Resource: "free flash blocks in reclaim group " + fmt.Sprint(group), Requested: uint64(w)}
	}
	sort.SliceStable(chips, func(a, b int) bool { return len(d.free[chips[a]]) > len(d.free[chips[b]]) })
	if len(chips) > w {
		chips = chips[:w]
	}
	sort.Ints(chips)
	r := &ru{id: d.nextRU, group: group, handle: handle, gc: gc, open: true, stamp: d.hostW}
	d.nextRU++
	for _, c := range chips {
		fl := d.free[c]
		best := 0
		for i, b := range fl {
			if d.erases[b] < d.erases[fl[best]] || (d.erases[b] == d.erases[fl[best]] && b < fl[best]) {
				best = i
			}
		}
		b := fl[best]
		fl[best] = fl[len(fl)-1]
		d.free[c] = fl[:len(fl)-1]
		d.nfree[group]--
		d.blkRU[b] = r
		r.blocks = append(r.blocks, b)
	}
	d.rus[r.id] = r
	return r, nil
}

// closeRU retires r from its handle; an unfilled unit is an event.
func (d *Device) closeRU(r *ru) {
	if r == nil || !r.open {
		return
	}
	r.open = false
	if r.written < r.cap(d.g) {
		d.event(EventRUNotFullyWritten, r, uint64(r.cap(d.g)-r.written))
	}
}

// hostSlot hands out the next slot of handle h of group for a host write,
// opening a reclaim unit (and collecting garbage first when the group's
// free blocks run low) when the handle has none or its unit is full.
func (d *Device) hostSlot(ctx context.Context, at time.Duration, group, h int) (int, *ru, time.Duration, error) {
	hs := &d.handles[group][h]
	for hs.cur == nil || hs.cur.written == hs.cur.cap(d.g) {
		if hs.cur != nil {
			hs.cur.open = false
		}
		hs.cur = nil
		end, err := d.reclaim(at, group)
		if err != nil {
			return 0, nil, 0, err
		}
		at = max(at, end)
		if hs.cur != nil { // another writer of the handle opened a unit while d.mu was released
			continue
		}
		r, err := d.allocRU(group, h, false)
		if err != nil {
			return 0, nil, 0, err
		}
		hs.cur = r
		hs.rusUsed++
	}
	r := hs.cur
	s := d.slotAt(r, r.written)
	r.written++
	return s, r, at, nil
}

// gcSlot hands out the next slot of group's GC unit for data of handle h
// (gcShared when it goes to the shared unit).
func (d *Device) gcSlot(group, h int) (int, *ru, error) {
	i := len(d.cfg.Handles)
	if h != gcShared {
		i = h
	}
	r := d.gcRU[group][i]
	if r == nil || r.written == r.cap(d.g) {
		if r != nil {
			r.open = false
		}
		var err error
		if r, err = d.allocRU(group, h, true); err != nil {
			return 0, nil, err
		}
		d.gcRU[group][i] = r
	}
	s := d.slotAt(r, r.written)
	r.written++
	return s, r, nil
}

// ---- garbage collection ----

// reclaim collects garbage in group until it has a reserve of free
// blocks for the next reclaim unit; returns when the chips are done. One
// collector runs per group; a writer that needs space while another
// collects waits for it. d.mu is held on entry and return but released
// while a victim's data moves (collect).
func (d *Device) reclaim(at time.Duration, group int) (time.Duration, error) {
	end := at
	for d.nfree[group] < (gcReserveRUs+1)*d.width() {
		if d.failed != nil {
			return end, &zerr.UnavailableError{What: "fdp device " + d.path, Reason: "read-only after an I/O error: " + d.failed.Error()}
		}
		if d.gcBusy[group] {
			d.gcDone.Wait()
			continue
		}
		need := (gcReserveRUs + 1) * d.width()
		v := d.pickVictim(group)
		if v == nil {
			if d.nfree[group] > 0 {
				return end, nil
			}
			return end, &zerr.NoResourcesError{Resource: fmt.Sprintf("reclaimable flash in reclaim group %d", group), Requested: uint64(need), Available: uint64(d.nfree[group])}
		}
		d.gcBusy[group] = true
		d.collecting.Add(1)
		e, err := d.collect(at, v)
		d.collecting.Add(-1)
		d.gcBusy[group] = false
		d.gcDone.Broadcast()
		if err != nil {
			return end, err
		}
		end = max(end, e)
	}
	return end, nil
}

// pickVictim is the closed reclaim unit of group the victim policy ranks
// first (ties: lowest id), or nil.
func (d *Device) pickVictim(group int) *ru {
	var best *ru
	var bestScore float64
	ids := make([]uint64, 0, len(d.rus))
	for id, r := range d.rus {
		if r.group == group && !r.open && r.inflight == 0 {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	for _, id := range ids {
		r := d.rus[id]
		c := r.cap(d.g)
		if r.valid >= c {
			continue
		}
		var score float64
		switch d.victim {
		case CostBenefit:
			u := float64(r.valid) / float64(c)
			age := float64(d.hostW-r.stamp) + 1
			if u == 0 {
				score = 1e300
			} else {
				score = age * (1 - u) / (2 * u)
			}
		default:
			score = float64(c - r.valid)
		}
		if best == nil || score > bestScore {
			best, bestScore = r, score
		}
	}
	return best
}

// gcMove is one LBA a collection moves: from slot src of the victim to
// slot dst of a GC unit, as of the victim's snapshot.
type gcMove struct {
	src, dst int
	lba      int32
	seq      uint64
	copies   uint32
	to       *ru
}

// collect moves v's valid data to GC units (the handle's own when it is
// persistently isolated, the group's shared one otherwise), makes the
// copies durable, then erases v's blocks. It is called with d.mu held and
// returns with it held, but does its file I/O with d.mu released, in
// three steps:
//
//  1. under d.mu: snapshot v's valid LBAs (LBA, sequence number, GC
//     moves), take a GC slot for each (its unit counts the copy in
//     flight, so it is never a victim meanwhile) and book the moves on the
//     flash model;
//  2. without d.mu: read each LBA's data from v and write it, with its
//     out-of-band record (the host write's sequence number, one more GC
//     move), to its GC slot; hosts read and write meanwhile (v is closed
//     and only this collector erases it, so its data stays readable);
//  3. under d.mu: publish each copy whose LBA still maps to the slot it
//     came from. A copy of an LBA written or trimmed since step 1 is left
//     unmapped: the newer write or trim has the higher sequence number,
//     so it also wins at recovery. Then, with d.mu released again, the
//     erase barrier (data file and journal made durable), and under d.mu
//     the erase.
func (d *Device) collect(at time.Duration, v *ru) (time.Duration, error) {
	dst := gcShared
	if v.handle != gcShared && d.cfg.Handles[v.handle] == PersistentlyIsolated {
		dst = v.handle
	}
	end := at
	lastRead := -1
	cfg := d.cfg.Flash.Resolved()
	var moves []gcMove
	for _, b := range v.blocks {
		for s := b * d.g.slotsPerBlock; s < (b+1)*d.g.slotsPerBlock; s++ {
			lba := d.p2l[s]
			if lba < 0 {
				continue
			}
			ns, nr, err := d.gcSlot(v.group, dst)
			if err != nil {
				d.abandon(moves)
				return end, err
			}
			nr.inflight++
			moves = append(moves, gcMove{src: s, dst: ns, lba: lba, seq: d.seq[lba], copies: d.copies[lba] + 1, to: nr})
			if d.model != nil {
				sc, dc := d.chipOf(d.blockOf(s)), d.chipOf(d.blockOf(ns))
				lastPage := (ns+1)%d.g.chunk == 0
				if sc == dc && !cfg.DisableCopyback {
					if lastPage {
						end = max(end, d.model.Copyback(at, dc))
						d.st.Copybacks++
					}
				} else {
					if p := d.pageOf(s); p != lastRead {
						lastRead = p
						end = max(end, d.model.Read(at, sc, d.g.chunk))
					}
					if lastPage {
						end = max(end, d.model.Program(at, dc))
					}
				}
			}
		}
	}

	d.mu.Unlock()
	err := d.copyOut(moves, dst)
	d.mu.Lock()
	if err != nil {
		d.abandon(moves)
		return end, d.fail("gc", err)
	}
	moved := uint64(0)
	for _, m := range moves {
		m.to.inflight--
		d.st.MediaBytesWritten += uint64(d.g.bs)
		d.st.GCCopies++
		if v.handle != gcShared {
			d.handles[v.group][v.handle].gcInBytes += uint64(d.g.bs)
		}
		if d.l2p[m.lba] != int32(m.src) {
			continue // written or trimmed since the snapshot: the copy is stale
		}
		d.p2l[m.src] = -1
		v.valid--
		d.p2l[m.dst] = m.lba
		d.l2p[m.lba] = int32(m.dst)
		d.copies[m.lba] = m.copies
		m.to.valid++
		moved++
	}

	// Erase barrier: the copies and every trim record reach the disk
	// before the blocks that held the old data may be reused.
	d.mu.Unlock()
	err = d.data.Datasync()
	if err == nil {
		err = d.jnl.Datasync()
	}
	d.mu.Lock()
	if err != nil {
		return end, d.fail("gc sync", err)
	}
	if moved > 0 {
		d.event(EventMediaReallocated, v, moved)
	}
	delete(d.rus, v.id)
	for _, b := range v.blocks {
		c := d.chipOf(b)
		if d.model != nil {
			end = max(end, d.model.Erase(at, c))
		}
		d.erases[b]++
		d.blkRU[b] = nil
		d.st.MediaBytesErased += uint64(d.g.slotsPerBlock * d.g.bs)
		if d.pins[b] > 0 {
			d.pending[b] = true
			continue
		}
		d.free[c] = append(d.free[c], b)
		d.nfree[v.group]++
	}
	d.st.RUsReclaimed++
	return end, nil
}

// copyOut writes the moves' data and out-of-band records to their GC
// slots; d.mu is not held.
func (d *Device) copyOut(moves []gcMove, dst int) error {
	buf := make([]byte, d.g.bs)
	ob := make([]byte, oobSize)
	for _, m := range moves {
		if _, err := d.data.ReadAt(buf, d.l.dataOff(m.src)); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read: %w", err)
		}
		o := oob{dcrc: crc(buf), lba: uint64(m.lba), seq: m.seq, ru: m.to.id, group: uint16(m.to.group), handle: uint16(dst), gc: true, copies: m.copies}
		o.encode(ob)
		if _, err := d.data.WriteAt(buf, d.l.dataOff(m.dst)); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		if _, err := d.data.WriteAt(ob, d.l.oobOff(m.dst)); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	return nil
}

// abandon gives up the moves' GC slots (they stay unwritten, invalid).
func (d *Device) abandon(moves []gcMove) {
	for _, m := range moves {
		m.to.inflight--
	}
}

// fail makes the device read-only after a failed file operation.
func (d *Device) fail(op string, err error) error {
	if d.failed == nil {
		d.failed = fmt.Errorf("%s: %w", op, err)
		d.o.log.Error("fdp device failed; read-only from now on", "path", d.path, "op", op, "err", err)
	}
	return ioErr(op, err)
}

// ---- commands ----

// Write writes data (whole blocks) at lba through placement identifier
// pid. It is acknowledged once the data and its out-of-band record are in
// the backing file (a killed process loses nothing acknowledged); with
// FUA, or after a later Flush, it survives a power loss.
func (d *Device) Write(ctx context.Context, lba uint64, data []byte, pid PlacementID, f Flags) (IOResult, error) {
	if len(data) == 0 || len(data)%d.g.bs != 0 {
		return IOResult{}, &zerr.InvalidArgumentError{Field: "data", Reason: fmt.Sprintf("length %d is not a positive multiple of the block size %d", len(data), d.g.bs)}
	}
	n := uint64(len(data) / d.g.bs)
	if err := d.checkRange(lba, n); err != nil {
		return IOResult{}, err
	}
	if err := d.checkPID(pid); err != nil {
		return IOResult{}, err
	}
	group, h := int(pid.Group), int(pid.Handle)
	at := d.now()
	res := IOResult{Submitted: at}

	d.mu.Lock()
	if err := d.enterLocked(true); err != nil {
		d.mu.Unlock()
		return res, err
	}
	defer d.ops.Done()
	slots := make([]int, n)
	seqs := make([]uint64, n)
	units := make([]*ru, n)
	start := at
	if d.model != nil {
		start = d.model.Link(at, len(data))
	}
	ready := start
	var err error
	for i := range n {
		var r *ru
		var t time.Duration
		slots[i], r, t, err = d.hostSlot(ctx, start, group, h)
		if err != nil {
			break
		}
		ready = max(ready, t)
		r.inflight++
		r.stamp = d.hostW
		units[i] = r
		seqs[i] = d.nextSeq
		d.nextSeq++
	}
	if err != nil {
		// Slots already handed out stay unwritten (invalid).
		for _, r := range units {
			if r != nil {
				r.inflight--
			}
		}
		d.mu.Unlock()
		return res, err
	}
	d.hostW += n
	d.mu.Unlock()

	// The data and the out-of-band records go to the file with no lock
	// held: the slots are ours, and their units cannot be collected while
	// inflight counts them.
	ob := make([]byte, oobSize)
	var werr error
	for i := range n {
		blk := data[int(i)*d.g.bs : int(i+1)*d.g.bs]
		r := units[i]
		o := oob{dcrc: crc(blk), lba: lba + i, seq: seqs[i], ru: r.id, group: uint16(r.group), handle: uint16(h)}
		o.encode(ob)
		if _, werr = d.data.WriteAt(blk, d.l.dataOff(slots[i])); werr != nil {
			break
		}
		if _, werr = d.data.WriteAt(ob, d.l.oobOff(slots[i])); werr != nil {
			break
		}
	}

	d.mu.Lock()
	for i := range n {
		units[i].inflight--
	}
	if werr != nil {
		err := d.fail("write", werr)
		d.mu.Unlock()
		return res, err
	}
	for i := range n {
		l := lba + i
		if d.seq[l] > seqs[i] {
			continue // a later write or trim of the LBA was published first
		}
		if old := d.l2p[l]; old >= 0 {
			d.p2l[old] = -1
			d.blkRU[d.blockOf(int(old))].valid--
		} else {
			d.mapped++
		}
		d.l2p[l] = int32(slots[i])
		d.seq[l] = seqs[i]
		d.copies[l] = 0
		d.p2l[slots[i]] = int32(l)
		units[i].valid++
	}
	b := uint64(len(data))
	d.st.HostBytesWritten += b
	d.st.MediaBytesWritten += b
	d.handles[group][h].hostBytes += b
	done := ready
	if d.model != nil {
		done = d.model.CacheAdmit(ready, int64(len(data)))
		var last time.Duration
		for i, s := range slots {
			if (s+1)%d.g.chunk == 0 || i == len(slots)-1 && f.FUA {
				last = max(last, d.model.Program(ready, d.chipOf(d.blockOf(s))))
			}
		}
		if last > 0 {
			d.model.CacheRelease(last, int64(len(data)))
		} else {
			d.model.CacheRelease(ready, int64(len(data)))
		}
		if f.FUA {
			done = max(done, last)
		}
	}
	d.mu.Unlock()
	if f.FUA {
		if err := d.sync(); err != nil {
			return res, err
		}
	}
	res.Completed = done
	return res, d.wait(ctx, done)
}

// Read reads n blocks at lba; unmapped blocks read as zeros.
func (d *Device) Read(ctx context.Context, lba, n uint64) ([]byte, IOResult, error) {
	if err := d.checkRange(lba, n); err != nil {
		return nil, IOResult{}, err
	}
	if n > 1<<20 {
		return nil, IOResult{}, &zerr.InvalidArgumentError{Field: "count", Reason: "a read is at most 2^20 blocks"}
	}
	at := d.now()
	res := IOResult{Submitted: at}
	d.mu.Lock()
	if err := d.enterLocked(false); err != nil {
		d.mu.Unlock()
		return nil, res, err
	}
	defer d.ops.Done()
	slots := make([]int32, n)
	for i := range n {
		s := d.l2p[lba+i]
		slots[i] = s
		if s >= 0 {
			d.pins[d.blockOf(int(s))]++
		}
	}
	done := at
	if d.model != nil {
		lastPage := -1
		for _, s := range slots {
			if s >= 0 && d.pageOf(int(s)) != lastPage {
				lastPage = d.pageOf(int(s))
				done = max(done, d.model.Read(at, d.chipOf(d.blockOf(int(s))), d.g.chunk))
			}
		}
		done = d.model.Link(done, int(n)*d.g.bs)
	}
	d.mu.Unlock()
	out := make([]byte, int(n)*d.g.bs)
	var rerr error
	for i, s := range slots {
		if s < 0 {
			continue
		}
		if _, err := d.data.ReadAt(out[i*d.g.bs:(i+1)*d.g.bs], d.l.dataOff(int(s))); err != nil && !errors.Is(err, io.EOF) && rerr == nil {
			rerr = ioErr("read", err)
		}
	}
	d.mu.Lock()
	for _, s := range slots {
		if s >= 0 {
			d.unpinLocked(d.blockOf(int(s)))
		}
	}
	d.mu.Unlock()
	if rerr != nil {
		return nil, res, rerr
	}
	res.Completed = done
	return out, res, d.wait(ctx, done)
}

func (d *Device) unpinLocked(b int) {
	d.pins[b]--
	if d.pins[b] == 0 && d.pending[b] {
		d.pending[b] = false
		c := d.chipOf(b)
		d.free[c] = append(d.free[c], b)
		d.nfree[d.groupOfChip(c)]++
	}
}

// Trim (deallocate) unmaps n blocks at lba: they read as zeros. It is
// durable after the next Flush (or FUA write).
func (d *Device) Trim(ctx context.Context, lba, n uint64) error {
	if err := d.checkRange(lba, n); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enterLocked(true); err != nil {
		return err
	}
	defer d.ops.Done()
	s := d.nextSeq
	d.nextSeq++
	b := make([]byte, recSize)
	record{typ: recTrim, a: lba, b: n, c: s}.encode(b)
	if _, err := d.jnl.WriteAt(b, d.jOff); err != nil {
		return d.fail("trim", err)
	}
	d.jOff += recSize
	for l := lba; l < lba+n; l++ {
		if old := d.l2p[l]; old >= 0 {
			d.p2l[old] = -1
			d.blkRU[d.blockOf(int(old))].valid--
			d.l2p[l] = -1
			d.mapped--
		}
		d.seq[l] = s
		d.copies[l] = 0
	}
	d.st.TrimmedBytes += n * uint64(d.g.bs)
	return nil
}

// Flush makes every acknowledged write and trim durable.
func (d *Device) Flush(ctx context.Context) error {
	d.mu.Lock()
	if err := d.enterLocked(true); err != nil {
		d.mu.Unlock()
		return err
	}
	defer d.ops.Done()
	d.mu.Unlock()
	return d.sync()
}

func (d *Device) sync() error {
	if err := d.data.Datasync(); err != nil {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.fail("flush", err)
	}
	d.mu.Lock()
	b := make([]byte, recSize)
	record{typ: recStats, a: d.st.HostBytesWritten, b: d.st.MediaBytesWritten, c: d.st.MediaBytesErased}.encode(b)
	if _, err := d.jnl.WriteAt(b, d.jOff); err != nil {
		defer d.mu.Unlock()
		return d.fail("flush", err)
	}
	d.jOff += recSize
	d.mu.Unlock()
	if err := d.jnl.Datasync(); err != nil {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.fail("flush", err)
	}
	return nil
}

// UpdateHandles points each given placement handle at a fresh reclaim
// unit (NVMe I/O Management Send, Reclaim Unit Handle Update). A unit
// left unfilled is reported as an event.
func (d *Device) UpdateHandles(ctx context.Context, pids []PlacementID) error {
	for _, p := range pids {
		if err := d.checkPID(p); err != nil {
			return err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enterLocked(true); err != nil {
		return err
	}
	defer d.ops.Done()
	for _, p := range pids {
		hs := &d.handles[p.Group][p.Handle]
		if hs.cur != nil {
			d.closeRU(hs.cur)
			hs.cur = nil
		}
	}
	return nil
}

// SetVictimPolicy changes the garbage collection victim policy.
func (d *Device) SetVictimPolicy(p VictimPolicy) error {
	if p != Greedy && p != CostBenefit {
		return bad("victim", "unknown victim policy %d", uint8(p))
	}
	d.mu.Lock()
	d.victim = p
	d.mu.Unlock()
	return nil
}

// SetRUChips changes the reclaim unit size (in chips, one block each;
// 0 = the whole group) for units opened from now on.
func (d *Device) SetRUChips(n int) error {
	if n < 0 || n > d.g.chipsPerGroup {
		return bad("ru_chips", "must be in [0, chips per group %d], got %d", d.g.chipsPerGroup, n)
	}
	if err := d.cfg.checkSpace(n); err != nil {
		return err
	}
	d.mu.Lock()
	d.ruChips = n
	d.mu.Unlock()
	return nil
}

// Close waits for running commands, makes everything durable and writes
// a compacted journal.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	d.ops.Wait()
	var err error
	if d.failed == nil {
		if err = d.data.Datasync(); err == nil {
			err = d.compactJournal()
		}
	}
	if d.jnl != nil {
		d.jnl.Close()
	}
	if cerr := d.data.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return ioErr("close", err)
	}
	return nil
}
