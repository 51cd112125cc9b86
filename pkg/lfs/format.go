package lfs

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/zonefleet/zonefleet/pkg/ondisk"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// On-disk formats. Every structure is little endian and checksummed with
// CRC32C. Decoders never panic: bad input gives a *zerr.CorruptError.

// FormatVersion is written in the superblock. Version 2 adds the feature
// bit sets; Mount reads version 1 (no features) and upgrades it: the
// decoded superblock says version 2, so the next superblock written (at the
// next metadata zone switch) is version 2. Other versions are refused.
const FormatVersion = 2

// KnownFeatures are the superblock feature bits this build understands. An
// unknown compat bit is ignored; an unknown ro_compat bit refuses a writable
// mount (*ondisk.FeatureError, class ro_compat: the image could only be
// mounted read-only); an unknown incompat bit refuses the mount.
// FeatureThreadedLog (tl.go) is incompat.
var KnownFeatures = ondisk.Features{Compat: FeatureInodeRdev | FeatureRootReserve, Incompat: FeatureThreadedLog | FeaturePrealloc | FeatureFsyncBatch}

// FeatureFsyncBatch (incompat) says an fsync may write its direct nodes and
// its marked inode in one write, after the data's Flush (nodeFlagBatch):
// roll-forward must check that every node of the batch is there before it
// trusts the inode. A build without it would trust the inode alone, so it
// must not mount such an image. mkfs and every writable mount set it (the
// mount's checkpoint writes the superblock before any fsync does).
const FeatureFsyncBatch = 1 << 2

// FeatureInodeRdev (compat) says inodes may carry a device number: an inode
// whose Flags has inodeFlagRdev stores a u64 rdev after its xattrs. Images
// without the bit have no such inodes (mknod of devices, FIFOs and sockets
// was refused) and read as rdev 0. An older build ignores the flag and the
// trailing field (it decodes the fixed part and the xattrs only), so the bit
// is compat: it may mount the image; rewriting such an inode drops the
// device number (the node becomes rdev 0), never the file. Set by Mkfs and
// by every writable mount (the next superblock written carries it).
const FeatureInodeRdev = 1 << 0

const (
	magicMeta   = 0x524d465a // "ZFMR" metadata record
	magicNode   = 0x444e465a // "ZFND" node block
	magicDentry = 0x4544465a // "ZFDE" dentry block
)

func checksum(b []byte) uint32 { return crc32.Checksum(b, ondisk.Castagnoli) }

func corrupt(what, format string, a ...any) error {
	return &zerr.CorruptError{Path: what, Reason: fmt.Sprintf(format, a...)}
}

// Addr is a block address: zone and offset, 0 meaning "none" (a hole).
type Addr uint64

// MakeAddr builds the address of block off of zone z.
func MakeAddr(z ZoneID, off uint64) Addr { return Addr((uint64(z)+1)<<32 | (off & 0xffffffff)) }

// Zone returns the address's zone.
func (a Addr) Zone() ZoneID { return ZoneID(uint64(a)>>32 - 1) }

// Off returns the address's block offset in its zone.
func (a Addr) Off() uint64 { return uint64(a) & 0xffffffff }

func (a Addr) String() string {
	if a == 0 {
		return "nil"
	}
	return fmt.Sprintf("%d:%d", a.Zone(), a.Off())
}

// Node IDs: nid = ino<<24 | idx; idx 0 is the inode, idx k>0 the k-th direct node.
const (
	nidIdxBits = 24
	maxDirect  = 1<<nidIdxBits - 1
	maxIno     = 1<<40 - 1
)

func mkNid(ino uint64, idx uint32) uint64 { return ino<<nidIdxBits | uint64(idx) }
func nidIno(nid uint64) uint64            { return nid >> nidIdxBits }
func nidIdx(nid uint64) uint32            { return uint32(nid & maxDirect) }

// ---- little encoder / decoder ----

type wbuf struct{ b []byte }

