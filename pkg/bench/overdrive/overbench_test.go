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

// A short run produces every figure. No speed is asserted: each measured
// window lasts until a write completed in it, so the bandwidths are positive
// however busy the machine is.
func TestRunShort(t *testing.T) {
	res, err := Run(context.Background(), Options{Dir: t.TempDir(), TimeScale: 4, Run: 60 * time.Millisecond,
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
