package fsvol_test

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// A mounted file system left idle past the arbiter's T_ReadOnly has its
// overdriven open v-zones reclaimed (eZNS: compacted to the minimum width on
// other zones, the old ones revoked and reset) under its cached layouts. Its
// next writes and checkpoints must go on through the new layouts. Before,
// the first write to a moved v-zone failed with NOT_OWNER and the file
// system went read-only (found with a `zctl local up --mount` left idle for
// 13 minutes).
func TestMountSurvivesReclaimWhileIdle(t *testing.T) {
	ctx := context.Background()
	const tro = 3 * time.Second
	_, c := tenantClusterWith(t, localcluster.Config{Nodes: 3, TReadOnly: tro}, "fs", 6, 8)
	vol, err := fsvol.New(ctx, c, fsvol.Options{MaxZones: 40})
	require.NoError(t, err)
	require.NoError(t, lfs.Mkfs(ctx, vol, lfs.MkfsOptions{}))
	fs, err := lfs.Mount(ctx, vol, lfs.Options{Move: lfs.Compact})
	require.NoError(t, err)

	files := map[string][]byte{}
	write := func(name string, n int) {
		t.Helper()
		data := bytes.Repeat([]byte(name), n/len(name)+1)[:n]
		_, h, err := fs.Create(ctx, lfs.RootIno, name, 0o644, 0, 0, os.O_RDWR)
		require.NoError(t, err)
		defer fs.Release(ctx, h)
		_, err = fs.Write(ctx, h, 0, data)
		require.NoError(t, err)
		require.NoError(t, fs.Fsync(ctx, h, false), "fsync of %s", name)
		files[name] = data
	}
	write("before-1", 300<<10)
	write("before-2", 700<<10)

	// The widths of the open v-zones now, to see the reclaim narrow them.
	widths := func() map[uint64]uint32 {
		vzs, err := c.ListVZones(ctx)
		require.NoError(t, err)
		out := map[uint64]uint32{}
		for _, vz := range vzs {
			if vz.GetState() == v1.VZoneState_VZONE_STATE_OPEN {
				gs := vz.GetGroups()
				out[vz.GetId()] = gs[len(gs)-1].GetWidth()
			}
		}
		return out
	}
	before := widths()
	require.Eventually(t, func() bool {
		after := widths()
		for id, w := range before {
			if a, ok := after[id]; ok && a < w {
				return true
			}
		}
		return false
	}, 30*time.Second, 200*time.Millisecond, "the idle namespace's overdriven v-zones were reclaimed (widths %v)", before)

	write("after-1", 200<<10)
	write("after-2", 900<<10)
	require.NoError(t, fs.Sync(ctx), "a checkpoint after the reclaim")
	require.Empty(t, fs.Stats().ReadOnlyReason)
	require.NoError(t, fs.Unmount(ctx))

	fs, err = lfs.Mount(ctx, vol, lfs.Options{Move: lfs.Compact})
	require.NoError(t, err)
	defer fs.Unmount(ctx)
	for name, want := range files {
		a, err := fs.Lookup(ctx, lfs.RootIno, name)
		require.NoError(t, err, name)
		h, err := fs.Open(ctx, a.Ino, os.O_RDONLY)
		require.NoError(t, err, name)
		got := make([]byte, len(want))
		n, err := fs.Read(ctx, h, 0, got)
		require.NoError(t, err, name)
		require.Equal(t, len(want), n, name)
		require.True(t, bytes.Equal(want, got), "%s after the reclaim and a remount", name)
		require.NoError(t, fs.Release(ctx, h))
	}
}
