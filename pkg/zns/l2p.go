package zns

import (
	"container/list"
	"fmt"
	"sync"
	"time"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// L2PGranularity is the unit one logical-to-physical map entry covers in
// the L2P cache model (WithL2P).
type L2PGranularity uint8

const (
	// L2PPage: one entry per logical block, the page-mapped FTL of a
	// block-interface flash device (the ZMS paper's baseline).
	L2PPage L2PGranularity = iota + 1
	// L2PChunk: one entry per chunk of L2PConfig.ChunkBlocks contiguous
	// blocks (ZMS's 4 MiB chunk mapping).
	L2PChunk
	// L2PZone: one entry per zone, the mapping a zoned device needs for
	// sequentially written zones (ZMS §5). In-place updated blocks keep
	// their own page and chunk entries in the IPU map, which the budget
	// keeps small enough to stay resident.
	L2PZone
)

func (g L2PGranularity) String() string {
	switch g {
	case L2PPage:
		return "page"
	case L2PChunk:
		return "chunk"
	case L2PZone:
		return "zone"
	}
	return fmt.Sprintf("granularity(%d)", uint8(g))
}

// ParseL2PGranularity parses "page", "chunk" or "zone".
func ParseL2PGranularity(s string) (L2PGranularity, error) {
	for _, g := range []L2PGranularity{L2PPage, L2PChunk, L2PZone} {
		if g.String() == s {
			return g, nil
		}
	}
	return 0, &zerr.InvalidArgumentError{Field: "l2p_granularity", Reason: fmt.Sprintf("%q is not page, chunk or zone", s)}
}

// L2PConfig configures the L2P cache model: a controller without DRAM
// keeps only CacheBytes of its map in SRAM and loads the rest on demand in
// map pages of MapPageBytes (DFTL, the ZMS paper §2.1); a read whose map
// page is not cached first reads that map page from flash.
type L2PConfig struct {
	Granularity  L2PGranularity
	CacheBytes   int    // SRAM for cached map pages (at least one map page)
	EntryBytes   int    // bytes per map entry; 0: 4
	MapPageBytes int    // bytes per map page, the unit loaded on a miss; 0: 4096
	ChunkBlocks  uint64 // blocks per L2PChunk entry; 0: 1024 (4 MiB of 4 KiB blocks)
}

// WithL2P makes reads pay for L2P cache misses (the model only: the
// emulator's own map is always in memory). Without it a drive models no
// map lookups at all.
func WithL2P(c L2PConfig) Option { return func(o *options) { o.l2p = &c } }

// l2pCache is an LRU of map pages (the L2P cache model). Its mutex is a
// leaf: taken with or without a zone lock, never while holding another.
type l2pCache struct {
	mu       sync.Mutex
	unit     uint64 // blocks per entry
	perPage  uint64 // entries per map page
	capPages int
	lru      *list.List               // of uint64 map page numbers, most recent first
	at       map[uint64]*list.Element // map page -> its element
	chips    int
	lookups  uint64
	misses   uint64
}

func newL2PCache(c L2PConfig, zoneSize uint64, chips int) (*l2pCache, error) {
	if c.EntryBytes == 0 {
		c.EntryBytes = 4
	}
	if c.MapPageBytes == 0 {
		c.MapPageBytes = 4096
	}
	if c.ChunkBlocks == 0 {
		c.ChunkBlocks = 1024
	}
	if c.EntryBytes < 0 || c.MapPageBytes < c.EntryBytes || c.CacheBytes < c.MapPageBytes {
		return nil, &zerr.InvalidArgumentError{Field: "l2p", Reason: fmt.Sprintf("cache %d B, map page %d B, entry %d B: need entry <= map page <= cache", c.CacheBytes, c.MapPageBytes, c.EntryBytes)}
	}
	l := &l2pCache{perPage: uint64(c.MapPageBytes / c.EntryBytes), capPages: c.CacheBytes / c.MapPageBytes,
		lru: list.New(), at: map[uint64]*list.Element{}, chips: max(chips, 1)}
	switch c.Granularity {
	case L2PPage:
		l.unit = 1
	case L2PChunk:
		l.unit = c.ChunkBlocks
	case L2PZone:
		l.unit = zoneSize
	default:
		return nil, &zerr.InvalidArgumentError{Field: "l2p_granularity", Reason: fmt.Sprintf("%d is not page, chunk or zone", c.Granularity)}
	}
	return l, nil
}

// touch looks up the map pages of the ranges and returns those that
// missed (now cached, the least recently used ones evicted), in order.
func (l *l2pCache) touch(rs []Range) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var miss []uint64
	for _, r := range rs {
		first, last := r.LBA/l.unit/l.perPage, (r.LBA+r.Count-1)/l.unit/l.perPage
		for mp := first; mp <= last; mp++ {
			l.lookups++
			if e, ok := l.at[mp]; ok {
				l.lru.MoveToFront(e)
				continue
			}
			l.misses++
			miss = append(miss, mp)
			l.at[mp] = l.lru.PushFront(mp)
			if l.lru.Len() > l.capPages {
				old := l.lru.Back()
				l.lru.Remove(old)
				delete(l.at, old.Value.(uint64))
			}
		}
	}
	return miss
}

func (l *l2pCache) counts() (lookups, misses uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lookups, l.misses
}

// l2pTranslate returns when the map entries of rs are in the controller's
// memory for a read submitted at t0: t0 when every map page hit, else after
// the flash reads of the missed map pages (each on the chip its number
// selects; misses on different chips overlap).
func (d *Device) l2pTranslate(t0 time.Duration, rs []Range) time.Duration {
	if d.l2p == nil {
		return t0
	}
	miss := d.l2p.touch(rs)
	done := t0
	for _, mp := range miss {
		d.st.nandRead.Add(1)
		if d.model != nil {
			done = max(done, d.model.Read(t0, int(mp%uint64(d.l2p.chips)), 1))
		}
	}
	return done
}

// newL2P builds the L2P cache model of WithL2P (nil without it).
func (o options) newL2P(lay layout) (*l2pCache, error) {
	if o.l2p == nil {
		return nil, nil
	}
	return newL2PCache(*o.l2p, lay.g.ZoneSize, lay.g.Chips)
}
