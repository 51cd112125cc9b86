package lfs

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

const tbs = 4096

func sampleCheckpoint(full bool) *checkpoint {
	c := &checkpoint{Full: full, Version: 7, NextSeq: 99, NextIno: 12, Used: 40,
		Segments: []segRec{{Zone: 3, WP: 10, Mtime: 5}, {Zone: 9, WP: 64, Mtime: 1}},
		Logs:     []ZoneID{4, 0, 0, 10, 0, 0}, LogWP: []uint64{10, 0, 0, 64, 0, 0},
		Orphans: []uint64{11}, NAT: [][2]uint64{{mkNid(1, 0), uint64(MakeAddr(3, 1))}},
		Valid: []Addr{MakeAddr(3, 1)}, Invalid: []Addr{MakeAddr(9, 2)}}
	if full {
		c.Segments[0].Bitmap = []byte{2, 0, 0, 0, 0, 0, 0, 0}
		c.Segments[1].Bitmap = []byte{0xff, 0, 0, 0, 0, 0, 0, 0}
		c.Valid, c.Invalid = []Addr{}, []Addr{}
	}
	return c
}

func TestRoundTrips(t *testing.T) {
	t.Run("meta record", func(t *testing.T) {
		for _, n := range []int{0, 10, tbs - metaHdrLen, tbs, 3 * tbs} {
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(i * 7)
			}
			b := encodeMetaRecord(metaRecord{Type: recCheckpoint, Epoch: 3, Seq: 4, Payload: p}, tbs)
			require.Zero(t, len(b)%tbs)
			l, err := metaRecordLen(b[:tbs], tbs)
			require.NoError(t, err)
			require.Equal(t, len(b)/tbs, l)
			r, err := decodeMetaRecord(b)
			require.NoError(t, err)
			require.True(t, bytes.Equal(p, r.Payload))
			require.Equal(t, uint64(3), r.Epoch)
			b[metaHdrLen+n/2] ^= 1 // any flipped bit is caught
			if n > 0 {
				_, err = decodeMetaRecord(b)
				require.ErrorIs(t, err, zerr.ErrCorrupt)
			}
		}
	})
	t.Run("checkpoint", func(t *testing.T) {
		for _, full := range []bool{true, false} {
			c := sampleCheckpoint(full)
			got, err := decodeCheckpoint(c.encode())
			require.NoError(t, err)
			require.Equal(t, c, got)
			_, err = decodeCheckpoint(c.encode()[:20])
			require.ErrorIs(t, err, zerr.ErrCorrupt)
		}
	})
	t.Run("superblock", func(t *testing.T) {
		s := superblock{Version: FormatVersion, BlockSize: tbs, ZoneBlocks: 64, MaxZones: 32, OPPercent: 10, Logs: 6, UserBlocks: 100, ReserveSegs: 10}
		got, err := decodeSuperblock(s.encode())
		require.NoError(t, err)
		require.Equal(t, s, got)
		s.Version = 99
		_, err = decodeSuperblock(s.encode())
		require.ErrorIs(t, err, zerr.ErrCorrupt)
	})
	t.Run("inode", func(t *testing.T) {
		in := inodeBody{Mode: 0o100644, UID: 1, GID: 2, Nlink: 3, Size: 1 << 33, Atime: 1, Mtime: 2, Ctime: 3, Parent: 1,
			Xattrs: []xattr{{Name: "user.a", Value: []byte("b")}}}
		b := encodeNode(nodeHeader{Kind: nodeInode, Nid: mkNid(5, 0), Ino: 5, CPVer: 2, Seq: 9}, in.encode(), tbs)
		h, got, err := decodeInode(b)
		require.NoError(t, err)
		require.Equal(t, in, *got)
		require.Equal(t, uint64(9), h.Seq)
		b[100] ^= 0x10
		_, _, err = decodeInode(b)
		require.ErrorIs(t, err, zerr.ErrCorrupt)
	})
	t.Run("direct", func(t *testing.T) {
		addrs := make([]Addr, directEntries(tbs))
		addrs[0], addrs[len(addrs)-1] = MakeAddr(1, 2), MakeAddr(7, 63)
		b := encodeNode(nodeHeader{Kind: nodeDirect, Nid: mkNid(5, 3), Ino: 5}, encodeDirect(addrs), tbs)
		_, got, err := decodeDirect(b)
		require.NoError(t, err)
		require.Equal(t, addrs, got)
		_, _, err = decodeInode(b)
		require.ErrorIs(t, err, zerr.ErrCorrupt)
	})
	t.Run("dentries", func(t *testing.T) {
		ents := []dentry{{Name: "a", Ino: 2, Type: dtReg}, {Name: string(make([]byte, 255)), Ino: 3, Type: dtDir}}
		got, err := decodeDentries(encodeDentries(9, ents, tbs), 9)
		require.NoError(t, err)
		require.Equal(t, ents, got)
		_, err = decodeDentries(encodeDentries(9, ents, tbs), 8)
		require.ErrorIs(t, err, zerr.ErrCorrupt)
	})
	t.Run("addr", func(t *testing.T) {
		a := MakeAddr(0, 0)
		require.NotZero(t, a)
		require.Equal(t, ZoneID(0), a.Zone())
		a = MakeAddr(1<<31, 1<<31)
		require.Equal(t, ZoneID(1<<31), a.Zone())
		require.Equal(t, uint64(1<<31), a.Off())
	})
}

