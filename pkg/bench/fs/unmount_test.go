package fsbench

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/lfs/devvol"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// TestUnmountNeverHangs: the harness's unmount returns whether or not a file
// of the mount is still open. A benchmark that failed part-way (a write
// refused with ENOSPC) with its file still open must not hang in its
// deferred unmount: a lazy unmount waits for the last user of the mount,
// the very goroutine waiting (and a mount only detached would hang the
// process at exit, when the kernel flushes that handle to the exiting
// process's own FUSE server).
func TestUnmountNeverHangs(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	defer func(g time.Duration) { unmountGrace = g }(unmountGrace)
	unmountGrace = 5 * time.Second
	for _, tc := range []struct {
		name     string
		leftOpen bool // the file is open while unmount runs (closed only after it returned)
		synced   bool
	}{
		{name: "closed", synced: true},
		{name: "left open", leftOpen: true},
		{name: "left open after fsync", leftOpen: true, synced: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.leftOpen && os.Geteuid() != 0 {
				t.Skip("aborting a busy FUSE mount (MNT_FORCE) needs root")
			}
			ctx := context.Background()
			dir := t.TempDir()
			d, err := zns.Create(filepath.Join(dir, "dev0"), devvol.TestConfig(32, 64), clock.Off())
			require.NoError(t, err)
			t.Cleanup(func() { _ = d.Close() })
			vol, err := devvol.New(d)
			require.NoError(t, err)
			require.NoError(t, lfs.Mkfs(ctx, vol, lfs.MkfsOptions{}))
			m, err := mountLFS(ctx, vol, filepath.Join(dir, "m"), lfs.Options{})
			require.NoError(t, err)
			f, err := os.Create(filepath.Join(m.dir, "f"))
			require.NoError(t, err)
			closed := false
			t.Cleanup(func() {
				if !closed {
					_ = f.Close() // lets an unmount still waiting end
				}
			})
			_, err = f.Write(make([]byte, 64<<10))
			require.NoError(t, err)
			if tc.synced {
				require.NoError(t, f.Sync())
			}
			if !tc.leftOpen {
				require.NoError(t, f.Close())
				closed = true
			}
			res := make(chan error, 1)
			go func() { res <- m.unmount(ctx) }()
			select {
			case err = <-res:
			case <-time.After(5 * time.Second):
				t.Fatal("unmount hangs while a file of the mount is open")
			}
			if !tc.leftOpen {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrMountBusy)
			// The connection is gone, not just detached: the FUSE server
			// stopped, and the lingering handle closes at once instead of
			// waiting on it (at exit, the process's own server).
			select {
			case <-m.srv.Done():
			default:
				t.Fatal("the FUSE server still serves the busy mount")
			}
			cerr := make(chan error, 1)
			go func() { cerr <- f.Close() }()
			closed = true
			select {
			case <-cerr:
			case <-time.After(5 * time.Second):
				t.Fatal("closing the lingering handle hangs")
			}
		})
	}
}
