package client_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// OpenVZoneID opens the v-zone it names, not the lowest empty one, and
// refuses one that is open already without changing it.
func TestOpenVZoneID(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, 1)
	createNS(t, c, "ids", 2)
	ctx := context.Background()
	cl := newClient(t, c, "ids")

	vz, inc, err := cl.OpenVZoneID(ctx, 3)
	require.NoError(t, err)
	assert.Equal(t, uint64(3), vz.ID())
	assert.NotZero(t, inc)
	require.NoError(t, vz.Write(ctx, 0, random(8*4096)))

	_, _, err = cl.OpenVZoneID(ctx, 3)
	require.ErrorIs(t, err, zerr.ErrZoneState)
	info, err := vz.ReportZone(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(8), info.WritePointer, "the refused open changed nothing")

	low, err := cl.OpenVZone(ctx) // the lowest empty id is still 0
	require.NoError(t, err)
	assert.Equal(t, uint64(0), low.ID())
}
