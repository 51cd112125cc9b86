package client_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/internal/testcluster"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/node"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// fdpClusterConfig is two nodes, each with one FDP drive of four handles
// (two persistently isolated) beside its zoned drive. Its one arbiter is
// never stopped, and a node stops gracefully: the leases keep the
// harness's TTLs.
func fdpClusterConfig() localcluster.Config {
	f := node.DefaultFDPOptions()
	f.Devices, f.Handles, f.RUChips, f.OverProvision = 1, []string{"ii", "ii", "pi", "pi"}, 1, 0.3
	return localcluster.Config{Nodes: 2, Arbiters: 1, FDP: f}
}

func createFDP(t *testing.T, c *localcluster.Cluster, name string, bytes uint64, handles uint32) {
	t.Helper()
	testcluster.CreateNamespace(t, c, &v1.CreateNamespaceRequest{Name: name, Kind: "fdp", FdpCapacityBytes: bytes, FdpHandles: handles})
}

// Tenants of fdp namespaces write and read through their own placement
// handles within their capacity; a tenant's token reaches no other
// tenant's grant (PERMISSION_DENIED from the node), a namespace the
// drives cannot hold is refused, and a deleted namespace's range comes
// back trimmed to the next tenant.
func TestFDPNamespaceQuotaAndIsolation(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, fdpClusterConfig())
	ctx := context.Background()
	const bs = 4096
	createFDP(t, c, "a", 64*bs, 2)
	createFDP(t, c, "b", 64*bs, 1)

	a := testcluster.Client(t, c, "a")
	fa, err := a.OpenFDP(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(64), fa.Blocks())
	require.Equal(t, uint32(bs), fa.BlockSize())
	require.Equal(t, 2, fa.Handles())

	hot, cold := bytes.Repeat([]byte{0xa1}, 2*bs), bytes.Repeat([]byte{0xa2}, 3*bs)
	require.NoError(t, fa.Write(ctx, 0, hot, client.Placement{Handle: 0}, false))
	require.NoError(t, fa.Write(ctx, 61, cold, client.Placement{Handle: 1}, true))
	got, err := fa.Read(ctx, 0, 2)
	require.NoError(t, err)
	assert.Equal(t, hot, got)
	got, err = fa.Read(ctx, 61, 3)
	require.NoError(t, err)
	assert.Equal(t, cold, got)
	require.NoError(t, fa.Flush(ctx))

	for _, tt := range []struct {
		name string
		err  error
		call func() error
	}{
		{"write past the capacity", zerr.ErrOutOfRange, func() error { return fa.Write(ctx, 63, hot, client.Placement{}, false) }},
		{"read past the capacity", zerr.ErrOutOfRange, func() error { _, err := fa.Read(ctx, 64, 1); return err }},
		{"trim past the capacity", zerr.ErrOutOfRange, func() error { return fa.Trim(ctx, 60, 5) }},
		{"a handle it was not granted", zerr.ErrInvalidArgument, func() error { return fa.Write(ctx, 0, hot, client.Placement{Handle: 2}, false) }},
		{"v-zones of an fdp namespace", zerr.ErrInvalidArgument, func() error { _, err := a.OpenVZone(ctx); return err }},
	} {
		t.Run(tt.name, func(t *testing.T) { assert.ErrorIs(t, tt.call(), tt.err) })
	}

	// b's token on a's drive: refused by the node, whatever the LBA
	b := testcluster.Client(t, c, "b")
	fb, err := b.OpenFDP(ctx)
	require.NoError(t, err)
	g := fa.Grant()
	cc, err := b.NodeConn(g.GetNode(), g.GetAddr())
	require.NoError(t, err)
	require.NotEqual(t, g.GetNode(), fb.Grant().GetNode(), "b went to the emptier drive")
	_, err = v1.NewFDPClient(cc).Write(ctx, &v1.FDPWriteRequest{Device: g.GetDevice(), Lba: 0, Data: make([]byte, bs)})
	assert.ErrorIs(t, err, zerr.ErrPermissionDenied, "another namespace's drive")
	_, err = v1.NewFDPClient(cc).Read(ctx, &v1.FDPReadRequest{Device: g.GetDevice(), Lba: 0, Count: 1})
	assert.ErrorIs(t, err, zerr.ErrPermissionDenied)
	_, err = v1.NewFDPClient(cc).Stats(ctx, &v1.FDPDeviceRequest{Device: g.GetDevice()})
	assert.ErrorIs(t, err, zerr.ErrPermissionDenied, "the log pages are the operator's")
	// b's own LBAs are not a's, on whichever drive
	require.NoError(t, fb.Write(ctx, 0, bytes.Repeat([]byte{0xb1}, bs), client.Placement{}, false))
	got, err = fb.Read(ctx, 0, 2)
	require.NoError(t, err)
	assert.Equal(t, append(bytes.Repeat([]byte{0xb1}, bs), make([]byte, bs)...), got)
	got, err = fa.Read(ctx, 0, 2)
	require.NoError(t, err)
	assert.Equal(t, hot, got, "a's data is untouched")

	// the operator sees a's writes on the drive handles granted to it
	adm := testcluster.Client(t, c, "")
	acc, err := adm.NodeConn(g.GetNode(), g.GetAddr())
	require.NoError(t, err)
	usage, err := v1.NewFDPClient(acc).Usage(ctx, &v1.FDPDeviceRequest{Device: g.GetDevice()})
	require.NoError(t, err)
	host := map[uint32]uint64{}
	for _, u := range usage.GetHandles() {
		host[u.GetHandle()] += u.GetHostBytesWritten()
	}
	assert.Equal(t, uint64(len(hot)), host[g.GetHandles()[0]], "placement handle 0")
	assert.Equal(t, uint64(len(cold)), host[g.GetHandles()[1]], "placement handle 1")

	// quota: a namespace no drive can hold is refused, typed
	_, err = adm.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "huge", Kind: "fdp", FdpCapacityBytes: 1 << 40})
	assert.ErrorIs(t, err, zerr.ErrNoResources)

	// a's range, deleted, comes back trimmed to the next tenant there
	require.NoError(t, adm.Namespaces().Delete(ctx, "a", false))
	// The node learns of the revocation through its etcd watch: wait for
	// it (the bound only guards against a hang).
	require.Eventually(t, func() bool {
		_, err := fa.Read(ctx, 0, 1)
		return errors.Is(err, zerr.ErrUnauthenticated)
	}, time.Minute, 10*time.Millisecond, "a deleted namespace's tokens are revoked")
	createFDP(t, c, "d", 64*bs, 2)
	fd, err := testcluster.Client(t, c, "d").OpenFDP(ctx)
	require.NoError(t, err)
	require.Equal(t, g.GetNode(), fd.Grant().GetNode())
	require.Equal(t, g.GetFirstLba(), fd.Grant().GetFirstLba())
	got, err = fd.Read(ctx, 0, 64)
	require.NoError(t, err)
	assert.Equal(t, make([]byte, 64*bs), got, "none of a's data")
}

