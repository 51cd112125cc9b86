package paper

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDeterministic runs the short configuration of every figure twice (the
// shared run and a fresh one) and requires byte-identical JSON. The figures
// run in parallel with each other (-parallel, GOMAXPROCS by default). Under
// the race detector only raceDeterminism's figures run twice: `make test`
// runs this test again without it, where the second run of every figure
// costs a tenth as much.
func TestDeterministic(t *testing.T) {
	for id := range raceDeterminism {
		require.Contains(t, IDs(), id)
	}
	for _, id := range IDs() {
		if raceDetector && !raceDeterminism[id] {
			continue
		}
		t.Run(id, func(t *testing.T) {
			t.Parallel() // the figures' runs are independent; this fills idle cores
			_, a := sharedShort(t, id)
			_, b, err := runShort(id)
			require.NoError(t, err)
			require.Equal(t, string(a), string(b))
		})
	}
}

// raceDeterminism: the figures TestDeterministic runs twice under the race
// detector: fig26's v-zone writers and fig29c's readers and writers on the
// node's device slots, both many concurrent actors on one virtual clock.
var raceDeterminism = map[string]bool{"fig26": true, "fig29c": true}
