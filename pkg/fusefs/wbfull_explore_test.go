package fusefs_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/zonefleet/zonefleet/pkg/fusefs"
	"github.com/zonefleet/zonefleet/pkg/lfs"
)

func TestExploreWBFull(t *testing.T) {
	m := mountClusterWith(t, fusefs.MountOptions{WritebackCache: true})
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(m.dir, &st))
	t.Logf("statfs blocks %d bfree %d bavail %d bsize %d", st.Blocks, st.Bfree, st.Bavail, st.Bsize)
	capB := int64(st.Blocks) * int64(st.Bsize)
	p := filepath.Join(m.dir, "dd")
	f, err := os.Create(p)
	require.NoError(t, err)
	buf := bytes.Repeat([]byte("z"), 1<<20)
	var n int64
	var werr error
	for n < 3*capB {
		k, err := f.Write(buf)
		n += int64(k)
		if err != nil {
			werr = err
			break
		}
	}
	t.Logf("wrote %d (cap %d) err %v", n, capB, werr)
	ferr := f.Sync()
	t.Logf("fsync: %v", ferr)
	fi, _ := f.Stat()
	t.Logf("kernel size %d", fi.Size())
	cerr := f.Close()
	t.Logf("close: %v", cerr)
	a, err := m.fs.Lookup(context.Background(), lfs.RootIno, "dd")
	require.NoError(t, err)
	t.Logf("lfs size %d blocks %d", a.Size, a.Blocks*512)
	fi, _ = os.Stat(p)
	t.Logf("stat size %d", fi.Size())
}
