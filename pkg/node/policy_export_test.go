package node

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWRRAcquireAsync: tickets are granted in the WRR's turn order as slots
// are released, like blocked Acquire calls.
func TestWRRAcquireAsync(t *testing.T) {
	w := NewWRR(1)
	w.SetWeight("b", 2)
	require.Nil(t, w.AcquireAsync("a"), "a free slot is granted at once")
	a1, b1, b2, a2 := w.AcquireAsync("a"), w.AcquireAsync("b"), w.AcquireAsync("b"), w.AcquireAsync("a")
	for _, tk := range []*WRRTicket{a1, b1, b2, a2} {
		require.False(t, tk.Granted())
	}
	order := []*WRRTicket{a1, b1, b2, a2}
	for i, want := range order {
		w.Release()
		require.True(t, want.Granted(), "grant %d", i)
		for _, other := range order[i+1:] {
			require.False(t, other.Granted())
		}
	}
	w.Release()
	require.Empty(t, w.Waiting())
}
