package zns

import (
	"fmt"
	"sync"
	"time"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// ipuRegion is the page-mapped SLC region of budget-based in-place updates
// (ZMS §6.2). Slot s holds one block at ipuBase + s*BlockSize.
type ipuRegion struct {
	mu    sync.Mutex
	owner []uint64 // lba+1 of the block in each slot, 0 = free
	used  uint64
	next  int
}

func newIPURegion(n int) *ipuRegion { return &ipuRegion{owner: make([]uint64, n)} }

// alloc finds k contiguous free slots (base aligned to k when aligned).
func (r *ipuRegion) alloc(k int, aligned bool, lba uint64) (int, bool) {
	n := len(r.owner)
	for i := 0; i < n; i++ {
		b := (r.next + i) % n
		if aligned && b%k != 0 {
			continue
		}
		if b+k > n {
			continue
		}
		ok := true
		for j := 0; j < k; j++ {
			if r.owner[b+j] != 0 {
				ok = false
				break
			}
		}
		if ok {
			for j := 0; j < k; j++ {
				r.owner[b+j] = lba + uint64(j) + 1
			}
			r.used += uint64(k)
			r.next = (b + k) % n
			return b, true
		}
	}
	return 0, false
}

func (r *ipuRegion) free(s uint32) {
	if r.owner[s] != 0 {
		r.owner[s] = 0
		r.used--
	}
}

func (r *ipuRegion) usedCount() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.used
}

// ipuLookup resolves off through the multi-granularity map: page entries
// first, then chunk entries (one entry for a chunk of contiguous slots).
func (z *zone) ipuLookup(off uint64, cb int) (uint32, bool) {
	if len(z.ipuPages) == 0 && len(z.ipuChunks) == 0 {
		return 0, false
	}
	if s, ok := z.ipuPages[uint32(off)]; ok {
		return s, true
	}
	if b, ok := z.ipuChunks[uint32(off)/uint32(cb)]; ok {
		return b + uint32(off)%uint32(cb), true
	}
	return 0, false
}

// ipuSet maps off to slot s, freeing the old slot and keeping the map at
// chunk granularity where it is contiguous. Caller holds z.mu and ipu.mu.
func (d *Device) ipuSet(z *zone, off uint64, s uint32) {
	cb := uint32(d.g.ChunkBlocks)
	o := uint32(off)
	c := o / cb
	if b, ok := z.ipuChunks[c]; ok { // demote
		delete(z.ipuChunks, c)
		for i := uint32(0); i < cb; i++ {
			z.ipuPages[c*cb+i] = b + i
		}
	}
	if old, ok := z.ipuPages[o]; ok && old != s {
		d.ipu.free(old)
	}
	z.ipuPages[o] = s
	// promote when the chunk is fully mapped to contiguous, aligned slots
	b, ok := z.ipuPages[c*cb]
	if !ok || b%cb != 0 {
		return
	}
	for i := uint32(1); i < cb; i++ {
		if v, ok := z.ipuPages[c*cb+i]; !ok || v != b+i {
			return
		}
	}
	for i := uint32(0); i < cb; i++ {
		delete(z.ipuPages, c*cb+i)
	}
	z.ipuChunks[c] = b
}

// dropIPUAt unmaps off (its data was superseded). Caller holds z.mu.
func (d *Device) dropIPUAt(z *zone, off uint64) {
	if len(z.ipuPages) == 0 && len(z.ipuChunks) == 0 {
		return
	}
	d.ipu.mu.Lock()
	defer d.ipu.mu.Unlock()
	cb := uint32(d.g.ChunkBlocks)
	o := uint32(off)
	if b, ok := z.ipuChunks[o/cb]; ok {
		delete(z.ipuChunks, o/cb)
		for i := uint32(0); i < cb; i++ {
			z.ipuPages[o/cb*cb+i] = b + i
		}
	}
	if s, ok := z.ipuPages[o]; ok {
		d.ipu.free(s)
		delete(z.ipuPages, o)
	}
}

// dropIPU frees all of a zone's IPU blocks. Caller holds z.mu.
func (d *Device) dropIPU(z *zone) {
	if len(z.ipuPages) == 0 && len(z.ipuChunks) == 0 {
		return
	}
	d.ipu.mu.Lock()
	defer d.ipu.mu.Unlock()
	cb := uint32(d.g.ChunkBlocks)
	for _, s := range z.ipuPages {
		d.ipu.free(s)
	}
	for _, b := range z.ipuChunks {
		for i := uint32(0); i < cb; i++ {
			d.ipu.free(b + i)
		}
	}
	z.ipuPages = map[uint32]uint32{}
	z.ipuChunks = map[uint32]uint32{}
}

func (d *Device) zoneIPURecs(z *zone) []ipuRec {
	var out []ipuRec
	cb := uint32(d.g.ChunkBlocks)
	for o, s := range z.ipuPages {
		out = append(out, ipuRec{z.idx, z.gen, uint64(o), s})
	}
	for c, b := range z.ipuChunks {
		for i := uint32(0); i < cb; i++ {
			out = append(out, ipuRec{z.idx, z.gen, uint64(c*cb + i), b + i})
		}
	}
	return out
}

