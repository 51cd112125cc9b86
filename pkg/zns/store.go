package zns

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/ondisk"
	"github.com/zonefleet/zonefleet/pkg/vfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

const (
	formatVersion = 2 // v2: feature bits in both headers, sequenced journal frames
	headerSize    = 4096
	slotSize      = 32
	jHeaderSize   = 64
	dataMagic     = "ZFZNSDEV"
	journalMagic  = "ZFZNSJNL"
	geomOff       = 28 // offset of the geometry words (geomFields) in the device header
	featOff       = 68 // offset of the feature sets in the device header (v2)
	jFeatOff      = 28 // offset of the feature sets in the journal header (v2)
	jEpochOff     = 52 // offset of the journal epoch (v2)
	frameHdr      = 16 // v2 frame: len u32 | seq u64 | crc u32
	frameHdrV1    = 8  // v1 frame: len u32 | crc u32
	maxRecord     = 1 << 24
)

// Device feature bits.
const (
	// featFBGInterleaved (incompat): the flash region is laid out by flash
	// block group, its chips' pages interleaved (see layout.off), so that
	// a zone striped over several dies is contiguous in the file. Without
	// it (drives made before it; identical for one-die zones) each chip's
	// blocks are contiguous and a striped zone's chunks lie a block apart.
	featFBGInterleaved uint64 = 1 << 0
)

// knownFeatures are the feature bits this build understands; newFeatures
// those of a device it creates (a test makes a drive of the older layout by
// clearing them). The journal's header carries none of the device's.
var (
	knownFeatures   = ondisk.Features{Incompat: featFBGInterleaved}
	newFeatures     = ondisk.Features{Incompat: featFBGInterleaved}
	journalFeatures = ondisk.Features{}
)

func crc(b []byte) uint32 { return crc32.Checksum(b, ondisk.Castagnoli) }

// layout of the backing file: header | WP slot table | IPU region | flash.
type layout struct {
	slotBase  int64
	ipuBase   int64
	flashBase int64
	size      int64
	cfg       flash.Config
	g         flash.Geometry
	// interleaved: featFBGInterleaved (see off)
	interleaved bool
}

func newLayout(cfg flash.Config) layout {
	g := cfg.Geometry()
	l := layout{cfg: cfg, g: g, slotBase: headerSize}
	slots := int64(g.Zones) * 2 * slotSize
	l.ipuBase = l.slotBase + (slots+4095)/4096*4096
	l.flashBase = l.ipuBase + int64(cfg.IPURegionBlocks)*int64(cfg.BlockSize)
	l.size = l.flashBase + int64(g.Chips)*int64(cfg.BlocksPerChip)*int64(cfg.PagesPerBlock)*int64(cfg.PageSize)
	return l
}

// off is the file offset of block sub of page on chip's flash block blk.
//
// Interleaved (featFBGInterleaved), the flash region is a sequence of flash
// block groups — block blk of every chip of one FCG — each holding its
// chips' pages interleaved: page p of the group's chip c at (p*DZone+c)
// pages from the group's start. A zone's chunk j lies on chip j mod DZone,
// page j / DZone (flash.Geometry.Locate), so the zone is contiguous in the
// file and a write or read of it is one pwrite or pread, whatever the
// stripe. Otherwise (older drives) chip-major: each chip's blocks in turn,
// a striped zone's chunks a block apart. With one die per zone both are the
// same.
func (l layout) off(chip, blk, page, sub int) int64 {
	ps, bs := int64(l.cfg.PageSize), int64(l.cfg.BlockSize)
	ppb, bpc := int64(l.cfg.PagesPerBlock), int64(l.cfg.BlocksPerChip)
	if l.interleaved {
		dz := int64(l.g.DZone)
		fcg, c := int64(chip)/dz, int64(chip)%dz
		return l.flashBase + (((fcg*bpc+int64(blk))*ppb+int64(page))*dz+c)*ps + int64(sub)*bs
	}
	return l.flashBase + ((int64(chip)*bpc+int64(blk))*ppb+int64(page))*ps + int64(sub)*bs
}

// fbgRanges are the file ranges (offset, length) of flash block group blk
// of fcg: one when interleaved, one per chip otherwise.
func (l layout) fbgRanges(fcg, blk int) [][2]int64 {
	dz := l.g.DZone
	if l.interleaved || dz == 1 {
		return [][2]int64{{l.off(fcg*dz, blk, 0, 0), int64(dz) * l.blockBytes()}}
	}
	out := make([][2]int64, dz)
	for c := range dz {
		out[c] = [2]int64{l.off(fcg*dz+c, blk, 0, 0), l.blockBytes()}
	}
	return out
}

