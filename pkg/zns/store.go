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

	"golang.org/x/sys/unix"

	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

const (
	formatVersion = 1
	headerSize    = 4096
	slotSize      = 32
	jHeaderSize   = 64
	dataMagic     = "ZFZNSDEV"
	journalMagic  = "ZFZNSJNL"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// layout of the backing file: header | WP slot table | IPU region | flash.
type layout struct {
	slotBase  int64
	ipuBase   int64
	flashBase int64
	size      int64
	cfg       flash.Config
	g         flash.Geometry
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
func (l layout) off(chip, blk, page, sub int) int64 {
	return l.flashBase + ((int64(chip)*int64(l.cfg.BlocksPerChip)+int64(blk))*int64(l.cfg.PagesPerBlock)+int64(page))*int64(l.cfg.PageSize) + int64(sub)*int64(l.cfg.BlockSize)
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

func encodeHeader(c flash.Config, uuid [16]byte) []byte {
	b := make([]byte, headerSize)
	copy(b, dataMagic)
	binary.LittleEndian.PutUint32(b[8:], formatVersion)
	copy(b[12:28], uuid[:])
	p := 28
	for _, f := range geomFields(c) {
		binary.LittleEndian.PutUint32(b[p:], f.v)
		p += 4
	}
	binary.LittleEndian.PutUint32(b[headerSize-4:], crc(b[:headerSize-4]))
	return b
}

func checkHeader(path string, b []byte, c flash.Config) ([16]byte, error) {
	var uuid [16]byte
	if len(b) < headerSize || string(b[:8]) != dataMagic {
		return uuid, &zerr.CorruptError{Path: path, Reason: "not a ZoneFleet device file (bad magic)"}
	}
	if crc(b[:headerSize-4]) != binary.LittleEndian.Uint32(b[headerSize-4:]) {
		return uuid, &zerr.CorruptError{Path: path, Reason: "header checksum mismatch"}
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != formatVersion {
		return uuid, &zerr.CorruptError{Path: path, Reason: fmt.Sprintf("format version %d, this build reads %d", v, formatVersion)}
	}
	copy(uuid[:], b[12:28])
	p := 28
	for _, f := range geomFields(c) {
		have := binary.LittleEndian.Uint32(b[p:])
		if have != f.v {
			return uuid, &zerr.GeometryMismatchError{Field: f.name, Have: strconv.Itoa(int(have)), Want: strconv.Itoa(int(f.v))}
		}
		p += 4
	}
	return uuid, nil
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

// journal is an append-only file of checksummed records.
type journal struct {
	mu          sync.Mutex
	f           *os.File
	path        string
	off         int64
	limit       int64  // checkpoint once the journal is larger
	checkpoint  func() // starts a background checkpoint
	ckptRunning atomic.Bool
}

// journalLimit is the journal size that triggers a background checkpoint.
const journalLimit = 8 << 20

func journalHeader(uuid [16]byte) []byte {
	b := make([]byte, jHeaderSize)
	copy(b, journalMagic)
	binary.LittleEndian.PutUint32(b[8:], formatVersion)
	copy(b[12:28], uuid[:])
	binary.LittleEndian.PutUint32(b[jHeaderSize-4:], crc(b[:jHeaderSize-4]))
	return b
}

func frame(payload []byte) []byte {
	b := make([]byte, 8, 8+len(payload))
	binary.LittleEndian.PutUint32(b[0:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[4:], crc(payload))
	return append(b, payload...)
}

// append writes one record (no fsync).
func (j *journal) append(payload []byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	fr := frame(payload)
	if _, err := j.f.WriteAt(fr, j.off); err != nil {
		return err
	}
	j.off += int64(len(fr))
	if j.off > j.limit && j.checkpoint != nil {
		j.checkpoint()
	}
	return nil
}

func (j *journal) sync() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return unix.Fdatasync(int(j.f.Fd()))
}

// readJournal returns the records of a journal file; a torn trailing record is
// dropped (and its offset returned as the end), a bad record followed by more
// data is corruption.
func readJournal(path string, uuid [16]byte) ([]any, int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	if len(b) < jHeaderSize || string(b[:8]) != journalMagic {
		return nil, 0, &zerr.CorruptError{Path: path, Reason: "not a ZoneFleet journal (bad magic)"}
	}
	if crc(b[:jHeaderSize-4]) != binary.LittleEndian.Uint32(b[jHeaderSize-4:]) {
		return nil, 0, &zerr.CorruptError{Path: path, Reason: "journal header checksum mismatch"}
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != formatVersion {
		return nil, 0, &zerr.CorruptError{Path: path, Reason: fmt.Sprintf("journal format version %d, this build reads %d", v, formatVersion)}
	}
	if !bytes.Equal(b[12:28], uuid[:]) {
		return nil, 0, &zerr.CorruptError{Path: path, Reason: "journal belongs to device " + hex.EncodeToString(b[12:28]) + ", not " + hex.EncodeToString(uuid[:])}
	}
	var recs []any
	p := int64(jHeaderSize)
	n := 0
	for p < int64(len(b)) {
		rest := b[p:]
		if len(rest) < 8 {
			break // torn frame header at the tail
		}
		l := int64(binary.LittleEndian.Uint32(rest))
		if 8+l > int64(len(rest)) {
			break // torn payload at the tail
		}
		payload := rest[8 : 8+l]
		tail := 8+l == int64(len(rest))
		if crc(payload) != binary.LittleEndian.Uint32(rest[4:]) {
			if tail {
				break
			}
			return nil, 0, &zerr.CorruptError{Path: path, Reason: fmt.Sprintf("checksum mismatch in record %d at offset %d", n, p)}
		}
		r, err := decodeRec(payload)
		if err != nil {
			return nil, 0, &zerr.CorruptError{Path: path, Reason: fmt.Sprintf("record %d at offset %d: %v", n, p, err)}
		}
		recs = append(recs, r)
		p += 8 + l
		n++
	}
	return recs, p, nil
}

// writeJournalFile atomically replaces path with a fresh journal holding recs.
func writeJournalFile(path string, uuid [16]byte, recs [][]byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.Write(journalHeader(uuid))
	for _, r := range recs {
		buf.Write(frame(r))
	}
	if _, err := io.Copy(f, &buf); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(path)
}

func syncDir(path string) error {
	dir := "."
	if i := bytes.LastIndexByte([]byte(path), '/'); i >= 0 {
		dir = path[:i]
		if dir == "" {
			dir = "/"
		}
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func newUUID() [16]byte {
	var u [16]byte
	_, _ = rand.Read(u[:])
	return u
}

// punch deallocates [off, off+n) so it reads back as zeros (erase).
func punch(f *os.File, off, n int64) error {
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if err == nil {
		return nil
	}
	z := make([]byte, 64<<10)
	for n > 0 {
		c := int64(len(z))
		if c > n {
			c = n
		}
		if _, err := f.WriteAt(z[:c], off); err != nil {
			return err
		}
		off += c
		n -= c
	}
	return nil
}
