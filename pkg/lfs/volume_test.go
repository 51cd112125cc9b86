package lfs_test

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// flakyVol fails every n-th Write and Read with zerr.Unavailable (before
// doing anything), or every one when n == 1.
type flakyVol struct {
	lfs.Volume
	n     int64
	calls atomic.Int64
}

func (f *flakyVol) fail() error {
	if f.calls.Add(1)%f.n == 0 {
		return &zerr.UnavailableError{What: "node n1", Reason: "test"}
	}
	return nil
}
func (f *flakyVol) Write(ctx context.Context, z lfs.ZoneID, off uint64, d []byte, fua bool) error {
	if err := f.fail(); err != nil {
		return err
	}
	return f.Volume.Write(ctx, z, off, d, fua)
}
func (f *flakyVol) Read(ctx context.Context, z lfs.ZoneID, off uint64, b []byte) error {
	if err := f.fail(); err != nil {
		return err
	}
	return f.Volume.Read(ctx, z, off, b)
}

func TestUnavailableIsRetriedThenEIO(t *testing.T) {
	v := newVol(t, 32, 8)
	require.NoError(t, lfs.Mkfs(bg, v, lfs.MkfsOptions{}))
	fv := &flakyVol{Volume: v, n: 3}
	fs, err := lfs.Mount(bg, fv, lfs.Options{})
	require.NoError(t, err)
	data := make([]byte, 200<<10)
	for i := range data {
		data[i] = byte(i * 31)
	}
	require.NoError(t, writeFile(fs, "f", data, true), "transient failures are retried")
	got, err := readFile(fs, "f")
	require.NoError(t, err)
	require.Equal(t, data, got)

	fv.n = 1 // the drives are gone for good
	err = writeFile(fs, "g", data, true)
	require.Error(t, err)
	require.Equal(t, syscall.EIO, lfs.Errno(err))
	fs.Abandon()

	// nothing fsynced was lost, nothing is inconsistent
	fs, err = lfs.Mount(bg, v, lfs.Options{})
	require.NoError(t, err)
	got, err = readFile(fs, "f")
	require.NoError(t, err)
	require.Equal(t, data, got)
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
}

// Few open zones (two logs instead of six) and a volume over two drives;
// the drives are closed and reopened between mounts (a whole-stack restart).
func TestTwoLogsTwoDrivesRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := devvol.TestConfig(12, 8)
	cfg.MaxOpenZones, cfg.MaxActiveZones = 3, 3
	open := func(create bool) ([]*zns.Device, *devvol.Volume) {
		var devs []*zns.Device
		for _, name := range []string{"a", "b"} {
			var d *zns.Device
			var err error
			if create {
				d, err = zns.Create(filepath.Join(dir, name), cfg, clock.Off())
			} else {
				d, err = zns.Open(filepath.Join(dir, name), cfg, clock.Off())
			}
			require.NoError(t, err)
			devs = append(devs, d)
		}
		v, err := devvol.New(devs...)
		require.NoError(t, err)
		return devs, v
	}
	devs, v := open(true)
	require.Equal(t, 6, v.Geometry().MaxOpen)
	fs := mkfsMount(t, v, lfs.Options{Move: lfs.Compact})
	m := &model{files: map[string]*mfile{}, dirs: map[string]bool{}}
	_, err := fs.Mkdir(bg, lfs.RootIno, "s", 0o755, 0, 0)
	require.NoError(t, err)
	require.NoError(t, worker(fs, 0, 42, 1000, []string{"s"}, m, map[string][]byte{}, &sync.Mutex{}))
	compareTree(t, fs, []*model{m})
	require.Positive(t, fs.Stats().GCForeground)
	require.NoError(t, fs.Unmount(bg))
	for _, d := range devs {
		require.NoError(t, d.Close())
	}
	devs, v = open(false)
	defer func() {
		for _, d := range devs {
			_ = d.Close()
		}
	}()
	fs, err = lfs.Mount(bg, v, lfs.Options{Move: lfs.Compact})
	require.NoError(t, err)
	compareTree(t, fs, []*model{m})
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.NoError(t, fs.Unmount(bg))
}
