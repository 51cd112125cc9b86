package lfs_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// classVol records the class of every zone the file system opens through
// lfs.ClassOpener.
type classVol struct {
	lfs.Volume
	mu    sync.Mutex
	class map[lfs.ZoneID]lfs.ZoneClass
	plain int // zones opened with OpenZone
}

func (c *classVol) OpenZoneFor(ctx context.Context, class lfs.ZoneClass) (lfs.ZoneID, error) {
	z, err := c.Volume.OpenZone(ctx)
	if err == nil {
		c.mu.Lock()
		c.class[z] = class
		c.mu.Unlock()
	}
	return z, err
}

func (c *classVol) OpenZone(ctx context.Context) (lfs.ZoneID, error) {
	c.mu.Lock()
	c.plain++
	c.mu.Unlock()
	return c.Volume.OpenZone(ctx)
}

// TestClassOpener: with a Volume that places by class, every zone the file
// system opens names what it is for: the metadata zones ClassMeta, file
// data a data log, directories and inodes a node log.
func TestClassOpener(t *testing.T) {
	v := &classVol{Volume: newVol(t, 40, 8), class: map[lfs.ZoneID]lfs.ZoneClass{}}
	fs := mkfsMount(t, v, lfs.Options{})
	require.NoError(t, writeFile(fs, "/a", make([]byte, 64<<10), true))
	require.NoError(t, fs.Sync(bg))
	require.NoError(t, fs.Unmount(bg))

	require.Zero(t, v.plain, "zones opened without a class")
	seen := map[lfs.ZoneClass]bool{}
	for _, c := range v.class {
		require.Less(t, c, lfs.NumZoneClasses)
		seen[c] = true
	}
	require.True(t, seen[lfs.ClassMeta], "classes %v", seen)
	require.True(t, seen[lfs.ClassWarmData], "classes %v", seen)
	require.True(t, seen[lfs.ClassHotNode] || seen[lfs.ClassWarmNode], "classes %v", seen)
	// every zone the file system holds was opened with a class
	zs, err := v.Zones(bg)
	require.NoError(t, err)
	for _, z := range zs {
		_, ok := v.class[z.ID]
		require.True(t, ok, "zone %d", z.ID)
	}
	require.Equal(t, "meta", lfs.ClassMeta.String())
	require.Equal(t, "warm_data", fmt.Sprint(lfs.ClassWarmData))
}
