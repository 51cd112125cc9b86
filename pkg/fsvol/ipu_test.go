package fsvol_test

import (
	"bytes"
	"context"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// TestInPlaceFsyncOverTheCluster: a tiny fdatasync goes in place through
// the client and the nodes to the drives (striped, no redundancy), and a
// mirrored namespace falls back to the log; both read back after a
// remount.
func TestInPlaceFsyncOverTheCluster(t *testing.T) {
	for _, tc := range []struct {
		redundancy string
		inPlace    bool
	}{{"", true}, {"mirror:2", false}} {
		t.Run("redundancy="+tc.redundancy, func(t *testing.T) {
			ctx := context.Background()
			cl, err := localcluster.Start(ctx, localcluster.Config{Dir: t.TempDir(), Nodes: 2, Clock: "off", Device: localcluster.TinyDevice()})
			require.NoError(t, err)
			defer cl.Close()
			admin, err := client.New(ctx, cl.AdminClientConfig())
			require.NoError(t, err)
			defer admin.Close()
			_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "fs", MaxActiveVzones: 8, ZonesPerVzone: 2, Redundancy: tc.redundancy})
			require.NoError(t, err)
			c, err := client.New(ctx, cl.ClientConfig("fs"))
			require.NoError(t, err)
			defer c.Close()
			vol, err := fsvol.New(ctx, c, fsvol.Options{MaxZones: 20})
			require.NoError(t, err)
			require.NoError(t, lfs.Mkfs(ctx, vol, lfs.MkfsOptions{}))
			fs, err := lfs.Mount(ctx, vol, lfs.Options{IPUFsyncBlocks: 8})
			require.NoError(t, err)
			_, h, err := fs.Create(ctx, lfs.RootIno, "db", 0o644, 0, 0, syscall.O_RDWR)
			require.NoError(t, err)
			want := bytes.Repeat([]byte{'a'}, 16*4096)
			for i := 0; i < 2; i++ { // the name, then the marked inode
				_, err = fs.Write(ctx, h, 0, want)
				require.NoError(t, err)
				require.NoError(t, fs.Fsync(ctx, h, false))
			}
			upd := bytes.Repeat([]byte{'b'}, 2*4096)
			_, err = fs.Write(ctx, h, 5*4096, upd) // two blocks in two stripe units
			require.NoError(t, err)
			copy(want[5*4096:], upd)
			s0 := fs.Stats()
			require.NoError(t, fs.Fsync(ctx, h, true))
			s1 := fs.Stats()
			if tc.inPlace {
				require.Equal(t, uint64(2), s1.IPUBlocks-s0.IPUBlocks)
			} else {
				require.Zero(t, s1.IPUBlocks-s0.IPUBlocks)
				require.NotZero(t, s1.IPUFallbacks-s0.IPUFallbacks)
			}
			require.NoError(t, fs.Release(ctx, h))
			require.NoError(t, fs.Unmount(ctx))
			fs2, err := lfs.Mount(ctx, vol, lfs.Options{})
			require.NoError(t, err)
			a, err := fs2.Lookup(ctx, lfs.RootIno, "db")
			require.NoError(t, err)
			h2, err := fs2.Open(ctx, a.Ino, syscall.O_RDONLY)
			require.NoError(t, err)
			got := make([]byte, len(want))
			n, err := fs2.Read(ctx, h2, 0, got)
			require.NoError(t, err)
			require.Equal(t, len(want), n)
			require.True(t, bytes.Equal(want, got))
			require.NoError(t, fs2.Release(ctx, h2))
			require.NoError(t, fs2.Unmount(ctx))
		})
	}
}