func (w *wbuf) u8(v uint8)   { w.b = append(w.b, v) }
func (w *wbuf) u16(v uint16) { w.b = binary.LittleEndian.AppendUint16(w.b, v) }
func (w *wbuf) u32(v uint32) { w.b = binary.LittleEndian.AppendUint32(w.b, v) }
func (w *wbuf) u64(v uint64) { w.b = binary.LittleEndian.AppendUint64(w.b, v) }
func (w *wbuf) bytes16(p []byte) {
	w.u16(uint16(len(p)))
	w.b = append(w.b, p...)
}

type rbuf struct {
	b   []byte
	bad bool
}

func (r *rbuf) take(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.bad = true
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}
func (r *rbuf) u8() uint8 {
	p := r.take(1)
	if p == nil {
		return 0
	}
	return p[0]
}
func (r *rbuf) u16() uint16 {
	p := r.take(2)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint16(p)
}
func (r *rbuf) u32() uint32 {
	p := r.take(4)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(p)
}
func (r *rbuf) u64() uint64 {
	p := r.take(8)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(p)
}
func (r *rbuf) bytes16() []byte {
	n := int(r.u16())
	p := r.take(n)
	return append([]byte(nil), p...)
}

// count reads a length prefix and checks that at least n*min bytes follow.
func (r *rbuf) count(min int) int {
	n := r.u32()
	if r.bad || uint64(n)*uint64(min) > uint64(len(r.b)) {
		r.bad = true
		return 0
	}
	return int(n)
}

// ---- metadata records ----

type recType uint8

const (
	recSuper      recType = 1 // superblock: first record of every metadata zone
	recSnapshot   recType = 2 // full checkpoint
	recCheckpoint recType = 3 // checkpoint as a delta on the previous one
)

const metaHdrLen = 32

// metaRecord framing: magic u32 | type u8 | rsv u8 u16 | epoch u64 | seq u64 |
// payload length u32 | crc32c u32 (of the header with crc 0, then payload).
type metaRecord struct {
	Type    recType
	Epoch   uint64 // metadata zone generation
	Seq     uint64 // record number within the zone
	Payload []byte
}

func metaBlocks(payloadLen, bs int) int { return (metaHdrLen + payloadLen + bs - 1) / bs }

func encodeMetaRecord(m metaRecord, bs int) []byte {
	n := metaBlocks(len(m.Payload), bs)
	b := make([]byte, n*bs)
	binary.LittleEndian.PutUint32(b[0:], magicMeta)
	b[4] = byte(m.Type)
	binary.LittleEndian.PutUint64(b[8:], m.Epoch)
	binary.LittleEndian.PutUint64(b[16:], m.Seq)
	binary.LittleEndian.PutUint32(b[24:], uint32(len(m.Payload)))
	copy(b[metaHdrLen:], m.Payload)
	c := checksum(b[:metaHdrLen+len(m.Payload)])
	binary.LittleEndian.PutUint32(b[28:], c)
	return b
}

// metaRecordLen reads just the header of a record from its first block and
// returns how many blocks the whole record takes.
func metaRecordLen(first []byte, bs int) (int, error) {
	if len(first) < metaHdrLen {
		return 0, corrupt("metadata record", "short header (%d bytes)", len(first))
	}
	if binary.LittleEndian.Uint32(first) != magicMeta {
		return 0, corrupt("metadata record", "bad magic %#x", binary.LittleEndian.Uint32(first))
	}
	pl := binary.LittleEndian.Uint32(first[24:])
	if pl > 1<<30 {
		return 0, corrupt("metadata record", "payload length %d too large", pl)
	}
	return metaBlocks(int(pl), bs), nil
}