// A namespace deleted while its node is down leaves nothing for the next
// tenant of its range: the node trims what no grant holds as it starts.
func TestFDPNamespaceDeletedWhileNodeDown(t *testing.T) {
	t.Parallel()
	cfg := fdpClusterConfig()
	cfg.Nodes = 1
	c := testcluster.Start(t, cfg)
	ctx := context.Background()
	const bs = 4096
	createFDP(t, c, "a", 16*bs, 1)
	fa, err := testcluster.Client(t, c, "a").OpenFDP(ctx)
	require.NoError(t, err)
	require.NoError(t, fa.Write(ctx, 0, bytes.Repeat([]byte{0xa1}, 16*bs), client.Placement{}, true))

	require.NoError(t, c.StopNode(0))
	adm := testcluster.Client(t, c, "")
	require.NoError(t, adm.Namespaces().Delete(ctx, "a", false))
	require.NoError(t, c.StartNode(ctx, 0))
	require.NoError(t, c.WaitReady(ctx))

	createFDP(t, c, "b", 16*bs, 1)
	fb, err := testcluster.Client(t, c, "b").OpenFDP(ctx)
	require.NoError(t, err)
	require.Equal(t, fa.Grant().GetFirstLba(), fb.Grant().GetFirstLba(), "the same range")
	got, err := fb.Read(ctx, 0, 16)
	require.NoError(t, err)
	assert.Equal(t, make([]byte, 16*bs), got)
}

