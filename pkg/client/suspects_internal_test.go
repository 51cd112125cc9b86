package client

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A node that failed a call stays down for parity writes until it answers
// one, however long ago it failed; reads try it again after suspectFor.
func TestSuspectsLastUntilAnswered(t *testing.T) {
	var s suspects
	require.False(t, s.down("n1"))
	require.False(t, s.suspected("n1"))

	s.mark("n1")
	require.True(t, s.suspected("n1"))
	require.True(t, s.down("n1"))
	require.False(t, s.down("n2"))

	// the failure is older than suspectFor (backdated: no wall-clock wait)
	s.mu.Lock()
	s.at["n1"] = time.Now().Add(-2 * suspectFor)
	s.mu.Unlock()
	require.False(t, s.suspected("n1"), "reads try the node again after suspectFor")
	require.True(t, s.down("n1"), "parity writes still refuse: the node has not answered")

	s.answered("n2") // another node's answer clears nothing
	require.True(t, s.down("n1"))
	s.answered("n1")
	require.False(t, s.down("n1"))
	require.False(t, s.suspected("n1"))
	require.Zero(t, s.n.Load())
}