func decodeMetaRecord(b []byte) (metaRecord, error) {
	if len(b) < metaHdrLen {
		return metaRecord{}, corrupt("metadata record", "short header (%d bytes)", len(b))
	}
	if binary.LittleEndian.Uint32(b) != magicMeta {
		return metaRecord{}, corrupt("metadata record", "bad magic %#x", binary.LittleEndian.Uint32(b))
	}
	pl := uint64(binary.LittleEndian.Uint32(b[24:]))
	if metaHdrLen+pl > uint64(len(b)) {
		return metaRecord{}, corrupt("metadata record", "payload length %d past the record end", pl)
	}
	h := make([]byte, metaHdrLen)
	copy(h, b[:metaHdrLen])
	want := binary.LittleEndian.Uint32(h[28:])
	binary.LittleEndian.PutUint32(h[28:], 0)
	c := crc32.Update(checksum(h), ondisk.Castagnoli, b[metaHdrLen:metaHdrLen+pl])
	if c != want {
		return metaRecord{}, corrupt("metadata record", "checksum mismatch")
	}
	t := recType(b[4])
	if t < recSuper || t > recCheckpoint {
		return metaRecord{}, corrupt("metadata record", "unknown type %d", t)
	}
	return metaRecord{
		Type: t, Epoch: binary.LittleEndian.Uint64(b[8:]), Seq: binary.LittleEndian.Uint64(b[16:]),
		Payload: append([]byte(nil), b[metaHdrLen:metaHdrLen+pl]...),
	}, nil
}

// superblock is the payload of recSuper.
type superblock struct {
	Version     uint32
	UUID        [16]byte
	BlockSize   uint32
	ZoneBlocks  uint64
	MaxZones    uint32
	OPPercent   uint32
	Logs        uint32          // number of active logs (6, or 2 when few zones may be open)
	UserBlocks  uint64          // blocks users may fill (statfs total)
	ReserveSegs uint32          // foreground GC keeps at least this many free segments
	MaxNodes    uint64          // inodes + direct nodes the NAT may hold (a snapshot fits one metadata zone)
	Features    ondisk.Features // version 2: compat / ro_compat / incompat bits
	// RootReserve (FeatureRootReserve; a u64 after the feature bits) is the
	// user blocks only root may fill (rootreserve.go).
	RootReserve uint64
}

func (s superblock) encode() []byte {
	var w wbuf
	w.u32(s.Version)
	w.b = append(w.b, s.UUID[:]...)
	w.u32(s.BlockSize)
	w.u64(s.ZoneBlocks)
	w.u32(s.MaxZones)
	w.u32(s.OPPercent)
	w.u32(s.Logs)
	w.u64(s.UserBlocks)
	w.u32(s.ReserveSegs)
	w.u64(s.MaxNodes)
	if s.Version >= 2 {
		var f [ondisk.Size]byte
		s.Features.Encode(f[:])
		w.b = append(w.b, f[:]...)
		if s.Features.Compat&FeatureRootReserve != 0 {
			w.u64(s.RootReserve)
		}
	}
	return w.b
}

func decodeSuperblock(p []byte) (superblock, error) {
	r := rbuf{b: p}
	var s superblock
	s.Version = r.u32()
	copy(s.UUID[:], r.take(16))
	s.BlockSize = r.u32()
	s.ZoneBlocks = r.u64()
	s.MaxZones = r.u32()
	s.OPPercent = r.u32()
	s.Logs = r.u32()
	s.UserBlocks = r.u64()
	s.ReserveSegs = r.u32()
	s.MaxNodes = r.u64()
	if s.Version >= 2 {
		if f := r.take(ondisk.Size); f != nil {
			s.Features = ondisk.Decode(f)
		}
		// An older build that rewrote the superblock kept the bit but not
		// the field: no field reads as no reserve.
		if s.Features.Compat&FeatureRootReserve != 0 && len(r.b) >= 8 && !r.bad {
			s.RootReserve = r.u64()
		}
	}
	if r.bad {
		return s, corrupt("superblock", "truncated")
	}
	if s.Version != 1 && s.Version != FormatVersion {
		return s, corrupt("superblock", "format version %d, this build reads 1..%d", s.Version, FormatVersion)
	}
	if _, err := ondisk.Check("superblock", s.Features, KnownFeatures); err != nil {
		return s, err // mounts are writable: unknown ro_compat bits refuse too
	}
	s.Version = FormatVersion // upgrade: written back as version 2
	if s.BlockSize < 512 || s.BlockSize > 1<<20 || s.ZoneBlocks == 0 || s.ZoneBlocks > 1<<32 || (s.Logs != 6 && s.Logs != 2) || s.OPPercent >= 100 {
		return s, corrupt("superblock", "bad geometry (block %d, zone %d blocks, %d logs, op %d%%)", s.BlockSize, s.ZoneBlocks, s.Logs, s.OPPercent)
	}
	return s, nil
}

