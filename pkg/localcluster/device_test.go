package localcluster

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// A cluster's drives keep the geometry they were created with: ExistingDevice
// reads it back so a later start (of a build with other defaults) opens them,
// and a start with another geometry fails at once, naming the node and the
// field, instead of waiting out the readiness deadline.
func TestExistingDevice(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	dev, ok, err := ExistingDevice(dir, LocalDevice())
	require.NoError(t, err)
	require.False(t, ok, "no drives yet")
	require.Equal(t, LocalDevice(), dev)

	cfg := Config{Dir: dir, Nodes: 1, Clock: "off", Device: TinyDevice(), AdminToken: "tok"}
	cl, err := Start(ctx, cfg)
	require.NoError(t, err)
	require.NoError(t, cl.Close())

	base := LocalDevice()
	base.Media = "TLC"
	dev, ok, err = ExistingDevice(dir, base)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, TinyDevice().Geometry(), dev.Geometry())
	assert.Equal(t, "TLC", dev.Media, "run-time knobs come from the base")

	// The node's own error, not the readiness deadline's "not up": the
	// start ended when the node stopped, without waiting the deadline out.
	cfg.Device = LocalDevice()
	_, err = Start(ctx, cfg)
	require.ErrorIs(t, err, zerr.ErrGeometryMismatch)
	assert.NotErrorIs(t, err, zerr.ErrUnavailable)
	assert.Contains(t, err.Error(), "node-1")

	cfg.Device = dev
	cl, err = Start(ctx, cfg)
	require.NoError(t, err, "the geometry read back opens the drives")
	require.NoError(t, cl.Close())
}
