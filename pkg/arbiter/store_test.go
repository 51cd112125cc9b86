package arbiter

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// storeKeys returns every arbiter state key with its mod revision.
func (tc *testCluster) storeKeys() map[string]int64 {
	tc.t.Helper()
	resp, err := tc.cli.Get(context.Background(), storePrefix, clientv3.WithPrefix())
	require.NoError(tc.t, err)
	out := map[string]int64{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kv.ModRevision
	}
	return out
}

func (tc *testCluster) rev() int64 {
	tc.t.Helper()
	resp, err := tc.cli.Get(context.Background(), "/rev-probe")
	require.NoError(tc.t, err)
	return resp.Header.Revision
}

func TestStateInManyKeys(t *testing.T) {
	tc, a := oneLeader(t, 2)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "a", MARLogical: 4, ZonesPerVZone: 16})
	require.NoError(t, err)
	_, err = a.CreateNamespace(ctx, NamespaceSpec{Name: "b", MARLogical: 4, ZonesPerVZone: 16})
	require.NoError(t, err)
	keys := tc.storeKeys()
	for _, k := range []string{formatKey, metaKey, nsKey("a"), nsKey("b"), nodeKey("n0"), nodeKey("n1")} {
		assert.Contains(t, keys, k)
	}
	_, err = tc.cli.Get(ctx, stateKey)
	require.NoError(t, err)

	before := tc.rev()
	l, err := a.OpenVZone(ctx, "a", 3)
	require.NoError(t, err)
	after := tc.rev()
	assert.Equal(t, before+1, after, "one transaction")
	// Exactly the keys the open touches changed: counters, the namespace, the v-zone (and grants).
	var changed []string
	for k, r := range tc.storeKeys() {
		if r == after {
			changed = append(changed, k)
		}
	}
	assert.ElementsMatch(t, []string{metaKey, nsKey("a"), vzKey("a", 3)}, changed)
	g := tc.grants()
	for _, z := range l.Groups[0].Zones {
		assert.Equal(t, "a", g[z].Namespace)
	}

	// No-ops write nothing.
	noops := counterOf(a.m.noops)
	before = tc.rev()
	require.NoError(t, a.ResetVZone(ctx, "b", 7)) // empty
	_, err = a.FinishVZone(ctx, "a", 3)
	require.NoError(t, err)
	mid := tc.rev()
	assert.Equal(t, before+1, mid, "only the finish wrote")
	_, err = a.FinishVZone(ctx, "a", 3) // already full
	require.NoError(t, err)
	require.NoError(t, a.ReportWrite(ctx, "b")) // not frozen: memory only
	assert.Equal(t, mid, tc.rev(), "no-op mutations wrote to etcd")
	assert.GreaterOrEqual(t, counterOf(a.m.noops)-noops, 2.0)

	// A node re-registering unchanged changes no arbiter key.
	keys = tc.storeKeys()
	noops = counterOf(a.m.noops)
	tc.addNode("n0", []cluster.DeviceInfo{testDevice(0)}, false)
	require.Eventually(t, func() bool { return counterOf(a.m.noops) > noops }, 30*time.Second, 5*time.Millisecond)
	assert.Equal(t, keys, tc.storeKeys())

	// Reset deletes the v-zone key; delete removes the namespace's keys.
	require.NoError(t, a.ResetVZone(ctx, "a", 3))
	assert.NotContains(t, tc.storeKeys(), vzKey("a", 3))
	_, err = a.OpenVZone(ctx, "a", 5)
	require.NoError(t, err)
	require.NoError(t, a.DeleteNamespace(ctx, "a", true))
	for k := range tc.storeKeys() {
		assert.False(t, strings.HasPrefix(k, vzNSPrefix("a")) || k == nsKey("a"), "left %s", k)
	}
	assert.Empty(t, tc.grants())
}

