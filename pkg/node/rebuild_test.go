package node

import (
	"bytes"
	"context"
	"crypto/subtle"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/ondisk"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc/codes"
)

// raidGroup is a raid5 group of width 2 written by hand on three real
// nodes (data legs on d0 and d1, parity and the PP log on p) and a fourth
// node t for the rebuilds, all zones granted to namespace "a": rows full
// rows with parity, then an open row covering S+5 blocks (leg 0's unit and
// 5 blocks of leg 1's) protected by a PP record.
type raidGroup struct {
	d0, d1, p, t *testNode
	ids          [4]string
	legs         [2][]byte // what each data leg holds
	parity       []byte
	rows, S      uint64
	cover        uint64
}

const rbBS = 4096

func xorBlocks(dst, src []byte) { subtle.XORBytes(dst, dst, src) }

func newRaidGroup(t *testing.T, prefix string) *raidGroup { return newRaidGroupCfg(t, prefix, nil) }

// newRaidGroupCfg is newRaidGroup with a hook on every node's Config.
func newRaidGroupCfg(t *testing.T, prefix string, tune func(*Config)) *raidGroup {
	g := &raidGroup{rows: 3, S: 16, ids: [4]string{prefix + "-d0", prefix + "-d1", prefix + "-p", prefix + "-t"}}
	start := func(id string) *testNode { return startNodeCfg(t, id, true, true, true, tune) }
	g.d0, g.d1, g.p, g.t = start(g.ids[0]), start(g.ids[1]), start(g.ids[2]), start(g.ids[3])
	for i, n := range []*testNode{g.d0, g.d1, g.p, g.t} {
		for z := uint32(0); z < 2; z++ {
			grant(t, g.ids[i], z, "a")
			waitGrant(t, n, z, "a")
		}
	}
	ctx := asNS("a")
	S := g.S
	g.cover = S + 5
	for i := range g.legs {
		n := g.rows * S
		if i == 0 {
			n += S
		} else {
			n += 5
		}
		g.legs[i] = randBlocks(t, int(n))
	}
	g.parity = make([]byte, g.rows*S*rbBS)
	for i := range g.legs {
		xorBlocks(g.parity, g.legs[i][:g.rows*S*rbBS])
	}
	for i, n := range []*testNode{g.d0, g.d1} {
		_, err := n.client.Write(ctx, &v1.WriteRequest{Lba: 0, Data: g.legs[i]})
		require.NoError(t, err)
	}
	_, err := g.p.client.Write(ctx, &v1.WriteRequest{Lba: 0, Data: g.parity})
	require.NoError(t, err)
	// the PP log (zone 1 of p): an older record of row 3, a torn block, the newest record
	acc := make([]byte, S*rbBS)
	xorBlocks(acc, g.legs[0][g.rows*S*rbBS:])
	old := encodePPRecord(ondisk.PPHeader{Group: 7, Row: g.rows, Covered: S}, acc, rbBS)
	xorBlocks(acc[:5*rbBS], g.legs[1][g.rows*S*rbBS:])
	rec := encodePPRecord(ondisk.PPHeader{Group: 7, Row: g.rows, Covered: g.cover}, acc, rbBS)
	torn := make([]byte, rbBS)
	copy(torn, rec[:ondisk.PPHeaderLen-1])
	log := append(append(append([]byte{}, old...), torn...), rec...)
	_, err = g.p.client.Write(ctx, &v1.WriteRequest{Lba: 2048, Data: log})
	require.NoError(t, err)
	return g
}

