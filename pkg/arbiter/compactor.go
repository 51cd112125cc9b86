package arbiter

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/daemon"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// NodeCompactor is the Compactor over the ssdnodes' ZonedDevice gRPC
// service: ReportZones for write pointers, ZoneCompaction + WaitCompaction
// for the copies (the source node pushes to a destination on another node).
// Data never passes through the arbiter: reclaim never plans a copy between
// two devices of one node (the node service does not offer it), and such a
// request fails with *zerr.InvalidArgumentError.
type NodeCompactor struct {
	cli   *clientv3.Client
	token string
	opts  []grpc.DialOption
	// nodeTLS, when set, dials every node pinned to its certificate role
	// node:<id> (auth.NodeCredentials): the address in the node's record is
	// not trusted.
	nodeTLS *tls.Config
	// grants signs the operation grants of the rebuilds it assigns (the
	// token-signing key); nil sends none (clusters without one).
	grants *auth.Issuer

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool // Close ran: no connection is dialled any more
}

// NewNodeCompactor finds nodes through their etcd registrations (cli) and
// calls them with the nodes' admin token (may be empty). Extra dial options
// (e.g. TLS) replace the default insecure transport.
func NewNodeCompactor(cli *clientv3.Client, token string, opts ...grpc.DialOption) *NodeCompactor {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	opts = append(append([]grpc.DialOption{}, opts...), rpcerr.DialOptions()...)
	opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(daemon.MaxMessageBytes), grpc.MaxCallSendMsgSize(daemon.MaxMessageBytes)))
	return &NodeCompactor{cli: cli, token: token, opts: opts, conns: map[string]*grpc.ClientConn{}}
}

// WithNodeTLS makes the compactor dial each node over TLS with conf (the
// arbiter's certificate and the cluster CA), accepting only a server whose
// certificate names node:<id> for the node id it means, whatever address
// the node's etcd record holds. It replaces the transport of the dial
// options; no token is sent (the arbiter's certificate is the credential).
func (c *NodeCompactor) WithNodeTLS(conf *tls.Config) *NodeCompactor {
	c.nodeTLS = conf
	c.token = ""
	return c
}

// WithPeerGrants makes the compactor sign operation grants for the peer
// calls it assigns: for a raid5 leg rebuild, the rebuilding node may
// PeerRead the survivors' zones (auth.IssuePeerRead); for a copy between
// nodes (reclaim, a mirror rebuild), the source node may PeerWrite into the
// destination zone (auth.IssuePeerWrite). Peers accept those calls only
// with them.
func (c *NodeCompactor) WithPeerGrants(iss *auth.Issuer) *NodeCompactor {
	c.grants = iss
	return c
}

// Close closes the connections to the nodes.
func (c *NodeCompactor) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for key, cc := range c.conns {
		_ = cc.Close()
		delete(c.conns, key)
	}
	return nil
}

type nodeRef struct {
	rec    cluster.NodeRecord
	client v1.ZonedDeviceClient
}