// TestMigrationFromDocument writes a format-1 document (the whole state as
// one JSON value) and starts a new arbiter on it: everything is preserved,
// the records are written, the document is gone.
func TestMigrationFromDocument(t *testing.T) {
	tc, a := oneLeader(t, 3)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "a", MARLogical: 4, ZonesPerVZone: 256, Weight: 2})
	require.NoError(t, err)
	_, err = a.CreateNamespace(ctx, NamespaceSpec{Name: "b", MARLogical: 2, ZonesPerVZone: 8})
	require.NoError(t, err)
	for i := uint64(0); i < 3; i++ {
		_, err = a.OpenVZone(ctx, "a", i)
		require.NoError(t, err)
	}
	_, err = a.NextStripeGroup(ctx, "a", 1)
	require.NoError(t, err)
	_, err = a.FinishVZone(ctx, "a", 2)
	require.NoError(t, err)
	_, err = a.OpenVZone(ctx, "b", 9)
	require.NoError(t, err)
	wantNS, err := a.ListNamespaces(ctx)
	require.NoError(t, err)
	wantVZ, err := a.ListVZones(ctx, "a")
	require.NoError(t, err)
	wantStatus, err := a.Status(ctx)
	require.NoError(t, err)
	st, _, err := a.snapshot(ctx)
	require.NoError(t, err)
	doc, err := cluster.Encode(st)
	require.NoError(t, err)
	grants := tc.grants()
	a.stop()

	// The old layout: only the document (plus the leftovers of an interrupted migration).
	_, err = tc.cli.Delete(ctx, storePrefix, clientv3.WithPrefix())
	require.NoError(t, err)
	_, err = tc.cli.Put(ctx, stateKey, string(doc))
	require.NoError(t, err)
	_, err = tc.cli.Put(ctx, vzKey("zzz", 1), `{"id":1}`)
	require.NoError(t, err)

	b := tc.start("arb-1:9000")
	tc.leader(b)
	gotNS, err := b.ListNamespaces(ctx)
	require.NoError(t, err)
	for i := range gotNS { // in-memory activity differs between leaders
		gotNS[i].LastWrite, wantNS[i].LastWrite = time.Time{}, time.Time{}
	}
	assert.Equal(t, wantNS, gotNS)
	gotVZ, err := b.ListVZones(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, wantVZ, gotVZ)
	gotStatus, err := b.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, wantStatus.AllocSeq, gotStatus.AllocSeq)
	assert.Equal(t, wantStatus.Loans, gotStatus.Loans)
	assert.Equal(t, grants, tc.grants())
	resp, err := tc.cli.Get(ctx, stateKey)
	require.NoError(t, err)
	assert.Empty(t, resp.Kvs, "the format-1 document is deleted")
	keys := tc.storeKeys()
	assert.Contains(t, keys, formatKey)
	assert.Contains(t, keys, vzKey("b", 9))
	assert.NotContains(t, keys, vzKey("zzz", 1))

	// And it keeps working on the new records, across another leader.
	_, err = b.OpenVZone(ctx, "a", 7)
	require.NoError(t, err)
	b.stop()
	c := tc.start("arb-2:9000")
	tc.leader(c)
	l, err := c.Layout(ctx, "a", 7)
	require.NoError(t, err)
	assert.Equal(t, VZoneOpen, l.State)
}

func TestUnknownFormatRefused(t *testing.T) {
	tc := newTestCluster(t)
	ctx := context.Background()
	a, err := New(Config{Addr: "x:1", Logger: discardLogger()}, tc.cli, nil)
	require.NoError(t, err)
	for _, v := range []string{`{"version":3}`, `{"version":2,"features":1}`, `not json`} {
		_, err = tc.cli.Put(ctx, formatKey, v)
		require.NoError(t, err)
		_, _, err = a.loadStore(ctx, nil)
		require.ErrorIs(t, err, zerr.ErrCorrupt, v)
	}
}

// TestGrantsBeyondMaxTxnOps: stripe groups wider than a transaction allows
// are granted and revoked completely (documented order), and the v-zone
// records stay consistent.
func TestGrantsBeyondMaxTxnOps(t *testing.T) {
	tc := newTestCluster(t)
	tc.cfg = func(c *Config) { c.MaxTxnOps = 8 }
	for i := 0; i < 2; i++ {
		tc.addNode(fmt.Sprintf("n%d", i), []cluster.DeviceInfo{testDevice(0)}, false)
	}
	a := tc.start("arb-0:9000")
	tc.leader(a)
	tc.waitNodes(a, 2)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "w", MARLogical: 1, ZonesPerVZone: 64})
	require.NoError(t, err)
	l, err := a.OpenVZone(ctx, "w", 0)
	require.NoError(t, err)
	require.Greater(t, len(l.Groups[0].Zones), 8)
	g := tc.grants()
	require.Len(t, g, len(l.Groups[0].Zones))
	for _, z := range l.Groups[0].Zones {
		assert.Equal(t, cluster.Grant{Namespace: "w", VZone: 0, Group: 0, Generation: l.Generation}, g[z])
	}
	l, err = a.NextStripeGroup(ctx, "w", 0)
	require.NoError(t, err)
	assert.Len(t, tc.grants(), len(l.Groups[0].Zones)+len(l.Groups[1].Zones))
	require.NoError(t, a.ResetVZone(ctx, "w", 0))
	assert.Empty(t, tc.grants())
	_, err = a.OpenVZone(ctx, "w", 1)
	require.NoError(t, err)
	require.NoError(t, a.DeleteNamespace(ctx, "w", true))
	assert.Empty(t, tc.grants())
	assert.NotContains(t, tc.storeKeys(), vzKey("w", 1))
}

