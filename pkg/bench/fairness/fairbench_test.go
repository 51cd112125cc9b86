package fairbench

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A short run produces every figure (no speed is asserted: the machine is shared).
func TestRunShort(t *testing.T) {
	res, err := Run(context.Background(), Options{Dir: t.TempDir(), Duration: 300 * time.Millisecond, TimeScale: 16, QDB: 4})
	require.NoError(t, err)
	for _, p := range []Pair{res.Off, res.On} {
		assert.Positive(t, p.A)
		assert.Positive(t, p.B)
	}
	var buf bytes.Buffer
	require.NoError(t, res.WriteTable(&buf))
	assert.Contains(t, buf.String(), "congestion control on")
}
