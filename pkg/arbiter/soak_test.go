package arbiter

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/etcdlocal"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// ownEtcd starts a private embedded etcd (compaction and quota tests must
// not touch the package's shared server).
func ownEtcd(t *testing.T, o etcdlocal.Options) (*etcdlocal.Server, *clientv3.Client) {
	t.Helper()
	srv, err := etcdlocal.StartWith(t.TempDir(), "", o)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	cli, err := srv.Client()
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	return srv, cli
}

func startOn(t *testing.T, cli *clientv3.Client, cfg Config) *Arbiter {
	t.Helper()
	cfg.Addr, cfg.Logger, cfg.ReclaimInterval = "arb:1", discardLogger(), -1
	a, err := New(cfg, cli, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	require.Eventually(t, a.IsLeader, 60*time.Second, 10*time.Millisecond)
	return a
}

func registerNodes(t *testing.T, cli *clientv3.Client, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("n%d", i)
		b, err := cluster.EncodeNode(cluster.NodeRecord{ID: id, Addr: id + ":1", Devices: []cluster.DeviceInfo{testDevice(0)}})
		require.NoError(t, err)
		_, err = cli.Put(context.Background(), cluster.NodeKey(id), string(b))
		require.NoError(t, err)
	}
}

// cycle is one allocation cycle: open, next stripe group, finish, reset (4 mutations).
func cycle(ctx context.Context, a *Arbiter, ns string, id uint64) error {
	if _, err := a.OpenVZone(ctx, ns, id); err != nil {
		return err
	}
	if _, err := a.NextStripeGroup(ctx, ns, id); err != nil {
		return err
	}
	if _, err := a.FinishVZone(ctx, ns, id); err != nil {
		return err
	}
	return a.ResetVZone(ctx, ns, id)
}

// TestEtcdSizeBoundedByCompaction: over many mutations with the arbiter's
// compaction (etcd's own auto-compaction off), etcd's database stops
// growing and old history is gone. ZONEFLEET_SOAK_MUTATIONS sets the count
// (100000 for the full soak); the default run is a short version.
func TestEtcdSizeBoundedByCompaction(t *testing.T) {
	mutations := 2000
	if v := os.Getenv("ZONEFLEET_SOAK_MUTATIONS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		mutations = n
	}
	srv, cli := ownEtcd(t, etcdlocal.Options{AutoCompactionRetention: -1})
	registerNodes(t, cli, 4)
	// The compaction ticks run on a virtual clock, advanced every
	// sixteenth of the run: a tick compacts at the revision of the one
	// before, as every 100 ms of wall time would, but at the same points
	// of the workload on every run, however busy the machine.
	vc := clock.NewVirtual()
	a := startOn(t, cli, Config{Clock: vc, CompactInterval: time.Minute})
	compactRound := func() {
		t.Helper()
		n := counterOf(a.m.compactions)
		vc.Advance(time.Minute)
		require.Eventually(t, func() bool { return counterOf(a.m.compactions) > n }, time.Minute, time.Millisecond, "a compaction tick compacts")
	}
	ctx := context.Background()
	require.Eventually(t, func() bool { s, err := a.Status(ctx); return err == nil && s.AvailableNodes == 4 }, 60*time.Second, 10*time.Millisecond)
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "soak", MARLogical: 4, ZonesPerVZone: 1024})
	require.NoError(t, err)
	first, err := cli.Get(ctx, formatKey)
	require.NoError(t, err)

	var sizes []int64
	cycles := mutations / 4
	for i := 0; i < cycles; i++ {
		require.NoError(t, cycle(ctx, a, "soak", uint64(i%4)))
		if (i+1)%max(cycles/16, 1) == 0 {
			compactRound()
		}
		if (i+1)%(cycles/4) == 0 {
			sizes = append(sizes, srv.DBSize())
		}
	}
	t.Logf("etcd db size after each quarter of %d mutations: %v", mutations, sizes)
	require.Positive(t, counterOf(a.m.compactions))
	_, err = cli.Get(ctx, formatKey, clientv3.WithRev(first.Header.Revision))
	require.ErrorIs(t, err, rpctypes.ErrCompacted, "old history is compacted")
	// Bounded: the last half adds at most a quarter (and 1 MiB of slack) to
	// what the first quarter reached; without compaction every mutation
	// keeps its revisions and the file grows linearly.
	assert.LessOrEqual(t, sizes[len(sizes)-1], sizes[0]+sizes[0]/4+1<<20, "db grows: %v", sizes)
}

// TestNoSpaceSurfaces: past etcd's quota every state change fails with an
// UnavailableError naming NOSPACE and the alarm gauge is set.
func TestNoSpaceSurfaces(t *testing.T) {
	_, cli := ownEtcd(t, etcdlocal.Options{QuotaBackendBytes: 2 << 20})
	registerNodes(t, cli, 2)
	a := startOn(t, cli, Config{CompactInterval: -1})
	ctx := context.Background()
	require.Eventually(t, func() bool { s, err := a.Status(ctx); return err == nil && s.AvailableNodes == 2 }, 60*time.Second, 10*time.Millisecond)
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "a", MARLogical: 4, ZonesPerVZone: 64})
	require.NoError(t, err)
	big := strings.Repeat("x", 64<<10)
	for i := 0; ; i++ {
		_, err := cli.Put(ctx, fmt.Sprintf("/filler/%d", i), big)
		if err != nil {
			require.ErrorIs(t, err, rpctypes.ErrNoSpace)
			break
		}
		require.Less(t, i, 10000, "quota never reached")
	}
	_, err = a.OpenVZone(ctx, "a", 0)
	require.ErrorIs(t, err, zerr.ErrUnavailable)
	require.Contains(t, err.Error(), "NOSPACE")
	assert.Equal(t, 1.0, gaugeOf(a.m.alarm.WithLabelValues("nospace")))
	a.pollAlarms(ctx)
	assert.Equal(t, 1.0, gaugeOf(a.m.alarm.WithLabelValues("nospace")), "polled from etcd's alarm list")
}