// segRec is one in-use segment in a checkpoint: with its SIT entry (the
// valid bitmap) in a snapshot. The SSA (owner of each block) is not stored
// here: every valid block's owner is the node that points at it (the NAT for
// node blocks, a direct node for data blocks), so mount rebuilds it from the
// nodes and fsck checks it against the SIT.
type segRec struct {
	Zone   ZoneID
	WP     uint64 // blocks written when the checkpoint was taken
	Mtime  uint64 // node/data write sequence of its last write (cost-benefit age)
	Bitmap []byte // snapshot only: valid bitmap, bit i = block i
}

const ofsNode = math.MaxUint32

// checkpoint is the payload of recSnapshot (Full) and recCheckpoint (delta).
type checkpoint struct {
	Full     bool
	Version  uint64 // checkpoint version; node blocks written after it carry it
	NextSeq  uint64 // next node write sequence
	NextIno  uint64
	Used     uint64 // user blocks in use (data + nodes), for statfs/ENOSPC
	Segments []segRec
	Logs     []ZoneID // per active log, the zone + 1 (0 = none)
	LogWP    []uint64
	Orphans  []uint64    // inodes unlinked but open: deleted at mount
	NAT      [][2]uint64 // nid, addr (addr 0 = deleted)
	Valid    []Addr      // delta only: blocks that became valid (SIT delta)
	Invalid  []Addr      // delta only: blocks that became invalid (SIT delta)
	// HasTL (FeatureThreadedLog): a trailing list of the TL-opened log heads
	// follows (their LogWP is the log's cursor in the segment's holes).
	HasTL bool
	TL    []ZoneID
	// HasPrealloc (FeaturePrealloc): after the TL list (empty without
	// threaded logging) the inodes holding fallocate reservations follow
	// (space.go).
	HasPrealloc bool
	Prealloc    []uint64
}

func (c *checkpoint) encode() []byte {
	var w wbuf
	if c.Full {
		w.u8(1)
	} else {
		w.u8(0)
	}
	w.u64(c.Version)
	w.u64(c.NextSeq)
	w.u64(c.NextIno)
	w.u64(c.Used)
	w.u32(uint32(len(c.Segments)))
	for _, s := range c.Segments {
		w.u32(uint32(s.Zone))
		w.u64(s.WP)
		w.u64(s.Mtime)
		if c.Full {
			w.u32(uint32(len(s.Bitmap)))
			w.b = append(w.b, s.Bitmap...)
		}
	}
	w.u32(uint32(len(c.Logs)))
	for i, l := range c.Logs {
		w.u32(uint32(l))
		w.u64(c.LogWP[i])
	}
	w.u32(uint32(len(c.Orphans)))
	for _, o := range c.Orphans {
		w.u64(o)
	}
	w.u32(uint32(len(c.NAT)))
	for _, e := range c.NAT {
		w.u64(e[0])
		w.u64(e[1])
	}
	w.u32(uint32(len(c.Valid)))
	for _, v := range c.Valid {
		w.u64(uint64(v))
	}
	w.u32(uint32(len(c.Invalid)))
	for _, a := range c.Invalid {
		w.u64(uint64(a))
	}
	if c.HasTL || c.HasPrealloc {
		w.u32(uint32(len(c.TL)))
		for _, z := range c.TL {
			w.u32(uint32(z))
		}
	}
	if c.HasPrealloc {
		w.u32(uint32(len(c.Prealloc)))
		for _, ino := range c.Prealloc {
			w.u64(ino)
		}
	}
	return w.b
}

