package lfs_test

import (
	"bytes"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// TestReadWhileOverwriting reads a cached file in large reads (copied from
// the page cache with the table lock released) while another handle
// overwrites it, whole pages and half pages: every half page a read returns
// is one version, never torn (page contents are replaced, never changed in
// place; the race detector also sees an in-place change). Then
// the file holds the last version, in the cache and after a remount.
func TestReadWhileOverwriting(t *testing.T) {
	const pages, bs = 64, 4096 // 256 KiB: reads past the unlocked-copy threshold
	v := newVol(t, 16, 64)
	fs := mkfsMount(t, v, lfs.Options{})
	a, wh, err := fs.Create(bg, lfs.RootIno, "f", 0o644, 0, 0, syscall.O_RDWR)
	require.NoError(t, err)
	require.NoError(t, fillWith(fs, wh, 0, pages*bs, 0))
	rh, err := fs.Open(bg, a.Ino, syscall.O_RDONLY)
	require.NoError(t, err)

	const versions = 40
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ver := byte(1); ver <= versions; ver++ {
			if ver%2 == 0 {
				// whole pages, the file in one write
				assert.NoError(t, fillWith(fs, wh, 0, pages*bs, ver))
				continue
			}
			// every page in two halves (a partial-page write): a read may
			// see the first half new and the second old, never a half torn
			for p := 0; p < pages; p++ {
				assert.NoError(t, fillWith(fs, wh, int64(p*bs), bs/2, ver))
				assert.NoError(t, fillWith(fs, wh, int64(p*bs+bs/2), bs/2, ver))
			}
		}
	}()
	buf := make([]byte, pages*bs)
	for i := 0; i < 200; i++ {
		n, err := fs.Read(bg, rh, 0, buf)
		require.NoError(t, err)
		require.Equal(t, len(buf), n)
		for p := 0; p < pages; p++ {
			lo, hi := buf[p*bs:p*bs+bs/2], buf[p*bs+bs/2:(p+1)*bs]
			require.Equal(t, bytes.Repeat(lo[:1], bs/2), lo, "read %d: page %d: first half torn", i, p)
			require.Equal(t, bytes.Repeat(hi[:1], bs/2), hi, "read %d: page %d: second half torn", i, p)
			require.GreaterOrEqual(t, lo[0], hi[0], "read %d: page %d: the second half is newer than the first", i, p)
		}
	}
	wg.Wait()
	n, err := fs.Read(bg, rh, 0, buf)
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat([]byte{versions}, pages*bs), buf[:n])
	require.NoError(t, fs.Release(bg, rh))
	require.NoError(t, fs.Fsync(bg, wh, false))
	require.NoError(t, fs.Release(bg, wh))
	require.NoError(t, fs.Unmount(bg))

	fs, err = lfs.Mount(bg, v, lfs.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, fs.Unmount(bg)) }()
	rh, err = fs.Open(bg, a.Ino, syscall.O_RDONLY)
	require.NoError(t, err)
	n, err = fs.Read(bg, rh, 0, buf)
	require.NoError(t, err)
	assert.Equal(t, bytes.Repeat([]byte{versions}, pages*bs), buf[:n], "after remount")
	require.NoError(t, fs.Release(bg, rh))
}

// fillWith writes n bytes of value v at off.
func fillWith(fs *lfs.FS, h lfs.Handle, off int64, n int, v byte) error {
	_, err := fs.Write(bg, h, off, bytes.Repeat([]byte{v}, n))
	return err
}
