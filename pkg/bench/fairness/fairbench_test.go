package fairbench

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A short run produces every figure. No speed is asserted: each run lasts
// until both zones completed a read, so the bandwidths are positive however
// busy the machine is.
func TestRunShort(t *testing.T) {
	res, err := Run(context.Background(), Options{Dir: t.TempDir(), Duration: 300 * time.Millisecond, TimeScale: 16, QDB: 4})
	require.NoError(t, err)
	for _, p := range []Pair{res.Off, res.On} {
		assert.Positive(t, p.A)
		assert.Positive(t, p.B)
		assert.InDelta(t, p.A/p.B, p.Ratio, 1e-9)
	}
	var buf bytes.Buffer
	require.NoError(t, res.WriteTable(&buf))
	assert.Contains(t, buf.String(), "congestion control on")
}
