package lfs_test

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// statfs tells what a fill achieves: the available blocks are what one
// file can take, the free inodes how many empty files fit (within 1 %).
func TestStatfsMatchesFill(t *testing.T) {
	t.Run("blocks", func(t *testing.T) {
		v := newVol(t, 32, 8)
		fs := mkfsMount(t, v, lfs.Options{})
		st, err := fs.Statfs(bg)
		require.NoError(t, err)
		got := fill(t, fs, "big")
		t.Logf("bavail %d, one file took %d blocks", st.Bavail, got)
		require.InEpsilon(t, float64(st.Bavail), float64(got), 0.01)
		require.NoError(t, fs.Unmount(bg))
	})
	t.Run("inodes", func(t *testing.T) {
		v := newVol(t, 32, 8)
		fs := mkfsMount(t, v, lfs.Options{})
		st, err := fs.Statfs(bg)
		require.NoError(t, err)
		n := 0
		for ; ; n++ {
			_, h, err := fs.Create(bg, lfs.RootIno, fmt.Sprintf("f%07d", n), 0o644, 0, 0, syscall.O_WRONLY)
			if err != nil {
				require.ErrorIs(t, err, syscall.ENOSPC)
				break
			}
			require.NoError(t, fs.Release(bg, h))
		}
		t.Logf("ffree %d (files %d), %d empty files fit", st.Ffree, st.Files, n)
		require.InEpsilon(t, float64(st.Ffree), float64(n), 0.01)
		require.NoError(t, fs.Unmount(bg))
	})
}
