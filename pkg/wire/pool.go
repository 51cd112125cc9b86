package wire

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// Pool is a mem.BufferPool that does not zero what it hands out. gRPC's
// default pool clears every buffer on Get — 1 MiB of memclr per 1 MiB
// message, about 8 % of the node's CPU on the write path (profile of
// BenchmarkDataPathWriteStreamCodec) — although every user overwrites the
// buffer whole: the transport reads a frame into exactly the bytes it asks
// for, and the node reads a drive range into exactly its length. Buffers come
// in power-of-two classes from 512 B to 8 MiB; larger ones are not pooled.
var Pool mem.BufferPool = newDirtyPool()

const (
	minClass = 9  // 512 B
	maxClass = 23 // 8 MiB
)

type dirtyPool struct {
	classes [maxClass + 1]sync.Pool
}

func newDirtyPool() *dirtyPool { return &dirtyPool{} }

// class is the smallest power of two holding n bytes (at least minClass).
func class(n int) int {
	if n <= 1<<minClass {
		return minClass
	}
	return bits.Len(uint(n - 1))
}

// Get returns a buffer of length n; its contents are arbitrary.
func (p *dirtyPool) Get(n int) *[]byte {
	c := class(n)
	if c > maxClass {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<c)
	return &b
}

// Put returns a buffer from Get (or any buffer of a class's exact capacity).
func (p *dirtyPool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minClass || c > 1<<maxClass || c&(c-1) != 0 {
		return
	}
	p.classes[bits.Len(uint(c))-1].Put(b)
}
