package node

import (
	"cmp"
	"hash/crc32"
	"slices"

	"github.com/zonefleet/zonefleet/pkg/ondisk"
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

// decodePPHeader decodes pkg/ondisk's PPHeader (one definition for the
// client's writer and this reader).
func decodePPHeader(b []byte) (ondisk.PPHeader, bool) { return ondisk.DecodePPHeader(b) }

// ppRecord is an intact record.
type ppRecord struct {
	ondisk.PPHeader
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
		if crc32.Checksum(payload, ondisk.Castagnoli) == h.CRC {
			out = append(out, ppRecord{PPHeader: h, xor: payload})
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
func encodePPRecord(h ondisk.PPHeader, payload []byte, bs uint64) []byte {
	rec := make([]byte, bs+uint64(len(payload)))
	copy(rec[bs:], payload)
	h.Blocks = uint32(uint64(len(payload)) / bs)
	h.CRC = crc32.Checksum(rec[bs:], ondisk.Castagnoli)
	h.Encode(rec[:bs])
	return rec
}
