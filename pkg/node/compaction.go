package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// compactionOp is one ZoneCompaction: its local part runs inside the device
// (copyback or read-and-program), its remote part is pushed by this node to
// the peers holding the destinations.
type compactionOp struct {
	ns       string
	dev      *device
	hasLocal bool
	localID  uint64

	rebuild      bool // a rebuild's copy: pushes are charged to the rebuild limit
	remoteDone   chan struct{}
	remoteBlocks uint64
	remoteErr    error

	waiting int // WaitCompaction calls in progress (under Service.opsMu)
}

// Bounds of the compactions submitted and not yet waited for (each keeps
// an entry until WaitCompaction): a caller that never waits cannot grow the
// node's table without limit.
const (
	MaxCompactionOps             = 1024
	MaxCompactionOpsPerNamespace = 64
)

// admitCompaction refuses a new compaction when the table is full, in total
// or for the caller's namespace (NoResourcesError: RESOURCE_EXHAUSTED).
func (s *Service) admitCompaction(ns string) error {
	s.opsMu.Lock()
	defer s.opsMu.Unlock()
	mine := 0
	for _, o := range s.ops {
		if o.ns == ns {
			mine++
		}
	}
	if len(s.ops) >= MaxCompactionOps {
		return &zerr.NoResourcesError{Resource: "compaction slots (wait for earlier compactions)", Requested: 1, Available: 0}
	}
	if mine >= MaxCompactionOpsPerNamespace {
		return &zerr.NoResourcesError{Resource: "compaction slots of the namespace (wait for earlier compactions)", Requested: 1, Available: 0}
	}
	return nil
}

// ZoneCompaction starts an asynchronous compaction and returns its id.
func (s *Service) ZoneCompaction(ctx context.Context, req *v1.ZoneCompactionRequest) (*v1.ZoneCompactionResponse, error) {
	d, err := s.device(req.GetDevice())
	if err != nil {
		return nil, err
	}
	if len(req.GetCopies()) == 0 {
		return nil, &zerr.InvalidArgumentError{Field: "copies", Reason: "is empty"}
	}
	var local []zns.Copy
	var remote []*v1.CompactionCopy
	for i, c := range req.GetCopies() {
		n := uint64(c.GetBlocks())
		if err := s.authorizeRange(ctx, d, c.GetSrcLba(), n); err != nil {
			return nil, fmt.Errorf("copy %d source: %w", i, err)
		}
		if p := c.GetPeer(); p != nil && (p.GetNodeId() != s.cfg.ID || p.GetDevice() != d.idx) {
			if p.GetNodeId() == s.cfg.ID {
				return nil, &zerr.InvalidArgumentError{Field: fmt.Sprintf("copies[%d].peer", i), Reason: "a copy between two devices of one node is not supported; copy within a device or to another node"}
			}
			// The peer is resolved from its registered node record by id
			// (peerdial); the request's address is never dialled.
			if p.GetNodeId() == "" {
				return nil, &zerr.InvalidArgumentError{Field: fmt.Sprintf("copies[%d].peer.node_id", i), Reason: "is empty"}
			}
			if _, verified := auth.FromContext(ctx); s.cfg.Peers == nil && (verified || s.legacyPeers == nil) {
				return nil, &zerr.UnavailableError{What: "peer " + p.GetNodeId(), Reason: "this node has no peer pool"}
			}
			remote = append(remote, c)
			continue
		}
		if err := s.authorizeRange(ctx, d, c.GetDstLba(), n); err != nil {
			return nil, fmt.Errorf("copy %d destination: %w", i, err)
		}
		local = append(local, zns.Copy{Src: c.GetSrcLba(), Dst: c.GetDstLba(), Count: n})
	}
	if req.GetRebuild() {
		if err := s.requireAdmin(ctx, "ZoneCompaction(rebuild)"); err != nil {
			return nil, err
		}
	}
	op := &compactionOp{ns: s.namespace(ctx), dev: d, rebuild: req.GetRebuild(), remoteDone: make(chan struct{})}
	if err := s.admitCompaction(op.ns); err != nil {
		return nil, err
	}
	if len(local) > 0 {
		// Submission goes through the zone fencing: a revocation reset
		// cannot run between the grant check and the start of the copy.
		var reads, writes [][2]uint64
		for _, c := range local {
			reads, writes = append(reads, [2]uint64{c.Src, c.Count}), append(writes, [2]uint64{c.Dst, c.Count})
		}
		unlock, err := s.holdRanges(ctx, d, reads, writes)
		if err != nil {
			return nil, err
		}
		id, err := d.dev.ZoneCompaction(ctx, local)
		unlock()
		if err != nil {
			return nil, err
		}
		op.hasLocal, op.localID = true, id
	}
	if len(remote) > 0 {
		go s.pushRemote(context.WithoutCancel(ctx), op, remote)
	} else {
		close(op.remoteDone)
	}
	s.opsMu.Lock()
	s.opSeq++
	id := fmt.Sprintf("%s-%d-%d", s.cfg.ID, d.idx, s.opSeq)
	s.ops[id] = op
	s.opsMu.Unlock()
	s.armExpiry(id)
	return &v1.ZoneCompactionResponse{OperationId: id}, nil
}