func (l layout) blockBytes() int64 { return int64(l.cfg.PagesPerBlock) * int64(l.cfg.PageSize) }

// geometry fields persisted in the header, in order.
func geomFields(c flash.Config) []struct {
	name string
	v    uint32
} {
	return []struct {
		name string
		v    uint32
	}{
		{"channels", uint32(c.Channels)}, {"ways", uint32(c.Ways)}, {"pages_per_block", uint32(c.PagesPerBlock)},
		{"page_size", uint32(c.PageSize)}, {"block_size", uint32(c.BlockSize)}, {"blocks_per_chip", uint32(c.BlocksPerChip)},
		{"spare_blocks_per_chip", uint32(c.SpareBlocksPerChip)}, {"d_zone", uint32(c.DZone)},
		{"zone_capacity", uint32(c.Geometry().ZoneCap)}, {"ipu_region_blocks", uint32(c.IPURegionBlocks)},
	}
}

// encodeHeader builds the device header: magic | version | UUID | geometry
// (10 x u32) | features (3 x u64, v2) | ... | CRC32C.
func encodeHeader(c flash.Config, uuid [16]byte, feat ondisk.Features) []byte {
	b := make([]byte, headerSize)
	copy(b, dataMagic)
	binary.LittleEndian.PutUint32(b[8:], formatVersion)
	copy(b[12:28], uuid[:])
	p := geomOff
	for _, f := range geomFields(c) {
		binary.LittleEndian.PutUint32(b[p:], f.v)
		p += 4
	}
	feat.Encode(b[featOff:])
	binary.LittleEndian.PutUint32(b[headerSize-4:], crc(b[:headerSize-4]))
	return b
}

// checkHeader validates a device header and returns its UUID, format
// version and feature bits. Version 1 (no feature bits) is read; Open
// upgrades it.
func checkHeader(path string, b []byte, c flash.Config) (uuid [16]byte, version uint32, feat ondisk.Features, err error) {
	if err := checkSealed(path, b); err != nil {
		return uuid, 0, feat, err
	}
	v := binary.LittleEndian.Uint32(b[8:])
	if v != 1 && v != formatVersion {
		return uuid, 0, feat, &zerr.CorruptError{Path: path, Reason: fmt.Sprintf("format version %d, this build reads 1..%d", v, formatVersion)}
	}
	if v >= 2 {
		// The drive is always opened for writing: unknown ro_compat bits refuse too.
		if _, err := ondisk.Check(path, ondisk.Decode(b[featOff:]), knownFeatures); err != nil {
			return uuid, 0, ondisk.Features{}, err
		}
		feat = ondisk.Decode(b[featOff:])
	}
	copy(uuid[:], b[12:28])
	p := geomOff
	for _, f := range geomFields(c) {
		have := binary.LittleEndian.Uint32(b[p:])
		if have != f.v {
			return uuid, 0, feat, &zerr.GeometryMismatchError{Field: f.name, Have: strconv.Itoa(int(have)), Want: strconv.Itoa(int(f.v))}
		}
		p += 4
	}
	return uuid, v, feat, nil
}

// checkSealed checks a device header's magic and checksum.
func checkSealed(path string, b []byte) error {
	if len(b) < headerSize || string(b[:8]) != dataMagic {
		return &zerr.CorruptError{Path: path, Reason: "not a ZoneFleet device file (bad magic)"}
	}
	if crc(b[:headerSize-4]) != binary.LittleEndian.Uint32(b[headerSize-4:]) {
		return &zerr.CorruptError{Path: path, Reason: "header checksum mismatch"}
	}
	return nil
}

