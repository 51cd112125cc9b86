package client

import (
	"bytes"
	mrand "math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// payload.cut returns exactly bytes [from, to) of the buffers back to back,
// for buffers of any lengths (empty ones too) and any range, sharing their
// memory; flat agrees with it.
func TestPayloadCut(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		var bufs [][]byte
		var all []byte
		for i := rng.IntN(20); i >= 0; i-- {
			b := make([]byte, rng.IntN(5000))
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			bufs = append(bufs, b)
			all = append(all, b...)
		}
		p := newPayload(bufs)
		require.Equal(t, len(all), p.size)
		for k := 0; k < 20 && len(all) > 0; k++ {
			from := rng.IntN(len(all))
			to := from + 1 + rng.IntN(len(all)-from)
			parts := p.cut([][]byte{[]byte("kept")}, from, to)
			require.Equal(t, []byte("kept"), parts[0], "cut appends")
			require.True(t, bytes.Equal(all[from:to], bytes.Join(parts[1:], nil)), "round %d cut [%d,%d)", round, from, to)
			for _, part := range parts[1:] {
				require.NotEmpty(t, part)
			}
			require.True(t, bytes.Equal(all[from:to], p.flat(from, to)))
		}
	}
	// shared memory: no copy of a single buffer's part
	b := []byte("0123456789")
	parts := newPayload([][]byte{b}).cut(nil, 2, 5)
	require.Len(t, parts, 1)
	parts[0][0] = 'x'
	require.Equal(t, byte('x'), b[2])
}
