package zns

import (
	"sync"
	"time"
)

// WithWriteBuffers models a mobile-class controller (the ZMS paper §2.2,
// §3.1): no power-loss protection and n volatile write buffers of one
// superpage (a flash page on each of a zone's d_zone chips: PageSize /
// BlockSize x DZone blocks). A zone written to takes a buffer; the blocks
// since its last superpage boundary wait there until the superpage is
// complete. Whatever a buffer holds when it must be emptied early — a FUA
// write or a Flush (no PLP: fsync cannot leave it in RAM), or another
// zone's write taking the least recently used buffer (write-buffer
// switching) — is programmed to SLC first (an unaligned buffer flush) and
// counted in Log.SLCBufferedBlocks; the operation that caused it waits for
// those SLC programs. n <= 0 turns the model off (the default: a FUA or
// Flush of a partial chunk costs no program).
func WithWriteBuffers(n int) Option { return func(o *options) { o.wbufs = n } }

// wbufs is the write-buffer model. mu is a leaf lock (taken under a zone's
// lock, never the other way round); the SLC programs it decides are booked
// on the flash model after it is released.
type wbufs struct {
	mu       sync.Mutex
	sp       uint64 // superpage in blocks
	bufs     []wbuf
	tick     uint64
	slc      uint64 // blocks programmed to SLC by unaligned flushes
	switches uint64 // buffers taken from another zone
}

// wbuf is one buffer: zone offsets [start, end) of zone wait in it.
type wbuf struct {
	zone       int64 // -1: free
	fcg        int
	start, end uint64
	used       uint64
}

// wspan is a buffer's content to program to SLC.
type wspan struct {
	fcg        int
	start, end uint64
}

func newWbufs(n int, sp uint64) *wbufs {
	if n <= 0 {
		return nil
	}
	w := &wbufs{sp: max(sp, 1), bufs: make([]wbuf, n)}
	for i := range w.bufs {
		w.bufs[i].zone = -1
	}
	return w
}

// drain empties buffer b into a span (nil when it held nothing).
func (w *wbufs) drain(b *wbuf, out []wspan) []wspan {
	if b.zone >= 0 && b.end > b.start {
		out = append(out, wspan{b.fcg, b.start, b.end})
		w.slc += b.end - b.start
	}
	b.start = b.end
	return out
}

// write records n blocks written at off of zone z (fcg its chip group),
// fua when the write must be durable; it returns the spans to program to
// SLC first.
func (w *wbufs) write(z uint64, fcg int, off, n uint64, fua bool) []wspan {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tick++
	var out []wspan
	var b *wbuf
	for i := range w.bufs {
		if w.bufs[i].zone == int64(z) {
			b = &w.bufs[i]
			break
		}
	}
	if b == nil {
		lru := 0
		for i := range w.bufs {
			if w.bufs[i].zone < 0 {
				lru = i
				break
			}
			if w.bufs[i].used < w.bufs[lru].used {
				lru = i
			}
		}
		b = &w.bufs[lru]
		if b.zone >= 0 {
			w.switches++
			out = w.drain(b, out)
		}
		*b = wbuf{zone: int64(z), fcg: fcg, start: off, end: off}
	}
	b.used = w.tick
	if off != b.end { // not where the buffer left off (a rewritten zone)
		b.start = off
	}
	b.end = off + n
	if bnd := b.end - b.end%w.sp; bnd > b.start {
		b.start = bnd // complete superpages are programmed as they fill
	}
	if fua {
		out = w.drain(b, out)
	}
	return out
}

// flush empties every buffer (a Flush).
func (w *wbufs) flush() []wspan {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []wspan
	for i := range w.bufs {
		out = w.drain(&w.bufs[i], out)
	}
	return out
}

// drop frees zone z's buffer without programming it (the zone was reset,
// or its last page was programmed as it filled).
func (w *wbufs) drop(z uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.bufs {
		if w.bufs[i].zone == int64(z) {
			w.bufs[i] = wbuf{zone: -1}
		}
	}
}

func (w *wbufs) counts() (slc, switches uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.slc, w.switches
}

// slcProgram books the SLC programs of spans from t (per chunk on its
// chip) and returns when the last ends.
func (d *Device) slcProgram(t time.Duration, spans []wspan) time.Duration {
	done := t
	cb := uint64(d.g.ChunkBlocks)
	for _, s := range spans {
		d.st.nandProg.Add((s.end - s.start + cb - 1) / cb)
		if d.model == nil {
			continue
		}
		for o := s.start; o < s.end; {
			k := min(s.end-o, cb-o%cb)
			done = max(done, d.model.SLCProgram(t, d.g.Locate(s.fcg, o).Chip, int(k)))
			o += k
		}
	}
	return done
}

// wbufWrite applies the write-buffer model to a host write of n blocks at
// off of z that the timing model completed as res (z.mu held).
func (d *Device) wbufWrite(z *zone, off, n uint64, fua bool, res IOResult) IOResult {
	if d.wb == nil {
		return res
	}
	spans := d.wb.write(z.idx, z.fcg, off, n, fua)
	if len(spans) == 0 {
		return res
	}
	t := res.Submitted
	if res.Completed > t {
		t = res.Completed
	}
	res.Completed = d.slcProgram(t, spans)
	return res
}

// wbufFlush programs every buffer's content to SLC for a Flush at t and
// returns when it is done.
func (d *Device) wbufFlush(t time.Duration) time.Duration {
	if d.wb == nil {
		return t
	}
	return d.slcProgram(t, d.wb.flush())
}
