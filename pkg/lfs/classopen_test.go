package lfs_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/zns"
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
// data a data log, directories and inodes a node log. With few open zones
// (two logs) the node log's zones are warm node, the data log's warm data.
func TestClassOpener(t *testing.T) {
	for _, tc := range []struct {
		name    string
		maxOpen int
		allowed []lfs.ZoneClass
	}{
		{"six logs", 16, []lfs.ZoneClass{lfs.ClassHotNode, lfs.ClassWarmNode, lfs.ClassColdNode, lfs.ClassHotData, lfs.ClassWarmData, lfs.ClassColdData, lfs.ClassMeta}},
		{"two logs", 6, []lfs.ZoneClass{lfs.ClassWarmNode, lfs.ClassWarmData, lfs.ClassMeta}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := devvol.TestConfig(40, 8)
			c.MaxOpenZones, c.MaxActiveZones = tc.maxOpen, tc.maxOpen
			d, err := zns.Create(filepath.Join(t.TempDir(), "dev0"), c, clock.Off())
			require.NoError(t, err)
			t.Cleanup(func() { _ = d.Close() })
			dv, err := devvol.New(d)
			require.NoError(t, err)
			v := &classVol{Volume: dv, class: map[lfs.ZoneID]lfs.ZoneClass{}}
			fs := mkfsMount(t, v, lfs.Options{})
			require.NoError(t, writeFile(fs, "/a", make([]byte, 64<<10), true))
			require.NoError(t, fs.Sync(bg))
			require.NoError(t, fs.Unmount(bg))

			require.Zero(t, v.plain, "zones opened without a class")
			seen := map[lfs.ZoneClass]bool{}
			for _, c := range v.class {
				require.Contains(t, tc.allowed, c)
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
		})
	}
	require.Equal(t, "meta", lfs.ClassMeta.String())
	require.Equal(t, "warm_data", fmt.Sprint(lfs.ClassWarmData))
}