func isTyped(err error) bool {
	return err == nil || errors.Is(err, zerr.ErrCorrupt)
}

func FuzzDecodeMetaRecord(f *testing.F) {
	f.Add(encodeMetaRecord(metaRecord{Type: recSuper, Epoch: 1, Payload: []byte("x")}, 512))
	f.Add(encodeMetaRecord(metaRecord{Type: recSnapshot, Epoch: 1, Payload: sampleCheckpoint(true).encode()}, 512))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeMetaRecord(b)
		if !isTyped(err) {
			t.Fatalf("untyped error %v", err)
		}
		_, err = metaRecordLen(b, 512)
		if !isTyped(err) {
			t.Fatalf("untyped error %v", err)
		}
		if err == nil && r.Type == recSnapshot {
			_, _ = decodeCheckpoint(r.Payload)
		}
	})
}

func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add(sampleCheckpoint(true).encode())
	f.Add(sampleCheckpoint(false).encode())
	withPrealloc := sampleCheckpoint(true)
	withPrealloc.HasPrealloc, withPrealloc.Prealloc = true, []uint64{7, 9}
	f.Add(withPrealloc.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCheckpoint(b)
		if !isTyped(err) {
			t.Fatalf("untyped error %v", err)
		}
		if err == nil {
			c2, err := decodeCheckpoint(c.encode())
			if err != nil || len(c2.NAT) != len(c.NAT) || len(c2.Valid) != len(c.Valid) {
				t.Fatalf("re-encode differs: %v", err)
			}
		}
	})
}

func FuzzDecodeSuperblock(f *testing.F) {
	f.Add(superblock{Version: FormatVersion, BlockSize: tbs, ZoneBlocks: 64, Logs: 6}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := decodeSuperblock(b); !isTyped(err) {
			t.Fatalf("untyped error %v", err)
		}
	})
}

func FuzzDecodeNode(f *testing.F) {
	in := inodeBody{Mode: 0o40755, Nlink: 2, Xattrs: []xattr{{Name: "user.x", Value: []byte("y")}}}
	f.Add(encodeNode(nodeHeader{Kind: nodeInode, Nid: mkNid(1, 0), Ino: 1}, in.encode(), 512))
	pre := inodeBody{Mode: 0o100644, Nlink: 1, Size: 1 << 20, BlocksKnown: true, Prealloc: []blkRange{{0, 8}, {16, 300}}}
	f.Add(encodeNode(nodeHeader{Kind: nodeInode, Nid: mkNid(2, 0), Ino: 2}, pre.encode(), 512))
	f.Add(encodeNode(nodeHeader{Kind: nodeDirect, Nid: mkNid(1, 1), Ino: 1}, encodeDirect(make([]Addr, directEntries(512))), 512))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, _, err := decodeInode(b); !isTyped(err) {
			t.Fatalf("untyped error %v", err)
		}
		if _, _, err := decodeDirect(b); !isTyped(err) {
			t.Fatalf("untyped error %v", err)
		}
		// the checksum is over the whole block: patch it and decode the body
		if len(b) >= nodeHdrLen+8 {
			c := append([]byte(nil), b...)
			copy(c[0:4], []byte{0x5a, 0x46, 0x4e, 0x44})
			h := nodeHeader{Kind: c[8], Flags: c[9], Nid: mkNid(1, 0), Ino: 1}
			c = encodeNode(h, c[nodeHdrLen:], len(c))
			if _, _, err := decodeInode(c); !isTyped(err) {
				t.Fatalf("untyped error %v", err)
			}
		}
	})
}

