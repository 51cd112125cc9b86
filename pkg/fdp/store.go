package fdp

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"

	"github.com/zonefleet/zonefleet/pkg/ondisk"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// On-disk format. The data file is header | OOB table | flash; the journal
// (path + ".journal") is a header followed by fixed-size records.
const (
	formatVersion = 1
	headerSize    = 4096
	dataMagic     = "ZFFDPDEV"
	journalMagic  = "ZFFDPJNL"
	oobSize       = 64         // per physical LBA (slot); divides a 512-byte sector
	recSize       = 32         // journal record
	oobMagic      = 0x4f504446 // "FDPO"
	featOff       = 100
	typesOff      = 128 // handle types, one byte each (MaxHandles)
)

// Journal record types.
const (
	recTrim  = 1 // a = first LBA, b = count, c = sequence number
	recStats = 2 // a = host bytes, b = media bytes written, c = media bytes erased
)

// Feature bits. None are defined yet: the sets are there so that a later
// format can add some without a flag day (pkg/ondisk).
var knownFeatures = ondisk.Features{}

func crc(b []byte) uint32 { return crc32.Checksum(b, ondisk.Castagnoli) }

// layout of the data file.
type layout struct {
	oobBase, flashBase, size int64
	bs                       int64
}

func newLayout(g geometry) layout {
	l := layout{oobBase: headerSize, bs: int64(g.bs)}
	l.flashBase = l.oobBase + (int64(g.slots)*oobSize+4095)/4096*4096
	l.size = l.flashBase + int64(g.slots)*int64(g.bs)
	return l
}

func (l layout) dataOff(slot int) int64 { return l.flashBase + int64(slot)*l.bs }
func (l layout) oobOff(slot int) int64  { return l.oobBase + int64(slot)*oobSize }

// oob is the out-of-band record written beside every programmed LBA, as a
// real drive keeps the logical address in the page's spare area: it lets
// Open rebuild the mapping from the flash itself.
type oob struct {
	dcrc   uint32 // CRC-32C of the block's data
	lba    uint64
	seq    uint64 // sequence number of the host write the data came from
	ru     uint64 // reclaim unit
	group  uint16
	handle uint16 // placement handle; gcShared for the initially isolated GC unit
	gc     bool   // written by garbage collection
	copies uint32 // times garbage collection moved this data (ties of seq)
}

const gcShared = 0xffff

func (o oob) encode(b []byte) {
	clear(b[:oobSize])
	binary.LittleEndian.PutUint32(b[0:], oobMagic)
	binary.LittleEndian.PutUint32(b[4:], o.dcrc)
	binary.LittleEndian.PutUint64(b[8:], o.lba)
	binary.LittleEndian.PutUint64(b[16:], o.seq)
	binary.LittleEndian.PutUint64(b[24:], o.ru)
	binary.LittleEndian.PutUint16(b[32:], o.group)
	binary.LittleEndian.PutUint16(b[34:], o.handle)
	if o.gc {
		b[36] = 1
	}
	binary.LittleEndian.PutUint32(b[40:], o.copies)
	binary.LittleEndian.PutUint32(b[60:], crc(b[:60]))
}

// decodeOOB: ok is false for anything but an intact record (zeros, a torn
// sector, garbage).
func decodeOOB(b []byte) (o oob, ok bool) {
	if len(b) < oobSize || binary.LittleEndian.Uint32(b) != oobMagic || binary.LittleEndian.Uint32(b[60:]) != crc(b[:60]) || b[36] > 1 {
		return oob{}, false
	}
	return oob{dcrc: binary.LittleEndian.Uint32(b[4:]), lba: binary.LittleEndian.Uint64(b[8:]), seq: binary.LittleEndian.Uint64(b[16:]),
		ru: binary.LittleEndian.Uint64(b[24:]), group: binary.LittleEndian.Uint16(b[32:]), handle: binary.LittleEndian.Uint16(b[34:]),
		gc: b[36] == 1, copies: binary.LittleEndian.Uint32(b[40:])}, true
}

type record struct {
	typ     uint8
	a, b, c uint64
}

func (r record) encode(b []byte) {
	clear(b[:recSize])
	b[0] = r.typ
	binary.LittleEndian.PutUint64(b[4:], r.a)
	binary.LittleEndian.PutUint64(b[12:], r.b)
	binary.LittleEndian.PutUint64(b[20:], r.c)
	binary.LittleEndian.PutUint32(b[28:], crc(b[:28]))
}

