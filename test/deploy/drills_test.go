//go:build deploy

package deploy

import (
	"context"
	"errors"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// layoutKey lists a v-zone's stripe groups and their physical zones: the
// grants the arbiter made for it.
func layoutKey(t testing.TB, vz *client.VZone) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := vz.Layout(ctx)
	require.NoError(t, err)
	var out []string
	for _, g := range l.GetGroups() {
		for _, z := range g.GetZones() {
			out = append(out, z.GetNode()+"/"+z.GetAddr()+"/"+itoa(int(z.GetDevice()))+"/"+itoa(int(z.GetZone())))
		}
	}
	return out
}

func namespaceNames(t testing.TB) []string {
	t.Helper()
	admin := newClient(t, "", 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nss, err := admin.Namespaces().List(ctx)
	require.NoError(t, err)
	var names []string
	for _, ns := range nss {
		names = append(names, ns.GetName())
	}
	sort.Strings(names)
	return names
}

// Kill the arbiter leader under load: the other arbiter takes over, no
// namespace or grant is lost; the writers (data path: nodes only) keep going,
// and control-plane calls (v-zone layouts, a new v-zone) continue after a
// pause of about the session TTL.
func TestDrillArbiterLeaderKilled(t *testing.T) {
	st := waitReady(t, nodeCount, time.Minute)
	leader := st.GetLeader()
	svc, ok := serviceOf[leader]
	require.True(t, ok, "leader %q is one of the compose arbiters", leader)
	t.Cleanup(func() {
		if _, err := runCompose("start", svc); err != nil {
			t.Log(err)
		}
		if err := waitHealthy(); err != nil {
			t.Log(err)
		}
	})
	createNamespace(t, "drill-arbiter", 3, 8)
	cl := newClient(t, "drill-arbiter", 45*time.Second)
	ctx := context.Background()
	var ws []*writer
	for i := 0; i < 2; i++ {
		vz, err := cl.OpenVZone(ctx)
		require.NoError(t, err)
		ws = append(ws, newWriter(t, vz, "arb", 16, 50*time.Millisecond))
	}
	nsBefore := namespaceNames(t)

	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); w.run(lctx) }()
	}
	// Control plane load: a layout refresh through the arbiter every 100 ms.
	var (
		cpMu     sync.Mutex
		cpCalls  int
		cpMaxGap time.Duration
		cpErr    error
		cpLastOK = time.Now()
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for lctx.Err() == nil {
			_, err := cl.ListVZones(lctx)
			cpMu.Lock()
			if err != nil && lctx.Err() == nil {
				cpErr = err
			} else if err == nil {
				cpCalls++
				cpMaxGap = max(cpMaxGap, time.Since(cpLastOK))
				cpLastOK = time.Now()
			}
			cpMu.Unlock()
			time.Sleep(100 * time.Millisecond) // the pace of the control-plane probe
		}
	}()
	// the workload and the control-plane probe run before the kill
	waitWrites(t, ws, 5)
	require.Eventually(t, func() bool { cpMu.Lock(); defer cpMu.Unlock(); return cpCalls >= 3 }, 2*time.Minute, 20*time.Millisecond,
		"the control-plane probe answers")
	var layouts [][]string
	for _, w := range ws {
		layouts = append(layouts, layoutKey(t, w.vz))
	}
	killed := time.Now()
	compose(t, "kill", svc)
	t.Logf("killed the leader %s (%s)", svc, leader)

	// A new v-zone right after the kill: its stripe group needs the new leader.
	vz3, err := cl.OpenVZone(ctx)
	require.NoError(t, err, "OpenVZone across the failover")
	w3 := newWriter(t, vz3, "arb3", 16, 0)
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	w3.run(wctx)
	cancel()
	t.Logf("a new v-zone opened and written %s after the kill", time.Since(killed).Round(time.Millisecond))
	ws = append(ws, w3)
	// the drill's window: the writers and the probe run for 15 s from the
	// kill (its length, not a wait for an event), through the failover
	time.Sleep(max(0, 15*time.Second-time.Since(killed)))
	stop()
	wg.Wait()

	cpMu.Lock()
	t.Logf("control plane: %d calls, longest pause %s", cpCalls, cpMaxGap.Round(time.Millisecond))
	assert.NoError(t, cpErr, "control-plane calls retry across the failover")
	assert.Less(t, cpMaxGap, 30*time.Second)
	cpMu.Unlock()
	for i, w := range ws {
		acked, writes, gap, err := w.state()
		require.NoError(t, err, "writer %d", i)
		info, err := w.vz.ReportZone(ctx)
		require.NoError(t, err)
		t.Logf("writer %d: %d writes, %d blocks acknowledged, %d stripe groups, longest pause %s", i, writes, acked, info.Groups, gap.Round(time.Millisecond))
		assert.Greater(t, acked, uint64(0))
		assert.Equal(t, acked, info.WritePointer, "writer %d: write pointer", i)
		if i < len(layouts) { // every grant from before the failover is still there
			after := layoutKey(t, w.vz)
			require.GreaterOrEqual(t, len(after), len(layouts[i]))
			assert.Equal(t, layouts[i], after[:len(layouts[i])], "writer %d: stripe groups from before the failover", i)
		}
		verify(t, w.vz, w.seed, acked, w.bs)
	}
	st = waitReady(t, nodeCount, 30*time.Second)
	assert.NotEqual(t, leader, st.GetLeader(), "the other arbiter leads")
	assert.Equal(t, nsBefore, namespaceNames(t), "namespaces")
	ns, err := newClient(t, "", 10*time.Second).Namespaces().Get(ctx, "drill-arbiter")
	require.NoError(t, err)
	assert.Equal(t, uint32(8), ns.GetZonesPerVzone())
	t.Logf("new leader %s", st.GetLeader())
}

