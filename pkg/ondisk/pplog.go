package ondisk

import (
	"encoding/binary"
	"hash/crc32"
)

// The partial-parity (PP) record header of a raid5 stripe group's PP logs
// (pkg/client writes the records, pkg/node reads them for a rebuild and
// writes one when it re-creates a lost log; both use this one definition).
// A header block holds magic, group, row, covered blocks, payload blocks,
// payload CRC-32C, flags, parity rows, sequence number and the header's
// CRC-32C, little endian, the rest of the block zero; its payload blocks
// follow. Version 2 (magic "ZFP2") carries the sequence number that orders
// a group's records across its two logs; version 1 headers (magic "ZFPP",
// header CRC at 44, one log per group) still decode, with Seq 0.

const (
	PPMagic       = 0x5a465032 // "ZFP2"
	PPMagicV1     = 0x5a465050 // "ZFPP"
	PPHeaderLen   = 56         // an encoded version 2 header
	PPHeaderLenV1 = 48         // an encoded version 1 header
	PPSealed      = 1          // Flags: a seal record (the group was finished after it)
)

// Castagnoli is the CRC-32C table of every checksum ZoneFleet persists
// (drive journal and slots, zone owners, file system blocks, FDP records,
// partial-parity headers and payloads): built once, shared read-only.
var Castagnoli = crc32.MakeTable(crc32.Castagnoli)

// PPHeader is a partial-parity record's header.
type PPHeader struct {
	Group   uint32 // stripe group index
	Row     uint64 // row within the group
	Covered uint64 // blocks of the row (from its start) the parity covers
	Blocks  uint32 // payload blocks that follow the header block
	CRC     uint32 // CRC-32C of the payload
	Flags   uint32 // PPSealed
	// ParityRows (seal records): the rows whose parity unit was written
	// when the group was sealed.
	ParityRows uint64
	// Seq orders the records of a group across its two PP logs: every
	// record has a greater Seq than the records written before it.
	Seq uint64
}

// Encode writes a version 2 header into b (at least PPHeaderLen bytes;
// all of b is cleared first).
func (h PPHeader) Encode(b []byte) {
	clear(b)
	binary.LittleEndian.PutUint32(b[0:], PPMagic)
	binary.LittleEndian.PutUint32(b[4:], h.Group)
	binary.LittleEndian.PutUint64(b[8:], h.Row)
	binary.LittleEndian.PutUint64(b[16:], h.Covered)
	binary.LittleEndian.PutUint32(b[24:], h.Blocks)
	binary.LittleEndian.PutUint32(b[28:], h.CRC)
	binary.LittleEndian.PutUint32(b[32:], h.Flags)
	binary.LittleEndian.PutUint64(b[36:], h.ParityRows)
	binary.LittleEndian.PutUint64(b[44:], h.Seq)
	binary.LittleEndian.PutUint32(b[52:], crc32.Checksum(b[:52], Castagnoli))
}

// DecodePPHeader parses a header block (version 2, or version 1 with Seq
// 0); ok is false for anything that is not an intact header (zeroes, a
// torn write, another record's payload).
func DecodePPHeader(b []byte) (h PPHeader, ok bool) {
	if len(b) < PPHeaderLenV1 {
		return PPHeader{}, false
	}
	var seq uint64
	switch binary.LittleEndian.Uint32(b) {
	case PPMagic:
		if len(b) < PPHeaderLen || binary.LittleEndian.Uint32(b[52:]) != crc32.Checksum(b[:52], Castagnoli) {
			return PPHeader{}, false
		}
		seq = binary.LittleEndian.Uint64(b[44:])
	case PPMagicV1:
		if binary.LittleEndian.Uint32(b[44:]) != crc32.Checksum(b[:44], Castagnoli) {
			return PPHeader{}, false
		}
	default:
		return PPHeader{}, false
	}
	return PPHeader{
		Group: binary.LittleEndian.Uint32(b[4:]), Row: binary.LittleEndian.Uint64(b[8:]),
		Covered: binary.LittleEndian.Uint64(b[16:]), Blocks: binary.LittleEndian.Uint32(b[24:]),
		CRC: binary.LittleEndian.Uint32(b[28:]), Flags: binary.LittleEndian.Uint32(b[32:]),
		ParityRows: binary.LittleEndian.Uint64(b[36:]), Seq: seq,
	}, true
}