func (d *Device) replayIPU(r ipuRec) {
	if r.zone >= d.g.Zones || int(r.slot) >= len(d.ipu.owner) || r.off >= d.g.ZoneCap {
		return
	}
	z := d.zones[r.zone]
	if r.gen != z.gen || z.state == StateEmpty || z.state == StateOffline {
		return
	}
	if prev := d.ipu.owner[r.slot]; prev != 0 {
		pz := d.zones[(prev-1)/d.g.ZoneSize]
		poff := (prev - 1) % d.g.ZoneSize
		if s, ok := pz.ipuLookup(poff, d.g.ChunkBlocks); ok && s == r.slot {
			d.dropIPUAt(pz, poff)
		}
	}
	d.ipu.owner[r.slot] = z.start + r.off + 1
	d.ipu.used++
	d.ipuSet(z, r.off, r.slot)
}

// ipuWrite is an in-place update of already written blocks [off, off+n) of a
// sequential zone into the SLC region, if the budget allows. Caller holds z.mu.
func (d *Device) ipuWrite(z *zone, off uint64, data []byte, t0 time.Duration) (IOResult, error) {
	bs := uint64(d.g.BlockSize)
	n := uint64(len(data)) / bs
	if off+n > z.wp {
		return IOResult{}, &zerr.InvalidArgumentError{Field: "lba", Reason: fmt.Sprintf("in-place update of [%d, %d) reaches past the write pointer %d", z.start+off, z.start+off+n, z.start+z.wp)}
	}
	slots, err := d.ipuAlloc(z, off, n)
	if err != nil {
		return IOResult{}, err
	}
	cb := uint64(d.g.ChunkBlocks)
	release := func() {
		d.ipu.mu.Lock()
		for _, s := range slots {
			d.ipu.free(s)
		}
		d.ipu.mu.Unlock()
	}
	for i := uint64(0); i < n; i++ {
		if _, err := d.f.WriteAt(data[i*bs:(i+1)*bs], d.lay.ipuBase+int64(slots[i])*int64(bs)); err != nil {
			release()
			return IOResult{}, d.zoneFail(z, "write IPU block", err)
		}
	}
	// The slots' data is durable before any record names it, and the
	// records are durable before the old slots are freed for reuse: a
	// power loss at any point leaves each block its old or its new
	// contents, never a slot another update reused.
	if err := d.f.Datasync(); err != nil {
		release()
		return IOResult{}, d.deviceFail("fdatasync IPU blocks", err)
	}
	for i := uint64(0); i < n; i++ {
		if err := d.jappend(ipuRec{z.idx, z.gen, off + i, slots[i]}.encode()); err != nil {
			// The device is read-only now; records already appended may
			// replay after a restart, which is fine: this write was not
			// acknowledged and the slots hold its data.
			release()
			return IOResult{}, err
		}
	}
	if err := d.j.sync(); err != nil {
		release()
		return IOResult{}, d.deviceFail("fdatasync journal", err)
	}
	d.ipu.mu.Lock()
	for i := uint64(0); i < n; i++ {
		d.ipuSet(z, off+i, slots[i])
	}
	d.ipu.mu.Unlock()
	d.st.hostW.Add(n)
	d.st.nandProg.Add((n + cb - 1) / cb)
	if d.model == nil {
		return IOResult{}, nil
	}
	ready := d.model.LinkIn(t0, len(data))
	done := ready
	for i := uint64(0); i < n; {
		k := min(n-i, cb)
		done = max(done, d.model.SLCProgram(ready, d.g.ChipOfLBA(z.start+off+i), int(k)))
		i += k
	}
	return IOResult{Submitted: t0, Completed: done}, nil
}

// ipuAlloc takes region slots for blocks [off, off+n) of z, chunk-aligned
// runs for whole chunks where it can, or returns a zerr.IPUBudgetError when
// the budget (counting only blocks not updated in place yet) or the region
// is spent. Caller holds z.mu.
func (d *Device) ipuAlloc(z *zone, off, n uint64) ([]uint32, error) {
	budget := uint64(d.conf().IPUBudgetBlocks)
	cb := uint64(d.g.ChunkBlocks)
	d.ipu.mu.Lock()
	var fresh uint64
	for o := off; o < off+n; o++ {
		if _, ok := z.ipuLookup(o, int(cb)); !ok {
			fresh++
		}
	}
	if d.ipu.used+n > uint64(len(d.ipu.owner)) || d.ipu.used+fresh > budget {
		used := d.ipu.used
		d.ipu.mu.Unlock()
		return nil, &zerr.IPUBudgetError{Budget: budget, Used: used}
	}
	slots := make([]uint32, n)
	var got []uint32
	ok := true
	for i := uint64(0); i < n && ok; {
		o := off + i
		k := uint64(1)
		if o%cb == 0 && n-i >= cb {
			if b, ok2 := d.ipu.alloc(int(cb), true, z.start+o); ok2 {
				for j := uint64(0); j < cb; j++ {
					slots[i+j] = uint32(b) + uint32(j)
					got = append(got, uint32(b)+uint32(j))
				}
				i += cb
				continue
			}
		}
		b, ok2 := d.ipu.alloc(1, false, z.start+o)
		if !ok2 {
			ok = false
			break
		}
		slots[i] = uint32(b)
		got = append(got, uint32(b))
		i += k
	}
	if !ok {
		for _, s := range got {
			d.ipu.free(s)
		}
		used := d.ipu.used
		d.ipu.mu.Unlock()
		return nil, &zerr.IPUBudgetError{Budget: budget, Used: used}
	}
	d.ipu.mu.Unlock()
	return slots, nil
}
