package node

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zonefleet/zonefleet/pkg/clock"
)

// Rebuild throttle (a rebuild is throttled so tenants keep their
// bandwidth).
//
// Every node has one token bucket of bytes per second for rebuild traffic
// (Config.RebuildRate, ssdnode --rebuild-rate in MiB/s; 0 = unlimited). It
// is charged for the bytes this node's devices read or write for a
// rebuild, before the I/O:
//
//   - source side: a mirror copy's push (ZoneCompaction marked rebuild:
//     pushRemote reads the source before each 1 MiB send) and a raid5
//     survivor's PeerRead (served 1 MiB piece by piece);
//   - target side: a mirror copy's received data (PeerWrite marked
//     rebuild) and a raid5 target's writes (RebuildParityLeg, the PP
//     record included).
//
// So one limit bounds the device bandwidth a node gives to rebuilds,
// whichever role it has in them and however many run through it: a mirror
// leg moves at the rate (source and target each charge it once), a raid5
// leg is written at the rate while each survivor reads at most the rate
// (the target's network receives k streams, but its device writes one).
// Tenant I/O is never charged. The bucket waits on the node's deadline
// clock (Config.Clock, real time unless a test injects a virtual one), so
// a virtual clock turns the wait into advanced time. The bucket allows a
// burst of Config.RebuildBurst bytes after idling (default
// DefaultRebuildBurst: at most 1 MiB) and lends a request bigger than its
// tokens (the next waits longer), so a 1 MiB piece passes even when the
// burst is smaller.

// DefaultRebuildRate is the rebuild share of a node in MiB/s: about 5% of
// an emulated drive's modelled host link (flash.Defaults: 1.2 GB/s) and a
// minority of what the emulator moves on a small machine, so tenants keep
// most of the node; a 1 GiB leg still rebuilds in about 16 s.
const DefaultRebuildRate = 64

// DefaultRebuildBurst is the bucket size for a rate: an eighth of a
// second of it, at least 64 KiB and at most one 1 MiB stream piece. Capped
// so that what a node saves while idle (between the legs it takes part
// in) stays small against a zone: with a larger burst, legs that rotate
// among the nodes would each pass whole on saved tokens.
func DefaultRebuildBurst(rate int64) int64 {
	return min(max(rate/8, 64<<10), StreamChunkBytes)
}

// Bucket is a token bucket of bytes per second on a clock. A Bucket with a
// rate of 0 does not wait but still counts. Safe for concurrent use; the
// lock is never held while waiting.
type Bucket struct {
	clk   clock.Clock
	rate  float64 // bytes per second; 0 = unlimited
	burst float64 // bytes

	mu     sync.Mutex
	tokens float64 // may go negative: bytes lent to waiters
	last   time.Duration

	bytes  atomic.Uint64
	waited atomic.Int64 // nanoseconds of clock time callers were held back
	waits  atomic.Uint64
}

// NewBucket returns a bucket of rate bytes per second holding at most
// burst bytes (rate 0: unlimited; burst 0: DefaultRebuildBurst). It starts
// full.
func NewBucket(clk clock.Clock, rate, burst int64) *Bucket {
	if rate < 0 {
		rate = 0
	}
	if burst <= 0 {
		burst = DefaultRebuildBurst(rate)
	}
	return &Bucket{clk: clk, rate: float64(rate), burst: float64(burst), tokens: float64(burst), last: clk.Now()}
}

// Rate is the bucket's rate in bytes per second (0: unlimited).
func (b *Bucket) Rate() int64 { return int64(b.rate) }

// Wait takes n bytes from the bucket, waiting on the clock until they are
// there. A cancelled wait returns ctx's error and gives the bytes back.
func (b *Bucket) Wait(ctx context.Context, n int) error {
	if n <= 0 {
		return ctx.Err()
	}
	if b.rate == 0 {
		b.bytes.Add(uint64(n))
		return ctx.Err()
	}
	b.mu.Lock()
	now := b.refill()
	b.tokens -= float64(n)
	var at time.Duration
	if b.tokens < 0 {
		at = now + time.Duration(-b.tokens/b.rate*float64(time.Second))
	}
	b.mu.Unlock()
	if at > now {
		if err := b.clk.WaitUntil(ctx, at); err != nil {
			b.mu.Lock()
			b.refill()
			b.tokens = min(b.tokens+float64(n), b.burst)
			b.mu.Unlock()
			return err
		}
		b.waited.Add(int64(at - now))
		b.waits.Add(1)
	}
	b.bytes.Add(uint64(n))
	return nil
}

// refill adds the tokens earned since the last call (b.mu held) and
// returns now.
func (b *Bucket) refill() time.Duration {
	now := b.clk.Now()
	if now > b.last {
		b.tokens = min(b.burst, b.tokens+(now-b.last).Seconds()*b.rate)
		b.last = now
	}
	return now
}

// Stats are the bytes that passed, the clock time callers were held back
// and how many calls waited.
func (b *Bucket) Stats() (bytes uint64, waited time.Duration, waits uint64) {
	return b.bytes.Load(), time.Duration(b.waited.Load()), b.waits.Load()
}