// Kill an ssdnode under load, then start it again: writes to its zones fail
// with a clear error (not a hang) while it is down; after the restart every
// acknowledged block is intact.
func TestDrillSSDNodeKilled(t *testing.T) {
	waitReady(t, nodeCount, time.Minute)
	createNamespace(t, "drill-node", 3, 8)
	const retry = 5 * time.Second
	cl := newClient(t, "drill-node", retry)
	ctx := context.Background()
	var ws []*writer
	for i := 0; i < 2; i++ {
		vz, err := cl.OpenVZone(ctx)
		require.NoError(t, err)
		ws = append(ws, newWriter(t, vz, "node", 32, 20*time.Millisecond))
	}
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); w.run(lctx) }()
	}
	waitWrites(t, ws, 10) // the workload runs before the kill
	// The victim holds a zone of the stripe group writer 0 is filling.
	l, err := ws[0].vz.Layout(ctx)
	require.NoError(t, err)
	groups := l.GetGroups()
	victim := groups[len(groups)-1].GetZones()[0]
	svc := serviceOf[victim.GetAddr()]
	require.NotEmpty(t, svc, "node address %s", victim.GetAddr())
	killed := time.Now()
	compose(t, "kill", svc)
	t.Logf("killed %s (%s)", svc, victim.GetNode())

	// The writer on the victim's zones gets an error naming the node within
	// the retry deadline, not a hang.
	require.Eventually(t, func() bool { _, _, _, err := ws[0].state(); return err != nil }, retry+15*time.Second, 100*time.Millisecond,
		"a write to the dead node's zones returns an error")
	_, _, _, werr := ws[0].state()
	t.Logf("writer 0 while %s is down: %v (%s after the kill)", svc, werr, time.Since(killed).Round(time.Millisecond))
	assert.ErrorIs(t, werr, zerr.ErrUnavailable)
	var ne *client.NodeError
	require.ErrorAs(t, werr, &ne)
	assert.Equal(t, victim.GetNode(), ne.Node)
	assert.Contains(t, werr.Error(), victim.GetNode())

	// A read of its zones fails the same way.
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	start := time.Now()
	_, err = ws[0].vz.Read(rctx, 0, 32)
	cancel()
	require.Error(t, err)
	assert.ErrorIs(t, err, zerr.ErrUnavailable)
	assert.Less(t, time.Since(start), retry+10*time.Second, "the read gives up after the retry deadline")
	stop()
	wg.Wait()

	compose(t, "start", svc)
	require.NoError(t, waitHealthy())
	waitReady(t, nodeCount, time.Minute)
	t.Logf("%s back %s after the kill", svc, time.Since(killed).Round(time.Second))

	cl2 := newClient(t, "drill-node", 20*time.Second)
	for i, w := range ws {
		acked, writes, _, err := w.state()
		t.Logf("writer %d: %d writes, %d blocks acknowledged, err %v", i, writes, acked, err)
		verify(t, cl2.VZone(w.vz.ID()), w.seed, acked, w.bs)
	}
	// And the cluster takes writes again.
	vz, err := cl2.OpenVZone(ctx)
	require.NoError(t, err)
	w := newWriter(t, vz, "node-after", 64, 0)
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	w.run(wctx)
	cancel()
	acked, _, _, err := w.state()
	require.NoError(t, err)
	verify(t, vz, w.seed, acked, w.bs)
}

