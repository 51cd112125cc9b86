package lfs_test

import (
	"bytes"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

func TestSmoke(t *testing.T) {
	v := newVol(t, 32, 8)
	fs := mkfsMount(t, v, lfs.Options{})
	_, err := fs.Mkdir(bg, lfs.RootIno, "d", 0o755, 0, 0)
	require.NoError(t, err)
	data := bytes.Repeat([]byte("hello world "), 5000)
	require.NoError(t, writeFile(fs, "d/f", data, false))
	got, err := readFile(fs, "d/f")
	require.NoError(t, err)
	require.Equal(t, data, got)
	require.NoError(t, fs.Unmount(bg))

	fs, err = lfs.Mount(bg, v, lfs.Options{})
	require.NoError(t, err)
	got, err = readFile(fs, "d/f")
	require.NoError(t, err)
	require.Equal(t, data, got)
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
	_ = syscall.ENOENT
}