func FuzzDecodeDentries(f *testing.F) {
	f.Add(encodeDentries(3, []dentry{{Name: "abc", Ino: 4, Type: dtReg}}, 512))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := decodeDentries(b, 3); !isTyped(err) {
			t.Fatalf("untyped error %v", err)
		}
		if len(b) >= dentryHdrLen {
			// valid checksum, arbitrary entries
			c := append([]byte(nil), b...)
			copy(c[0:4], []byte{0x5a, 0x46, 0x44, 0x45})
			c[8], c[9], c[10], c[11], c[12], c[13], c[14], c[15] = 3, 0, 0, 0, 0, 0, 0, 0
			c[4], c[5], c[6], c[7] = 0, 0, 0, 0
			sum := checksum(c)
			c[4], c[5], c[6], c[7] = byte(sum), byte(sum>>8), byte(sum>>16), byte(sum>>24)
			if _, err := decodeDentries(c, 3); !isTyped(err) {
				t.Fatalf("untyped error %v", err)
			}
		}
	})
}

// The device number is a compat extension of the inode: it round-trips, an
// inode without it encodes exactly as before (old images and old builds
// read it unchanged), and an inode an older build rewrote (flag kept, field
// dropped) or whose xattrs fill the block decodes as rdev 0, never corrupt.
func TestInodeRdevCompat(t *testing.T) {
	h := nodeHeader{Kind: nodeInode, Nid: mkNid(5, 0), Ino: 5}
	for _, c := range []struct {
		name string
		in   inodeBody
	}{
		{"chr", inodeBody{Mode: 0o20600, Nlink: 1, Rdev: 0x0103, BlocksKnown: true}},
		{"blk with xattrs", inodeBody{Mode: 0o60600, Nlink: 1, Rdev: 1<<40 | 7, Xattrs: []xattr{{"user.x", []byte("1")}}}},
		{"fifo", inodeBody{Mode: 0o10600, Nlink: 1}},
		{"file with blocks", inodeBody{Mode: 0o100600, Nlink: 1, Size: 1 << 20, Blocks: 3, BlocksKnown: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, got, err := decodeInode(encodeNode(h, c.in.encode(), tbs))
			require.NoError(t, err)
			require.Equal(t, c.in.Rdev, got.Rdev)
			require.Equal(t, c.in.Blocks, got.Blocks)
			require.Equal(t, c.in.BlocksKnown, got.BlocksKnown)
			require.Equal(t, c.in.Xattrs, got.Xattrs)
			require.Zero(t, got.Flags&inodeFlagRdev, "the flag is an encoding detail")
		})
	}
	// no device number: the encoding of a version without the field
	plain := inodeBody{Mode: 0o100644, Nlink: 1, Size: 3}
	require.Len(t, plain.encode(), inodeFixedLen)
	// an older build rewrote it: flag kept, field gone
	old := inodeBody{Mode: 0o20600, Nlink: 1, Flags: inodeFlagRdev}
	b := old.encode()[:0]
	old.Flags = 0
	b = append(b, old.encode()...)
	b[inodeFixedLen-6] |= inodeFlagRdev // Flags is the u32 before the xattr count
	_, got, err := decodeInode(encodeNode(h, b, tbs))
	require.NoError(t, err)
	require.Zero(t, got.Rdev)
	// a stale block-count flag over zero padding with data: unknown, recounted
	stale := inodeBody{Mode: 0o100600, Nlink: 1, Size: 4096}
	b = stale.encode()
	b[inodeFixedLen-6] |= inodeFlagBlocks
	_, got, err = decodeInode(encodeNode(h, b, tbs))
	require.NoError(t, err)
	require.False(t, got.BlocksKnown)
	// xattrs that fill the whole block and a stale flag: no room, rdev 0
	full := inodeBody{Mode: 0o20600, Nlink: 1, Xattrs: []xattr{{"user.big", make([]byte, xattrSpace(tbs)-xattrLen("user.big", nil))}}}
	b = full.encode()
	b[inodeFixedLen-6] |= inodeFlagRdev
	_, got, err = decodeInode(encodeNode(h, b, tbs))
	require.NoError(t, err)
	require.Zero(t, got.Rdev)
	require.Len(t, got.Xattrs, 1)
	// the superblock says so, and the bit is compat (an old build ignores it)
	require.NotZero(t, KnownFeatures.Compat&FeatureInodeRdev)
}