// armExpiry drops operation id Config.CompactionTTL from now unless a
// WaitCompaction is waiting for it then (it is looked at again one TTL
// later) or took it before.
func (s *Service) armExpiry(id string) {
	c := s.clk()
	c.AfterFunc(c.Now()+s.compactionTTL(), func() { s.expire(id) })
}

// expire drops an operation nobody waited for: it leaves the table at once
// (a later WaitCompaction finds nothing), and its device-side record and
// remote push are released when they end (the push has send deadlines).
func (s *Service) expire(id string) {
	s.opsMu.Lock()
	op, ok := s.ops[id]
	if ok && op.waiting > 0 {
		s.opsMu.Unlock()
		s.armExpiry(id)
		return
	}
	delete(s.ops, id)
	s.opsMu.Unlock()
	if !ok {
		return
	}
	s.m.compactionsExpired.Inc()
	s.log.Warn("dropped a zone compaction nobody waited for", "operation", id, "ttl", s.compactionTTL())
	go func() {
		if op.hasLocal {
			_, _ = op.dev.dev.WaitCompaction(context.Background(), op.localID)
		}
		<-op.remoteDone
	}()
}

// OpenCompactions is how many compactions wait for their WaitCompaction.
func (s *Service) OpenCompactions() int {
	s.opsMu.Lock()
	defer s.opsMu.Unlock()
	return len(s.ops)
}

// pushRemote reads each remote copy's source and streams it to its peer.
func (s *Service) pushRemote(ctx context.Context, op *compactionOp, copies []*v1.CompactionCopy) {
	defer close(op.remoteDone)
	d := op.dev
	per := uint64(StreamChunkBytes / d.geo.bs)
	for _, c := range copies {
		var conn *grpc.ClientConn
		var err error
		pctx := wire.WithNamespace(ctx, op.ns) // the node certificate is the credential: no token
		// The destination must see the grants the caller saw (the arbiter
		// copies into zones it has just granted, maybe revoked from another
		// v-zone a moment before): it applies them before the first extent.
		pctx = wire.WithMinRevision(pctx, wire.MinRevision(ctx))
		// The copy's authority goes with it: the grant the arbiter signed
		// for this node, for its compactor or for the tenant who asked.
		pctx = auth.WithPeerGrant(pctx, auth.PeerGrantFrom(ctx))
		if s.cfg.Peers != nil {
			conn, err = s.cfg.Peers.Get(ctx, c.GetPeer().GetNodeId())
		} else {
			// In-process servers without an authenticator only (see
			// Config.AdminToken): the old address-based dial.
			conn, err = s.legacyPeers.get(c.GetPeer().GetAddr())
			pctx = wire.WithToken(pctx, s.cfg.AdminToken)
		}
		if err != nil {
			op.remoteErr = err
			return
		}
		sctx, cancel := context.WithCancel(pctx)
		defer cancel()
		dl := s.peerDeadline(cancel)
		stream, err := v1.NewZonedDeviceClient(conn).PeerWrite(sctx)
		if err != nil {
			op.remoteErr = rpcerr.FromError(err)
			return
		}
		total := uint64(c.GetBlocks())
		for done := uint64(0); done < total; {
			n := min(per, total-done)
			if op.rebuild {
				if err := s.rebuild.Wait(ctx, int(n)*d.geo.bs); err != nil {
					op.remoteErr = err
					_ = stream.CloseSend()
					return
				}
			}
			unlock, err := s.hold(ctx, d, c.GetSrcLba()+done, n)
			if err != nil {
				op.remoteErr = fmt.Errorf("peer copy: source LBA %d: %w", c.GetSrcLba()+done, err)
				_ = stream.CloseSend()
				return
			}
			data, _, err := d.dev.Read(ctx, c.GetSrcLba()+done, n)
			unlock()
			if err != nil {
				op.remoteErr = fmt.Errorf("peer copy: read source LBA %d: %w", c.GetSrcLba()+done, err)
				_ = stream.CloseSend()
				return
			}
			err = dl.do(func() error {
				return stream.Send(&v1.PeerWriteRequest{Device: c.GetPeer().GetDevice(), Namespace: op.ns, Rebuild: op.rebuild,
					Extents: []*v1.PeerExtent{{DstLba: c.GetDstLba() + done, Data: data}}})
			})
			if err != nil {
				break // the real error comes from CloseAndRecv
			}
			done += n
		}
		var resp *v1.PeerWriteResponse
		err = dl.do(func() error {
			var e error
			resp, e = stream.CloseAndRecv()
			return e
		})
		if err != nil {
			op.remoteErr = fmt.Errorf("peer copy to %s: %w", c.GetPeer().GetNodeId(), rpcerr.FromError(err))
			return
		}
		op.remoteBlocks += resp.GetBlocks()
		s.m.peerPushed.WithLabelValues(fmt.Sprint(d.idx)).Add(float64(resp.GetBlocks()))
	}
}