func (g *raidGroup) req(lost uint32, target uint32) *v1.RebuildParityLegRequest {
	pz := func(n *testNode, id string, zone uint32, written uint64) *v1.PeerZone {
		return &v1.PeerZone{NodeId: id, Device: 0, Zone: zone, WrittenBlocks: written, Addr: n.addr}
	}
	legs := []*v1.PeerZone{
		pz(g.d0, g.ids[0], 0, uint64(len(g.legs[0])/rbBS)),
		pz(g.d1, g.ids[1], 0, uint64(len(g.legs[1])/rbBS)),
		pz(g.p, g.ids[2], 0, uint64(len(g.parity)/rbBS)),
	}
	legs[lost] = &v1.PeerZone{}
	r := &v1.RebuildParityLegRequest{Device: 0, Zone: target, Group: 7, Width: 2, StripeBlocks: g.S, Lost: lost, Legs: legs,
		PpLog: pz(g.p, g.ids[2], 1, 2*(1+g.S)+1)}
	if lost == 2 {
		r.PpLog = &v1.PeerZone{NodeId: g.ids[3], Device: 0, Zone: 1}
	}
	return r
}

// arbiter is how the arbiter calls: the admin credential (no
// authenticator in these tests) and the namespace.
func arbiter() context.Context { return wire.WithToken(asNS("a"), token) }

func readZone(t *testing.T, n *testNode, zone uint32, blocks uint64) []byte {
	t.Helper()
	if blocks == 0 {
		return nil
	}
	r, err := n.client.Read(asNS("a"), &v1.ReadRequest{Lba: uint64(zone) * 2048, Blocks: uint32(blocks)})
	require.NoError(t, err)
	return r.GetData()
}

func TestRebuildParityLegDataLegs(t *testing.T) {
	g := newRaidGroup(t, "rbd")
	for lost, want := range g.legs {
		zone := uint32(lost)
		resp, err := g.t.client.RebuildParityLeg(arbiter(), g.req(uint32(lost), zone))
		require.NoError(t, err, "leg %d", lost)
		n := uint64(len(want) / rbBS)
		assert.Equal(t, n, resp.GetBlocks(), "leg %d: its extent is the acknowledged end (parity rows + its part of the PP cover)", lost)
		assert.Equal(t, n, resp.GetWrittenBlocks())
		assert.Positive(t, resp.GetPulledBlocks())
		assert.Equal(t, uint64(zone)*2048+n, zoneWP(t, g.t.client, zone))
		assert.True(t, bytes.Equal(want, readZone(t, g.t, zone, n)), "leg %d rebuilt from the other leg, the parity and the newest PP record", lost)

		// idempotent: again, nothing to do
		resp, err = g.t.client.RebuildParityLeg(arbiter(), g.req(uint32(lost), zone))
		require.NoError(t, err)
		assert.Equal(t, n, resp.GetBlocks())
		assert.Zero(t, resp.GetWrittenBlocks())
		assert.Equal(t, uint64(zone)*2048+n, zoneWP(t, g.t.client, zone))
	}
}

// A group's two PP logs: the records are ordered by their sequence
// numbers, not by which log the request names first — here the newest
// record (the open row's whole cover) is in pp_log and an older one (a
// smaller cover) in pp_log_b; leg 1 is rebuilt up to the newest cover.
func TestRebuildParityLegTwoPPLogs(t *testing.T) {
	g := newRaidGroup(t, "rb2")
	grant(t, g.ids[2], 2, "a")
	waitGrant(t, g.p, 2, "a")
	ctx := asNS("a")
	S := g.S
	_, err := g.p.client.ZoneManagement(ctx, &v1.ZoneManagementRequest{Zone: 1, Action: v1.ZoneAction_ZONE_ACTION_RESET})
	require.NoError(t, err)
	acc := make([]byte, S*rbBS)
	xorBlocks(acc, g.legs[0][g.rows*S*rbBS:])
	old := encodePPRecord(ondisk.PPHeader{Group: 7, Row: g.rows, Covered: S, Seq: 4}, acc, rbBS)
	xorBlocks(acc[:5*rbBS], g.legs[1][g.rows*S*rbBS:])
	rec := encodePPRecord(ondisk.PPHeader{Group: 7, Row: g.rows, Covered: g.cover, Seq: 5}, acc, rbBS)
	_, err = g.p.client.Write(ctx, &v1.WriteRequest{Lba: 2048, Data: rec})
	require.NoError(t, err)
	_, err = g.p.client.Write(ctx, &v1.WriteRequest{Lba: 2 * 2048, Data: old})
	require.NoError(t, err)
	req := g.req(1, 0)
	req.PpLog.WrittenBlocks = 1 + S
	req.PpLogB = &v1.PeerZone{NodeId: g.ids[2], Device: 0, Zone: 2, WrittenBlocks: 1 + S, Addr: g.p.addr}
	resp, err := g.t.client.RebuildParityLeg(arbiter(), req)
	require.NoError(t, err)
	n := uint64(len(g.legs[1]) / rbBS)
	assert.Equal(t, n, resp.GetBlocks(), "the newest record's cover, from pp_log")
	assert.True(t, bytes.Equal(g.legs[1], readZone(t, g.t, 0, n)))
}

