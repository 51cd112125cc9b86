package fsvol_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/internal/testcluster"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// lossFS is the scaffolding of the node-loss file-system tests: a cluster
// of 4 tiny nodes, namespace "fs" with the given redundancy, a file system
// made on it, and the files written so far (to check every one of them).
type lossFS struct {
	t     *testing.T
	ctx   context.Context
	cl    *localcluster.Cluster
	admin *client.Client
	files map[string][]byte
}

func newLossFS(t *testing.T, redundancy string, maxActive, zonesPerVZone uint32) *lossFS {
	t.Helper()
	ctx := context.Background()
	// The tests stop a node gracefully (its registration lease is revoked
	// at once) and no arbiter: the leases keep the harness's TTLs.
	cl := testcluster.Start(t, localcluster.Config{Nodes: 4})
	admin := testcluster.Client(t, cl, "")
	testcluster.CreateNamespace(t, cl, &v1.CreateNamespaceRequest{Name: "fs", MaxActiveVzones: maxActive, ZonesPerVzone: zonesPerVZone, Redundancy: redundancy})
	c, err := client.New(ctx, cl.ClientConfig("fs"))
	require.NoError(t, err)
	vol, err := fsvol.New(ctx, c, fsvol.Options{MaxZones: 60})
	require.NoError(t, err)
	require.NoError(t, lfs.Mkfs(ctx, vol, lfs.MkfsOptions{OPPercent: 20}))
	c.Close()
	return &lossFS{t: t, ctx: ctx, cl: cl, admin: admin, files: map[string][]byte{}}
}

// mount mounts the file system with a fresh client. The client's retry
// deadline is 1 s of backoff on a testcluster.RetryClock: about seven
// attempts, however long each takes on a busy machine, so a call to the
// stopped node (a finish) gives up soon, and a call through a transient
// failure makes as many attempts as on an idle machine (a wall-clock
// second allows a single slow attempt). The file system's own retries
// of an unavailable volume (lfs.Options.RetryDeadline) must succeed here:
// their minute on the wall clock is a hang guard.
func (h *lossFS) mount() (*fsvol.Volume, *lfs.FS, func()) {
	ccfg := h.cl.ClientConfig("fs")
	ccfg.RetryDeadline, ccfg.Clock = time.Second, testcluster.NewRetryClock()
	c, err := client.New(h.ctx, ccfg)
	require.NoError(h.t, err)
	vol, err := fsvol.New(h.ctx, c, fsvol.Options{MaxZones: 60})
	require.NoError(h.t, err)
	clk := clock.Realtime(1)
	fs, err := lfs.Mount(h.ctx, vol, lfs.Options{Clock: clk, Mode: lfs.ModeZNS, RetryDeadline: time.Minute, CacheBlocks: 96})
	require.NoError(h.t, err)
	return vol, fs, func() { clk.Stop(); c.Close() }
}

// write writes and fsyncs n files named prefix-NN.
func (h *lossFS) write(ops fsOps, prefix string, n int) {
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		data := content(name, 0, 20<<10+i*1000)
		require.NoError(h.t, ops.write(h.ctx, name, data, true), "fsync of %s", name)
		h.files[name] = data
	}
}

// check reads back every file written.
func (h *lossFS) check(ops fsOps, when string) {
	for name, want := range h.files {
		got, err := ops.read(h.ctx, name)
		require.NoError(h.t, err, "%s: read %s", when, name)
		require.True(h.t, bytes.Equal(want, got), "%s: %s reads back other bytes", when, name)
	}
}

// nodeIndex is the localcluster index of node id.
func (h *lossFS) nodeIndex(id string) int {
	for i, n := range h.cl.Info().Nodes {
		if n.ID == id {
			return i
		}
	}
	require.FailNow(h.t, "no such node", id)
	return -1
}
