package overbench

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// A short run produces every figure (no speed is asserted: the machine is shared;
// the Fig. 26 point is 1 s of wall time so that a loaded machine still completes
// writes in it — 60 ms measured 0 MiB/s once under a parallel test load).
func TestRunShort(t *testing.T) {
	res, err := Run(context.Background(), Options{Dir: t.TempDir(), TimeScale: 4, Run: 250 * time.Millisecond,
		Phase: 60 * time.Millisecond, Intervals: 1, Writers: []int{2}})
	require.NoError(t, err)
	require.Len(t, res.Fig26, 1)
	assert.Positive(t, res.Fig26[0].VZoneMiBps)
	assert.Positive(t, res.Fig26[0].StaticMiBps)
	assert.Positive(t, res.Fig26[0].MeanWidth)
	require.Len(t, res.Timeline, 3)
	for _, row := range res.Timeline {
		assert.Len(t, row.Spares, 4)
	}
	var buf bytes.Buffer
	require.NoError(t, res.WriteTable(&buf))
	assert.Contains(t, buf.String(), "v-zone/static")
}

func TestRejectsBadWriters(t *testing.T) {
	_, err := Run(context.Background(), Options{Writers: []int{40}})
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
}
