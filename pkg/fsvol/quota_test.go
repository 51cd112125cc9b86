package fsvol_test

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/internal/testcluster"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// fillFS writes 1 MiB files with fsync into fs until an error or until
// fewer than stopFree blocks are free; it returns the bytes written and the
// error that stopped it.
func fillFS(ctx context.Context, t *testing.T, fs *lfs.FS, stopFree uint64) (int, error) {
	buf := make([]byte, 1<<20)
	for i := 0; ; i++ {
		st, err := fs.Statfs(ctx)
		require.NoError(t, err)
		if st.Bavail < stopFree {
			return i << 20, nil
		}
		_, h, err := fs.Create(ctx, lfs.RootIno, fmt.Sprintf("f%d", i), 0o644, 0, 0, os.O_RDWR)
		if err != nil {
			return i << 20, err
		}
		copy(buf, fmt.Sprintf("file %d", i))
		_, err = fs.Write(ctx, h, 0, buf)
		if err == nil {
			err = fs.Fsync(ctx, h, false)
		}
		_ = fs.Release(ctx, h)
		if err != nil {
			return i << 20, err
		}
	}
}

// A namespace's capacity quota holds against a file system that was
// formatted with the whole cluster (the only namespace then) and fills it:
// that one meets ENOSPC where the reservation begins, and the file system
// of the namespace with the quota fills its own space. Without the
// reservation the first took the zones and the second got ENOSPC at a few
// percent (found with two mounts on one `zctl local up`).
func TestQuotaProtectsAFileSystemFromAnother(t *testing.T) {
	ctx := context.Background()
	cl := testcluster.Start(t, localcluster.Config{Nodes: 3}) // closed after the unmounts (cleanups run last in, first out)
	admin := testcluster.Client(t, cl, "")
	mount := func(name string) (*lfs.FS, *fsvol.Volume) {
		c := testcluster.Client(t, cl, name)
		vol, err := fsvol.New(ctx, c, fsvol.Options{})
		require.NoError(t, err)
		require.NoError(t, lfs.Mkfs(ctx, vol, lfs.MkfsOptions{}))
		fs, err := lfs.Mount(ctx, vol, lfs.Options{Move: lfs.Compact})
		require.NoError(t, err)
		t.Cleanup(func() { _ = fs.Unmount(ctx); _ = vol.Close(ctx) })
		return fs, vol
	}
	_, err := admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "hog", MaxActiveVzones: 8, ZonesPerVzone: 4})
	require.NoError(t, err)
	hog, _ := mount("hog") // formatted as the only namespace: the whole cluster

	_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "q", MaxActiveVzones: 8, ZonesPerVzone: 4, Vzones: 400})
	require.Error(t, err, "more v-zones than the cluster holds")
	_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "q", MaxActiveVzones: 8, ZonesPerVzone: 4, Vzones: 40})
	require.NoError(t, err)
	ns, err := admin.Namespaces().Get(ctx, "q")
	require.NoError(t, err)
	assert.Equal(t, uint64(160), ns.GetQuotaZones())
	q, qvol := mount("q")
	assert.Equal(t, 40, qvol.Geometry().MaxZones, "the file system takes the quota")

	t0 := time.Now()
	n, err := fillFS(ctx, t, hog, 0)
	require.Error(t, err, "hog fills the cluster up to the reservation")
	assert.Equal(t, syscall.ENOSPC, lfs.Errno(err), "%v", err)
	t.Logf("hog wrote %d MiB in %v, then: %v", n>>20, time.Since(t0), err)
	t0 = time.Now()

	st, err := q.Statfs(ctx)
	require.NoError(t, err)
	n, err = fillFS(ctx, t, q, st.Blocks/4)
	require.NoError(t, err, "the namespace with a quota fills three quarters of its file system after %d MiB", n>>20)
	assert.Greater(t, n, 40<<20)
	t.Logf("q wrote %d MiB in %v", n>>20, time.Since(t0))

}
