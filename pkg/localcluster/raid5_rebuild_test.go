package localcluster_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/internal/testcluster"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/node"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// raid5 rebuild over real nodes (mTLS, node-to-node PeerRead): a raid5
// namespace on 4 nodes (groups of 2 data legs + parity on 3 of them), two
// v-zones written at random against a reference — one finished (sealed in
// the middle of a row), one open ending inside a row (protected by a PP
// record) — then the node holding a data leg (or the parity leg) of the
// open group stops and is removed; the arbiter re-places its legs on the
// fourth node, which rebuilds them from the survivors. Every acknowledged
// byte reads back through a fresh client; then a second node of the
// rebuilt group stops, so that the rebuilt zones are the only way to the
// data (reads reconstruct through them), and every byte reads back again.
func TestRaid5RebuildDataLeg(t *testing.T)   { testRaid5Rebuild(t, false, 0) }
func TestRaid5RebuildParityLeg(t *testing.T) { testRaid5Rebuild(t, true, 0) }

// The same under a small rebuild rate (256 KiB/s per node): every byte is
// rebuilt, the nodes' zonefleet_node_rebuild_throttled_seconds_total shows
// the rebuild was held back, and the rebuild took at least what each
// node's rebuild bytes (less one burst) take at the rate — a lower bound
// only, which a loaded machine cannot break.
func TestRaid5RebuildThrottled(t *testing.T) { testRaid5Rebuild(t, false, 0.25) }

// nodeRebuildMetrics scrapes a node's rebuild bytes and throttled seconds.
func nodeRebuildMetrics(t *testing.T, metricsURL string) (bytes, throttled float64) {
	t.Helper()
	resp, err := http.Get(metricsURL)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(body), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "zonefleet_node_rebuild_bytes_total":
			require.NoError(t, err)
			bytes = v
		case "zonefleet_node_rebuild_throttled_seconds_total":
			require.NoError(t, err)
			throttled = v
		}
	}
	return bytes, throttled
}

