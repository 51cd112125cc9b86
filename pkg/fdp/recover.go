package fdp

import (
	"errors"
	"io"
	"os"
	"sync"

	"github.com/zonefleet/zonefleet/pkg/vfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// blockMeta is what the scan learns of a block: the reclaim unit of its
// newest incarnation (reclaim unit ids only grow) and how many of its
// slots that incarnation wrote.
type blockMeta struct {
	ru      uint64
	group   uint16
	handle  uint16
	gc      bool
	written int
	seen    bool
}

func (d *Device) initState() {
	g := d.g
	nb := g.chips * g.blocksPerChip
	d.l2p = make([]int32, g.lbas)
	for i := range d.l2p {
		d.l2p[i] = -1
	}
	d.seq = make([]uint64, g.lbas)
	d.copies = make([]uint32, g.lbas)
	d.p2l = make([]int32, g.slots)
	for i := range d.p2l {
		d.p2l[i] = -1
	}
	d.blkRU = make([]*ru, nb)
	d.erases = make([]uint32, nb)
	d.pins = make([]int32, nb)
	d.pending = make([]bool, nb)
	d.free = make([][]int, g.chips)
	d.nfree = make([]int, g.groups)
	d.gcBusy = make([]bool, g.groups)
	d.gcDone = sync.NewCond(&d.mu)
	d.rus = map[uint64]*ru{}
	d.handles = make([][]handleState, g.groups)
	d.gcRU = make([][]*ru, g.groups)
	for i := range g.groups {
		d.handles[i] = make([]handleState, len(d.cfg.Handles))
		d.gcRU[i] = make([]*ru, len(d.cfg.Handles)+1)
	}
}

// recover rebuilds the mapping: every intact out-of-band record whose
// data matches its checksum is a candidate for its LBA, the newest
// (sequence number, then GC moves) wins; trim records newer than the
// winner unmap it. Blocks holding no winner are free.
func (d *Device) recover() error {
	d.initState()
	g := d.g
	jpath := d.path + ".journal"
	jb, err := vfs.ReadFile(d.o.fs, jpath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return &zerr.CorruptError{Path: jpath, Reason: "journal missing"}
		}
		return ioErr("open journal", err)
	}
	if err := checkJournalHeader(jpath, jb, d.uuid); err != nil {
		return err
	}
	var trims []record
	var maxSeq uint64
	tail := 0
	for off := 64; off+recSize <= len(jb); off += recSize {
		r, ok := decodeRecord(jb[off:])
		if !ok {
			tail = len(jb) - off
			break
		}
		switch r.typ {
		case recTrim:
			if r.a < g.lbas && r.b <= g.lbas-r.a {
				trims = append(trims, r)
				maxSeq = max(maxSeq, r.c)
			}
		case recStats:
			d.st.HostBytesWritten, d.st.MediaBytesWritten, d.st.MediaBytesErased = r.a, r.b, r.c
		}
	}
	if tail > 0 {
		d.o.log.Info("fdp journal: dropped a torn tail", "path", jpath, "bytes", tail)
	}

	metas := make([]blockMeta, g.chips*g.blocksPerChip)
	var maxRU uint64
	anyRU := false
	const batch = 1024 // slots per read
	ob := make([]byte, batch*oobSize)
	db := make([]byte, batch*g.bs)
	for base := 0; base < g.slots; base += batch {
		n := min(batch, g.slots-base)
		if _, err := d.data.ReadAt(ob[:n*oobSize], d.l.oobOff(base)); err != nil && !errors.Is(err, io.EOF) {
			return ioErr("recover", err)
		}
		loaded := false
		for i := range n {
			o, ok := decodeOOB(ob[i*oobSize:])
			if !ok || o.lba >= g.lbas || int(o.group) >= g.groups || (o.handle != gcShared && int(o.handle) >= len(d.cfg.Handles)) {
				continue
			}
			if !loaded {
				if _, err := d.data.ReadAt(db[:n*g.bs], d.l.dataOff(base)); err != nil && !errors.Is(err, io.EOF) {
					return ioErr("recover", err)
				}
				loaded = true
			}
			if crc(db[i*g.bs:(i+1)*g.bs]) != o.dcrc {
				continue // torn or never reached the disk
			}
			s := base + i
			b := d.blockOf(s)
			if d.groupOfChip(d.chipOf(b)) != int(o.group) {
				continue
			}
			m := &metas[b]
			if !m.seen || o.ru > m.ru {
				*m = blockMeta{ru: o.ru, group: o.group, handle: o.handle, gc: o.gc, seen: true}
			}
			if o.ru == m.ru {
				m.written++
			}
			if o.ru >= maxRU {
				maxRU, anyRU = o.ru, true
			}
			maxSeq = max(maxSeq, o.seq)
			if o.seq == 0 {
				continue // sequence numbers start at 1
			}
			l := o.lba
			if o.seq > d.seq[l] || o.seq == d.seq[l] && o.copies > d.copies[l] {
				d.l2p[l] = int32(s)
				d.seq[l] = o.seq
				d.copies[l] = o.copies
			}
		}
	}
	for _, t := range trims {
		for l := t.a; l < t.a+t.b; l++ {
			if t.c > d.seq[l] {
				d.l2p[l] = -1
				d.seq[l] = t.c
				d.copies[l] = 0
			}
		}
	}
	// Rebuild the reclaim units from the blocks their winners are in.
	valid := make([]int, len(metas))
	for l, s := range d.l2p {
		if s >= 0 {
			d.p2l[s] = int32(l)
			valid[d.blockOf(int(s))]++
			d.mapped++
		}
	}
	for b, m := range metas {
		c := d.chipOf(b)
		if valid[b] == 0 {
			d.free[c] = append(d.free[c], b)
			d.nfree[d.groupOfChip(c)]++
			continue
		}
		r := d.rus[m.ru]
		if r == nil {
			h := int(m.handle)
			r = &ru{id: m.ru, group: int(m.group), handle: h, gc: m.gc}
			d.rus[m.ru] = r
		}
		r.blocks = append(r.blocks, b)
		r.valid += valid[b]
		r.written += m.written
		d.blkRU[b] = r
	}
	for _, r := range d.rus {
		if r.written < r.cap(g) {
			d.event(EventRUNotFullyWritten, r, uint64(r.cap(g)-r.written))
		}
		r.written = r.cap(g) // closed: its unwritten slots wait for GC
	}
	d.nextSeq = maxSeq + 1
	if anyRU {
		d.nextRU = maxRU + 1
	}
	return d.compactJournal()
}

