package fusefs

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The pieces of a vectored READ reply: Slices hands them to go-fuse's
// writev; Bytes concatenates them into the request's buffer even when some
// pieces are slices of that same buffer (lfs reads what is not cached
// there, at the piece's own offset); Done clears the references.
func TestVecResult(t *testing.T) {
	page1, page3 := bytes.Repeat([]byte{1}, 4096), bytes.Repeat([]byte{3}, 2048)
	buf := make([]byte, 4096+4096+2048)
	copy(buf[4096:8192], bytes.Repeat([]byte{2}, 4096)) // read from the drives into buf
	r := vecPool.Get().(*vecResult)
	r.vec = append(r.vec[:0], page1, buf[4096:8192], page3)
	r.n = len(buf)
	sl, st := r.Slices()
	require.True(t, st.Ok())
	assert.Len(t, sl, 3)
	assert.Equal(t, len(buf), r.Size())
	want := append(append(bytes.Clone(page1), bytes.Repeat([]byte{2}, 4096)...), page3...)
	got, st := r.Bytes(buf)
	require.True(t, st.Ok())
	assert.Equal(t, want, got)
	got, _ = r.Bytes(nil) // no buffer: a new one
	assert.Equal(t, want, got)
	vec := r.vec
	r.Done()
	assert.Equal(t, [][]byte{nil, nil, nil}, vec[:3], "no references kept in the pool")
	assert.Zero(t, r.Size())
}