// ReadGeometry reads the geometry a device file was created with and returns
// base with its geometry fields (channels, ways, pages per block, page and
// block size, blocks and spare blocks per chip, D_zone, zone capacity, IPU
// region) replaced by the file's; base's run-time knobs (media, limits,
// cache, budgets) stay. It checks the magic and the header checksum only:
// Open checks the rest. A missing file is a zerr.NotFoundError, a foreign or
// damaged one a zerr.CorruptError.
func ReadGeometry(path string, base flash.Config) (flash.Config, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return base, &zerr.NotFoundError{Kind: "device file", Name: path}
		}
		return base, err
	}
	defer f.Close()
	b := make([]byte, headerSize)
	if _, err := io.ReadFull(f, b); err != nil {
		return base, &zerr.CorruptError{Path: path, Reason: "cannot read header: " + err.Error()}
	}
	if err := checkSealed(path, b); err != nil {
		return base, err
	}
	c := base
	dst := []*int{&c.Channels, &c.Ways, &c.PagesPerBlock, &c.PageSize, &c.BlockSize, &c.BlocksPerChip,
		&c.SpareBlocksPerChip, &c.DZone, &c.ZoneCapacity, &c.IPURegionBlocks}
	// in geomFields' order (TestReadGeometry keeps the two in step)
	for i, p := range dst {
		*p = int(binary.LittleEndian.Uint32(b[geomOff+4*i:]))
	}
	if err := c.Validate(); err != nil {
		return base, &zerr.CorruptError{Path: path, Reason: "header geometry: " + err.Error()}
	}
	// Devices store resolved values (a zone capacity, never 0 for "zone
	// size"): what does not read back as written is not a device's header.
	for i, f := range geomFields(c.Resolved()) {
		if have := binary.LittleEndian.Uint32(b[geomOff+4*i:]); have != f.v {
			return base, &zerr.CorruptError{Path: path, Reason: fmt.Sprintf("header geometry: %s %d is not a resolved value (%d)", f.name, have, f.v)}
		}
	}
	return c, nil
}

// ---- write pointer slots ----

type slot struct {
	gen, wp, seq uint64
}

func encodeSlot(s slot) []byte {
	b := make([]byte, slotSize)
	binary.LittleEndian.PutUint64(b[0:], s.gen)
	binary.LittleEndian.PutUint64(b[8:], s.wp)
	binary.LittleEndian.PutUint64(b[16:], s.seq)
	binary.LittleEndian.PutUint32(b[24:], crc(b[:24]))
	return b
}

// decodeSlot returns the slot, whether it was ever written, and whether it is valid.
func decodeSlot(b []byte) (slot, bool, bool) {
	if bytes.Equal(b, make([]byte, slotSize)) {
		return slot{}, false, true
	}
	if crc(b[:24]) != binary.LittleEndian.Uint32(b[24:]) {
		return slot{}, true, false
	}
	return slot{binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])}, true, true
}

// ---- journal ----

type recType uint8

const (
	recZone recType = 1
	recFBG  recType = 2
	recIPU  recType = 3
)

// zoneRec is the persisted state of a zone (last record wins).
type zoneRec struct {
	zone   uint64
	state  ZoneState
	wp     uint64
	gen    uint64
	fbg    int32
	logFBG int32
	tlMode TLMode
	tl     bool
	bitmap []byte
}

type fbgRec struct {
	fcg, fbg uint32
	erases   uint64
}

type ipuRec struct {
	zone, gen, off uint64
	slot           uint32
}

func (r zoneRec) encode() []byte {
	b := make([]byte, 0, 64+len(r.bitmap))
	b = append(b, byte(recZone))
	b = binary.LittleEndian.AppendUint64(b, r.zone)
	b = append(b, byte(r.state))
	b = binary.LittleEndian.AppendUint64(b, r.wp)
	b = binary.LittleEndian.AppendUint64(b, r.gen)
	b = binary.LittleEndian.AppendUint32(b, uint32(r.fbg))
	b = binary.LittleEndian.AppendUint32(b, uint32(r.logFBG))
	tl := byte(0)
	if r.tl {
		tl = 1
	}
	b = append(b, byte(r.tlMode), tl)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.bitmap)))
	return append(b, r.bitmap...)
}

func (r fbgRec) encode() []byte {
	b := []byte{byte(recFBG)}
	b = binary.LittleEndian.AppendUint32(b, r.fcg)
	b = binary.LittleEndian.AppendUint32(b, r.fbg)
	return binary.LittleEndian.AppendUint64(b, r.erases)
}

func (r ipuRec) encode() []byte {
	b := []byte{byte(recIPU)}
	b = binary.LittleEndian.AppendUint64(b, r.zone)
	b = binary.LittleEndian.AppendUint64(b, r.gen)
	b = binary.LittleEndian.AppendUint64(b, r.off)
	return binary.LittleEndian.AppendUint32(b, r.slot)
}

var errShort = errors.New("short record")

