package paper

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDeterministic runs the short configuration of every figure twice (the
// shared run and a fresh one) and requires byte-identical JSON. The figures
// run in parallel with each other (-parallel, GOMAXPROCS by default).
func TestDeterministic(t *testing.T) {
	for _, id := range IDs() {
		t.Run(id, func(t *testing.T) {
			t.Parallel() // the figures' runs are independent; this fills idle cores
			_, a := sharedShort(t, id)
			_, b, err := runShort(id)
			require.NoError(t, err)
			require.Equal(t, string(a), string(b))
		})
	}
}
