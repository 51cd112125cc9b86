package fusefs_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/fusefs"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

func needFuse(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
}

// mounted is a file system over an in-process cluster, mounted through FUSE.
type mounted struct {
	reg *prometheus.Registry // the file system's metrics
	dir string
	fs  *lfs.FS
	vol *fsvol.Volume
	srv *fusefs.Server
}

func mountCluster(t *testing.T) *mounted { return mountClusterWith(t, fusefs.MountOptions{}) }

// mountClusterWith is mountCluster with these mount options (Direct is set
// for root).
func mountClusterWith(t *testing.T, mo fusefs.MountOptions) *mounted {
	t.Helper()
	return mountClusterOpts(t, mo, lfs.Options{Move: lfs.Compact})
}

// mountClusterOpts is mountClusterWith with lfs options (Registry is set).
func mountClusterOpts(t *testing.T, mo fusefs.MountOptions, lo lfs.Options) *mounted {
	t.Helper()
	return mountClusterMkfs(t, lfs.MkfsOptions{OPPercent: 20}, mo, lo)
}

// mountClusterMkfs is mountClusterOpts formatted with mko.
func mountClusterMkfs(t *testing.T, mko lfs.MkfsOptions, mo fusefs.MountOptions, lo lfs.Options) *mounted {
	t.Helper()
	needFuse(t)
	ctx := context.Background()
	cl, err := localcluster.Start(ctx, localcluster.Config{Dir: t.TempDir(), Nodes: 3, Clock: "off", Device: localcluster.TinyDevice(), AdminToken: "tok"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	admin, err := client.New(ctx, cl.AdminClientConfig())
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "fs", MaxActiveVzones: 8, ZonesPerVzone: 4})
	require.NoError(t, err)
	c, err := client.New(ctx, cl.ClientConfig("fs"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	vol, err := fsvol.New(ctx, c, fsvol.Options{MaxZones: 40})
	require.NoError(t, err)
	require.NoError(t, lfs.Mkfs(ctx, vol, mko))
	reg := prometheus.NewRegistry()
	lo.Registry = reg
	fs, err := lfs.Mount(ctx, vol, lo)
	require.NoError(t, err)
	dir := t.TempDir()
	mo.Direct = os.Geteuid() == 0
	srv, err := fusefs.Mount(fusefs.New(fs, fusefs.Config{}), dir, mo)
	require.NoError(t, err)
	m := &mounted{reg: reg, dir: dir, fs: fs, vol: vol, srv: srv}
	t.Cleanup(func() {
		if m.srv != nil {
			_ = m.srv.Unmount(true)
		}
	})
	return m
}

// unmount ends the FUSE mount, unmounts lfs and checks it with fsck.
func (m *mounted) unmountAndCheck(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, m.srv.Unmount(false))
	m.srv = nil
	require.NoError(t, m.fs.Unmount(ctx))
	rep, err := lfs.Fsck(ctx, m.vol, false)
	require.NoError(t, err)
	assert.Empty(t, rep.Problems, "fsck after the run")
}

// go-fuse's POSIX conformance suite against a real mount: every case in a
// fresh directory of one mount.
func TestPosix(t *testing.T) {
	m := mountCluster(t)
	names := make([]string, 0, len(posixtest.All))
	for n := range posixtest.All {
		// POSIX record locks of one process never conflict: this case
		// fails on ext4 as well, and go-fuse's own TestAll leaves it out.
		if n != "FcntlFlockLocksFile" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		sub := filepath.Join(m.dir, n)
		require.NoError(t, os.Mkdir(sub, 0o755))
		t.Run(n, func(t *testing.T) { posixtest.All[n](t, sub) })
	}
	m.unmountAndCheck(t)
}
