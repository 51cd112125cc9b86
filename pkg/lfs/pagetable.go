package lfs

import "sort"

// pageTable is a file's cached pages by block number: chunks of
// pageChunkSize consecutive blocks in a map keyed by block/pageChunkSize.
// It replaced a map keyed by block: a 64 MiB file's 16,384 cached pages
// made that map the file system's biggest (probes on every block written,
// committed or read from the cache, and growth); a chunk keeps 64 pages
// behind one map entry. The zero value is empty and ready to use. It has
// no lock of its own and never writes on lookup, so it has a map's
// concurrency rules: lookups may run together, a change excludes
// everything else (callers hold the inode's or the file system's lock as
// they did for the map).
type pageTable struct {
	chunks map[uint64]*pageChunk
	n      int // pages
}

const pageChunkSize = 64

type pageChunk struct {
	p [pageChunkSize]*page
	n int // non-nil slots
}

// get is the cached page of blk, or nil.
func (t *pageTable) get(blk uint64) *page {
	c := t.chunks[blk/pageChunkSize]
	if c == nil {
		return nil
	}
	return c.p[blk%pageChunkSize]
}

// set caches p (not nil) as the page of blk, replacing any.
func (t *pageTable) set(blk uint64, p *page) {
	if t.chunks == nil {
		t.chunks = map[uint64]*pageChunk{}
	}
	k := blk / pageChunkSize
	c := t.chunks[k]
	if c == nil {
		c = &pageChunk{}
		t.chunks[k] = c
	}
	s := &c.p[blk%pageChunkSize]
	if *s == nil {
		c.n++
		t.n++
	}
	*s = p
}

// del drops blk's page, if any.
func (t *pageTable) del(blk uint64) {
	k := blk / pageChunkSize
	c := t.chunks[k]
	if c == nil {
		return
	}
	s := &c.p[blk%pageChunkSize]
	if *s == nil {
		return
	}
	*s = nil
	c.n--
	t.n--
	if c.n == 0 {
		delete(t.chunks, k)
	}
}

// len is the number of cached pages.
func (t *pageTable) len() int { return t.n }

// blocks returns, in increasing order, the blocks in [from, to) that have a
// cached page now: a snapshot, so the caller may drop or replace pages as
// it goes (look each up again).
func (t *pageTable) blocks(from, to uint64) []uint64 {
	if from >= to || t.n == 0 {
		return nil
	}
	keys := make([]uint64, 0, len(t.chunks))
	for k := range t.chunks {
		if k >= from/pageChunkSize && k <= (to-1)/pageChunkSize {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	var out []uint64
	for _, k := range keys {
		c := t.chunks[k]
		for i, p := range c.p {
			if b := k*pageChunkSize + uint64(i); p != nil && b >= from && b < to {
				out = append(out, b)
			}
		}
	}
	return out
}

// any reports whether a block in [from, to) has a cached page.
func (t *pageTable) any(from, to uint64) bool {
	if from >= to || t.n == 0 {
		return false
	}
	lo, hi := from/pageChunkSize, (to-1)/pageChunkSize
	if uint64(len(t.chunks)) < hi-lo+1 {
		for k, c := range t.chunks {
			if k >= lo && k <= hi && c.anyIn(k, from, to) {
				return true
			}
		}
		return false
	}
	for k := lo; k <= hi; k++ {
		if c := t.chunks[k]; c != nil && c.anyIn(k, from, to) {
			return true
		}
	}
	return false
}

func (c *pageChunk) anyIn(k, from, to uint64) bool {
	for i, p := range c.p {
		if b := k*pageChunkSize + uint64(i); p != nil && b >= from && b < to {
			return true
		}
	}
	return false
}
