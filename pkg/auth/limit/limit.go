// Package limit holds the bounded state a server keeps per client-chosen key:
// an LRU cache with a hard entry limit and optional per-entry expiry, a keyed
// token-bucket limiter whose set of buckets is itself bounded, MissGuard,
// which combines both to protect the node's grant cache, and Labels, which
// bounds the values of a metric label that come from callers.
//
// Why: every map keyed by something a client controls (a namespace name, a
// zone address, a token) is a memory-exhaustion and an amplification vector.
// Every grant-cache miss on a node costs one linearizable etcd read, so a
// client sending random namespaces or zones could load etcd at the rate it
// could send RPCs. With authentication the namespace is no longer
// free-form (it comes from a verified token), but a tenant can still probe
// zones it does not own; MissGuard answers repeated misses from a negative
// cache and caps the etcd reads per namespace and in total.
//
// Concurrency: every type is safe for concurrent use; each holds one mutex
// for the duration of an in-memory operation only (no I/O under the lock).
// Time comes from an injected now function (wall time; tests pass a fake).
//
// Failure behaviour: nothing here blocks or fails open. When a limit is hit
// the caller gets ErrRateLimited and must answer the RPC without the etcd
// read (the node maps it to RESOURCE_EXHAUSTED / UNAVAILABLE).
package limit

import (
	"container/list"
	"errors"
	"sync"
	"time"
)

// LRU is a least-recently-used cache of at most Max entries. An entry may
// carry an expiry; expired entries are treated as absent and dropped lazily.
type LRU[K comparable, V any] struct {
	mu    sync.Mutex
	max   int
	now   func() time.Time
	ll    *list.List
	items map[K]*list.Element
}

type lruEntry[K comparable, V any] struct {
	key     K
	val     V
	expires time.Time // zero: never
}

// NewLRU returns a cache holding at most max (>= 1) entries. now may be nil
// (time.Now).
func NewLRU[K comparable, V any](max int, now func() time.Time) *LRU[K, V] {
	if max < 1 {
		max = 1
	}
	if now == nil {
		now = time.Now
	}
	return &LRU[K, V]{max: max, now: now, ll: list.New(), items: make(map[K]*list.Element)}
}

// Get returns the value of key and marks it recently used.
func (c *LRU[K, V]) Get(key K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var zero V
	el, ok := c.items[key]
	if !ok {
		return zero, false
	}
	e := el.Value.(*lruEntry[K, V])
	if !e.expires.IsZero() && !c.now().Before(e.expires) {
		c.ll.Remove(el)
		delete(c.items, key)
		return zero, false
	}
	c.ll.MoveToFront(el)
	return e.val, true
}

// Put stores key without expiry, evicting the least recently used entry when full.
func (c *LRU[K, V]) Put(key K, val V) { c.PutUntil(key, val, time.Time{}) }

// PutTTL stores key until now+ttl.
func (c *LRU[K, V]) PutTTL(key K, val V, ttl time.Duration) {
	c.PutUntil(key, val, c.now().Add(ttl))
}

// PutUntil stores key until the given time (zero: no expiry).
func (c *LRU[K, V]) PutUntil(key K, val V, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		e := el.Value.(*lruEntry[K, V])
		e.val, e.expires = val, expires
		c.ll.MoveToFront(el)
		return
	}
	for c.ll.Len() >= c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.items, old.Value.(*lruEntry[K, V]).key)
	}
	c.items[key] = c.ll.PushFront(&lruEntry[K, V]{key: key, val: val, expires: expires})
}

// Remove drops key.
func (c *LRU[K, V]) Remove(key K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.ll.Remove(el)
		delete(c.items, key)
	}
}

// RemoveIf drops every entry whose key matches pred.
func (c *LRU[K, V]) RemoveIf(pred func(K) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, el := range c.items {
		if pred(k) {
			c.ll.Remove(el)
			delete(c.items, k)
		}
	}
}

// Clear drops every entry.
func (c *LRU[K, V]) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ll.Init()
	clear(c.items)
}

