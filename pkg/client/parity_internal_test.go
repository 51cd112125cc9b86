package client

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/ondisk"
)

func ppRec(bs uint64, h ondisk.PPHeader, payload []byte) []byte {
	b := make([]byte, bs+uint64(len(payload)))
	copy(b[bs:], payload)
	h.Blocks, h.CRC = uint32(uint64(len(payload))/bs), crc32.Checksum(payload, ondisk.Castagnoli)
	h.Encode(b[:bs])
	return b
}

// The PP log parser keeps intact records in order and skips a torn
// record (payload CRC), a torn header and the zeroes past the write pointer.
func TestParseLogSkipsTornRecords(t *testing.T) {
	const bs = 512
	p1 := bytes.Repeat([]byte{1}, 2*bs)
	p2 := bytes.Repeat([]byte{2}, bs)
	p3 := bytes.Repeat([]byte{3}, 2*bs)
	r1 := ppRec(bs, ondisk.PPHeader{Group: 0, Row: 4, Covered: 3}, p1)
	torn := ppRec(bs, ondisk.PPHeader{Group: 0, Row: 4, Covered: 5}, p2)
	torn[len(torn)-1] ^= 0xff // its payload did not land whole
	tornHdr := ppRec(bs, ondisk.PPHeader{Group: 0, Row: 4, Covered: 6}, p2)
	tornHdr[20] ^= 1
	r3 := ppRec(bs, ondisk.PPHeader{Group: 1, Row: 0, Covered: 7}, p3)
	log := append(append(append(append(append([]byte{}, r1...), torn...), tornHdr...), r3...), make([]byte, 3*bs)...)
	recs := parseLog(log, bs)
	require.Len(t, recs, 2)
	require.Equal(t, uint64(3), recs[0].Covered)
	require.Equal(t, p1, recs[0].xor)
	require.Equal(t, uint32(1), recs[1].Group)
	require.Equal(t, p3, recs[1].xor)
	require.Empty(t, parseLog(make([]byte, 4*bs), bs))
	require.Empty(t, parseLog(r1[:2*bs], bs), "a payload past the end is not a record")
}

// encodeV1 writes a version 1 header (one PP log per group, no Seq).
func encodeV1(h ondisk.PPHeader, b []byte) {
	clear(b)
	binary.LittleEndian.PutUint32(b[0:], ondisk.PPMagicV1)
	binary.LittleEndian.PutUint32(b[4:], h.Group)
	binary.LittleEndian.PutUint64(b[8:], h.Row)
	binary.LittleEndian.PutUint64(b[16:], h.Covered)
	binary.LittleEndian.PutUint32(b[24:], h.Blocks)
	binary.LittleEndian.PutUint32(b[28:], h.CRC)
	binary.LittleEndian.PutUint32(b[32:], h.Flags)
	binary.LittleEndian.PutUint64(b[36:], h.ParityRows)
	binary.LittleEndian.PutUint32(b[44:], crc32.Checksum(b[:44], ondisk.Castagnoli))
}

// Version 2 headers carry Seq; version 1 headers (written before groups
// had two PP logs) still decode, with Seq 0; a torn one of either does not.
func TestDecodePPHeaderVersions(t *testing.T) {
	h := ondisk.PPHeader{Group: 3, Row: 9, Covered: 17, Blocks: 2, CRC: 7, Flags: ondisk.PPSealed, ParityRows: 8, Seq: 41}
	b := make([]byte, 64)
	h.Encode(b)
	got, ok := decodePPHeader(b)
	require.True(t, ok)
	require.Equal(t, h, got)
	b[50] ^= 1
	_, ok = decodePPHeader(b)
	require.False(t, ok, "a torn version 2 header")
	_, ok = decodePPHeader(b[:ondisk.PPHeaderLenV1])
	require.False(t, ok, "a version 2 header cut short")
	encodeV1(h, b)
	got, ok = decodePPHeader(b[:ondisk.PPHeaderLenV1])
	require.True(t, ok)
	h.Seq = 0
	require.Equal(t, h, got)
	b[40] ^= 1
	_, ok = decodePPHeader(b)
	require.False(t, ok, "a torn version 1 header")
}

func FuzzDecodePPHeader(f *testing.F) {
	b := make([]byte, 64)
	ondisk.PPHeader{Group: 3, Row: 9, Covered: 17, Blocks: 2, CRC: 7, Seq: 5}.Encode(b)
	f.Add(b)
	v1 := make([]byte, 64)
	encodeV1(ondisk.PPHeader{Group: 3, Row: 9, Covered: 17, Blocks: 2, CRC: 7}, v1)
	f.Add(v1)
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, ok := decodePPHeader(b)
		if !ok {
			return
		}
		out := make([]byte, max(len(b), ondisk.PPHeaderLen))
		h.Encode(out)
		back, ok := decodePPHeader(out)
		require.True(t, ok)
		require.Equal(t, h, back)
		_ = parseLog(b, 64) // never panics on any bytes
	})
}