// Cut an ssdnode off (docker pause: with host networking there is no
// `docker network disconnect`; a frozen node sends no lease keep-alives,
// exactly like a partitioned one) and let it back: its lease expires, the
// arbiter marks it unavailable, and it rejoins cleanly with its data.
func TestDrillSSDNodePartitioned(t *testing.T) {
	waitReady(t, nodeCount, time.Minute)
	createNamespace(t, "drill-partition", 1, 8)
	cl := newClient(t, "drill-partition", 20*time.Second)
	admin := newClient(t, "", 20*time.Second)
	ctx := context.Background()
	vz, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	w := newWriter(t, vz, "part", 64, 0)
	w.limit /= 2 // room for writes after the partition
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	w.run(wctx)
	cancel()
	before, _, _, err := w.state()
	require.NoError(t, err)
	l, err := vz.Layout(ctx)
	require.NoError(t, err)
	victim := l.GetGroups()[0].GetZones()[0]
	svc := serviceOf[victim.GetAddr()]
	require.NotEmpty(t, svc)

	compose(t, "pause", svc)
	paused := time.Now()
	unpaused := false
	t.Cleanup(func() {
		if !unpaused {
			_, _ = runCompose("unpause", svc)
		}
	})
	var down time.Duration
	require.Eventually(t, func() bool {
		n, err := admin.GetNode(ctx, victim.GetNode())
		if err == nil && !n.GetAvailable() {
			down = time.Since(paused)
			return true
		}
		return errors.Is(err, zerr.ErrNotFound) && func() bool { down = time.Since(paused); return true }()
	}, 30*time.Second, 200*time.Millisecond, "the arbiter marks %s unavailable", victim.GetNode())
	st, err := admin.ClusterStatus(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint32(nodeCount-1), st.GetNodesAvailable())
	t.Logf("%s unavailable %s after the pause (lease TTL 5s)", victim.GetNode(), down.Round(time.Millisecond))

	compose(t, "unpause", svc)
	unpaused = true
	back := time.Now()
	require.Eventually(t, func() bool {
		n, err := admin.GetNode(ctx, victim.GetNode())
		return err == nil && n.GetAvailable()
	}, 30*time.Second, 200*time.Millisecond, "%s available again", victim.GetNode())
	t.Logf("%s available again %s after the unpause", victim.GetNode(), time.Since(back).Round(time.Millisecond))
	waitReady(t, nodeCount, 30*time.Second)
	require.NoError(t, waitHealthy())
	logs := compose(t, "logs", "--no-color", svc)
	assert.Contains(t, logs, "node registered again", "the node re-registered under a new lease")

	// Its data is intact and its zones take writes again.
	verify(t, vz, w.seed, before, w.bs)
	w.limit *= 2
	wctx, cancel = context.WithTimeout(ctx, 3*time.Second)
	w.run(wctx)
	cancel()
	after, _, _, err := w.state()
	require.NoError(t, err)
	require.Greater(t, after, before)
	verify(t, vz, w.seed, after, w.bs)
}