func TestRebuildParityLegResumes(t *testing.T) {
	g := newRaidGroup(t, "rbr")
	// an earlier call was cut after 20 blocks
	_, err := g.t.client.Write(asNS("a"), &v1.WriteRequest{Lba: 0, Data: g.legs[1][:20*rbBS]})
	require.NoError(t, err)
	resp, err := g.t.client.RebuildParityLeg(arbiter(), g.req(1, 0))
	require.NoError(t, err)
	n := uint64(len(g.legs[1]) / rbBS)
	assert.Equal(t, n-20, resp.GetWrittenBlocks())
	assert.True(t, bytes.Equal(g.legs[1], readZone(t, g.t, 0, n)))
}

func TestRebuildParityLegParityLeg(t *testing.T) {
	g := newRaidGroup(t, "rbp")
	resp, err := g.t.client.RebuildParityLeg(arbiter(), g.req(2, 0))
	require.NoError(t, err)
	assert.Equal(t, g.rows*g.S, resp.GetBlocks(), "parity of the rows every data leg holds")
	assert.True(t, resp.GetPpRecord())
	assert.True(t, bytes.Equal(g.parity, readZone(t, g.t, 0, g.rows*g.S)))
	// the new PP log: one record of the open row, covering the data legs' prefix
	recs := parsePPLog(readZone(t, g.t, 1, 1+g.S), rbBS)
	require.Len(t, recs, 1)
	assert.Equal(t, uint32(7), recs[0].Group)
	assert.Equal(t, g.rows, recs[0].Row)
	assert.Equal(t, g.cover, recs[0].Covered)
	want := make([]byte, g.S*rbBS)
	xorBlocks(want, g.legs[0][g.rows*g.S*rbBS:])
	xorBlocks(want[:5*rbBS], g.legs[1][g.rows*g.S*rbBS:])
	assert.True(t, bytes.Equal(want, recs[0].xor))

	// again: nothing more is written
	resp, err = g.t.client.RebuildParityLeg(arbiter(), g.req(2, 0))
	require.NoError(t, err)
	assert.Zero(t, resp.GetWrittenBlocks())
	assert.Equal(t, uint64(2048+1+g.S), zoneWP(t, g.t.client, 1))
}

// A finished group: the seal decides (its ParityRows, its row's cover).
func TestRebuildParityLegSealed(t *testing.T) {
	g := newRaidGroup(t, "rbs")
	S := g.S
	acc := make([]byte, S*rbBS)
	xorBlocks(acc, g.legs[0][g.rows*S*rbBS:])
	xorBlocks(acc[:5*rbBS], g.legs[1][g.rows*S*rbBS:])
	seal := encodePPRecord(ondisk.PPHeader{Group: 7, Row: g.rows, Covered: g.cover, Flags: ondisk.PPSealed, ParityRows: g.rows}, acc, rbBS)
	_, err := g.p.client.Write(asNS("a"), &v1.WriteRequest{Lba: 2048 + 2*(1+S) + 1, Data: seal})
	require.NoError(t, err)
	for _, n := range []*testNode{g.d0, g.d1, g.p} {
		for z := uint32(0); z < 2; z++ {
			_, err := n.client.ZoneManagement(asNS("a"), &v1.ZoneManagementRequest{Zone: z, Action: v1.ZoneAction_ZONE_ACTION_FINISH})
			require.NoError(t, err)
		}
	}
	req := g.req(1, 0)
	req.Sealed = true
	for _, l := range req.GetLegs() {
		if l.GetNodeId() != "" {
			l.WrittenBlocks = 2048 // finished: the write pointers say nothing
		}
	}
	req.PpLog.WrittenBlocks = 2048
	resp, err := g.t.client.RebuildParityLeg(arbiter(), req)
	require.NoError(t, err)
	n := uint64(len(g.legs[1]) / rbBS)
	assert.Equal(t, n, resp.GetBlocks())
	assert.True(t, bytes.Equal(g.legs[1], readZone(t, g.t, 0, n)))
}