// LBAStatus over the network: a tenant sees the mapped runs of its own
// range in its own addressing, paged by the node's bound (lowered to 5
// LBAs here, so every answer below takes several calls); past its capacity
// is OUT_OF_RANGE, another tenant's drive PERMISSION_DENIED, and Configs
// shows a tenant its namespace's view only.
func TestFDPNamespaceLBAStatus(t *testing.T) {
	t.Parallel()
	cfg := fdpClusterConfig()
	cfg.FDP.StatusLBAs = 5
	c := testcluster.Start(t, cfg)
	ctx := context.Background()
	const bs = 4096
	createFDP(t, c, "a", 64*bs, 2)
	createFDP(t, c, "b", 64*bs, 1)
	fa, err := testcluster.Client(t, c, "a").OpenFDP(ctx)
	require.NoError(t, err)
	fb, err := testcluster.Client(t, c, "b").OpenFDP(ctx)
	require.NoError(t, err)

	runs, err := fa.LBAStatus(ctx, 0, 64)
	require.NoError(t, err)
	assert.Empty(t, runs, "a fresh namespace maps nothing")

	// runs that cross the node's 5-LBA pages come back merged
	require.NoError(t, fa.Write(ctx, 3, make([]byte, 9*bs), client.Placement{Handle: 1}, false))
	require.NoError(t, fa.Write(ctx, 20, make([]byte, bs), client.Placement{}, false))
	require.NoError(t, fa.Write(ctx, 60, make([]byte, 4*bs), client.Placement{}, false))
	require.NoError(t, fa.Trim(ctx, 7, 1))
	// b writes on its own drive too: none of it shows in a's answers
	require.NoError(t, fb.Write(ctx, 0, make([]byte, 64*bs), client.Placement{}, false))

	for _, tt := range []struct {
		name       string
		lba, count uint64
		want       []client.LBARange
	}{
		{"whole namespace", 0, 64, []client.LBARange{{3, 4}, {8, 4}, {20, 1}, {60, 4}}},
		{"within one page", 4, 2, []client.LBARange{{4, 2}}},
		{"clipped to the range", 5, 16, []client.LBARange{{5, 2}, {8, 4}, {20, 1}}},
		{"unmapped range", 30, 30, nil},
		{"last block", 63, 1, []client.LBARange{{63, 1}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fa.LBAStatus(ctx, tt.lba, tt.count)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
	runs, err = fb.LBAStatus(ctx, 0, 64)
	require.NoError(t, err)
	assert.Equal(t, []client.LBARange{{0, 64}}, runs, "b's own addressing")

	g := fa.Grant()
	for _, tt := range []struct {
		name       string
		lba, count uint64
		err        error
	}{
		{"past the capacity", 60, 5, zerr.ErrOutOfRange},
		{"starting past the capacity", 64, 1, zerr.ErrOutOfRange},
		{"wrapping range", 1, ^uint64(0), zerr.ErrOutOfRange},
		{"empty range", 0, 0, zerr.ErrInvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := fa.LBAStatus(ctx, tt.lba, tt.count)
			assert.ErrorIs(t, err, tt.err)
		})
	}

	// b's token on a's drive: refused whatever the range
	b := testcluster.Client(t, c, "b")
	cc, err := b.NodeConn(g.GetNode(), g.GetAddr())
	require.NoError(t, err)
	require.NotEqual(t, g.GetNode(), fb.Grant().GetNode())
	for _, lba := range []uint64{0, g.GetFirstLba()} {
		_, err = v1.NewFDPClient(cc).LBAStatus(ctx, &v1.FDPLBAStatusRequest{Device: g.GetDevice(), Lba: lba, Count: 4})
		assert.ErrorIs(t, err, zerr.ErrPermissionDenied, "another namespace's drive")
	}
	_, err = v1.NewFDPClient(cc).Configs(ctx, &v1.FDPDeviceRequest{Device: g.GetDevice()})
	assert.ErrorIs(t, err, zerr.ErrPermissionDenied, "another namespace's drive")

	// Configs: the namespace's capacity and handles, the drive's reclaim units
	ca, err := fa.Configs(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(64), ca.GetLbas())
	assert.Len(t, ca.GetHandleTypes(), 2)
	assert.Equal(t, 2*ca.GetReclaimGroups(), ca.GetMaxPlacementIds())
	assert.Zero(t, ca.GetPhysicalBytes())
	assert.Equal(t, uint32(bs), ca.GetBlockSize())
	assert.Positive(t, ca.GetPageSize())
	assert.Equal(t, uint32(1), ca.GetRuChips())
	assert.Positive(t, ca.GetReclaimUnitNominalBytes())
	adm := testcluster.Client(t, c, "")
	acc, err := adm.NodeConn(g.GetNode(), g.GetAddr())
	require.NoError(t, err)
	cd, err := v1.NewFDPClient(acc).Configs(ctx, &v1.FDPDeviceRequest{Device: g.GetDevice()})
	require.NoError(t, err)
	assert.Greater(t, cd.GetLbas(), ca.GetLbas(), "the operator sees the drive")
	assert.Len(t, cd.GetHandleTypes(), 4)
	assert.Equal(t, cd.GetReclaimUnitNominalBytes(), ca.GetReclaimUnitNominalBytes())
	for i, h := range g.GetHandles() {
		assert.Equal(t, cd.GetHandleTypes()[h], ca.GetHandleTypes()[i], "placement handle %d", i)
	}
}