func counterOf(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

func gaugeOf(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		return -1
	}
	return m.GetGauge().GetValue()
}

// TestManyRecordsSmallTxns: a change of more records than a transaction
// holds (20 nodes joining, a migration) is written in fenced batches and
// loads back complete.
func TestManyRecordsSmallTxns(t *testing.T) {
	tc := newTestCluster(t)
	tc.cfg = func(c *Config) { c.MaxTxnOps = 8 }
	for i := 0; i < 20; i++ {
		tc.addNode(fmt.Sprintf("n%02d", i), []cluster.DeviceInfo{testDevice(0)}, false)
	}
	a := tc.start("arb-0:9000")
	tc.leader(a)
	tc.waitNodes(a, 20)
	ctx := context.Background()
	_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: "a", MARLogical: 4, ZonesPerVZone: 64})
	require.NoError(t, err)
	for i := uint64(0); i < 4; i++ {
		_, err = a.OpenVZone(ctx, "a", i)
		require.NoError(t, err)
	}
	for i := 0; i < 10; i++ { // each reprovisions every namespace: more records than a transaction holds
		_, err = a.CreateNamespace(ctx, NamespaceSpec{Name: fmt.Sprintf("x%d", i), MARLogical: 1, ZonesPerVZone: 8})
		require.NoError(t, err)
	}
	wantNS, err := a.ListNamespaces(ctx)
	require.NoError(t, err)
	st0, _, err := a.snapshot(ctx)
	require.NoError(t, err)
	require.True(t, sharesConsistent(st0))
	for i := 0; i < 20; i++ {
		assert.Contains(t, tc.storeKeys(), nodeKey(fmt.Sprintf("n%02d", i)))
	}
	st, _, err := a.snapshot(ctx)
	require.NoError(t, err)
	doc, err := cluster.Encode(st)
	require.NoError(t, err)
	want, err := a.ListVZones(ctx, "a")
	require.NoError(t, err)
	a.stop()

	// A restart loads every record; a migration of the same state in batches too.
	b := tc.start("arb-1:9000")
	tc.leader(b)
	tc.waitNodes(b, 20)
	got, err := b.ListVZones(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, want, got)
	gotNS, err := b.ListNamespaces(ctx)
	require.NoError(t, err)
	for i := range gotNS {
		gotNS[i].LastWrite, wantNS[i].LastWrite = time.Time{}, time.Time{}
	}
	assert.Equal(t, wantNS, gotNS)
	b.stop()

	// A crash between the batches of a reprovisioning left a namespace's
	// share stale: the next leader reprovisions before it serves.
	resp, err := tc.cli.Get(ctx, nsKey("x0"))
	require.NoError(t, err)
	var rec nsRecord
	require.NoError(t, cluster.Decode(nsKey("x0"), resp.Kvs[0].Value, &rec))
	rec.Essentials += 7
	bad, err := cluster.Encode(rec)
	require.NoError(t, err)
	_, err = tc.cli.Put(ctx, nsKey("x0"), string(bad))
	require.NoError(t, err)
	b2 := tc.start("arb-3:9000")
	tc.leader(b2)
	x0, err := b2.GetNamespace(ctx, "x0")
	require.NoError(t, err)
	assert.Equal(t, rec.Essentials-7, x0.Essentials, "reprovisioned at start")
	st2, _, err := b2.snapshot(ctx)
	require.NoError(t, err)
	assert.True(t, sharesConsistent(st2))
	b2.stop()
	_, err = tc.cli.Delete(ctx, storePrefix, clientv3.WithPrefix())
	require.NoError(t, err)
	_, err = tc.cli.Put(ctx, stateKey, string(doc))
	require.NoError(t, err)
	c := tc.start("arb-2:9000")
	tc.leader(c)
	tc.waitNodes(c, 20)
	got, err = c.ListVZones(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, want, got)
	checkInvariants(t, tc, c, "after a batched migration")
}