func decodeRec(p []byte) (any, error) {
	if len(p) < 1 {
		return nil, errShort
	}
	switch recType(p[0]) {
	case recZone:
		if len(p) < 1+8+1+8+8+4+4+2+4 {
			return nil, errShort
		}
		r := zoneRec{}
		q := p[1:]
		r.zone = binary.LittleEndian.Uint64(q)
		r.state = ZoneState(q[8])
		r.wp = binary.LittleEndian.Uint64(q[9:])
		r.gen = binary.LittleEndian.Uint64(q[17:])
		r.fbg = int32(binary.LittleEndian.Uint32(q[25:]))
		r.logFBG = int32(binary.LittleEndian.Uint32(q[29:]))
		r.tlMode = TLMode(q[33])
		r.tl = q[34] == 1
		n := binary.LittleEndian.Uint32(q[35:])
		if uint64(len(q)-39) != uint64(n) {
			return nil, errShort
		}
		r.bitmap = append([]byte(nil), q[39:]...)
		return r, nil
	case recFBG:
		if len(p) != 17 {
			return nil, errShort
		}
		return fbgRec{binary.LittleEndian.Uint32(p[1:]), binary.LittleEndian.Uint32(p[5:]), binary.LittleEndian.Uint64(p[9:])}, nil
	case recIPU:
		if len(p) != 29 {
			return nil, errShort
		}
		return ipuRec{binary.LittleEndian.Uint64(p[1:]), binary.LittleEndian.Uint64(p[9:]), binary.LittleEndian.Uint64(p[17:]), binary.LittleEndian.Uint32(p[25:])}, nil
	}
	return nil, fmt.Errorf("unknown record type %d", p[0])
}

// journal is an append-only file of checksummed, sequenced records.
//
// v2 frame: len u32 | seq u64 | crc u32 | payload, where crc is CRC32C over
// epoch, len, seq and payload. Each journal file has an epoch (in its
// header; a checkpoint's new file has the next one) and its records are
// numbered 1, 2, ... A reader stops at the first frame that is short, has a
// bad checksum or the wrong sequence number: a zero-filled tail (len 0, seq
// 0), a torn frame or stale garbage (even a frame of an earlier journal file,
// whose epoch differs) is the end of the log, never a valid record.
//
// Concurrency: mu orders appends; sync does not hold it across the
// fdatasync (appends go on meanwhile and concurrent syncs share rounds, see
// syncFile). syncs is held shared by every sync and exclusively by whatever
// replaces or closes f (the checkpoint's swap, Close), so an fdatasync never
// runs on a closed file. Lock order: syncs, then mu.
type journal struct {
	syncs       sync.RWMutex
	mu          sync.Mutex
	f           vfs.File
	path        string
	off         int64
	epoch       uint64
	seq         uint64 // of the last record written
	limit       int64  // checkpoint once the journal is larger (and twice base)
	base        int64  // size right after the last rewrite
	checkpoint  func() // starts a background checkpoint
	ckptRunning atomic.Bool
	// n counts the records appended since Open (under mu; monotonic across
	// checkpoints, unlike seq); durable is the n a completed sync or a
	// checkpoint's synced new file covers.
	n       uint64
	durable atomic.Uint64
}

// journalLimit is the journal size that triggers a background checkpoint.
const journalLimit = 8 << 20

func journalHeader(uuid [16]byte, epoch uint64) []byte {
	b := make([]byte, jHeaderSize)
	copy(b, journalMagic)
	binary.LittleEndian.PutUint32(b[8:], formatVersion)
	copy(b[12:28], uuid[:])
	journalFeatures.Encode(b[jFeatOff:])
	binary.LittleEndian.PutUint64(b[jEpochOff:], epoch)
	binary.LittleEndian.PutUint32(b[jHeaderSize-4:], crc(b[:jHeaderSize-4]))
	return b
}

func frameCRC(epoch uint64, hdr, payload []byte) uint32 {
	var e [8]byte
	binary.LittleEndian.PutUint64(e[:], epoch)
	c := crc32.Update(0, ondisk.Castagnoli, e[:])
	c = crc32.Update(c, ondisk.Castagnoli, hdr[:12])
	return crc32.Update(c, ondisk.Castagnoli, payload)
}

func frame(epoch, seq uint64, payload []byte) []byte {
	b := make([]byte, frameHdr, frameHdr+len(payload))
	binary.LittleEndian.PutUint32(b[0:], uint32(len(payload)))
	binary.LittleEndian.PutUint64(b[4:], seq)
	binary.LittleEndian.PutUint32(b[12:], frameCRC(epoch, b, payload))
	return append(b, payload...)
}

// append writes one record (no fsync) and returns its number (see n).
func (j *journal) append(payload []byte) (uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	fr := frame(j.epoch, j.seq+1, payload)
	if _, err := j.f.WriteAt(fr, j.off); err != nil {
		return 0, err
	}
	j.seq++
	j.n++
	j.off += int64(len(fr))
	if j.due() && j.checkpoint != nil {
		j.checkpoint()
	}
	return j.n, nil
}

// due reports whether a checkpoint should run. Caller holds j.mu.
func (j *journal) due() bool { return j.off > j.limit && j.off > 2*j.base }

