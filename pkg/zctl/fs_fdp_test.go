package zctl

import (
	"bytes"
	"context"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/node"
)

// The file system commands on an fdp namespace of a local cluster (one
// node, one FDP drive with 512 KiB reclaim units): an option of zoned
// namespaces is refused with a usage error naming it; mkfs formats, fsck
// is clean; and, where FUSE is at hand, a mount writes files that a
// second mount reads back (fsck clean after).
func TestFSOnFDPNamespace(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster")
	}
	dir := t.TempDir()
	isolate(t, dir)
	f := node.DefaultFDPOptions()
	f.Devices, f.RUChips, f.OverProvision = 1, 1, 0.2
	f.Handles = []string{"ii", "ii", "ii", "ii", "ii", "ii", "ii", "ii"}
	dev := localcluster.TinyDevice()
	dev.BlocksPerChip = 24
	ctx := context.Background()
	cl, err := localcluster.Start(ctx, localcluster.Config{Dir: dir, Nodes: 1, Clock: "off", Device: dev, FDP: f})
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, localcluster.WriteInfo(cl.Info()))
	t.Setenv("ZONEFLEET_CLUSTER", filepath.Join(dir, "cluster.json"))

	_, errOut, code := run(t, "", "ns", "create", "fs", "--kind", "fdp", "--capacity", "16MiB", "--handles", "7")
	require.Equal(t, 0, code, errOut)
	mnt := filepath.Join(dir, "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o755))

	for _, tt := range []struct {
		name string
		args []string
		flag string
	}{
		{"mkfs --max-zones", []string{"mkfs", "--ns", "fs", "--max-zones", "8"}, "--max-zones"},
		{"fsck --max-zones", []string{"fsck", "--ns", "fs", "--max-zones", "8"}, "--max-zones"},
		{"mount --gc izc", []string{"mount", mnt, "--ns", "fs", "--gc", "izc"}, "--gc"},
		{"mount --ipu-fsync-blocks", []string{"mount", mnt, "--ns", "fs", "--ipu-fsync-blocks", "8"}, "--ipu-fsync-blocks"},
		{"mount --async-compaction", []string{"mount", mnt, "--ns", "fs", "--async-compaction"}, "--async-compaction"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := run(t, "", tt.args...)
			assert.Equal(t, ExitUsage, code, errOut)
			assert.Contains(t, errOut, tt.flag+" does not apply to fdp namespace fs")
		})
	}

	out, errOut, code := run(t, "", "mkfs", "--ns", "fs")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "formatted namespace fs: 32 segments (v-zones) of 512.0 KiB")
	out, errOut, code = run(t, "", "fsck", "--ns", "fs")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "fs: clean")

	if _, err := os.Stat("/dev/fuse"); err != nil || os.Geteuid() != 0 {
		t.Skip("no FUSE mount here (needs /dev/fuse and root)")
	}
	var gout, gerr bytes.Buffer
	_, g := newRoot(&gout, &gerr)
	rng := rand.New(rand.NewSource(1))
	files := map[string][]byte{}
	stop, err := localMount(ctx, g, cl, "fs", mnt, false, false)
	require.NoError(t, err, gerr.String())
	for _, name := range []string{"a", "b", "c"} {
		b := make([]byte, 100<<10+rng.Intn(1<<20))
		rng.Read(b)
		files[name] = b
		fh, err := os.Create(filepath.Join(mnt, name))
		require.NoError(t, err)
		_, err = fh.Write(b)
		require.NoError(t, err)
		require.NoError(t, fh.Sync())
		require.NoError(t, fh.Close())
	}
	stop()

	stop, err = localMount(ctx, g, cl, "fs", mnt, false, false)
	require.NoError(t, err, gerr.String())
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(mnt, name))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(want, got), "%s differs", name)
	}
	stop()
	out, errOut, code = run(t, "", "fsck", "--ns", "fs")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "fs: clean")
}
