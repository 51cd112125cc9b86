package node

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/ondisk"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// Rebuild of a lost leg of a raid5 stripe group (the layout is
// pkg/client parity.go's, the arbiter's side pkg/arbiter rebuild.go).
//
// The arbiter grants a zone of this node (a node holding no zone of the
// group) and calls RebuildParityLeg with the group's geometry and its
// surviving legs (and their write pointers, which it read). This node pulls
// the rows from the survivors' nodes with PeerRead (node to node: the bytes
// never pass through the arbiter or a client), XORs them and writes the
// lost leg at the target's write pointer, one chunk of rows (about 1 MiB
// per leg) at a time: one read per survivor in flight, then one write, so a
// rebuild takes at most one stream per survivor and the arbiter runs one
// rebuild at a time (the throttle mirror rebuilds have). A repeated call
// goes on from the target's write pointer (what it computes is the same
// every time), so a rebuild cut short is resumed, and one that was done is
// answered at once.
//
// The lost leg's extent follows the design's write-pointer rules:
//
//   - a data leg i of an open group: the rows whose parity unit is written
//     (P = the parity leg's write pointer / S) are XORs of the row's other
//     k units; the row at P and after it hold what the newest intact PP
//     record of that row whose cover the survivors hold says: the record's
//     XOR with the survivors' blocks inside the cover, up to the cover
//     (blocks after it were never acknowledged). The extent is the
//     client's lostLegWritePointer: P*S plus leg i's part of that cover.
//     The records are those of both PP logs (pp_log and pp_log_b),
//     ordered by their sequence numbers.
//   - a data leg of a finished (sealed) group: the group's last PP record
//     is its seal: ParityRows rows have parity, the seal's row is
//     rebuilt from its cover; a finished group without a seal was full or
//     empty (every row has parity). The target is finished afterwards.
//   - the parity leg (the PP log zones are on the same node, so they are
//     lost with it): the rows every data leg holds completely get their parity
//     unit (the XOR of the k data units); for an open group the data
//     legs' contiguous prefix of the next row is protected again by a
//     fresh PP record in the first new log zone (a record of that row with
//     the XOR of the data blocks it covers; the second new log, pp_log_b,
//     starts empty and is not touched here), which is what the lost logs
//     protected; a finished group gets the parity of every row (its data
//     zones read zeroes past what was written) and no record, the rule
//     the client applies to a finished group without a seal.

// MaxRebuildWidth bounds the data legs of a rebuilt group.
const MaxRebuildWidth = 64

// rebuildReq is a validated RebuildParityLegRequest.
type rebuildReq struct {
	ns      string
	d       *device
	zone    uint32
	group   uint32
	k       int
	S       uint64
	lost    int
	legs    []*v1.PeerZone
	pp      *v1.PeerZone
	ppB     *v1.PeerZone // the second surviving PP log (data leg rebuilt; nil: a group with one)
	ppDev   *device      // the new PP log's device (parity leg rebuilt)
	sealed  bool
	cap     uint64
	written []uint64 // survivors' write pointers, clamped to the capacity
}

