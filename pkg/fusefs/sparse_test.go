package fusefs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// st_blocks, SEEK_DATA/SEEK_HOLE and fallocate through the kernel.
func TestSparseFiles(t *testing.T) {
	m := mountCluster(t)
	p := filepath.Join(m.dir, "sparse")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	defer f.Close()
	const bs = 4096
	blocks := func(when string) int64 {
		t.Helper()
		var st unix.Stat_t
		require.NoError(t, unix.Fstat(int(f.Fd()), &st), when)
		return st.Blocks
	}
	_, err = f.WriteAt(bytes.Repeat([]byte("a"), 2*bs), 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("z"), 1<<30) // 1 GiB apparent size
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	assert.Equal(t, int64(3*bs/512), blocks("sparse"), "st_blocks counts written blocks, not the size")
	for _, c := range []struct {
		off    int64
		whence int
		want   int64
	}{
		{0, unix.SEEK_DATA, 0},
		{0, unix.SEEK_HOLE, 2 * bs},
		{2 * bs, unix.SEEK_DATA, 1 << 30},
		{1 << 30, unix.SEEK_HOLE, 1<<30 + 1},
	} {
		got, err := unix.Seek(int(f.Fd()), c.off, c.whence)
		require.NoError(t, err, "%+v", c)
		assert.Equal(t, c.want, got, "%+v", c)
	}
	_, err = unix.Seek(int(f.Fd()), 1<<30+1, unix.SEEK_DATA)
	assert.ErrorIs(t, err, syscall.ENXIO)

	// punch the first block: zeros, one block less, same size
	require.NoError(t, unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, bs))
	buf := make([]byte, 2*bs)
	_, err = f.ReadAt(buf, 0)
	require.NoError(t, err)
	assert.Equal(t, make([]byte, bs), buf[:bs], "punched range reads zeros")
	assert.Equal(t, bytes.Repeat([]byte("a"), bs), buf[bs:])
	assert.Equal(t, int64(2*bs/512), blocks("punched"))
	got, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA)
	require.NoError(t, err)
	assert.Equal(t, int64(bs), got)
	// zero range extends the size without taking space
	fi, err := f.Stat()
	require.NoError(t, err)
	require.NoError(t, unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE, fi.Size(), 4*bs))
	fi2, err := f.Stat()
	require.NoError(t, err)
	assert.Equal(t, fi.Size()+4*bs, fi2.Size())
	assert.Equal(t, int64(2*bs/512), blocks("zero range"))
	// collapse stays unsupported
	err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_COLLAPSE_RANGE, 0, bs)
	assert.ErrorIs(t, err, syscall.EOPNOTSUPP)
	require.NoError(t, f.Close())
	m.remount(t)
	var st unix.Stat_t
	require.NoError(t, unix.Stat(p, &st))
	assert.Equal(t, int64(2*bs/512), st.Blocks, "after remount")
	m.unmountAndCheck(t)
}