func (c *NodeCompactor) node(ctx context.Context, id string) (nodeRef, error) {
	resp, err := c.cli.Get(ctx, cluster.NodeKey(id))
	if err != nil {
		return nodeRef{}, &zerr.UnavailableError{What: "etcd", Reason: err.Error()}
	}
	if len(resp.Kvs) == 0 {
		return nodeRef{}, &zerr.UnavailableError{What: "node " + id, Reason: "not registered"}
	}
	rec, err := cluster.DecodeNode(string(resp.Kvs[0].Key), resp.Kvs[0].Value)
	if err != nil {
		return nodeRef{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed { // a reclaim still running when its owner closed the compactor
		return nodeRef{}, &zerr.UnavailableError{What: "node " + id, Reason: "the compactor is closed"}
	}
	key := id + "\x00" + rec.Addr
	cc := c.conns[key]
	if cc == nil {
		opts := c.opts
		if c.nodeTLS != nil {
			creds, err := auth.NewNodeCredentials(c.nodeTLS, id)
			if err != nil {
				return nodeRef{}, err
			}
			opts = append(append([]grpc.DialOption{}, opts...), grpc.WithTransportCredentials(creds),
				grpc.WithChainUnaryInterceptor(creds.UnaryInterceptor))
		}
		cc, err = grpc.NewClient(rec.Addr, opts...)
		if err != nil {
			return nodeRef{}, &zerr.UnavailableError{What: "node " + id, Reason: err.Error()}
		}
		c.conns[key] = cc
	}
	return nodeRef{rec: rec, client: v1.NewZonedDeviceClient(cc)}, nil
}

func (c *NodeCompactor) auth(ctx context.Context, ns string) context.Context {
	return wire.WithToken(wire.WithNamespace(ctx, ns), c.token)
}

func (c *NodeCompactor) zone(ctx context.Context, ns string, n nodeRef, z cluster.PhysZone) (*v1.ZoneDescriptor, error) {
	r, err := n.client.ReportZones(c.auth(ctx, ns), &v1.ReportZonesRequest{Device: z.Device, StartZone: z.Zone, MaxZones: 1})
	if err != nil {
		return nil, fmt.Errorf("report zone %s: %w", z, err)
	}
	if len(r.GetZones()) != 1 || r.GetZones()[0].GetIndex() != z.Zone {
		return nil, &zerr.NotFoundError{Kind: "zone", Name: z.String()}
	}
	return r.GetZones()[0], nil
}

// WrittenBlocks implements Compactor.
func (c *NodeCompactor) WrittenBlocks(ctx context.Context, ns string, zones []cluster.PhysZone) ([]uint64, error) {
	out := make([]uint64, len(zones))
	for i, z := range zones {
		n, err := c.node(ctx, z.Node)
		if err != nil {
			return nil, err
		}
		zd, err := c.zone(ctx, ns, n, z)
		if err != nil {
			return nil, err
		}
		out[i] = zd.GetWritePointer() - zd.GetStartLba()
	}
	return out, nil
}

// Compact implements Compactor.
func (c *NodeCompactor) Compact(ctx context.Context, ns string, dst cluster.PhysZone, ranges []CopyRange) error {
	dn, err := c.node(ctx, dst.Node)
	if err != nil {
		return err
	}
	dz, err := c.zone(ctx, ns, dn, dst)
	if err != nil {
		return err
	}
	next := dz.GetWritePointer() // destination LBA of the next copied block
	for i := 0; i < len(ranges); {
		src := ranges[i].Src
		j := i
		for j < len(ranges) && ranges[j].Src.Node == src.Node && ranges[j].Src.Device == src.Device {
			j++
		}
		sn, err := c.node(ctx, src.Node)
		if err != nil {
			return err
		}
		sd, ok := sn.rec.Device(src.Device)
		if !ok {
			return &zerr.NotFoundError{Kind: "device", Name: fmt.Sprintf("%s/%d", src.Node, src.Device)}
		}
		if src.Node == dst.Node && src.Device != dst.Device {
			return &zerr.InvalidArgumentError{Field: "copy", Reason: fmt.Sprintf("%s/%d to %s: a copy between two devices of one node is not offered by the nodes", src.Node, src.Device, dst)}
		}
		var copies []*v1.CompactionCopy
		for _, r := range ranges[i:j] {
			lba := uint64(r.Src.Zone)*sd.ZoneSize + r.SrcBlock
			for left := r.Blocks; left > 0; {
				n := min(left, math.MaxUint32)
				cp := &v1.CompactionCopy{SrcLba: lba, Blocks: uint32(n), DstLba: next}
				if src.Node != dst.Node {
					cp.Peer = &v1.PeerTarget{NodeId: dst.Node, Addr: dn.rec.Addr, Device: dst.Device}
				}
				copies = append(copies, cp)
				lba, next, left = lba+n, next+n, left-n
			}
		}
		cctx := c.auth(ctx, ns)
		if c.grants != nil && src.Node != dst.Node {
			// The source pushes into dst with PeerWrite: this grant, for
			// the source node and dst only, is what dst accepts.
			grant, err := c.grants.IssuePeerWrite(src.Node, ns, []string{dst.String()}, auth.PeerGrantTTL)
			if err != nil {
				return err
			}
			cctx = auth.WithPeerGrant(cctx, grant)
		}
		resp, err := sn.client.ZoneCompaction(cctx, &v1.ZoneCompactionRequest{Device: src.Device, Copies: copies, Rebuild: isRebuild(ctx)})
		if err != nil {
			return fmt.Errorf("zone_compaction on %s/%d into %s: %w", src.Node, src.Device, dst, err)
		}
		if _, err := sn.client.WaitCompaction(c.auth(ctx, ns), &v1.WaitCompactionRequest{Device: src.Device, OperationId: resp.GetOperationId()}); err != nil {
			return fmt.Errorf("zone_compaction %s: %w", resp.GetOperationId(), err)
		}
		i = j
	}
	return nil
}

// FinishZone finishes zone z (a rebuilt copy of a finished leg).
func (c *NodeCompactor) FinishZone(ctx context.Context, ns string, z cluster.PhysZone) error {
	n, err := c.node(ctx, z.Node)
	if err != nil {
		return err
	}
	_, err = n.client.ZoneManagement(c.auth(ctx, ns), &v1.ZoneManagementRequest{Device: z.Device, Zone: z.Zone, Action: v1.ZoneAction_ZONE_ACTION_FINISH})
	if err != nil && !errors.Is(err, zerr.ErrZoneState) {
		return fmt.Errorf("finish %s: %w", z, err)
	}
	return nil
}

// RebuildParityLeg implements parityRebuilder: the target's node rebuilds
// the leg, pulling from the survivors' nodes (RebuildParityLeg, PeerRead).
func (c *NodeCompactor) RebuildParityLeg(ctx context.Context, ns string, r ParityRebuild) (uint64, error) {
	tn, err := c.node(ctx, r.Target.Node)
	if err != nil {
		return 0, err
	}
	peer := func(z cluster.PhysZone, written uint64) (*v1.PeerZone, error) {
		n, err := c.node(ctx, z.Node)
		if err != nil {
			return nil, err
		}
		return &v1.PeerZone{NodeId: z.Node, Device: z.Device, Zone: z.Zone, WrittenBlocks: written, Addr: n.rec.Addr}, nil
	}
	req := &v1.RebuildParityLegRequest{Device: r.Target.Device, Zone: r.Target.Zone, Group: r.Group, Width: r.Width,
		StripeBlocks: r.StripeBlocks, Lost: r.Lost, Sealed: r.Sealed}
	for i, z := range r.Legs {
		if uint32(i) == r.Lost {
			req.Legs = append(req.Legs, &v1.PeerZone{})
			continue
		}
		p, err := peer(z, r.Written[i])
		if err != nil {
			return 0, err
		}
		req.Legs = append(req.Legs, p)
	}
	if r.Lost == r.Width {
		req.PpLog = &v1.PeerZone{NodeId: r.PPTarget.Node, Device: r.PPTarget.Device, Zone: r.PPTarget.Zone}
		if r.PPTargetB != (cluster.PhysZone{}) {
			req.PpLogB = &v1.PeerZone{NodeId: r.PPTargetB.Node, Device: r.PPTargetB.Device, Zone: r.PPTargetB.Zone}
		}
	} else {
		if req.PpLog, err = peer(r.PPLog, r.PPWritten); err != nil {
			return 0, err
		}
		if r.PPLogB != (cluster.PhysZone{}) {
			if req.PpLogB, err = peer(r.PPLogB, r.PPWrittenB); err != nil {
				return 0, err
			}
		}
	}
	cctx := c.auth(ctx, ns)
	if c.grants != nil {
		// The zones the target reads: the surviving legs, and the
		// partial-parity logs unless they are what is rebuilt.
		read := append([]*v1.PeerZone{}, req.Legs...)
		if r.Lost != r.Width {
			read = append(read, req.PpLog, req.PpLogB)
		}
		var zones []string
		for _, p := range read {
			if p.GetNodeId() != "" {
				zones = append(zones, cluster.PhysZone{Node: p.GetNodeId(), Device: p.GetDevice(), Zone: p.GetZone()}.String())
			}
		}
		grant, err := c.grants.IssuePeerRead(r.Target.Node, ns, zones, auth.PeerGrantTTL)
		if err != nil {
			return 0, err
		}
		cctx = auth.WithPeerGrant(cctx, grant)
	}
	resp, err := tn.client.RebuildParityLeg(cctx, req)
	if err != nil {
		return 0, fmt.Errorf("rebuild raid5 leg on %s: %w", r.Target.Node, err)
	}
	return resp.GetBlocks(), nil
}