// peerDeadline bounds each step of a push to a peer: a step that does not
// complete within Config.SendTimeout (the peer stopped reading and the
// flow-control window is full, or it does not answer) cancels the stream.
type peerDeadline struct {
	s        *Service
	cancel   context.CancelFunc
	timedOut atomic.Bool
}

func (s *Service) peerDeadline(cancel context.CancelFunc) *peerDeadline {
	return &peerDeadline{s: s, cancel: cancel}
}

func (p *peerDeadline) do(fn func() error) error {
	if p.timedOut.Load() {
		return sendTimeoutError("peer_push", p.s.sendTimeout())
	}
	c := p.s.clk()
	stop := c.AfterFunc(c.Now()+p.s.sendTimeout(), func() {
		p.timedOut.Store(true)
		p.cancel()
	})
	err := fn()
	if !stop() && p.timedOut.Load() {
		p.s.m.sendTimeouts.WithLabelValues("peer_push").Inc()
		return sendTimeoutError("peer_push", p.s.sendTimeout())
	}
	return err
}

// WaitCompaction waits for a compaction and reports how its blocks moved.
func (s *Service) WaitCompaction(ctx context.Context, req *v1.WaitCompactionRequest) (*v1.CompactionResult, error) {
	visible := func(op *compactionOp) bool {
		return op.dev.idx == req.GetDevice() && (op.ns == s.namespace(ctx) || (s.grants != nil && s.bypassGrants(ctx)))
	}
	s.opsMu.Lock()
	op, ok := s.ops[req.GetOperationId()]
	if ok && visible(op) {
		op.waiting++ // in the same critical section: expire never drops it under us
	}
	s.opsMu.Unlock()
	if !ok || !visible(op) {
		return nil, &zerr.NotFoundError{Kind: "compaction", Name: req.GetOperationId()}
	}
	defer func() {
		s.opsMu.Lock()
		op.waiting--
		s.opsMu.Unlock()
	}()
	out := &v1.CompactionResult{OperationId: req.GetOperationId()}
	var errs []error
	if op.hasLocal {
		res, err := op.dev.dev.WaitCompaction(ctx, op.localID)
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err() // the operation is still there to wait for
		}
		if err != nil {
			errs = append(errs, err) // the copy failed (res.Err)
		}
		out.CopybackBlocks, out.ReadProgramBlocks = res.CopybackBlocks, res.ReadProgBlocks
		out.LatencyNs = uint64(res.Duration())
		s.m.copied.WithLabelValues(fmt.Sprint(op.dev.idx), "copyback").Add(float64(res.CopybackBlocks))
		s.m.copied.WithLabelValues(fmt.Sprint(op.dev.idx), "read_program").Add(float64(res.ReadProgBlocks))
	}
	select {
	case <-op.remoteDone:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out.RemoteBlocks = op.remoteBlocks
	s.m.copied.WithLabelValues(fmt.Sprint(op.dev.idx), "remote").Add(float64(op.remoteBlocks))
	if op.remoteErr != nil {
		errs = append(errs, op.remoteErr)
	}
	s.opsMu.Lock()
	delete(s.ops, req.GetOperationId())
	s.opsMu.Unlock()
	if len(errs) > 0 {
		return nil, fmt.Errorf("compaction %s failed after %d copyback, %d read-and-program and %d remote blocks: %w",
			req.GetOperationId(), out.CopybackBlocks, out.ReadProgramBlocks, out.RemoteBlocks, errors.Join(errs...))
	}
	return out, nil
}