func decodeCheckpoint(p []byte) (*checkpoint, error) {
	r := rbuf{b: p}
	c := &checkpoint{}
	switch r.u8() {
	case 0:
	case 1:
		c.Full = true
	default:
		return nil, corrupt("checkpoint", "bad kind")
	}
	c.Version = r.u64()
	c.NextSeq = r.u64()
	c.NextIno = r.u64()
	c.Used = r.u64()
	n := r.count(20)
	c.Segments = make([]segRec, n)
	for i := range c.Segments {
		c.Segments[i] = segRec{Zone: ZoneID(r.u32()), WP: r.u64(), Mtime: r.u64()}
		if c.Full {
			n := r.count(1)
			c.Segments[i].Bitmap = append([]byte(nil), r.take(n)...)
		}
	}
	n = r.count(12)
	if n > 16 {
		return nil, corrupt("checkpoint", "%d logs", n)
	}
	c.Logs = make([]ZoneID, n)
	c.LogWP = make([]uint64, n)
	for i := range c.Logs {
		c.Logs[i] = ZoneID(r.u32())
		c.LogWP[i] = r.u64()
	}
	n = r.count(8)
	c.Orphans = make([]uint64, n)
	for i := range c.Orphans {
		c.Orphans[i] = r.u64()
	}
	n = r.count(16)
	c.NAT = make([][2]uint64, n)
	for i := range c.NAT {
		c.NAT[i] = [2]uint64{r.u64(), r.u64()}
	}
	n = r.count(8)
	c.Valid = make([]Addr, n)
	for i := range c.Valid {
		c.Valid[i] = Addr(r.u64())
	}
	n = r.count(8)
	c.Invalid = make([]Addr, n)
	for i := range c.Invalid {
		c.Invalid[i] = Addr(r.u64())
	}
	if len(r.b) > 0 && !r.bad {
		// FeatureThreadedLog: the TL-opened log heads
		c.HasTL = true
		n = r.count(4)
		if n > 16 {
			return nil, corrupt("checkpoint", "%d threaded-logging heads", n)
		}
		c.TL = make([]ZoneID, n)
		for i := range c.TL {
			c.TL[i] = ZoneID(r.u32())
		}
	}
	if len(r.b) > 0 && !r.bad {
		// FeaturePrealloc: the inodes holding reservations
		c.HasPrealloc = true
		n = r.count(8)
		c.Prealloc = make([]uint64, n)
		for i := range c.Prealloc {
			c.Prealloc[i] = r.u64()
		}
	}
	if r.bad {
		return nil, corrupt("checkpoint", "truncated")
	}
	if len(r.b) != 0 {
		return nil, corrupt("checkpoint", "%d trailing bytes", len(r.b))
	}
	return c, nil
}

// ---- node blocks ----

const (
	nodeInode  = 1
	nodeDirect = 2

	nodeFlagFsync = 1 // written by fsync: roll forward up to here
	// nodeFlagBatch (with nodeFlagFsync, FeatureFsyncBatch): the inode was
	// written in one write with the direct nodes its fsync wrote, the
	// Batch nodes just before it in sequence; it is an fsync point only if
	// all of them are found (recover.go).
	nodeFlagBatch = 2
	nodeHdrLen    = 48
)

// nodeHeader is the footer-like header of every node block.
type nodeHeader struct {
	Kind  uint8
	Flags uint8
	Nid   uint64
	Ino   uint64
	CPVer uint64 // checkpoint version current when written
	Seq   uint64 // global node write sequence
	Batch uint32 // nodeFlagBatch: the direct nodes written with this inode (bytes 10..13; 0 before FeatureFsyncBatch)
}