// Bad input to RebuildParityLeg and PeerRead: a typed error, and nothing
// written on the target.
func TestRebuildParityLegBadInputs(t *testing.T) {
	g := newRaidGroup(t, "rbb")
	mut := func(f func(r *v1.RebuildParityLegRequest)) *v1.RebuildParityLegRequest {
		r := g.req(1, 0)
		f(r)
		return r
	}
	rebuild := func(ctx context.Context, r *v1.RebuildParityLegRequest) func() error {
		return func() error {
			_, err := g.t.client.RebuildParityLeg(ctx, r)
			return err
		}
	}
	peerRead := func(ctx context.Context, r *v1.PeerReadRequest) func() error {
		return func() error {
			st, err := g.d0.client.PeerRead(ctx, r)
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return rpcerr.FromError(err)
		}
	}
	tests := []struct {
		name string
		call func() error
		is   error
		code codes.Code
	}{
		{"a tenant starts a rebuild", rebuild(asNS("a"), g.req(1, 0)), zerr.ErrUnauthenticated, codes.Unauthenticated},
		{"no namespace", rebuild(wire.WithToken(context.Background(), token), g.req(1, 0)), zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"unknown device", rebuild(arbiter(), mut(func(r *v1.RebuildParityLegRequest) { r.Device = 9 })), zerr.ErrNotFound, codes.NotFound},
		{"zone past the end", rebuild(arbiter(), mut(func(r *v1.RebuildParityLegRequest) { r.Zone = 99 })), zerr.ErrOutOfRange, codes.OutOfRange},
		{"zero width", rebuild(arbiter(), mut(func(r *v1.RebuildParityLegRequest) { r.Width = 0 })), zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"huge width", rebuild(arbiter(), mut(func(r *v1.RebuildParityLegRequest) { r.Width = 1 << 30 })), zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"zero stripe", rebuild(arbiter(), mut(func(r *v1.RebuildParityLegRequest) { r.StripeBlocks = 0 })), zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"stripe past the zone", rebuild(arbiter(), mut(func(r *v1.RebuildParityLegRequest) { r.StripeBlocks = 1 << 40 })), zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"lost past the parity leg", rebuild(arbiter(), mut(func(r *v1.RebuildParityLegRequest) { r.Lost = 3 })), zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"legs missing", rebuild(arbiter(), mut(func(r *v1.RebuildParityLegRequest) { r.Legs = r.Legs[:2] })), zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"a survivor without a node", rebuild(arbiter(), mut(func(r *v1.RebuildParityLegRequest) { r.Legs[0].NodeId = "" })), zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"a survivor on the target's node", rebuild(arbiter(), mut(func(r *v1.RebuildParityLegRequest) { r.Legs[0].NodeId = g.ids[3] })), zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"two legs on one node", rebuild(arbiter(), mut(func(r *v1.RebuildParityLegRequest) { r.Legs[2].NodeId = g.ids[0] })), zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"no PP log", rebuild(arbiter(), mut(func(r *v1.RebuildParityLegRequest) { r.PpLog = nil })), zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"PP log off the parity node", rebuild(arbiter(), mut(func(r *v1.RebuildParityLegRequest) { r.PpLog.NodeId = g.ids[0] })), zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"new PP log on another node", rebuild(arbiter(), func() *v1.RebuildParityLegRequest {
			r := g.req(2, 0)
			r.PpLog.NodeId = g.ids[0]
			return r
		}()), zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"new PP log in the target zone", rebuild(arbiter(), func() *v1.RebuildParityLegRequest {
			r := g.req(2, 0)
			r.PpLog.Zone = 0
			return r
		}()), zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"target not granted to the namespace", rebuild(arbiter(), mut(func(r *v1.RebuildParityLegRequest) { r.Zone = 3 })), zerr.ErrNotOwner, codes.PermissionDenied},
		{"target of another namespace", rebuild(wire.WithToken(asNS("b"), token), g.req(1, 0)), zerr.ErrNotOwner, codes.PermissionDenied},
		{"a survivor's zone of another namespace", rebuild(arbiter(), mut(func(r *v1.RebuildParityLegRequest) { r.Legs[0].Zone = 3 })), zerr.ErrNotOwner, codes.PermissionDenied},
		{"peer read by a tenant", peerRead(asNS("a"), &v1.PeerReadRequest{Namespace: "a", Blocks: 1}), zerr.ErrUnauthenticated, codes.Unauthenticated},
		{"peer read without a namespace", peerRead(asAdmin(), &v1.PeerReadRequest{Blocks: 1}), zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"peer read of nothing", peerRead(asAdmin(), &v1.PeerReadRequest{Namespace: "a"}), zerr.ErrInvalidArgument, codes.InvalidArgument},
		{"peer read past the zone", peerRead(asAdmin(), &v1.PeerReadRequest{Namespace: "a", Offset: 2047, Blocks: 2}), zerr.ErrOutOfRange, codes.OutOfRange},
		{"peer read of a huge offset", peerRead(asAdmin(), &v1.PeerReadRequest{Namespace: "a", Offset: ^uint64(0), Blocks: 2}), zerr.ErrOutOfRange, codes.OutOfRange},
		{"peer read of an unknown zone", peerRead(asAdmin(), &v1.PeerReadRequest{Namespace: "a", Zone: 99, Blocks: 1}), zerr.ErrOutOfRange, codes.OutOfRange},
		{"peer read of another namespace's zone", peerRead(asAdmin(), &v1.PeerReadRequest{Namespace: "b", Blocks: 1}), zerr.ErrNotOwner, codes.PermissionDenied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.is, "%v", err)
			assert.Equal(t, tc.code, rpcerr.Code(err), "%v", err)
			for z := uint32(0); z < 4; z++ {
				assert.Equal(t, uint64(z)*2048, zoneWP(t, g.t.client, z), "the target node's zone %d is unchanged", z)
			}
		})
	}
}