func (s *Service) validateRebuild(ctx context.Context, req *v1.RebuildParityLegRequest) (*rebuildReq, error) {
	inv := func(field, reason string) error { return &zerr.InvalidArgumentError{Field: field, Reason: reason} }
	d, err := s.device(req.GetDevice())
	if err != nil {
		return nil, err
	}
	if uint64(req.GetZone()) >= d.geo.zones {
		return nil, &zerr.OutOfRangeError{LBA: uint64(req.GetZone()) * d.geo.zoneSize, Count: 1, Limit: d.geo.zones * d.geo.zoneSize}
	}
	k := int(req.GetWidth())
	if k < 1 || k > MaxRebuildWidth {
		return nil, inv("width", fmt.Sprintf("%d data legs (1..%d)", k, MaxRebuildWidth))
	}
	S := req.GetStripeBlocks()
	if S == 0 || S > d.geo.zoneCap {
		return nil, inv("stripe_blocks", fmt.Sprintf("%d (1..%d, the zone capacity)", S, d.geo.zoneCap))
	}
	lost := int(req.GetLost())
	if lost > k {
		return nil, inv("lost", fmt.Sprintf("position %d of a group of %d data legs and a parity leg", lost, k))
	}
	if len(req.GetLegs()) != k+1 {
		return nil, inv("legs", fmt.Sprintf("%d entries for %d data legs and a parity leg", len(req.GetLegs()), k))
	}
	ns := s.namespace(ctx)
	if ns == "" {
		return nil, inv("namespace", "is empty (metadata "+wire.NamespaceKey+")")
	}
	r := &rebuildReq{ns: ns, d: d, zone: req.GetZone(), group: req.GetGroup(), k: k, S: S, lost: lost, legs: req.GetLegs(),
		pp: req.GetPpLog(), sealed: req.GetSealed(), cap: d.geo.zoneCap, written: make([]uint64, k+1)}
	seen := map[string]int{}
	for j, l := range r.legs {
		if j == lost {
			continue
		}
		switch {
		case l.GetNodeId() == "":
			return nil, inv(fmt.Sprintf("legs[%d].node_id", j), "is empty")
		case l.GetNodeId() == s.cfg.ID:
			return nil, inv(fmt.Sprintf("legs[%d].node_id", j), "is this node: a leg is rebuilt on a node holding no other leg of its group")
		}
		if p, dup := seen[l.GetNodeId()]; dup {
			return nil, inv(fmt.Sprintf("legs[%d].node_id", j), fmt.Sprintf("%s holds legs %d and %d: the legs of a group are on distinct nodes", l.GetNodeId(), p, j))
		}
		seen[l.GetNodeId()] = j
		r.written[j] = min(l.GetWrittenBlocks(), r.cap)
	}
	if r.pp == nil {
		return nil, inv("pp_log", "is missing")
	}
	if lost < k {
		if r.pp.GetNodeId() == "" || r.pp.GetNodeId() == s.cfg.ID {
			return nil, inv("pp_log.node_id", "must name the surviving log's node (not this one)")
		}
		if r.pp.GetNodeId() != r.legs[k].GetNodeId() {
			return nil, inv("pp_log.node_id", "the partial-parity log is on the parity leg's node")
		}
		if b := req.GetPpLogB(); b != nil {
			if b.GetNodeId() != r.legs[k].GetNodeId() {
				return nil, inv("pp_log_b.node_id", "the partial-parity logs are on the parity leg's node")
			}
			if b.GetDevice() == r.pp.GetDevice() && b.GetZone() == r.pp.GetZone() {
				return nil, inv("pp_log_b.zone", "is pp_log's zone")
			}
			r.ppB = b
		}
	} else {
		if r.pp.GetNodeId() != "" && r.pp.GetNodeId() != s.cfg.ID {
			return nil, inv("pp_log.node_id", "the new partial-parity log is on this node, with the parity leg")
		}
		if r.ppDev, err = s.device(r.pp.GetDevice()); err != nil {
			return nil, err
		}
		if uint64(r.pp.GetZone()) >= r.ppDev.geo.zones {
			return nil, &zerr.OutOfRangeError{LBA: uint64(r.pp.GetZone()) * r.ppDev.geo.zoneSize, Count: 1, Limit: r.ppDev.geo.zones * r.ppDev.geo.zoneSize}
		}
		if r.ppDev == d && r.pp.GetZone() == r.zone {
			return nil, inv("pp_log.zone", "is the target zone")
		}
	}
	return r, nil
}

