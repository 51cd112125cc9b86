package fdpnet_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/internal/testcluster"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/fdpvol"
	"github.com/zonefleet/zonefleet/pkg/fdpvol/fdpnet"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/node"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

var (
	bg    = context.Background()
	quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
)

// cluster is one node with one FDP drive of eight initially isolated
// handles and reclaim units of one flash block of 32 pages (512 KiB: zones small
// enough that a few MiB of churn makes lfs recycle segments), whose
// LBAStatus answers cover at most 300 LBAs (a volume's recovery pages).
func cluster(t *testing.T) *localcluster.Cluster {
	f := node.DefaultFDPOptions()
	f.Devices, f.RUChips, f.OverProvision, f.StatusLBAs = 1, 1, 0.2, 300
	f.Handles = []string{"ii", "ii", "ii", "ii", "ii", "ii", "ii", "ii"}
	dev := localcluster.SmallDevice()
	dev.PagesPerBlock, dev.BlocksPerChip = 32, 24
	return testcluster.Start(t, localcluster.Config{Nodes: 1, Arbiters: 1, Device: dev, FDP: f})
}

// open makes a volume over the namespace through a fresh client and
// mounts the file system on it.
func open(t *testing.T, c *localcluster.Cluster, ns string) (*fdpvol.Volume, *lfs.FS, *client.FDPNamespace) {
	t.Helper()
	f, err := testcluster.Client(t, c, ns).OpenFDP(bg)
	require.NoError(t, err)
	v, err := fdpvol.Open(bg, fdpnet.Drive(f), fdpvol.Options{})
	require.NoError(t, err)
	fs, err := lfs.Mount(bg, v, lfs.Options{Mode: lfs.ModeZNS, CacheBlocks: 64, Clock: clock.NewVirtual()})
	require.NoError(t, err)
	return v, fs, f
}

// writeFile writes data at off of name (created when missing).
func writeFile(t *testing.T, fs *lfs.FS, name string, off int, data []byte, fsync bool) {
	t.Helper()
	a, err := fs.Lookup(bg, lfs.RootIno, name)
	var h lfs.Handle
	if err == syscall.ENOENT {
		_, h, err = fs.Create(bg, lfs.RootIno, name, 0o644, 0, 0, syscall.O_RDWR)
	} else if err == nil {
		h, err = fs.Open(bg, a.Ino, syscall.O_RDWR)
	}
	require.NoError(t, err)
	n, err := fs.Write(bg, h, int64(off), data)
	require.NoError(t, err)
	require.Equal(t, len(data), n)
	if fsync {
		require.NoError(t, fs.Fsync(bg, h, false))
	}
	require.NoError(t, fs.Release(bg, h))
}

func checkFiles(t *testing.T, fs *lfs.FS, model map[string][]byte) {
	t.Helper()
	for name, want := range model {
		a, err := fs.Lookup(bg, lfs.RootIno, name)
		require.NoError(t, err, name)
		require.Equal(t, uint64(len(want)), a.Size, name)
		h, err := fs.Open(bg, a.Ino, syscall.O_RDONLY)
		require.NoError(t, err)
		got := make([]byte, len(want))
		n, err := fs.Read(bg, h, 0, got)
		require.NoError(t, err)
		require.Equal(t, len(want), n)
		require.True(t, bytes.Equal(want, got), "%s differs", name)
		require.NoError(t, fs.Release(bg, h))
	}
	rep, err := fs.Fsck(bg)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
}