// Reserved ranges and the checkpoint's list of their inodes round-trip;
// ranges out of order are corrupt.
func TestPreallocEncoding(t *testing.T) {
	in := inodeBody{Mode: 0o100644, Nlink: 1, Size: 5, BlocksKnown: true, Blocks: 1, Prealloc: []blkRange{{0, 8}, {16, 300}}}
	_, got, err := decodeInode(encodeNode(nodeHeader{Kind: nodeInode, Nid: mkNid(2, 0), Ino: 2}, in.encode(), 512))
	require.NoError(t, err)
	require.Equal(t, in.Prealloc, got.Prealloc)
	require.Equal(t, uint64(1), got.Blocks)
	bad := in
	bad.Prealloc = []blkRange{{16, 300}, {0, 8}}
	_, _, err = decodeInode(encodeNode(nodeHeader{Kind: nodeInode, Nid: mkNid(2, 0), Ino: 2}, bad.encode(), 512))
	require.ErrorIs(t, err, zerr.ErrCorrupt)
	c := sampleCheckpoint(false)
	c.HasPrealloc, c.Prealloc = true, []uint64{3, 11}
	c2, err := decodeCheckpoint(c.encode())
	require.NoError(t, err)
	require.Equal(t, c.Prealloc, c2.Prealloc)
	require.Empty(t, c2.TL)
}

// The batch count of a marked inode (nodeFlagBatch) round-trips in header
// bytes 10..13, under the node checksum; a node written before
// FeatureFsyncBatch has zeros there and decodes with no batch.
func TestNodeHeaderBatch(t *testing.T) {
	h := nodeHeader{Kind: nodeInode, Flags: nodeFlagFsync | nodeFlagBatch, Nid: mkNid(9, 0), Ino: 9, CPVer: 3, Seq: 41, Batch: 7}
	b := encodeNode(h, nil, 4096)
	got, err := decodeNodeHeader(b)
	require.NoError(t, err)
	require.Equal(t, h, got)
	old := encodeNode(nodeHeader{Kind: nodeInode, Flags: nodeFlagFsync, Nid: mkNid(9, 0), Ino: 9, CPVer: 3, Seq: 41}, nil, 4096)
	require.Equal(t, []byte{0, 0, 0, 0, 0, 0}, old[10:16])
	got, err = decodeNodeHeader(old)
	require.NoError(t, err)
	require.Zero(t, got.Batch)
	b[10]++ // the count is under the checksum
	_, err = decodeNodeHeader(b)
	require.Error(t, err)
}

// batchWhole: a marked inode with nodeFlagBatch is an fsync point only
// when the Batch nodes before it in sequence are all found, direct, and
// of its inode.
func TestBatchWhole(t *testing.T) {
	m := nodeHeader{Kind: nodeInode, Flags: nodeFlagFsync | nodeFlagBatch, Ino: 5, Seq: 10, Batch: 2}
	d := func(seq, ino uint64) nodeHeader { return nodeHeader{Kind: nodeDirect, Ino: ino, Seq: seq} }
	for _, tc := range []struct {
		name  string
		found []nodeHeader
		h     nodeHeader
		want  bool
	}{
		{"whole", []nodeHeader{d(8, 5), d(9, 5)}, m, true},
		{"first missing", []nodeHeader{d(9, 5)}, m, false},
		{"last missing", []nodeHeader{d(8, 5)}, m, false},
		{"another inode's node", []nodeHeader{d(8, 5), d(9, 6)}, m, false},
		{"no batch flag: trusted alone", nil, nodeHeader{Kind: nodeInode, Flags: nodeFlagFsync, Ino: 5, Seq: 10}, true},
		{"empty batch", nil, nodeHeader{Kind: nodeInode, Flags: nodeFlagFsync | nodeFlagBatch, Ino: 5, Seq: 10}, true},
		{"batch past the first sequence", nil, nodeHeader{Kind: nodeInode, Flags: nodeFlagFsync | nodeFlagBatch, Ino: 5, Seq: 1, Batch: 3}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			by := map[uint64]nodeHeader{}
			for _, f := range tc.found {
				by[f.Seq] = f
			}
			require.Equal(t, tc.want, batchWhole(tc.h, by))
		})
	}
}