// inodeBody is the content of an inode node block.
type inodeBody struct {
	Mode   uint32
	UID    uint32
	GID    uint32
	Nlink  uint32
	Size   uint64
	Atime  int64
	Mtime  int64
	Ctime  int64
	Parent uint64
	Flags  uint32
	Xattrs []xattr
	Rdev   uint64 // device number (inodeFlagRdev, FeatureInodeRdev): character and block devices
	// Blocks is the number of data blocks mapped (space used; holes and
	// punched ranges not counted), valid when BlocksKnown (inodeFlagBlocks):
	// inodes written by builds before the field read as unknown and have it
	// counted from their direct nodes when first needed.
	Blocks      uint64
	BlocksKnown bool
	// Prealloc are the file block ranges fallocate reserved
	// (inodeFlagPrealloc, FeaturePrealloc; space.go): the holes in them are
	// counted as used until written or released.
	Prealloc []blkRange
}

// Inode flags (inodeBody.Flags). Each flag says that a u64 field follows the
// xattrs, in this order.
const (
	inodeFlagRdev     = 1 << 0 // the device number
	inodeFlagBlocks   = 1 << 1 // the mapped data block count
	inodeFlagPrealloc = 1 << 2 // the reserved ranges: a u16 count, then a u64 pair each (not a u64)
	inodeFlagsExt     = inodeFlagRdev | inodeFlagBlocks | inodeFlagPrealloc
)

// extLen is the room the fields after the xattrs take in the inode block.
func (in *inodeBody) extLen() int {
	n := 0
	if in.Rdev != 0 {
		n += 8
	}
	if in.BlocksKnown {
		n += 8
	}
	if len(in.Prealloc) > 0 {
		n += 2 + 16*len(in.Prealloc)
	}
	return n
}

type xattr struct {
	Name  string
	Value []byte
}

func directEntries(bs int) int { return (bs - nodeHdrLen) / 8 }

// inodeFixedLen is the inode body size without xattrs.
const inodeFixedLen = 4*4 + 8 + 8*3 + 8 + 4 + 2

// xattrSpace is the room for xattrs in an inode block (the device number,
// when an inode has one, takes rdevLen of it).
func xattrSpace(bs int) int { return bs - nodeHdrLen - inodeFixedLen }

func encodeNode(h nodeHeader, body []byte, bs int) []byte {
	b := make([]byte, bs)
	binary.LittleEndian.PutUint32(b[0:], magicNode)
	b[8] = h.Kind
	b[9] = h.Flags
	binary.LittleEndian.PutUint32(b[10:], h.Batch)
	binary.LittleEndian.PutUint64(b[16:], h.Nid)
	binary.LittleEndian.PutUint64(b[24:], h.Ino)
	binary.LittleEndian.PutUint64(b[32:], h.CPVer)
	binary.LittleEndian.PutUint64(b[40:], h.Seq)
	copy(b[nodeHdrLen:], body)
	binary.LittleEndian.PutUint32(b[4:], checksum(b))
	return b
}

func decodeNodeHeader(b []byte) (nodeHeader, error) {
	if len(b) < nodeHdrLen+8 {
		return nodeHeader{}, corrupt("node block", "short (%d bytes)", len(b))
	}
	if binary.LittleEndian.Uint32(b) != magicNode {
		return nodeHeader{}, corrupt("node block", "bad magic")
	}
	want := binary.LittleEndian.Uint32(b[4:])
	c := checksum(b[:4])
	c = crc32.Update(c, ondisk.Castagnoli, []byte{0, 0, 0, 0})
	c = crc32.Update(c, ondisk.Castagnoli, b[8:])
	if c != want {
		return nodeHeader{}, corrupt("node block", "checksum mismatch")
	}
	h := nodeHeader{Kind: b[8], Flags: b[9], Nid: binary.LittleEndian.Uint64(b[16:]), Ino: binary.LittleEndian.Uint64(b[24:]),
		CPVer: binary.LittleEndian.Uint64(b[32:]), Seq: binary.LittleEndian.Uint64(b[40:]), Batch: binary.LittleEndian.Uint32(b[10:])}
	if h.Kind != nodeInode && h.Kind != nodeDirect {
		return h, corrupt("node block", "unknown kind %d", h.Kind)
	}
	if nidIno(h.Nid) != h.Ino || (h.Kind == nodeInode) != (nidIdx(h.Nid) == 0) {
		return h, corrupt("node block", "nid %#x does not match ino %d / kind %d", h.Nid, h.Ino, h.Kind)
	}
	return h, nil
}