// RebuildParityLeg rebuilds a lost leg of a raid5 stripe group into a zone
// of this node (see above). Callers: the arbiter (for the namespace the zone
// is granted to) or the operator.
func (s *Service) RebuildParityLeg(ctx context.Context, req *v1.RebuildParityLegRequest) (*v1.RebuildParityLegResponse, error) {
	if err := s.requireAdmin(ctx, "RebuildParityLeg"); err != nil {
		return nil, err
	}
	r, err := s.validateRebuild(ctx, req)
	if err != nil {
		return nil, err
	}
	// the target's writes go through the grants and the fencing as the
	// namespace (the arbiter acts for it, it does not bypass them)
	wctx := auth.NewContext(wire.WithNamespace(ctx, r.ns), auth.Identity{Kind: auth.KindNamespace, Name: r.ns, Namespace: r.ns, Via: "rebuild"})
	if _, verified := auth.FromContext(ctx); !verified {
		wctx = asNamespace(ctx, r.ns)
	}
	if err := s.authorizeZone(wctx, r.d, r.zone); err != nil {
		return nil, err
	}
	if r.ppDev != nil {
		if err := s.authorizeZone(wctx, r.ppDev, r.pp.GetZone()); err != nil {
			return nil, err
		}
	}
	rb := &rebuilder{s: s, r: r, ctx: ctx}
	resp, err := rb.run(wctx)
	if err != nil {
		s.log.Warn("raid5 leg rebuild failed", "namespace", r.ns, "device", r.d.idx, "zone", r.zone, "group", r.group, "lost", r.lost, "err", err)
		return nil, err
	}
	s.log.Info("rebuilt a raid5 leg", "namespace", r.ns, "device", r.d.idx, "zone", r.zone, "group", r.group, "lost", r.lost,
		"blocks", resp.GetBlocks(), "written", resp.GetWrittenBlocks(), "pulled", resp.GetPulledBlocks(), "pp_record", resp.GetPpRecord())
	return resp, nil
}

type rebuilder struct {
	s      *Service
	r      *rebuildReq
	ctx    context.Context // the caller's (its credentials reach the peers)
	pulled atomic.Uint64   // blocks read from peers (pulls run in parallel)
}

func sub64(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return 0
}

func xorInto(dst, src []byte) { subtle.XORBytes(dst, dst, src) }

