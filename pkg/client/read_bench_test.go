package client_test

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// BenchmarkReadInto reads a written v-zone of a 3-node cluster (one
// process, TLS) at random offsets: 4 KiB (one leg) and 128 KiB (a row of
// stripe legs). Profile: go test -run '^$' -bench ReadInto -cpuprofile cpu.out ./pkg/client/
func BenchmarkReadInto(b *testing.B) {
	c, err := localcluster.Start(context.Background(), localcluster.Config{Dir: b.TempDir(), Nodes: 3, Arbiters: 1,
		Clock: "off", SessionTTL: time.Second, Device: localcluster.TinyDevice()})
	require.NoError(b, err)
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	mk := func(ns string) *client.Client {
		cfg := c.ClientConfig(ns)
		cfg.Etcd, cfg.RetryDeadline = c.Etcd.Endpoints(), 20*time.Second
		cl, err := client.New(ctx, cfg)
		require.NoError(b, err)
		b.Cleanup(cl.Close)
		return cl
	}
	_, err = mk("").Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "rb", MaxActiveVzones: 2, ZonesPerVzone: 32})
	require.NoError(b, err)
	cl := mk("rb")
	vz, err := cl.OpenVZone(ctx)
	require.NoError(b, err)
	info, err := vz.ReportZone(ctx)
	require.NoError(b, err)
	bs := info.BlockSize
	n := min(info.AllocatedUpTo, 1024)
	require.NoError(b, vz.Write(ctx, 0, make([]byte, n*bs)))
	for _, size := range []uint64{4096, 128 << 10} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			buf := make([]byte, size)
			blocks := size / bs
			rng := mrand.New(mrand.NewPCG(1, 1))
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				require.NoError(b, vz.ReadInto(ctx, rng.Uint64N(n-blocks+1), buf))
			}
		})
	}
}