func FuzzParsePPLog(f *testing.F) {
	const bs = 64
	rec := encodePPRecord(ondisk.PPHeader{Group: 1, Row: 2, Covered: 3}, bytes.Repeat([]byte{7}, 2*bs), bs)
	f.Add(rec)
	f.Add(append(append([]byte{}, rec...), rec[:bs]...))
	f.Add(make([]byte, 3*bs))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs := parsePPLog(b, bs)
		var again []byte
		for _, r := range recs {
			if uint64(len(r.xor)) != uint64(r.Blocks)*bs {
				t.Fatalf("record %+v with %d payload bytes", r.PPHeader, len(r.xor))
			}
			again = append(again, encodePPRecord(r.PPHeader, r.xor, bs)...)
		}
		if len(again) > len(b) {
			t.Fatalf("%d bytes of records from %d", len(again), len(b))
		}
		// the records re-encoded parse back to themselves
		back := parsePPLog(again, bs)
		if len(back) != len(recs) {
			t.Fatalf("%d records re-parse as %d", len(recs), len(back))
		}
		for i := range back {
			if back[i].PPHeader != recs[i].PPHeader || !bytes.Equal(back[i].xor, recs[i].xor) {
				t.Fatalf("record %d: %+v re-parses as %+v", i, recs[i].PPHeader, back[i].PPHeader)
			}
		}
	})
}