func (in *inodeBody) encode() []byte {
	var w wbuf
	w.u32(in.Mode)
	w.u32(in.UID)
	w.u32(in.GID)
	w.u32(in.Nlink)
	w.u64(in.Size)
	w.u64(uint64(in.Atime))
	w.u64(uint64(in.Mtime))
	w.u64(uint64(in.Ctime))
	w.u64(in.Parent)
	flags := in.Flags &^ inodeFlagsExt
	if in.Rdev != 0 {
		flags |= inodeFlagRdev
	}
	if in.BlocksKnown {
		flags |= inodeFlagBlocks
	}
	if len(in.Prealloc) > 0 {
		flags |= inodeFlagPrealloc
	}
	w.u32(flags)
	w.u16(uint16(len(in.Xattrs)))
	for _, x := range in.Xattrs {
		w.bytes16([]byte(x.Name))
		w.bytes16(x.Value)
	}
	if in.Rdev != 0 {
		w.u64(in.Rdev)
	}
	if in.BlocksKnown {
		w.u64(in.Blocks)
	}
	if len(in.Prealloc) > 0 {
		w.u16(uint16(len(in.Prealloc)))
		for _, r := range in.Prealloc {
			w.u64(r.From)
			w.u64(r.To)
		}
	}
	return w.b
}

// xattrLen is the encoded size of one xattr.
func xattrLen(name string, v []byte) int { return 4 + len(name) + len(v) }

func decodeInode(b []byte) (nodeHeader, *inodeBody, error) {
	h, err := decodeNodeHeader(b)
	if err != nil {
		return h, nil, err
	}
	if h.Kind != nodeInode {
		return h, nil, corrupt("inode", "node %#x is not an inode", h.Nid)
	}
	r := rbuf{b: b[nodeHdrLen:]}
	in := &inodeBody{Mode: r.u32(), UID: r.u32(), GID: r.u32(), Nlink: r.u32(), Size: r.u64(),
		Atime: int64(r.u64()), Mtime: int64(r.u64()), Ctime: int64(r.u64()), Parent: r.u64(), Flags: r.u32()}
	n := int(r.u16())
	for i := 0; i < n && !r.bad; i++ {
		name := string(r.bytes16())
		in.Xattrs = append(in.Xattrs, xattr{Name: name, Value: r.bytes16()})
	}
	if r.bad {
		return h, nil, corrupt("inode", "ino %d: truncated", h.Ino)
	}
	// An older build that rewrote the inode kept the flags but not the
	// fields: the block's zero padding reads as rdev 0 and a block count of
	// 0. So a count of 0 with a non-zero size is recounted, and an inode
	// whose xattrs fill the block has no room left: rdev 0, count unknown.
	if in.Flags&inodeFlagRdev != 0 && len(r.b) >= 8 {
		in.Rdev = r.u64()
	}
	if in.Flags&inodeFlagBlocks != 0 && len(r.b) >= 8 {
		in.Blocks = r.u64()
		in.BlocksKnown = in.Blocks != 0 || in.Size == 0
	}
	if in.Flags&inodeFlagPrealloc != 0 {
		n := int(r.u16())
		if n > maxPreallocRanges {
			return h, nil, corrupt("inode", "ino %d: %d reserved ranges", h.Ino, n)
		}
		for i := 0; i < n && !r.bad; i++ {
			rg := blkRange{From: r.u64(), To: r.u64()}
			if rg.From >= rg.To || (i > 0 && rg.From <= in.Prealloc[i-1].To) {
				return h, nil, corrupt("inode", "ino %d: reserved range %d..%d out of order", h.Ino, rg.From, rg.To)
			}
			in.Prealloc = append(in.Prealloc, rg)
		}
		if r.bad {
			return h, nil, corrupt("inode", "ino %d: reserved ranges truncated", h.Ino)
		}
	}
	in.Flags &^= inodeFlagsExt
	return h, in, nil
}

