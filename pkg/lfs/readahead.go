package lfs

import (
	"context"

	"github.com/zonefleet/zonefleet/pkg/clock"
)

// Read-ahead. A read that starts where the previous read of the same inode
// ended is sequential; then, when the blocks prefetched so far end less than
// half a window past the read, one goroutine per inode reads the next window
// (Options.ReadAheadBlocks, default 256 = 1 MiB with 4 KiB blocks) with no
// lock held and inserts the blocks as clean pages into the page cache, which
// stays bounded by Options.CacheBlocks (clean pages are dropped first); the
// window starts past the blocks already cached, and a window wholly cached
// starts nothing (re-reads from the page cache cost no goroutine). A
// block is inserted only if, after the read, no page is cached for it and
// the file still maps it at the address read (a write, truncate or recycling
// in between wins). No read-ahead on the virtual clock (reproducible runs).

const defaultReadAhead = 256

func (fs *FS) readAheadBlocks() uint64 {
	switch {
	case fs.opts.ReadAheadBlocks < 0 || fs.clk.Kind() == clock.KindVirtual:
		return 0
	case fs.opts.ReadAheadBlocks == 0:
		return defaultReadAhead
	}
	return uint64(fs.opts.ReadAheadBlocks)
}

// noteRead records a read of in at [off, off+n) and starts read-ahead when
// the access is sequential (fs.mu held).
func (fs *FS) noteRead(in *inode, off uint64, n int) {
	win := fs.readAheadBlocks()
	if win == 0 || n == 0 {
		return
	}
	seq := off == in.raLast
	in.raLast = off + uint64(n)
	if !seq || in.raBusy {
		return
	}
	bs := uint64(fs.bs)
	end := (off + uint64(n) + bs - 1) / bs
	size := (in.body.Size + bs - 1) / bs
	if in.raUntil >= end+win/2 || end >= size {
		return
	}
	start := max(in.raUntil, end)
	stop := min(start+win, size)
	// skip what is cached already: a file read again from the page cache
	// starts no goroutine (and takes fs.mu no second time) per read
	for start < stop && in.pages.get(start) != nil {
		start++
	}
	if start >= stop {
		in.raUntil = max(in.raUntil, stop)
		return
	}
	fs.bg.mu.Lock()
	defer fs.bg.mu.Unlock()
	if fs.bg.down.Load() {
		return
	}
	in.raBusy = true
	fs.bg.wg.Add(1)
	go func() {
		defer fs.bg.wg.Done()
		fs.readAhead(in, start, stop)
	}()
}

// readAhead reads blocks [start, stop) of in into clean pages.
func (fs *FS) readAhead(in *inode, start, stop uint64) {
	ctx := context.Background()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	defer func() { in.raBusy = false }()
	bs := uint64(fs.bs)
	epd := fs.epd()
	mapped := func(blk uint64) Addr {
		d := in.dn[uint32(blk/epd+1)]
		if d == nil {
			return 0
		}
		return d.addrs[blk%epd]
	}
	for blk := start; blk < stop; {
		if fs.closed || in.gone {
			return
		}
		if in.pages.get(blk) != nil {
			blk++
			continue
		}
		a, err := fs.blockAddr(ctx, in, blk)
		if err != nil {
			return
		}
		if a == 0 {
			blk++
			continue
		}
		run := uint64(1)
		for blk+run < stop && in.pages.get(blk+run) == nil && mapped(blk+run) == a+Addr(run) && (a+Addr(run)).Zone() == a.Zone() {
			run++
		}
		buf := make([]byte, run*bs)
		if err := fs.readBlocks(ctx, a, buf); err != nil {
			return
		}
		if fs.ic.pages+int(run) > fs.opts.CacheBlocks {
			fs.evictCache()
		}
		for j := uint64(0); j < run; j++ {
			b := blk + j
			if in.pages.get(b) != nil || mapped(b) != a+Addr(j) || in.gone {
				continue
			}
			in.pages.set(b, &page{b: buf[j*bs : (j+1)*bs : (j+1)*bs]})
			fs.ic.pages++
			fs.stats.ReadAheadBlocks++
		}
		blk += run
		in.raUntil = blk
	}
	in.raUntil = stop
}