func (b *rebuilder) run(wctx context.Context) (*v1.RebuildParityLegResponse, error) {
	r := b.r
	d := r.d
	bs := uint64(d.geo.bs)
	S, k := r.S, r.k
	rows := r.cap / S
	// the extent and, per row from P on, the record that rebuilds it
	var (
		P      uint64
		extent uint64
		recs   = map[uint64]*ppRecord{} // data leg: rows at and after P
		cover  uint64                   // parity leg, open group: the data legs' contiguous prefix of row P
	)
	if r.lost < k {
		var all []ppRecord
		for _, pl := range []*v1.PeerZone{r.pp, r.ppB} {
			if n := min(pl.GetWrittenBlocks(), r.cap); pl != nil && n > 0 {
				raw, err := b.pull(pl, 0, n)
				if err != nil {
					return nil, fmt.Errorf("read the partial-parity log: %w", err)
				}
				all = append(all, parsePPLog(raw, bs)...)
			}
		}
		sortPPRecords(all) // the two logs' records, oldest first
		var mine []*ppRecord
		for i := range all {
			if all[i].Group == r.group {
				mine = append(mine, &all[i])
			}
		}
		var seal *ppRecord
		if n := len(mine); n > 0 && mine[n-1].Flags&ondisk.PPSealed != 0 {
			seal = mine[n-1]
		}
		held := func(row, c uint64) bool {
			if r.sealed {
				return true
			}
			for j := 0; j < k; j++ {
				if j != r.lost && r.written[j] < row*S+min(sub64(c, uint64(j)*S), S) {
					return false
				}
			}
			return true
		}
		switch {
		case r.sealed && seal != nil:
			P = seal.ParityRows
		case r.sealed:
			P = rows // full or empty when finished: every row has parity
		default:
			P = r.written[k] / S
		}
		P = min(P, rows)
		extent = P * S
		for i := len(mine) - 1; i >= 0; i-- {
			x := mine[i]
			if x.Row < P || x.Row >= rows || recs[x.Row] != nil || !held(x.Row, x.Covered) {
				continue
			}
			if seal != nil && x.Flags&ondisk.PPSealed == 0 && x.Row == seal.Row {
				continue // the seal's cover is what was acknowledged of its row
			}
			recs[x.Row] = x
		}
		for row, x := range recs {
			if m := min(sub64(x.Covered, uint64(r.lost)*S), S); m > 0 {
				extent = max(extent, row*S+m)
			}
		}
		if !r.sealed {
			// the client's lostLegWritePointer: only the row at P counts
			extent = P * S
			if x := recs[P]; x != nil {
				extent += min(sub64(x.Covered, uint64(r.lost)*S), S)
			}
		}
	} else {
		if r.sealed {
			P = rows
		} else {
			P = rows
			for j := 0; j < k; j++ {
				P = min(P, r.written[j]/S)
			}
			if P < rows {
				for j := 0; j < k; j++ {
					h := min(sub64(r.written[j], P*S), S)
					cover += h
					if h < S {
						break
					}
				}
			}
		}
		extent = P * S
	}

	tw, err := b.s.zoneWritten(d, r.zone)
	if err != nil {
		return nil, err
	}
	if tw > extent && !(r.sealed && tw == r.cap) {
		return nil, &zerr.ZoneStateError{Zone: uint64(r.zone), State: fmt.Sprintf("written %d blocks", tw),
			Op: fmt.Sprintf("rebuild a leg of %d blocks into it (the target holds more than the leg)", extent)}
	}
	resp := &v1.RebuildParityLegResponse{Blocks: extent}
	zstart := uint64(r.zone) * d.geo.zoneSize
	chunkRows := max(1, uint64(StreamChunkBytes)/bs/S)
	for r0 := tw / S; r0*S < extent && tw < extent; r0 += chunkRows {
		r1 := min(r0+chunkRows, (extent+S-1)/S)
		units, err := b.pullRows(r0, r1)
		if err != nil {
			return nil, err
		}
		out := make([]byte, (r1-r0)*S*bs)
		for row := r0; row < r1; row++ {
			o := out[(row-r0)*S*bs : (row-r0+1)*S*bs]
			at := (row - r0) * S * bs
			unit := func(j int) []byte { return units[j][at : at+S*bs] }
			if row < P {
				for j := 0; j <= k; j++ {
					if j != r.lost {
						xorInto(o, unit(j))
					}
				}
				continue
			}
			x := recs[row]
			if x == nil {
				continue // nothing of this row was acknowledged on the leg: zeroes
			}
			copy(o, x.xor)
			for j := 0; j < k; j++ {
				if j == r.lost {
					continue
				}
				if m := min(sub64(x.Covered, uint64(j)*S), S); m > 0 {
					xorInto(o[:m*bs], unit(j)[:m*bs])
				}
			}
			if mine := min(sub64(x.Covered, uint64(r.lost)*S), S); mine < S {
				clear(o[mine*bs:])
			}
		}
		lo, hi := max(tw, r0*S), min(extent, r1*S)
		if err := b.write(wctx, d, zstart+lo, out[(lo-r0*S)*bs:(hi-r0*S)*bs]); err != nil {
			return nil, err
		}
		resp.WrittenBlocks += hi - lo
		tw = hi
	}
	if r.lost == k && cover > 0 {
		// a fresh PP record of row P in the new log
		units, err := b.pullRows(P, P+1)
		if err != nil {
			return nil, err
		}
		acc := make([]byte, S*bs)
		for j := 0; j < k; j++ {
			if m := min(sub64(cover, uint64(j)*S), S); m > 0 {
				xorInto(acc[:m*bs], units[j][:m*bs])
			}
		}
		rec := encodePPRecord(ondisk.PPHeader{Group: r.group, Row: P, Covered: cover, Seq: 1}, acc[:min(cover, S)*bs], bs)
		pw, err := b.s.zoneWritten(r.ppDev, r.pp.GetZone())
		if err != nil {
			return nil, err
		}
		switch pw {
		case 0:
			if err := b.write(wctx, r.ppDev, uint64(r.pp.GetZone())*r.ppDev.geo.zoneSize, rec); err != nil {
				return nil, fmt.Errorf("write the partial-parity record: %w", err)
			}
			resp.PpRecord = true
		case uint64(len(rec)) / bs: // an earlier call wrote it
			resp.PpRecord = true
		default:
			return nil, &zerr.ZoneStateError{Zone: uint64(r.pp.GetZone()), State: fmt.Sprintf("written %d blocks", pw), Op: "write a partial-parity record into a new log"}
		}
	}
	if resp.WrittenBlocks > 0 || resp.PpRecord {
		if _, err := d.dev.Flush(wctx); err != nil {
			return nil, err
		}
		if r.ppDev != nil && r.ppDev != d {
			if _, err := r.ppDev.dev.Flush(wctx); err != nil {
				return nil, err
			}
		}
	}
	resp.PulledBlocks = b.pulled.Load()
	return resp, nil
}

