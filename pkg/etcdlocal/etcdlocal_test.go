package etcdlocal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAutoCompaction: the embedded server compacts its history by itself.
func TestAutoCompaction(t *testing.T) {
	tests := []struct {
		name      string
		retention time.Duration
		compacts  bool
	}{
		{"periodic", time.Second, true},
		{"disabled", -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := StartWith(t.TempDir(), "", Options{AutoCompactionRetention: tt.retention})
			require.NoError(t, err)
			defer srv.Close()
			cli, err := srv.Client()
			require.NoError(t, err)
			defer cli.Close()
			ctx := context.Background()
			first, err := cli.Put(ctx, "/k", "0")
			require.NoError(t, err)
			compacted := func() bool {
				_, err := cli.Put(ctx, "/k", fmt.Sprint(time.Now().UnixNano()))
				require.NoError(t, err)
				_, err = cli.Get(ctx, "/k", clientv3.WithRev(first.Header.Revision))
				return err != nil && err.Error() == rpctypes.ErrCompacted.Error()
			}
			if tt.compacts {
				require.Eventually(t, compacted, 30*time.Second, 100*time.Millisecond)
				require.Positive(t, srv.DBSize())
				return
			}
			time.Sleep(3 * time.Second)
			require.False(t, compacted())
		})
	}
}

func TestPicksPortAndAddrInUse(t *testing.T) {
	for addr, want := range map[string]bool{"": true, "127.0.0.1:0": true, "127.0.0.1:2379": false, "bad": false} {
		assert.Equal(t, want, picksPort(addr), addr)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	_, err = net.Listen("tcp", l.Addr().String())
	require.Error(t, err)
	assert.True(t, addrInUse(err), "a real bind failure: %v", err)
	assert.False(t, addrInUse(errors.New("permission denied")))
	// a taken port given explicitly is not retried: the error comes back
	_, err = Start(t.TempDir(), l.Addr().String())
	require.Error(t, err)
	assert.True(t, addrInUse(err), "%v", err)
}