// PeerWrite receives compaction data pushed by another node. The caller
// must be a node (its certificate; the policy admits nobody else) acting for
// the namespace in its metadata, and the destination must be granted to that
// namespace. Without an authenticator (in-process tests) the legacy admin
// token is required.
func (s *Service) PeerWrite(stream v1.ZonedDevice_PeerWriteServer) error {
	ctx := stream.Context()
	id, verified := auth.FromContext(ctx)
	if verified {
		if id.Kind != auth.KindNode {
			return auth.Status(&auth.PermissionDeniedError{Identity: id.String(), Method: "PeerWrite", Reason: "only nodes push compaction data"})
		}
	} else if err := s.requireAdmin(ctx, "PeerWrite"); err != nil {
		return err
	}
	if s.grants != nil {
		// Grants up to the revision the pushing node was asked for: a zone
		// re-granted from another v-zone must be revoked and reset here
		// before the copy lands, or the reset would wipe the copy.
		if err := s.grants.CatchUp(ctx, wire.MinRevision(ctx)); err != nil {
			return err
		}
	}
	var blocks uint64
	authorized := map[[2]uint64]bool{} // destination zones whose authority was checked (bounded by the drives' zones)
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&v1.PeerWriteResponse{Blocks: blocks})
		}
		if err != nil {
			return err
		}
		d, err := s.device(req.GetDevice())
		if err != nil {
			return err
		}
		for _, ext := range req.GetExtents() {
			n, err := d.blocksOf("extent data", ext.GetData())
			if err != nil {
				return err
			}
			ns := req.GetNamespace()
			if verified && ns != id.Namespace {
				return auth.Status(&auth.PermissionDeniedError{Identity: id.String(), Method: "PeerWrite", Reason: "request namespace differs from the call's"})
			}
			end := d.geo.zones * d.geo.zoneSize
			if ext.GetDstLba() >= end || n > end-ext.GetDstLba() {
				return &zerr.OutOfRangeError{LBA: ext.GetDstLba(), Count: n, Limit: end}
			}
			if s.grants != nil {
				if ns == "" {
					return &zerr.NotOwnerError{Zone: cluster.PhysZone{Node: s.cfg.ID, Device: d.idx, Zone: uint32(ext.GetDstLba() / d.geo.zoneSize)}.String()}
				}
				for z := ext.GetDstLba() / d.geo.zoneSize; z <= (ext.GetDstLba()+n-1)/d.geo.zoneSize; z++ {
					if key := [2]uint64{uint64(d.idx), z}; verified && s.cfg.PeerGrants != nil && !authorized[key] {
						authorized[key] = true // once per zone and stream: a long copy outlives no check it passed
						zone := cluster.PhysZone{Node: s.cfg.ID, Device: d.idx, Zone: uint32(z)}.String()
						if err := auth.CheckPeerWrite(s.cfg.PeerGrants, s.cfg.PeerRevoked, auth.PeerGrantFrom(ctx), id.Name, ns, zone); err != nil {
							return s.refused(v1.ZonedDevice_PeerWrite_FullMethodName, auth.RefusedPeerNotAssigned, err)
						}
					}
					if err := s.checkGrant(ns, d.idx, uint32(z), wire.MinRevision(ctx)); err != nil {
						return err
					}
				}
			}
			// The destination goes through the fencing as the namespace (a
			// node's identity acts for it; grants are checked, not bypassed).
			wctx := auth.NewContext(wire.WithNamespace(ctx, ns), auth.Identity{Kind: auth.KindNamespace, Name: ns, Namespace: ns, Via: "peer"})
			if !verified || s.grants == nil {
				wctx = wire.WithNamespace(ctx, ns)
			}
			if req.GetRebuild() {
				// before the zone lock: no lock is held while throttled
				if err := s.rebuild.Wait(ctx, len(ext.GetData())); err != nil {
					return err
				}
			}
			unlock, err := s.holdWrite(wctx, d, ext.GetDstLba(), n)
			if err != nil {
				return err
			}
			_, err = s.write(wctx, d, "peer_write", ext.GetDstLba(), ext.GetData(), zns.Flags{})
			unlock()
			if err != nil {
				return fmt.Errorf("peer write stopped after %d blocks: %w", blocks, err)
			}
			blocks += n
		}
	}
}

// peers pools gRPC connections to other nodes. After close, get fails: a
// rebuild or compaction still running when the node stops must not dial a
// connection nobody would close.
type peers struct {
	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

func newPeers() *peers { return &peers{conns: map[string]*grpc.ClientConn{}} }

func (p *peers) get(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, &zerr.ClosedError{What: "peer pool"}
	}
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	opts := append(append(rpcerr.DialOptions(), wire.TransportDialOptions(false)...), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(wire.MaxMessageBytes), grpc.MaxCallSendMsgSize(wire.MaxMessageBytes)))
	c, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, &zerr.UnavailableError{What: "peer " + addr, Reason: err.Error()}
	}
	p.conns[addr] = c
	return c, nil
}

func (p *peers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[string]*grpc.ClientConn{}
}