// compactJournal replaces the journal with one holding the statistics and
// a trim, at a new sequence number, of every unmapped LBA: older
// out-of-band records of those LBAs stay cancelled, and nothing else of
// the old journal is needed (every mapped LBA's winner is on the flash).
func (d *Device) compactJournal() error {
	s := d.nextSeq
	d.nextSeq++
	out := encodeJournalHeader(d.uuid)
	rec := make([]byte, recSize)
	record{typ: recStats, a: d.st.HostBytesWritten, b: d.st.MediaBytesWritten, c: d.st.MediaBytesErased}.encode(rec)
	out = append(out, rec...)
	for l := uint64(0); l < d.g.lbas; {
		if d.l2p[l] >= 0 {
			l++
			continue
		}
		e := l
		for e < d.g.lbas && d.l2p[e] < 0 {
			e++
		}
		record{typ: recTrim, a: l, b: e - l, c: s}.encode(rec)
		out = append(out, rec...)
		l = e
	}
	jpath := d.path + ".journal"
	if d.jnl != nil {
		d.jnl.Close()
		d.jnl = nil
	}
	if err := vfs.WriteFileAtomic(d.o.fs, jpath, out); err != nil {
		return ioErr("journal checkpoint", err)
	}
	if d.closed {
		return nil
	}
	f, err := d.o.fs.OpenFile(jpath, os.O_RDWR, 0)
	if err != nil {
		return ioErr("journal checkpoint", err)
	}
	d.jnl = f
	d.jOff = int64(len(out))
	return nil
}