func decodeRecord(b []byte) (record, bool) {
	if len(b) < recSize || binary.LittleEndian.Uint32(b[28:]) != crc(b[:28]) || (b[0] != recTrim && b[0] != recStats) {
		return record{}, false
	}
	return record{typ: b[0], a: binary.LittleEndian.Uint64(b[4:]), b: binary.LittleEndian.Uint64(b[12:]), c: binary.LittleEndian.Uint64(b[20:])}, true
}

// geometry words persisted in the header, in order.
func geomWords(c Config) []struct {
	name string
	v    uint64
} {
	f := c.Flash.Resolved()
	g := c.geometry()
	return []struct {
		name string
		v    uint64
	}{
		{"channels", uint64(f.Channels)}, {"ways", uint64(f.Ways)}, {"pages_per_block", uint64(f.PagesPerBlock)},
		{"page_size", uint64(f.PageSize)}, {"block_size", uint64(f.BlockSize)}, {"blocks_per_chip", uint64(f.BlocksPerChip)},
		{"reclaim_groups", uint64(c.ReclaimGroups)}, {"handles", uint64(len(c.Handles))}, {"lbas", g.lbas},
	}
}

// encodeHeader: magic | version u32 | uuid[16] | geometry (9 x u64 from 28)
// | features at 100 | handle types at 128 | ... | CRC32C.
func encodeHeader(c Config, uuid [16]byte, feat ondisk.Features) []byte {
	b := make([]byte, headerSize)
	copy(b, dataMagic)
	binary.LittleEndian.PutUint32(b[8:], formatVersion)
	copy(b[12:28], uuid[:])
	for i, w := range geomWords(c) {
		binary.LittleEndian.PutUint64(b[28+8*i:], w.v)
	}
	feat.Encode(b[featOff:])
	for i, h := range c.Handles {
		b[typesOff+i] = byte(h)
	}
	binary.LittleEndian.PutUint32(b[headerSize-4:], crc(b[:headerSize-4]))
	return b
}

func checkHeader(path string, b []byte, c Config) (uuid [16]byte, err error) {
	if len(b) < headerSize || string(b[:8]) != dataMagic {
		return uuid, &zerr.CorruptError{Path: path, Reason: "not a ZoneFleet FDP device file (bad magic)"}
	}
	if crc(b[:headerSize-4]) != binary.LittleEndian.Uint32(b[headerSize-4:]) {
		return uuid, &zerr.CorruptError{Path: path, Reason: "header checksum mismatch"}
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != formatVersion {
		return uuid, &zerr.CorruptError{Path: path, Reason: fmt.Sprintf("format version %d, this build reads %d", v, formatVersion)}
	}
	if _, err := ondisk.Check(path, ondisk.Decode(b[featOff:]), knownFeatures); err != nil {
		return uuid, err
	}
	copy(uuid[:], b[12:28])
	for i, w := range geomWords(c) {
		if have := binary.LittleEndian.Uint64(b[28+8*i:]); have != w.v {
			return uuid, &zerr.GeometryMismatchError{Field: w.name, Have: strconv.FormatUint(have, 10), Want: strconv.FormatUint(w.v, 10)}
		}
	}
	for i, h := range c.Handles {
		if have := HandleType(b[typesOff+i]); have != h {
			return uuid, &zerr.GeometryMismatchError{Field: fmt.Sprintf("handles[%d]", i), Have: have.String(), Want: h.String()}
		}
	}
	return uuid, nil
}

// journal header: magic | version u32 | uuid[16] | features at 28 | CRC32C at 60.
func encodeJournalHeader(uuid [16]byte) []byte {
	b := make([]byte, 64)
	copy(b, journalMagic)
	binary.LittleEndian.PutUint32(b[8:], formatVersion)
	copy(b[12:28], uuid[:])
	knownFeatures.Encode(b[28:])
	binary.LittleEndian.PutUint32(b[60:], crc(b[:60]))
	return b
}

func checkJournalHeader(path string, b []byte, uuid [16]byte) error {
	if len(b) < 64 || string(b[:8]) != journalMagic || binary.LittleEndian.Uint32(b[60:]) != crc(b[:60]) {
		return &zerr.CorruptError{Path: path, Reason: "bad journal header"}
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != formatVersion {
		return &zerr.CorruptError{Path: path, Reason: fmt.Sprintf("journal format version %d, this build reads %d", v, formatVersion)}
	}
	if string(b[12:28]) != string(uuid[:]) {
		return &zerr.CorruptError{Path: path, Reason: "journal belongs to another device"}
	}
	_, err := ondisk.Check(path, ondisk.Decode(b[28:]), knownFeatures)
	return err
}
