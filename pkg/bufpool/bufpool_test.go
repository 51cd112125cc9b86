package bufpool

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGetSizes(t *testing.T) {
	var p Pool
	for _, tc := range []struct {
		n, cap int
	}{
		{0, 64 << 10},
		{1, 64 << 10},
		{64 << 10, 64 << 10},
		{64<<10 + 1, 128 << 10},
		{2 << 20, 2 << 20},
		{3 << 20, 4 << 20},
		{16 << 20, 16 << 20},
		{16<<20 + 4096, 16<<20 + 4096}, // above the classes: exact, never pooled
	} {
		b := p.Get(tc.n)
		assert.Len(t, b, tc.n)
		assert.Equal(t, tc.cap, cap(b), "n=%d", tc.n)
		p.Put(b)
	}
}

func TestPutRecycles(t *testing.T) {
	var p Pool
	b := p.Get(1 << 20)
	b[0] = 42
	p.Put(b)
	assert.Equal(t, 1<<20, p.Retained())
	c := p.Get(600 << 10)
	require.Len(t, c, 600<<10)
	assert.Equal(t, 1<<20, cap(c))
	assert.Equal(t, byte(42), c[0], "the buffer put back is handed out again")
	assert.Zero(t, p.Retained())
	d := p.Get(600 << 10)
	assert.NotSame(t, &c[0], &d[0], "a buffer is handed out once")
}

func TestLimitBoundsRetained(t *testing.T) {
	p := Pool{Limit: 3 << 20}
	bufs := make([][]byte, 5)
	for i := range bufs {
		bufs[i] = p.Get(1 << 20)
	}
	for _, b := range bufs {
		p.Put(b)
	}
	assert.Equal(t, 3<<20, p.Retained(), "buffers past the limit are dropped")
	var zero Pool
	for i := 0; i < 40; i++ {
		zero.Put(make([]byte, 1<<20))
	}
	assert.Equal(t, DefaultLimit, zero.Retained())
}

func TestPutForeignBuffersIsHarmless(t *testing.T) {
	var p Pool
	p.Put(nil)
	p.Put(make([]byte, 100))       // not a class capacity: dropped
	p.Put(make([]byte, 10, 3<<20)) // not a class capacity: dropped
	p.Put(make([]byte, 32<<20))    // above the classes: dropped
	assert.Zero(t, p.Retained())
	b := p.Get(3 << 20)
	assert.Equal(t, 4<<20, cap(b))
}

func TestConcurrentUse(t *testing.T) {
	var p Pool
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				b := p.Get(128<<10 + g)
				b[0], b[len(b)-1] = byte(g), byte(g)
				require.Equal(t, byte(g), b[0])
				p.Put(b)
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, p.Retained(), DefaultLimit)
}
