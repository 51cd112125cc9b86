package lfs_test

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
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

// TestLargeWriteNotStarvedBySmallWriters writes 8 MiB in one call (more
// than twice the dirty budget of these 512 KiB zones) while 8 writers keep
// writing 16 KiB each. The large write must get in while they still run:
// waiting until no other write is admitted could wait for ever.
func TestLargeWriteNotStarvedBySmallWriters(t *testing.T) {
	v := newVol(t, 128, 16)
	fs := mkfsMount(t, v, lfs.Options{})
	defer fs.Unmount(bg)
	_, big, err := fs.Create(bg, lfs.RootIno, "big", 0o644, 0, 0, syscall.O_RDWR)
	require.NoError(t, err)
	_, small, err := fs.Create(bg, lfs.RootIno, "small", 0o644, 0, 0, syscall.O_RDWR)
	require.NoError(t, err)
	var (
		wg      sync.WaitGroup
		bigDone atomic.Bool
		stopped atomic.Int32 // small writers that ran out of writes before the large one was done
	)
	buf := make([]byte, 16<<10)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 4000 && !bigDone.Load(); i++ {
				if _, err := fs.Write(bg, small, int64(w*64+i%64)*int64(len(buf)), buf); err != nil {
					t.Error(err)
					return
				}
			}
			if !bigDone.Load() {
				stopped.Add(1)
			}
		}()
	}
	n, err := fs.Write(bg, big, 0, bytes.Repeat([]byte{7}, 8<<20))
	bigDone.Store(true)
	wg.Wait()
	require.NoError(t, err)
	require.Equal(t, 8<<20, n)
	require.Zero(t, stopped.Load(), "small writers ran out before the large write got in")
	require.NoError(t, fs.Release(bg, big))
	require.NoError(t, fs.Release(bg, small))
}