// pullRows reads rows [r0, r1) of every surviving leg (data and parity), in
// parallel, one stream per leg. Entry lost is nil.
func (b *rebuilder) pullRows(r0, r1 uint64) ([][]byte, error) {
	r := b.r
	out := make([][]byte, r.k+1)
	errs := make([]error, r.k+1)
	var wg sync.WaitGroup
	for j := 0; j <= r.k; j++ {
		if j == r.lost {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[j], errs[j] = b.pull(r.legs[j], r0*r.S, (r1-r0)*r.S)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// write writes data at lba of d (the rebuild's target) as the namespace.
func (b *rebuilder) write(wctx context.Context, d *device, lba uint64, data []byte) error {
	n := uint64(len(data)) / uint64(d.geo.bs)
	if err := b.s.rebuild.Wait(wctx, len(data)); err != nil {
		return err
	}
	unlock, err := b.s.holdWrite(wctx, d, lba, n)
	if err != nil {
		return err
	}
	defer unlock()
	_, err = b.s.write(wctx, d, "rebuild", lba, data, zns.Flags{})
	return err
}

// zoneWritten is the blocks written in zone z of d (its write pointer from
// the zone start).
func (s *Service) zoneWritten(d *device, z uint32) (uint64, error) {
	zs, err := d.dev.ReportZones(zns.StateAny, uint64(z), 1)
	if err != nil {
		return 0, err
	}
	if len(zs) == 0 {
		return 0, &zerr.NotFoundError{Kind: "zone", Name: fmt.Sprintf("%d/%d", d.idx, z)}
	}
	return min(zs[0].WP-zs[0].Start, zs[0].Capacity), nil
}

// pull reads n blocks at zone offset off of a peer's zone (PeerRead).
func (b *rebuilder) pull(pz *v1.PeerZone, off, n uint64) ([]byte, error) {
	s := b.s
	ctx := b.ctx
	var conn *grpc.ClientConn
	var err error
	pctx := wire.WithNamespace(ctx, b.r.ns) // the node certificate is the credential: no token
	// The arbiter's grant for this rebuild goes with every pull.
	pctx = auth.WithPeerGrant(pctx, auth.PeerGrantFrom(ctx))
	if s.cfg.Peers != nil {
		conn, err = s.cfg.Peers.Get(ctx, pz.GetNodeId())
	} else {
		if _, verified := auth.FromContext(ctx); verified || s.legacyPeers == nil {
			return nil, &zerr.UnavailableError{What: "peer " + pz.GetNodeId(), Reason: "this node has no peer pool"}
		}
		conn, err = s.legacyPeers.get(pz.GetAddr())
		pctx = wire.WithToken(pctx, s.cfg.AdminToken)
	}
	if err != nil {
		return nil, err
	}
	bs := uint64(b.r.d.geo.bs)
	buf := make([]byte, 0, n*bs)
	per := uint64(StreamChunkBytes) / bs
	for done := uint64(0); done < n; {
		m := min(n-done, per*64)
		st, err := v1.NewZonedDeviceClient(conn).PeerRead(pctx, &v1.PeerReadRequest{Namespace: b.r.ns, Device: pz.GetDevice(), Zone: pz.GetZone(), Offset: off + done, Blocks: uint32(m)})
		if err != nil {
			return nil, fmt.Errorf("pull from %s: %w", pz.GetNodeId(), rpcerr.FromError(err))
		}
		for {
			msg, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("pull from %s: %w", pz.GetNodeId(), rpcerr.FromError(err))
			}
			buf = append(buf, msg.GetData()...)
		}
		done += m
		if uint64(len(buf)) != done*bs {
			return nil, &zerr.UnavailableError{What: "peer " + pz.GetNodeId(), Reason: fmt.Sprintf("answered %d bytes for %d blocks", len(buf), done)}
		}
	}
	b.pulled.Add(n)
	return buf, nil
}

// peerReadStream is a ReadStream server stream with the peer's namespace
// identity in its context.
type peerReadStream struct {
	v1.ZonedDevice_PeerReadServer
	ctx context.Context
}

func (p peerReadStream) Context() context.Context { return p.ctx }

// PeerRead serves a zone range to another node's RebuildParityLeg. The
// caller must be a node (its certificate; the policy admits nobody else)
// acting for the namespace of the request, and the zone must be granted to
// that namespace. Without an authenticator (in-process tests) the legacy
// admin token is required.
func (s *Service) PeerRead(req *v1.PeerReadRequest, stream v1.ZonedDevice_PeerReadServer) error {
	ctx := stream.Context()
	id, verified := auth.FromContext(ctx)
	if verified {
		if id.Kind != auth.KindNode {
			return auth.Status(&auth.PermissionDeniedError{Identity: id.String(), Method: "PeerRead", Reason: "only nodes read for a rebuild"})
		}
		if req.GetNamespace() != id.Namespace {
			return auth.Status(&auth.PermissionDeniedError{Identity: id.String(), Method: "PeerRead", Reason: "request namespace differs from the call's"})
		}
		if s.cfg.PeerGrants != nil {
			zone := cluster.PhysZone{Node: s.cfg.ID, Device: req.GetDevice(), Zone: req.GetZone()}.String()
			if err := auth.CheckPeerRead(s.cfg.PeerGrants, auth.PeerGrantFrom(ctx), id.Name, req.GetNamespace(), zone); err != nil {
				return s.refused(v1.ZonedDevice_PeerRead_FullMethodName, auth.RefusedPeerNotAssigned, err)
			}
		}
	} else if err := s.requireAdmin(ctx, "PeerRead"); err != nil {
		return err
	}
	ns := req.GetNamespace()
	if ns == "" {
		return &zerr.InvalidArgumentError{Field: "namespace", Reason: "is empty"}
	}
	d, err := s.device(req.GetDevice())
	if err != nil {
		return err
	}
	if uint64(req.GetZone()) >= d.geo.zones {
		return &zerr.OutOfRangeError{LBA: uint64(req.GetZone()) * d.geo.zoneSize, Count: 1, Limit: d.geo.zones * d.geo.zoneSize}
	}
	n := uint64(req.GetBlocks())
	if n == 0 {
		return &zerr.InvalidArgumentError{Field: "blocks", Reason: "must be at least 1"}
	}
	if req.GetOffset() >= d.geo.zoneCap || n > d.geo.zoneCap-req.GetOffset() {
		return &zerr.OutOfRangeError{LBA: req.GetOffset(), Count: n, Limit: d.geo.zoneCap}
	}
	rctx := auth.NewContext(wire.WithNamespace(ctx, ns), auth.Identity{Kind: auth.KindNamespace, Name: ns, Namespace: ns, Via: "peer"})
	if !verified {
		rctx = asNamespace(ctx, ns)
	}
	// piece by piece, each charged to the rebuild rate limit before it is
	// read (no lock is held while throttled)
	per := uint64(StreamChunkBytes / d.geo.bs)
	lba := uint64(req.GetZone())*d.geo.zoneSize + req.GetOffset()
	for done := uint64(0); done < n; {
		m := min(per, n-done)
		if err := s.rebuild.Wait(ctx, int(m)*d.geo.bs); err != nil {
			return err
		}
		if err := s.ReadStream(&v1.ReadRequest{Device: d.idx, Lba: lba + done, Blocks: uint32(m)},
			peerReadStream{ZonedDevice_PeerReadServer: stream, ctx: rctx}); err != nil {
			return err
		}
		done += m
	}
	return nil
}

// asNamespace is ctx as an incoming call of namespace ns without the admin
// token (servers without an authenticator: the grants decide, as for the
// tenant).
func asNamespace(ctx context.Context, ns string) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	md = md.Copy()
	md.Set(wire.NamespaceKey, ns)
	md.Delete(wire.TokenKey)
	return metadata.NewIncomingContext(ctx, md)
}
