// Package bufpool recycles the large byte buffers of the write path.
//
// The file system gathers the dirty pages of a write-back into one buffer
// when its volume cannot take the pages as they are (no lfs.VectorWriter;
// megabytes, written once and dropped after the write). Allocating them
// fresh each time cost more than the copy itself: the heap hands back
// memory the runtime has returned to the kernel, so every page of a new
// buffer faults in (about 25 µs a fault measured in this project's VMs,
// six times the cost of copying the page), and the allocation rate drives
// the garbage collector. A sync.Pool does not help enough: it drops its
// buffers at every second collection, which at this allocation rate is
// every few tens of milliseconds.
//
// A Pool keeps buffers in power-of-two size classes from 64 KiB to 16 MiB
// on free lists that the garbage collector leaves alone, up to a retained
// total (Limit, 32 MiB by default); buffers beyond it, and requests above
// the largest class, are left to the garbage collector.
//
// Concurrency: a Pool is safe for concurrent use (one mutex, held only to
// push or pop a free list). Ownership: a buffer returned by Get belongs to
// the caller until it calls Put, and must not be used after that. A buffer
// that may still be read by someone else — a transport that was still
// sending it when its call failed or was cancelled — must simply not be
// Put: the garbage collector frees it.
//
// Buffers sent to the nodes. The zero-copy codec (pkg/wire) hands a write's
// buffer to gRPC's transport, which reads it while it sends. The users of
// this package put a sent buffer back only after the whole write returned
// success, yet a sender can still read it then: an earlier attempt that was
// abandoned (a per-attempt deadline, a copy of a mirror that failed) while a
// retry, or the same blocks in another zone, succeeded. The transport drops a
// cancelled stream within one 16 KiB frame, but that frame may carry
// recycled bytes and complete the old request. Such a request can only
// write where no data lfs uses is: at a block the successful attempt
// already wrote (the zone's write pointer, or a threaded-logging hole
// filled once, refuses it), or in a zone whose write failed and whose blocks
// past the acknowledged prefix the file system never maps. (This is why a
// late frame is no reason to give up pooling. pkg/lfs
// TestFailedWriteBuffersAreNotRecycled checks the other half: a buffer of a
// write that failed is never handed out again.)
package bufpool

import (
	"math/bits"
	"sync"
)

const (
	minShift = 16 // 64 KiB
	maxShift = 24 // 16 MiB

	// DefaultLimit is the bytes a Pool retains when its Limit is 0.
	DefaultLimit = 32 << 20
)

// Pool is a set of size-classed free lists. The zero value is ready.
type Pool struct {
	// Limit bounds the bytes of the buffers the Pool keeps for reuse
	// (0: DefaultLimit). Set it before the first Put.
	Limit int

	mu       sync.Mutex
	free     [maxShift - minShift + 1][][]byte
	retained int
}

// class returns the size class of a buffer of n bytes, or -1 when n is
// above the largest class.
func class(n int) int {
	if n <= 1<<minShift {
		return 0
	}
	s := bits.Len(uint(n - 1)) // smallest s with 1<<s >= n
	if s > maxShift {
		return -1
	}
	return s - minShift
}

// Get returns a buffer of length n. Its contents are arbitrary: the caller
// overwrites all of it (or clears what it does not).
func (p *Pool) Get(n int) []byte {
	c := class(n)
	if c < 0 {
		return make([]byte, n)
	}
	p.mu.Lock()
	if f := p.free[c]; len(f) > 0 {
		b := f[len(f)-1]
		f[len(f)-1] = nil
		p.free[c] = f[:len(f)-1]
		p.retained -= cap(b)
		p.mu.Unlock()
		return b[:n]
	}
	p.mu.Unlock()
	return make([]byte, n, 1<<(c+minShift))
}

// Put gives b back for reuse. Buffers whose capacity is not exactly a size
// class (not from Get, or oversized), and buffers past the Pool's Limit,
// are dropped.
func (p *Pool) Put(b []byte) {
	n := cap(b)
	c := class(n)
	if c < 0 || n != 1<<(c+minShift) {
		return
	}
	limit := p.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	p.mu.Lock()
	if p.retained+n <= limit {
		p.free[c] = append(p.free[c], b[:n])
		p.retained += n
	}
	p.mu.Unlock()
}

// Retained returns the bytes of the buffers the Pool keeps for reuse.
func (p *Pool) Retained() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.retained
}