// Restart the whole cluster (containers removed and created again, volumes
// kept): namespaces, v-zones, write pointers and every acknowledged block
// come back. (The file-system version — mount again, every fsynced file
// intact — comes with zctl mount.)
func TestDrillWholeClusterRestart(t *testing.T) {
	waitReady(t, nodeCount, time.Minute)
	ctx := context.Background()
	type vzState struct {
		ns, seed string
		id       uint64
		acked    uint64
		bs       uint64
	}
	var states []vzState
	for _, ns := range []string{"restart-a", "restart-b"} {
		createNamespace(t, ns, 2, 8)
		cl := newClient(t, ns, 20*time.Second)
		for i := 0; i < 2; i++ {
			vz, err := cl.OpenVZone(ctx)
			require.NoError(t, err)
			w := newWriter(t, vz, ns, 96, 0)
			w.limit -= 64 // room for a write after the restart
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			w.run(wctx)
			cancel()
			acked, _, _, err := w.state()
			require.NoError(t, err)
			states = append(states, vzState{ns, ns, vz.ID(), acked, w.bs})
		}
	}
	nsBefore := namespaceNames(t)

	start := time.Now()
	compose(t, "down") // no -v: the volumes stay
	compose(t, "up", "-d")
	require.NoError(t, waitHealthy())
	waitReady(t, nodeCount, 2*time.Minute)
	t.Logf("whole cluster down and up again in %s", time.Since(start).Round(time.Second))

	assert.Equal(t, nsBefore, namespaceNames(t))
	for _, s := range states {
		cl := newClient(t, s.ns, 20*time.Second)
		vz := cl.VZone(s.id)
		info, err := vz.ReportZone(ctx)
		require.NoError(t, err)
		assert.Equal(t, s.acked, info.WritePointer, "%s v-zone %d write pointer", s.ns, s.id)
		verify(t, vz, s.seed, s.acked, s.bs)
		// and it keeps going from there
		require.NoError(t, vz.Write(ctx, s.acked, pattern(s.seed, s.id, s.acked, 16, s.bs)))
		verify(t, vz, s.seed, s.acked+16, s.bs)
	}
}

// health is the Docker health status of a compose service's container.
func health(t testing.TB, svc string) string {
	t.Helper()
	id := strings.TrimSpace(compose(t, "ps", "-q", svc))
	require.NotEmpty(t, id, "container of %s", svc)
	out, err := exec.Command("docker", "inspect", "-f", "{{if .State.Health}}{{.State.Health.Status}}{{end}}", id).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return strings.TrimSpace(string(out))
}

// Stop two of the three etcd members: the survivor's healthcheck (etcd's
// /health through zctl health) turns unhealthy — the healthchecks really
// check. Start them again: the cluster comes back, nodes and arbiters
// reconnect, data is intact and writes work.
func TestDrillEtcdQuorumLost(t *testing.T) {
	waitReady(t, nodeCount, time.Minute)
	createNamespace(t, "drill-etcd", 1, 8)
	cl := newClient(t, "drill-etcd", 30*time.Second)
	ctx := context.Background()
	vz, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	w := newWriter(t, vz, "etcd", 64, 0)
	w.limit /= 2
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	w.run(wctx)
	cancel()
	before, _, _, err := w.state()
	require.NoError(t, err)

	compose(t, "stop", "etcd-2", "etcd-3")
	stopped := time.Now()
	t.Cleanup(func() { _, _ = runCompose("start", "etcd-2", "etcd-3") })
	require.Eventually(t, func() bool { return health(t, "etcd-1") == "unhealthy" }, 60*time.Second, time.Second,
		"etcd-1 unhealthy without quorum")
	t.Logf("etcd-1 unhealthy %s after losing quorum", time.Since(stopped).Round(time.Second))

	compose(t, "start", "etcd-2", "etcd-3")
	require.NoError(t, waitHealthy())
	waitReady(t, nodeCount, time.Minute)
	t.Logf("cluster ready again %s after the stop", time.Since(stopped).Round(time.Second))
	verify(t, vz, w.seed, before, w.bs)
	w.limit *= 2
	wctx, cancel = context.WithTimeout(ctx, 2*time.Second)
	w.run(wctx)
	cancel()
	after, _, _, err := w.state()
	require.NoError(t, err)
	require.Greater(t, after, before)
	verify(t, vz, w.seed, after, w.bs)
}