// TestLFSOverNetworkFDP runs the file system on a tenant's fdp namespace
// over gRPC: mkfs, files written and fsynced, the mount abandoned without
// an unmount (its client closed: a crash) and the volume recovered from
// the node's LBA status by a fresh client, the fsynced files rolled
// forward; then overwrites until lfs has recycled segments by host copy,
// a clean unmount, and a third volume reading everything back. fsck is
// clean at every step, and the logs went to more than one of the
// namespace's placement handles.
func TestLFSOverNetworkFDP(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	const ruBytes = 32 * 16 << 10
	testcluster.CreateNamespace(t, c, &v1.CreateNamespaceRequest{Name: "fs", Kind: "fdp", FdpCapacityBytes: 40 * ruBytes, FdpHandles: uint32(lfs.NumZoneClasses)})

	f, err := testcluster.Client(t, c, "fs").OpenFDP(bg)
	require.NoError(t, err)
	v, err := fdpvol.Open(bg, fdpnet.Drive(f), fdpvol.Options{})
	require.NoError(t, err)
	geo := v.Geometry()
	require.Equal(t, uint64(ruBytes/4096), geo.ZoneBlocks, "a zone is one reclaim unit")
	require.Equal(t, 40, geo.MaxZones)
	require.NoError(t, lfs.Mkfs(bg, v, lfs.MkfsOptions{}))

	rng := rand.New(rand.NewSource(1))
	rnd := func(n int) []byte { b := make([]byte, n); rng.Read(b); return b }
	model := map[string][]byte{}

	// fsynced files, then a crash: the client goes, nothing is unmounted
	f1 := testcluster.Client(t, c, "fs")
	fns, err := f1.OpenFDP(bg)
	require.NoError(t, err)
	v1vol, err := fdpvol.Open(bg, fdpnet.Drive(fns), fdpvol.Options{})
	require.NoError(t, err)
	fs, err := lfs.Mount(bg, v1vol, lfs.Options{Mode: lfs.ModeZNS, CacheBlocks: 64, Clock: clock.NewVirtual()})
	require.NoError(t, err)
	for i := range 6 {
		name := fmt.Sprintf("f%d", i)
		model[name] = rnd(64<<10 + rng.Intn(1<<20))
		writeFile(t, fs, name, 0, model[name], true)
	}
	checkFiles(t, fs, model)
	f1.Close()

	_, fs, _ = open(t, c, "fs")
	checkFiles(t, fs, model)

	// small overwrites leave segments partly valid: lfs recycles them
	// by host copy
	for i := 0; i < 60 || fs.Stats().CompactedSegments == 0; i++ {
		require.Less(t, i, 5000, "no segment recycled after %d overwrites", i)
		name := fmt.Sprintf("f%d", rng.Intn(6))
		cur := model[name]
		off := rng.Intn(len(cur))
		d := rnd(4<<10 + rng.Intn(60<<10))
		writeFile(t, fs, name, off, d, i%8 == 0)
		if off+len(d) > len(cur) {
			cur = append(cur, make([]byte, off+len(d)-len(cur))...)
		}
		copy(cur[off:], d)
		model[name] = cur
	}
	st := fs.Stats()
	assert.Positive(t, st.CompactedSegments, "segments were recycled")
	assert.Positive(t, st.MovedHostCopy, "by host copy")
	checkFiles(t, fs, model)
	require.NoError(t, fs.Unmount(bg))

	_, fs, fns = open(t, c, "fs")
	checkFiles(t, fs, model)
	require.NoError(t, fs.Unmount(bg))

	// the logs wrote through several of the namespace's handles
	g := fns.Grant()
	cc, err := testcluster.Client(t, c, "").NodeConn(g.GetNode(), g.GetAddr())
	require.NoError(t, err)
	us, err := v1.NewFDPClient(cc).Usage(bg, &v1.FDPDeviceRequest{Device: g.GetDevice()})
	require.NoError(t, err)
	used := map[uint32]bool{}
	for _, u := range us.GetHandles() {
		if u.GetHostBytesWritten() > 0 {
			used[u.GetHandle()] = true
		}
	}
	for h := range used {
		assert.Contains(t, g.GetHandles(), h, "only the namespace's handles")
	}
	assert.GreaterOrEqual(t, len(used), 3, "node, data and metadata logs on handles of their own")
}

// The mount lease over an fdp namespace: a second holder is refused while
// the first renews; a forced takeover makes the first lose it, and its
// volume then refuses every change with a fenced (zone state) error while
// it still reads.
func TestLeaseFencesTheVolume(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	const ruBytes = 32 * 16 << 10
	testcluster.CreateNamespace(t, c, &v1.CreateNamespaceRequest{Name: "fs", Kind: "fdp", FdpCapacityBytes: 32 * ruBytes, FdpHandles: uint32(lfs.NumZoneClasses)})

	ca := testcluster.Client(t, c, "fs")
	la, err := fdpnet.AcquireLease(bg, ca, fdpnet.LeaseOptions{Holder: "a", TTL: 3 * time.Second, Logger: quiet})
	require.NoError(t, err)
	fa, err := ca.OpenFDP(bg)
	require.NoError(t, err)
	va, err := fdpvol.Open(bg, fdpnet.Drive(fa), fdpvol.Options{Fence: la.Fence})
	require.NoError(t, err)
	z, err := va.OpenZone(bg)
	require.NoError(t, err)
	data := bytes.Repeat([]byte{7}, 4096)
	require.NoError(t, va.Write(bg, z, 0, data, false))

	cb := testcluster.Client(t, c, "fs")
	_, err = fdpnet.AcquireLease(bg, cb, fdpnet.LeaseOptions{Holder: "b", TTL: time.Second, Logger: quiet})
	require.ErrorIs(t, err, zerr.ErrAlreadyExists, "a renews its lease")
	lb, err := fdpnet.AcquireLease(bg, cb, fdpnet.LeaseOptions{Holder: "b", TTL: 3 * time.Second, Force: true, Logger: quiet})
	require.NoError(t, err)
	<-la.Lost() // a's next renewal finds b's lease

	for _, tt := range []struct {
		name string
		call func() error
	}{
		{"write", func() error { return va.Write(bg, z, 1, data, false) }},
		{"open", func() error { _, err := va.OpenZone(bg); return err }},
		{"reset", func() error { return va.Reset(bg, z) }},
		{"finish", func() error { return va.Finish(bg, z) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var fe *fsvol.FencedError
			require.ErrorAs(t, err, &fe)
			assert.True(t, fe.Final)
			assert.ErrorIs(t, err, zerr.ErrZoneState, "not transient: the file system turns read-only")
		})
	}
	got := make([]byte, 4096)
	require.NoError(t, va.Read(bg, z, 0, got), "reads go on")
	assert.Equal(t, data, got)
	require.NoError(t, la.Release(bg), "a lost lease is not given back")
	require.NoError(t, lb.Fence())
	require.NoError(t, lb.Release(bg))
}
