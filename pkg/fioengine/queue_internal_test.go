package fioengine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gate is a Target whose reads block until the test releases them, one
// release per read, and tell when they start.
type gate struct {
	Target  // (nil: only Geometry and Read are called)
	started chan uint64
	release chan struct{}
}

func (g *gate) Geometry() Geometry {
	return Geometry{BlockSize: 4096, ZoneSize: 1 << 20, ZoneCap: 1 << 20, Zones: 16}
}

func (g *gate) Read(ctx context.Context, off uint64, buf []byte) error {
	g.started <- off
	select {
	case <-g.release:
		buf[0] = byte(off / 4096)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (q *Queue) workerCount() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.workers
}

// Reads run concurrently on workers: as many as were in flight at once,
// reused by later reads rather than one goroutine per read.
func TestQueueReusesReadWorkers(t *testing.T) {
	const depth = 4
	g := &gate{started: make(chan uint64, 64), release: make(chan struct{})}
	done := make(chan Completion, 64)
	q := NewQueueFunc(g, false, func(c Completion) { done <- c })
	t.Cleanup(q.Close)

	bufs := map[uint64][]byte{}
	submit := func(i uint64) {
		off := i * 4096
		bufs[off] = make([]byte, 4096)
		q.Submit(Op{Tag: uintptr(off), Kind: KindRead, Off: off, Buf: bufs[off]})
	}
	for i := uint64(0); i < depth; i++ {
		submit(i)
	}
	for i := 0; i < depth; i++ { // all depth reads run at once: none waits for another
		<-g.started
	}
	assert.Equal(t, depth, q.workerCount())

	// Three waves more, each read submitted as one completes (fio's
	// steady state): the workers run them all.
	for i := uint64(depth); i < 4*depth; i++ {
		g.release <- struct{}{}
		c := <-done
		require.Zero(t, c.Errno)
		assert.Equal(t, byte(c.Tag/4096), bufs[uint64(c.Tag)][0], "read at %d", c.Tag)
		submit(i)
		<-g.started
	}
	for i := 0; i < depth; i++ {
		g.release <- struct{}{}
		require.Zero(t, (<-done).Errno)
	}
	assert.Equal(t, depth, q.workerCount(), "no worker beyond the reads in flight at once")
}