func encodeDirect(addrs []Addr) []byte {
	b := make([]byte, 8*len(addrs))
	for i, a := range addrs {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(a))
	}
	return b
}

func decodeDirect(b []byte) (nodeHeader, []Addr, error) {
	h, err := decodeNodeHeader(b)
	if err != nil {
		return h, nil, err
	}
	if h.Kind != nodeDirect {
		return h, nil, corrupt("direct node", "node %#x is not a direct node", h.Nid)
	}
	n := directEntries(len(b))
	out := make([]Addr, n)
	for i := range out {
		out[i] = Addr(binary.LittleEndian.Uint64(b[nodeHdrLen+8*i:]))
	}
	return h, out, nil
}

// ---- dentry blocks ----

const dentryHdrLen = 20 // magic u32 | crc u32 | dir ino u64 | count u16 | rsv u16

type dentry struct {
	Name string
	Ino  uint64
	Type uint8 // DT_* of the target
}

func dentryLen(name string) int { return 8 + 1 + 1 + len(name) }

func encodeDentries(dir uint64, ents []dentry, bs int) []byte {
	b := make([]byte, bs)
	binary.LittleEndian.PutUint32(b[0:], magicDentry)
	binary.LittleEndian.PutUint64(b[8:], dir)
	binary.LittleEndian.PutUint16(b[16:], uint16(len(ents)))
	p := dentryHdrLen
	for _, e := range ents {
		binary.LittleEndian.PutUint64(b[p:], e.Ino)
		b[p+8] = e.Type
		b[p+9] = byte(len(e.Name))
		copy(b[p+10:], e.Name)
		p += dentryLen(e.Name)
	}
	binary.LittleEndian.PutUint32(b[4:], checksum(b))
	return b
}

func decodeDentries(b []byte, dir uint64) ([]dentry, error) {
	if len(b) < dentryHdrLen {
		return nil, corrupt("dentry block", "short")
	}
	if binary.LittleEndian.Uint32(b) != magicDentry {
		return nil, corrupt("dentry block", "dir %d: bad magic", dir)
	}
	want := binary.LittleEndian.Uint32(b[4:])
	c := checksum(b[:4])
	c = crc32.Update(c, ondisk.Castagnoli, []byte{0, 0, 0, 0})
	c = crc32.Update(c, ondisk.Castagnoli, b[8:])
	if c != want {
		return nil, corrupt("dentry block", "dir %d: checksum mismatch", dir)
	}
	if got := binary.LittleEndian.Uint64(b[8:]); got != dir {
		return nil, corrupt("dentry block", "belongs to dir %d, not %d", got, dir)
	}
	n := int(binary.LittleEndian.Uint16(b[16:]))
	p := dentryHdrLen
	out := make([]dentry, 0, n)
	for i := 0; i < n; i++ {
		if p+10 > len(b) {
			return nil, corrupt("dentry block", "dir %d: entry %d past the end", dir, i)
		}
		l := int(b[p+9])
		if l == 0 || p+10+l > len(b) {
			return nil, corrupt("dentry block", "dir %d: entry %d bad name length", dir, i)
		}
		out = append(out, dentry{Ino: binary.LittleEndian.Uint64(b[p:]), Type: b[p+8], Name: string(b[p+10 : p+10+l])})
		p += 10 + l
	}
	return out, nil
}