// Len is the number of stored entries (expired ones included until touched).
func (c *LRU[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}

// ErrRateLimited: a limiter has no token left for the key (or in total).
var ErrRateLimited = errors.New("rate limited")

// Limiter is a set of token buckets, one per key, plus one global bucket.
// Allow(key) takes a token from both. At most MaxKeys buckets are kept: a
// key evicted from the LRU comes back with a full bucket, which is why the
// global bucket exists — it bounds the total rate no matter how many keys a
// caller invents.
type Limiter struct {
	mu      sync.Mutex
	now     func() time.Time
	rate    float64 // tokens per second per key
	burst   float64
	global  bucket
	grate   float64
	gburst  float64
	buckets *LRU[string, *bucket]
}

type bucket struct {
	tokens float64
	last   time.Time
}

// LimiterConfig sizes a Limiter. Zero fields take the defaults in parentheses.
type LimiterConfig struct {
	PerKeyRate  float64 // tokens/s per key (10)
	PerKeyBurst float64 // bucket size per key (20)
	GlobalRate  float64 // tokens/s over all keys (200)
	GlobalBurst float64 // (400)
	MaxKeys     int     // buckets kept (4096)
	Now         func() time.Time
}

// NewLimiter returns a limiter; every bucket starts full.
func NewLimiter(cfg LimiterConfig) *Limiter {
	def := func(v, d float64) float64 {
		if v <= 0 {
			return d
		}
		return v
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = 4096
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	l := &Limiter{
		now:   cfg.Now,
		rate:  def(cfg.PerKeyRate, 10),
		burst: def(cfg.PerKeyBurst, 20),
		grate: def(cfg.GlobalRate, 200), gburst: def(cfg.GlobalBurst, 400),
		buckets: NewLRU[string, *bucket](cfg.MaxKeys, cfg.Now),
	}
	l.global = bucket{tokens: l.gburst, last: cfg.Now()}
	return l
}

func (b *bucket) refill(now time.Time, rate, burst float64) {
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = min(burst, b.tokens+dt*rate)
		b.last = now
	}
}

// Allow takes one token for key. It returns false (and takes nothing) when
// either the key's bucket or the global bucket is empty.
func (l *Limiter) Allow(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b, ok := l.buckets.Get(key)
	if !ok {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets.Put(key, b)
	}
	b.refill(now, l.rate, l.burst)
	l.global.refill(now, l.grate, l.gburst)
	if b.tokens < 1 || l.global.tokens < 1 {
		return false
	}
	b.tokens--
	l.global.tokens--
	return true
}

// Keys is the number of buckets held (bounded by MaxKeys).
func (l *Limiter) Keys() int { return l.buckets.Len() }

// MissGuard sits in front of an expensive authoritative lookup (the node's
// linearizable etcd read on a grant-cache miss). Before the lookup the
// caller asks Admit; after a lookup that found nothing it calls RecordMiss;
// when the authoritative state changes for a key (a watch event) it calls
// Forget, and ForgetAll after a watch reconnect.
type MissGuard struct {
	neg     *LRU[string, struct{}]
	ttl     time.Duration
	limiter *Limiter
}

// MissGuardConfig sizes a MissGuard. Zero fields take the defaults.
type MissGuardConfig struct {
	NegativeEntries int           // remembered misses (16384)
	NegativeTTL     time.Duration // how long a miss is remembered (2s)
	Limiter         LimiterConfig // lookups allowed per namespace and in total
}

// ErrKnownMiss: the key was looked up recently and was absent.
var ErrKnownMiss = errors.New("recently looked up and absent")

// NewMissGuard returns a guard.
func NewMissGuard(cfg MissGuardConfig) *MissGuard {
	if cfg.NegativeEntries <= 0 {
		cfg.NegativeEntries = 16384
	}
	if cfg.NegativeTTL <= 0 {
		cfg.NegativeTTL = 2 * time.Second
	}
	return &MissGuard{
		neg:     NewLRU[string, struct{}](cfg.NegativeEntries, cfg.Limiter.Now),
		ttl:     cfg.NegativeTTL,
		limiter: NewLimiter(cfg.Limiter),
	}
}

// Admit says whether the caller may do the authoritative lookup of key on
// behalf of namespace ns: nil (go ahead), ErrKnownMiss (answer "absent"
// without a lookup) or ErrRateLimited (answer without a lookup, try later).
func (g *MissGuard) Admit(ns, key string) error {
	if _, ok := g.neg.Get(key); ok {
		return ErrKnownMiss
	}
	if !g.limiter.Allow(ns) {
		return ErrRateLimited
	}
	return nil
}

// RecordMiss remembers that key was absent.
func (g *MissGuard) RecordMiss(key string) { g.neg.PutTTL(key, struct{}{}, g.ttl) }

// Forget drops a remembered miss (the key now exists, e.g. a grant was written).
func (g *MissGuard) Forget(key string) { g.neg.Remove(key) }

// ForgetAll drops every remembered miss (after a watch reconnect the cache
// may have missed puts).
func (g *MissGuard) ForgetAll() { g.neg.Clear() }

// Remembered is the number of remembered misses.
func (g *MissGuard) Remembered() int { return g.neg.Len() }
