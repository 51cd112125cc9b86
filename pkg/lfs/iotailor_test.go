package lfs_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// TestIOTailor: two files of different temperatures (two zones) written
// back under memory pressure on a drive with one write buffer: without
// IOTailor the write-backs leave partial superpages that the next zone's
// write flushes to SLC; with it the write-backs end on superpage
// boundaries. Both read back after a crash-free remount.
func TestIOTailor(t *testing.T) {
	slc := map[bool]uint64{}
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprint("iotailor=", on), func(t *testing.T) {
			c := devvol.TestConfig(40, 16)
			d, err := zns.Create(filepath.Join(t.TempDir(), "dev0"), c, clock.NewVirtual(), zns.WithWriteBuffers(1))
			require.NoError(t, err)
			defer d.Close()
			v, err := devvol.New(d)
			require.NoError(t, err)
			require.Greater(t, v.Geometry().SuperpageBlocks, 1)
			fs := mkfsMount(t, v, lfs.Options{Clock: clock.NewVirtual(), CacheBlocks: 128, IOTailor: on})
			var hs [2]lfs.Handle
			var want [2][]byte
			for i := range hs {
				a, h, err := fs.Create(bg, lfs.RootIno, fmt.Sprintf("f%d", i), 0o644, 0, 0, syscall.O_RDWR)
				require.NoError(t, err)
				if i == 1 {
					require.NoError(t, fs.Setxattr(bg, a.Ino, "user.lfs.cold", []byte("1"), 0))
				}
				hs[i] = h
			}
			require.NoError(t, fs.Sync(bg))
			l0 := d.Log()
			rng := rand.New(rand.NewSource(1))
			for k := 0; k < 200; k++ {
				i := k % 2
				b := bytes.Repeat([]byte{byte(k)}, 4096*(1+rng.Intn(5)))
				_, err := fs.Write(bg, hs[i], int64(len(want[i])), b)
				require.NoError(t, err)
				want[i] = append(want[i], b...)
			}
			slc[on] = d.Log().SLCBufferedBlocks - l0.SLCBufferedBlocks // before any sync
			require.NoError(t, fs.Sync(bg))
			for i := range hs {
				require.NoError(t, fs.Release(bg, hs[i]))
			}
			require.NoError(t, fs.Unmount(bg))
			fs2, err := lfs.Mount(bg, v, lfs.Options{})
			require.NoError(t, err)
			for i := range hs {
				got, err := readFile(fs2, fmt.Sprintf("f%d", i))
				require.NoError(t, err)
				require.True(t, bytes.Equal(want[i], got))
			}
			require.NoError(t, fs2.Unmount(bg))
		})
	}
	t.Logf("SLC-buffered blocks before the sync: %d without IOTailor, %d with", slc[false], slc[true])
	require.NotZero(t, slc[false])
	require.Less(t, slc[true], slc[false])
}
