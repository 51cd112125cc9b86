package fsvol_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// plainVolume hides the layout hint (lfs.LikeOpener) of the volume it wraps.
type plainVolume struct{ lfs.Volume }

// The file system's IZC destinations opened "like" their victim
// (lfs.LikeOpener → arbiter like_vzone) let copyback-aware allocation find
// same-chip destinations across a cluster: a larger share of the blocks the
// drives copy moves by on-chip copyback than with destinations placed
// without the hint, on the same workload.
func TestCopybackShareWithTheLayoutHint(t *testing.T) {
	share := func(hint bool) float64 {
		ctx := context.Background()
		_, c := tenantCluster(t, 3, "fs", 9, 4) // 9 active: six logs (lfs mkfs)
		fv, err := fsvol.New(ctx, c, fsvol.Options{MaxZones: 28})
		require.NoError(t, err)
		var vol lfs.Volume = fv
		if !hint {
			vol = plainVolume{fv}
		}
		require.NoError(t, lfs.Mkfs(ctx, vol, lfs.MkfsOptions{OPPercent: 20}))
		fs, err := lfs.Mount(ctx, vol, lfs.Options{Mode: lfs.ModeIZC})
		require.NoError(t, err)
		write := func(name string, off int, data []byte) {
			a, err := fs.Lookup(ctx, lfs.RootIno, name)
			var h lfs.Handle
			if err == nil {
				h, err = fs.Open(ctx, a.Ino, os.O_RDWR)
			} else {
				_, h, err = fs.Create(ctx, lfs.RootIno, name, 0o644, 0, 0, os.O_RDWR)
			}
			require.NoError(t, err)
			_, err = fs.Write(ctx, h, int64(off), data)
			require.NoError(t, err)
			require.NoError(t, fs.Fsync(ctx, h, false))
			require.NoError(t, fs.Release(ctx, h))
		}
		const nfiles, size, piece = 16, 1 << 20, 64 << 10
		for i := 0; i < nfiles; i++ {
			name := fmt.Sprintf("f%d", i)
			write(name, 0, content(name, 0, size))
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for k := 0; k < nfiles*size/piece; k++ {
			name := fmt.Sprintf("f%d", rng.IntN(nfiles))
			write(name, rng.IntN(size/piece)*piece, content(name, k+1, piece))
		}
		st := fs.Stats()
		require.Positive(t, st.MovedIZC, "recycling moved blocks inside the drives")
		require.NoError(t, fs.Unmount(ctx))
		rep, err := lfs.Fsck(ctx, vol, false)
		require.NoError(t, err)
		require.Empty(t, rep.Problems)
		t.Logf("hint=%v: copyback share %.3f (%d of %d planned same-chip, %d moved by copyback)", hint, st.CopybackShare, st.CopybackPlanned, st.MovedIZC, st.CompactCopyback)
		return st.CopybackShare
	}
	with, without := share(true), share(false)
	require.Greater(t, with, without, "the hint raises the copyback share")
}
