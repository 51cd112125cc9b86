package node

import (
	"cmp"
	"encoding/binary"
	"hash/crc32"
	"slices"
)

// The partial-parity (PP) log of a raid5 stripe group, as the client writes
// it (pkg/client parity.go is the writer and the reference; a rebuild reads
// it on the node and writes a record when it re-creates a lost log). A
// record is one header block — magic, group, row, covered blocks, payload
// blocks, payload CRC-32C, flags, parity rows, sequence number, header
// CRC-32C, little endian, the rest of the block zero — followed by its
// payload blocks (the row's parity over its covered prefix). A group has
// two logs used alternately; the sequence number orders the records across
// them. Version 1 headers (magic "ZFPP", no sequence number, the header CRC
// at 44; one log per group) are still decoded, with sequence number 0. The
// round trip with the client's encoder is tested end to end
// (TestRebuildParityLeg*: the node parses the records the client wrote).

const (
	ppMagic       = 0x5a465032 // "ZFP2"
	ppMagicV1     = 0x5a465050 // "ZFPP"
	ppHeaderLen   = 56
	ppHeaderLenV1 = 48
	ppSealed      = 1 // a seal record (the group was finished after it)
)

var ppCRC = crc32.MakeTable(crc32.Castagnoli)

// ppHeader is a PP record's header.
type ppHeader struct {
	Group      uint32
	Row        uint64
	Covered    uint64
	Blocks     uint32
	CRC        uint32
	Flags      uint32
	ParityRows uint64
	Seq        uint64
}

func (h ppHeader) encode(b []byte) {
	clear(b)
	binary.LittleEndian.PutUint32(b[0:], ppMagic)
	binary.LittleEndian.PutUint32(b[4:], h.Group)
	binary.LittleEndian.PutUint64(b[8:], h.Row)
	binary.LittleEndian.PutUint64(b[16:], h.Covered)
	binary.LittleEndian.PutUint32(b[24:], h.Blocks)
	binary.LittleEndian.PutUint32(b[28:], h.CRC)
	binary.LittleEndian.PutUint32(b[32:], h.Flags)
	binary.LittleEndian.PutUint64(b[36:], h.ParityRows)
	binary.LittleEndian.PutUint64(b[44:], h.Seq)
	binary.LittleEndian.PutUint32(b[52:], crc32.Checksum(b[:52], ppCRC))
}

func decodePPHeader(b []byte) (ppHeader, bool) {
	if len(b) < ppHeaderLenV1 {
		return ppHeader{}, false
	}
	var seq uint64
	switch binary.LittleEndian.Uint32(b) {
	case ppMagic:
		if len(b) < ppHeaderLen || binary.LittleEndian.Uint32(b[52:]) != crc32.Checksum(b[:52], ppCRC) {
			return ppHeader{}, false
		}
		seq = binary.LittleEndian.Uint64(b[44:])
	case ppMagicV1:
		if binary.LittleEndian.Uint32(b[44:]) != crc32.Checksum(b[:44], ppCRC) {
			return ppHeader{}, false
		}
	default:
		return ppHeader{}, false
	}
	return ppHeader{
		Group: binary.LittleEndian.Uint32(b[4:]), Row: binary.LittleEndian.Uint64(b[8:]),
		Covered: binary.LittleEndian.Uint64(b[16:]), Blocks: binary.LittleEndian.Uint32(b[24:]),
		CRC: binary.LittleEndian.Uint32(b[28:]), Flags: binary.LittleEndian.Uint32(b[32:]),
		ParityRows: binary.LittleEndian.Uint64(b[36:]), Seq: seq,
	}, true
}

// ppRecord is an intact record.
type ppRecord struct {
	ppHeader
	xor []byte
}

// parsePPLog returns the intact records of a PP log's bytes (bs-byte
// blocks) in log order: a block that is no header is skipped (a torn
// record, zeroes past the write pointer), a record whose payload fails its
// CRC or runs past the end is dropped.
func parsePPLog(b []byte, bs uint64) []ppRecord {
	var out []ppRecord
	for p := uint64(0); bs > 0 && p+bs <= uint64(len(b)); {
		h, ok := decodePPHeader(b[p : p+bs])
		if !ok {
			p += bs
			continue
		}
		end := p + bs + uint64(h.Blocks)*bs
		if end > uint64(len(b)) || end < p {
			p += bs
			continue
		}
		payload := b[p+bs : end]
		if crc32.Checksum(payload, ppCRC) == h.CRC {
			out = append(out, ppRecord{ppHeader: h, xor: payload})
			p = end
			continue
		}
		p += bs
	}
	return out
}

// sortPPRecords orders the records of a group's logs oldest first: by
// sequence number, log order among equal ones.
func sortPPRecords(recs []ppRecord) {
	slices.SortStableFunc(recs, func(a, b ppRecord) int { return cmp.Compare(a.Seq, b.Seq) })
}

// encodePPRecord returns a record (header block + payload blocks).
func encodePPRecord(h ppHeader, payload []byte, bs uint64) []byte {
	rec := make([]byte, bs+uint64(len(payload)))
	copy(rec[bs:], payload)
	h.Blocks = uint32(uint64(len(payload)) / bs)
	h.CRC = crc32.Checksum(rec[bs:], ppCRC)
	h.encode(rec[:bs])
	return rec
}
