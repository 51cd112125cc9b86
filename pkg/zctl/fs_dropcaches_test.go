package zctl

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// zctl fs drop-caches on a directory that is no ZoneFleet mount fails with
// ExitNotFound and sets nothing on it.
func TestFsDropCachesNotAMount(t *testing.T) {
	dir := t.TempDir()
	_, _, err := DropMountCaches(dir)
	require.Error(t, err)
	assert.Equal(t, ExitNotFound, ExitCode(err))
	assert.Contains(t, err.Error(), "not a ZoneFleet mount")
}