func random(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func nodeIndex(t *testing.T, id string) int {
	t.Helper()
	var idx int
	_, err := fmt.Sscanf(id, "node-%d", &idx)
	require.NoError(t, err)
	return idx - 1
}

func testRaid5Rebuild(t *testing.T, parityLeg bool, rateMiB float64) {
	if testing.Short() {
		t.Skip("starts a 4-node cluster")
	}
	ctx := context.Background()
	c := testcluster.Start(t, localcluster.Config{Nodes: 4, Arbiters: 1, RebuildRate: rateMiB})
	// The retry deadline only bounds a hang: ten times what a retry
	// through a node's stop takes on a saturated machine.
	newClient := func(ns string) *client.Client {
		return testcluster.Client(t, c, ns, testcluster.WithEtcd(c), testcluster.RetryDeadline(30*time.Second))
	}
	admin := newClient("")
	_, err := admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "p", MaxActiveVzones: 2, ZonesPerVzone: 2, Redundancy: "raid5"})
	require.NoError(t, err)
	cl := newClient("p")

	// two v-zones of random writes against the reference
	rng := mrand.New(mrand.NewPCG(19, 27))
	type ref struct {
		vz   *client.VZone
		want []byte
	}
	var refs []*ref
	var bs uint64
	for v := 0; v < 2; v++ {
		vz, err := cl.OpenVZone(ctx)
		require.NoError(t, err)
		info, err := vz.ReportZone(ctx)
		require.NoError(t, err)
		bs = info.BlockSize
		l, err := vz.Layout(ctx)
		require.NoError(t, err)
		g0 := l.GetGroups()[0]
		require.True(t, g0.GetParity())
		row := uint64(g0.GetStripeBlocks()) * uint64(g0.GetWidth())
		r := &ref{vz: vz}
		// about two and a half groups' worth (the open one keeps a group open)
		limit := info.Capacity * 5 / 8
		if v == 0 {
			limit = info.Capacity / 3
		}
		for i := 0; uint64(len(r.want))/bs < limit && i < 400; i++ {
			nb := 1 + rng.Uint64N(2*row)
			b := random(int(bs * nb))
			off := uint64(len(r.want)) / bs
			if i%3 == 0 {
				require.NoError(t, vz.WriteFUA(ctx, off, b))
			} else {
				got, err := vz.Append(ctx, b)
				require.NoError(t, err)
				require.Equal(t, off, got)
			}
			r.want = append(r.want, b...)
		}
		if uint64(len(r.want))/bs%row == 0 { // end inside a row
			b := random(int(bs))
			_, err := vz.Append(ctx, b)
			require.NoError(t, err)
			r.want = append(r.want, b...)
		}
		require.NoError(t, vz.Flush(ctx))
		refs = append(refs, r)
	}
	require.NoError(t, refs[0].vz.Finish(ctx)) // sealed inside a row

	readAll := func(why string) {
		t.Helper()
		fresh := newClient("p") // no cached layout, row parity or PP records
		for i, r := range refs {
			// through a fresh client, and through the writer's (its cached
			// layout names the lost node until it refreshes)
			for who, vz := range map[string]*client.VZone{"fresh": fresh.VZone(r.vz.ID()), "writer": r.vz} {
				got, err := vz.Read(ctx, 0, uint64(len(r.want))/bs)
				require.NoError(t, err, "v-zone %d, %s client: %s", i, who, why)
				require.True(t, bytes.Equal(r.want, got), "v-zone %d reads back other bytes through the %s client (%s)", i, who, why)
			}
		}
		info, err := fresh.VZone(refs[1].vz.ID()).ReportZone(ctx)
		require.NoError(t, err, why)
		require.Equal(t, uint64(len(refs[1].want))/bs, info.WritePointer, "the open v-zone's write pointer (%s)", why)
	}
	readAll("all nodes up")

	// the victim: a leg of the open v-zone's open group
	l, err := refs[1].vz.Layout(ctx)
	require.NoError(t, err)
	open := l.GetGroups()[len(l.GetGroups())-1]
	k := int(open.GetWidth())
	pos := 0
	if parityLeg {
		pos = k
	}
	if !parityLeg { // prefer a data leg whose node holds a data leg of the finished v-zone's sealed group too
		fl, err := refs[0].vz.Layout(ctx)
		require.NoError(t, err)
		sealed := fl.GetGroups()[len(fl.GetGroups())-1]
		for i := 0; i < k; i++ {
			for _, z := range sealed.GetZones()[:sealed.GetWidth()] {
				if z.GetNode() == open.GetZones()[i].GetNode() {
					pos = i
				}
			}
		}
	}
	victim := open.GetZones()[pos].GetNode()
	groupNodes := map[string]bool{}
	for _, z := range open.GetZones() {
		groupNodes[z.GetNode()] = true
	}
	require.NoError(t, c.StopNode(nodeIndex(t, victim)))
	require.Eventually(t, func() bool {
		nodes, err := admin.ListNodes(ctx)
		if err != nil {
			return false
		}
		for _, n := range nodes {
			if n.GetId() == victim {
				return !n.GetAvailable()
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond)
	readAll(victim + " down, degraded")

	// declared lost: its raid5 legs are rebuilt on the other nodes
	removed := time.Now()
	err = admin.RemoveNode(ctx, victim)
	require.ErrorIs(t, err, zerr.ErrZoneState, "it still holds zones: marked down, rebuild started")
	arb, err := admin.Arbiter(ctx)
	require.NoError(t, err)
	onVictim := func() int {
		n := 0
		for _, r := range refs {
			l, err := arb.GetVZone(ctx, &v1.VZoneRequest{Namespace: "p", Id: r.vz.ID()})
			require.NoError(t, err)
			for _, g := range l.GetGroups() {
				for _, z := range g.GetZones() {
					if z.GetNode() == victim {
						n++
					}
				}
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return onVictim() == 0 }, 60*time.Second, 100*time.Millisecond,
		"the raid5 legs leave the lost node")
	if rateMiB > 0 {
		took := time.Since(removed)
		rate := rateMiB * (1 << 20)
		burst := float64(node.DefaultRebuildBurst(int64(rate)))
		var throttled, total float64
		for _, n := range c.Info().Nodes {
			if n.ID == victim {
				continue
			}
			b, th := nodeRebuildMetrics(t, n.Metrics)
			total += b
			throttled += th
			if b > burst {
				min := time.Duration((b - burst) / rate * float64(time.Second))
				require.GreaterOrEqual(t, took, min, "%s moved %.0f rebuild bytes at %.2f MiB/s", n.ID, b, rateMiB)
			}
		}
		require.Positive(t, total, "rebuild bytes counted")
		require.Positive(t, throttled, "the rebuild waited for the rate limit")
		t.Logf("rebuilt under %.2f MiB/s per node: %.0f rebuild bytes over the nodes, %.2f s throttled, %v", rateMiB, total, throttled, took)
	}
	st, err := admin.ClusterStatus(ctx)
	require.NoError(t, err)
	require.Zero(t, st.GetLostParityZones())
	require.Zero(t, st.GetRebuilding())

	// the rebuilt group: on distinct nodes again, the PP logs with the parity leg
	l, err = arb.GetVZone(ctx, &v1.VZoneRequest{Namespace: "p", Id: refs[1].vz.ID()})
	require.NoError(t, err)
	rebuilt := l.GetGroups()[len(l.GetGroups())-1]
	target := rebuilt.GetZones()[pos].GetNode()
	require.False(t, groupNodes[target], "rebuilt on %s, a node of the group", target)
	nodes := map[string]bool{}
	for _, z := range rebuilt.GetZones()[:k+1] {
		require.False(t, nodes[z.GetNode()], "two legs of the rebuilt group on %s", z.GetNode())
		nodes[z.GetNode()] = true
	}
	require.Len(t, rebuilt.GetZones(), int(k)+3)
	require.Equal(t, rebuilt.GetZones()[k].GetNode(), rebuilt.GetZones()[k+1].GetNode(), "the PP logs are on the parity leg's node")
	require.Equal(t, rebuilt.GetZones()[k].GetNode(), rebuilt.GetZones()[k+2].GetNode(), "the PP logs are on the parity leg's node")
	readAll("rebuilt on " + target)

	// the open v-zone takes writes again (all its zones are on live nodes;
	// the writer's client, whose layout still names the lost node, answers
	// degraded as designed and a writer moves on: a new client writes): a
	// partial row, protected by a PP record in the (new) log
	more := random(int(bs) * 3)
	_, err = newClient("p").VZone(refs[1].vz.ID()).Append(ctx, more)
	require.NoError(t, err, "a write into the rebuilt open group")
	refs[1].want = append(refs[1].want, more...)
	readAll("written after the rebuild")

	// a second node of the rebuilt group stops: a data leg's (not the
	// target's), so its rows reconstruct through the rebuilt zone(s)
	second := ""
	for i := 0; i < k && second == ""; i++ { // another data leg
		if i != pos {
			second = rebuilt.GetZones()[i].GetNode()
		}
	}
	require.NotEmpty(t, second, "a group of one data leg")
	require.NotEqual(t, target, second)
	require.NoError(t, c.StopNode(nodeIndex(t, second)))
	readAll(second + " down after the rebuild: the rebuilt zones are the only way to its legs")
}
