package fsvol

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// writeFile creates (or truncates) name with data and fsyncs it.
func writeFile(t *testing.T, fs *lfs.FS, name string, data []byte) {
	t.Helper()
	ctx := context.Background()
	_, h, err := fs.Create(ctx, lfs.RootIno, name, 0o644, 0, 0, os.O_RDWR|os.O_TRUNC)
	require.NoError(t, err)
	_, err = fs.Write(ctx, h, 0, data)
	require.NoError(t, err)
	require.NoError(t, fs.Fsync(ctx, h, false))
	require.NoError(t, fs.Release(ctx, h))
}

func readFile(t *testing.T, fs *lfs.FS, name string, n int) []byte {
	t.Helper()
	ctx := context.Background()
	a, err := fs.Lookup(ctx, lfs.RootIno, name)
	require.NoError(t, err, name)
	h, err := fs.Open(ctx, a.Ino, os.O_RDONLY)
	require.NoError(t, err)
	buf := make([]byte, n)
	got, err := fs.Read(ctx, h, 0, buf)
	require.NoError(t, err)
	require.NoError(t, fs.Release(ctx, h))
	return buf[:got]
}

// The spare race (the workaround of commit ec08fff): mount A unmounts but
// its Volume.Close is delayed; mount B of the same namespace (another
// client, as another process) recovers, which resets A's spare, and opens
// that id again for its own log. A's Close then gives back its spare: it
// must not reset B's v-zone. Real arbiter, embedded etcd, nodes over gRPC.
func TestCloseDoesNotResetAReusedSpare(t *testing.T) {
	ctx := context.Background()
	cl, err := localcluster.Start(ctx, localcluster.Config{Dir: t.TempDir(), Nodes: 2, Clock: "off", Device: localcluster.TinyDevice()})
	require.NoError(t, err)
	defer cl.Close()
	admin, err := client.New(ctx, cl.AdminClientConfig())
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "fs", MaxActiveVzones: 6, ZonesPerVzone: 2})
	require.NoError(t, err)

	ca, err := client.New(ctx, cl.ClientConfig("fs"))
	require.NoError(t, err)
	defer ca.Close()
	va, err := New(ctx, ca, Options{MaxZones: 20, OpenAhead: 1})
	require.NoError(t, err)
	require.NoError(t, lfs.Mkfs(ctx, va, lfs.MkfsOptions{OPPercent: 20}))
	fsa, err := lfs.Mount(ctx, va, lfs.Options{Move: lfs.Compact})
	require.NoError(t, err)
	payload := bytes.Repeat([]byte("A"), 20000)
	writeFile(t, fsa, "a", payload)
	require.NoError(t, fsa.Unmount(ctx))
	// Let the open ahead land, then take note of A's spare.
	va.mu.Lock()
	wait := va.openDone
	va.mu.Unlock()
	if wait != nil {
		<-wait
	}
	va.mu.Lock()
	require.Len(t, va.spares, 1, "A holds one spare")
	sp := va.spares[0]
	va.mu.Unlock()
	require.NotZero(t, sp.inc, "the arbiter names the opening")

	// Mount B before A's Close: its recovery resets A's spare (not in the
	// file system) and B opens v-zones for its own log, reusing that id.
	cb, err := client.New(ctx, cl.ClientConfig("fs"))
	require.NoError(t, err)
	defer cb.Close()
	vb, err := New(ctx, cb, Options{MaxZones: 20})
	require.NoError(t, err)
	fsb, err := lfs.Mount(ctx, vb, lfs.Options{Move: lfs.Compact})
	require.NoError(t, err)
	reused := false
	for i := 0; i < 12 && !reused; i++ {
		writeFile(t, fsb, fmt.Sprintf("b%d", i), bytes.Repeat([]byte{byte('a' + i)}, 30000))
		info, err := cb.VZone(uint64(sp.id)).ReportZone(ctx) // refreshes the layout
		require.NoError(t, err)
		reused = info.State != "empty"
	}
	lay, err := cb.VZone(uint64(sp.id)).Layout(ctx)
	require.NoError(t, err)
	require.True(t, reused, "B reopened A's spare id %d (the race needs it)", sp.id)
	require.NotEqual(t, sp.inc, lay.GetIncarnation(), "a new opening has a new incarnation")

	// A's delayed Close: the spare is another opening now; nothing is reset.
	require.NoError(t, va.Close(ctx))
	after, err := cb.VZone(uint64(sp.id)).ReportZone(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, "empty", after.State, "B's v-zone survived A's Close")
	// Giving back that id by A's incarnation directly is refused, typed.
	err = ca.VZone(uint64(sp.id)).ResetIncarnation(ctx, sp.inc)
	require.Error(t, err)
	assert.True(t, errors.Is(err, zerr.ErrStaleLayout), "%v", err)

	// B goes on writing and everything reads back after a remount.
	writeFile(t, fsb, "late", bytes.Repeat([]byte("L"), 50000))
	require.NoError(t, fsb.Unmount(ctx))
	require.NoError(t, vb.Close(ctx))
	vc, err := New(ctx, cb, Options{MaxZones: 20})
	require.NoError(t, err)
	defer vc.Close(ctx)
	fsc, err := lfs.Mount(ctx, vc, lfs.Options{Move: lfs.Compact})
	require.NoError(t, err)
	assert.Equal(t, payload, readFile(t, fsc, "a", len(payload)+1))
	assert.Equal(t, bytes.Repeat([]byte("L"), 50000), readFile(t, fsc, "late", 50001))
	require.NoError(t, fsc.Unmount(ctx))
	report, err := lfs.Fsck(ctx, vc, false)
	require.NoError(t, err)
	assert.Empty(t, report.Problems)
}
