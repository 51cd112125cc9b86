package lfs_test

import (
	"bytes"
	"fmt"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// TestManyWritersDoNotRunOutOfSegments overwrites a file that fills 40 % of
// a small file system, again and again, with 32 writers at once (as the
// kernel's write-back cache sends up to 64 WRITEs concurrently) and an
// fsync after each pass. There is always room: the previous pass's blocks
// only wait for a checkpoint to free their segments. Before writers were
// admitted to the dirty budget (FS.admit), every writer passed the budget
// check before any of them had dirtied a page, the dirty pages outgrew the
// GC reserve, and the fsync's write-back found no free segment: ENOSPC.
func TestManyWritersDoNotRunOutOfSegments(t *testing.T) {
	v := newVol(t, 128, 16) // 512 KiB zones
	fs := mkfsMount(t, v, lfs.Options{})
	defer fs.Unmount(bg)
	st := fs.Stats()
	const writers, chunk = 32, 256 << 10
	size := int(st.UserBlocks*uint64(st.BlockSize)*4/10) / (writers * chunk) * (writers * chunk)
	require.Positive(t, size)
	_, h, err := fs.Create(bg, lfs.RootIno, "f", 0o644, 0, 0, syscall.O_RDWR)
	require.NoError(t, err)
	require.NoError(t, fs.Release(bg, h))
	a, err := fs.Lookup(bg, lfs.RootIno, "f")
	require.NoError(t, err)
	per := size / writers
	for pass := 0; pass < 8; pass++ {
		h, err := fs.Open(bg, a.Ino, syscall.O_RDWR|syscall.O_TRUNC)
		require.NoError(t, err)
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := bytes.Repeat([]byte{byte(pass*writers + w)}, chunk)
				for off := w * per; off < (w+1)*per; off += chunk {
					if _, err := fs.Write(bg, h, int64(off), buf); err != nil {
						errs <- fmt.Errorf("pass %d writer %d at %d: %w", pass, w, off, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.NoError(t, fs.Fsync(bg, h, false), "pass %d", pass)
		require.NoError(t, fs.Release(bg, h))
	}
	require.Positive(t, fs.Stats().WriteThrottled, "32 writers of 256 KiB waited for room in a 2 MiB budget")
	got, err := readFile(fs, "f")
	require.NoError(t, err)
	require.Len(t, got, size)
	for w := 0; w < writers; w++ {
		require.Equal(t, byte(7*writers+w), got[w*per], "writer %d's slice", w)
		require.Equal(t, byte(7*writers+w), got[(w+1)*per-1], "writer %d's slice", w)
	}
	require.NoError(t, fs.Unmount(bg))
}
