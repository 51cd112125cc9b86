package node

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zns"
	"google.golang.org/grpc/metadata"
)

// BenchmarkHoldOwnerCheck is the cost of the owner epoch on the fencing
// path: hold of one zone with the grant and owner check (what every
// zone-touching call pays) against the grant-only check it replaced (read
// lock, cached grant lookup), measured in the same run:
//
//	go test -run '^$' -bench BenchmarkHoldOwnerCheck -count 6 ./pkg/node/
func BenchmarkHoldOwnerCheck(b *testing.B) {
	d, err := zns.Create(filepath.Join(b.TempDir(), "dev0.zns"), testGeometry(), clock.Off())
	require.NoError(b, err)
	defer d.Close()
	g := &Grants{m: map[[2]uint32]grantEntry{}, synced: make(chan struct{}), log: quiet, node: "bench", revCh: make(chan struct{})}
	g.m[[2]uint32{0, 1}] = grantEntry{g: cluster.Grant{Namespace: "a"}, epoch: 7}
	s, err := New(Config{ID: "bench"}, []*zns.Device{d}, g, quiet)
	require.NoError(b, err)
	defer s.Close()
	dev := s.devs[0]
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(wire.NamespaceKey, "a"))
	unlock, err := s.hold(ctx, dev, 2048, 1) // adopt once: the owner is recorded
	require.NoError(b, err)
	unlock()

	b.Run("grant-only", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			dev.zl[1].RLock()
			ok := !s.bypassGrants(ctx) && s.grants.Cached(s.namespace(ctx), 0, 1)
			dev.zl[1].RUnlock()
			if !ok {
				b.Fatal("not granted")
			}
		}
	})
	b.Run("grant+owner", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			unlock, err := s.hold(ctx, dev, 2048, 1)
			if err != nil {
				b.Fatal(err)
			}
			unlock()
		}
	})
}
