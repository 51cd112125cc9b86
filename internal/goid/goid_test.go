package goid

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGet: an id is non-zero, the same within a goroutine and different
// between two that live at once.
func TestGet(t *testing.T) {
	a := Get()
	require.NotZero(t, a)
	require.Equal(t, a, Get())
	ch := make(chan uint64)
	go func() { ch <- Get() }()
	b := <-ch
	require.NotZero(t, b)
	require.NotEqual(t, a, b)
}