// sync makes every record appended before the call durable.
func (j *journal) sync() error {
	j.syncs.RLock()
	defer j.syncs.RUnlock()
	j.mu.Lock()
	f, n := j.f, j.n
	j.mu.Unlock()
	if err := f.Datasync(); err != nil {
		return err
	}
	for {
		d := j.durable.Load()
		if d >= n || j.durable.CompareAndSwap(d, n) {
			return nil
		}
	}
}

// pending reports whether a record appended before the call is not yet
// covered by a completed sync.
func (j *journal) pending() bool {
	j.mu.Lock()
	n := j.n
	j.mu.Unlock()
	return !j.covers(n)
}

// covers reports whether record n (from append) is durable.
func (j *journal) covers(n uint64) bool { return j.durable.Load() >= n }

// jcontent is a parsed journal file.
type jcontent struct {
	recs    [][]byte // raw payloads, in order
	end     int64    // offset after the last valid record
	epoch   uint64
	seq     uint64 // of the last valid record
	version uint32
	dropped int64 // bytes after end (a torn, zeroed or garbage tail)
}

// parseJournal checks a journal file's header and returns its valid
// records: the log ends at the first short, mis-sequenced or mis-checksummed
// frame (see journal).
func parseJournal(path string, b []byte, uuid [16]byte) (jcontent, error) {
	var jc jcontent
	if len(b) < jHeaderSize || string(b[:8]) != journalMagic {
		return jc, &zerr.CorruptError{Path: path, Reason: "not a ZoneFleet journal (bad magic)"}
	}
	if crc(b[:jHeaderSize-4]) != binary.LittleEndian.Uint32(b[jHeaderSize-4:]) {
		return jc, &zerr.CorruptError{Path: path, Reason: "journal header checksum mismatch"}
	}
	jc.version = binary.LittleEndian.Uint32(b[8:])
	if jc.version != 1 && jc.version != formatVersion {
		return jc, &zerr.CorruptError{Path: path, Reason: fmt.Sprintf("journal format version %d, this build reads 1..%d", jc.version, formatVersion)}
	}
	if !bytes.Equal(b[12:28], uuid[:]) {
		return jc, &zerr.CorruptError{Path: path, Reason: "journal belongs to device " + hex.EncodeToString(b[12:28]) + ", not " + hex.EncodeToString(uuid[:])}
	}
	if jc.version >= 2 {
		if _, err := ondisk.Check(path, ondisk.Decode(b[jFeatOff:]), knownFeatures); err != nil {
			return jc, err
		}
		jc.epoch = binary.LittleEndian.Uint64(b[jEpochOff:])
	}
	p := int64(jHeaderSize)
	for p < int64(len(b)) {
		rest := b[p:]
		if jc.version == 1 {
			if len(rest) < frameHdrV1 {
				break
			}
			l := int64(binary.LittleEndian.Uint32(rest))
			// a v1 zero tail has len 0 and crc 0 (= CRC32C of nothing): stop
			if l == 0 || frameHdrV1+l > int64(len(rest)) || crc(rest[frameHdrV1:frameHdrV1+l]) != binary.LittleEndian.Uint32(rest[4:]) {
				break
			}
			jc.recs = append(jc.recs, rest[frameHdrV1:frameHdrV1+l])
			p += frameHdrV1 + l
			jc.seq++
			continue
		}
		if len(rest) < frameHdr {
			break
		}
		l := int64(binary.LittleEndian.Uint32(rest))
		if l == 0 || l > maxRecord || frameHdr+l > int64(len(rest)) {
			break
		}
		if binary.LittleEndian.Uint64(rest[4:]) != jc.seq+1 {
			break
		}
		payload := rest[frameHdr : frameHdr+l]
		if frameCRC(jc.epoch, rest, payload) != binary.LittleEndian.Uint32(rest[12:]) {
			break
		}
		jc.recs = append(jc.recs, payload)
		jc.seq++
		p += frameHdr + l
	}
	jc.end = p
	jc.dropped = int64(len(b)) - p
	return jc, nil
}

// decodeAll decodes the payloads of a parsed journal. A payload that passed
// its checksum but does not decode is corruption.
func decodeAll(path string, jc jcontent) ([]any, error) {
	out := make([]any, 0, len(jc.recs))
	for i, p := range jc.recs {
		r, err := decodeRec(p)
		if err != nil {
			return nil, &zerr.CorruptError{Path: path, Reason: fmt.Sprintf("record %d: %v", i+1, err)}
		}
		out = append(out, r)
	}
	return out, nil
}

func newUUID() [16]byte {
	var u [16]byte
	_, _ = rand.Read(u[:])
	return u
}
