package arbiter

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/auth/limit"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Server adapts an Arbiter to the generated v1.ArbiterServer. Every error is
// converted with rpcerr (a follower answers NOT_LEADER with the leader's
// address).
type Server struct {
	v1.UnimplementedArbiterServer
	a   *Arbiter
	iss *auth.Issuer // IssueToken (tokens.go); nil: IssueToken is FAILED_PRECONDITION
	// issue rate-limits IssueToken per caller identity (tokens.go), grant
	// the PeerWrite grants it signs.
	issue, grant *limit.Limiter
}

// NewServer returns the gRPC adapter of a.
func NewServer(a *Arbiter) *Server {
	return &Server{a: a, issue: limit.NewLimiter(limit.LimiterConfig{PerKeyRate: IssueRate, PerKeyBurst: IssueBurst,
		GlobalRate: IssueGlobalRate, GlobalBurst: 2 * IssueGlobalRate, MaxKeys: 4096, Now: a.cfg.Now}),
		grant: limit.NewLimiter(limit.LimiterConfig{PerKeyRate: GrantRate, PerKeyBurst: GrantBurst,
			GlobalRate: GrantGlobalRate, GlobalBurst: 2 * GrantGlobalRate, MaxKeys: 4096, Now: a.cfg.Now})}
}

var _ v1.ArbiterServer = (*Server)(nil)

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func toNamespace(n NamespaceInfo) *v1.Namespace {
	out := &v1.Namespace{
		Name: n.Name, MaxActiveVzones: n.MARLogical, ZonesPerVzone: n.ZonesPerVZone, Weight: max(n.Weight, 1),
		Essentials: n.Essentials, Spares: n.SparesProvisioned, SparesLent: n.SparesLent, SparesBorrowed: n.SparesBorrowed,
		ActiveVzones: n.ActiveVZones, ActiveZones: n.EssentialsInUse + n.SparesInUse, MinStripeWidth: n.MinWidth,
		Active: !n.Inactive, Frozen: n.Frozen, Degraded: n.Degraded, Created: ts(n.CreatedAt), LastWrite: ts(n.LastWrite),
		Redundancy: Redundancy(n.NamespaceSpec).String(),
		Vzones:     n.VZones, AllocatedZones: n.AllocatedZones, QuotaZones: n.quotaZones(),
		Kind: n.Kind.String(),
	}
	if e := n.FDP; e != nil {
		out.Fdp = &v1.FDPGrant{Node: e.Node, Addr: n.FDPAddr, Device: e.Device, FirstLba: e.FirstLBA, Lbas: e.LBAs,
			BlockSize: n.FDPDrive.BlockSize, Handles: e.Handles, ReclaimGroups: n.FDPDrive.ReclaimGroups}
	}
	return out
}

var vzoneStates = map[VZoneState]v1.VZoneState{
	VZoneOpen: v1.VZoneState_VZONE_STATE_OPEN, VZoneFull: v1.VZoneState_VZONE_STATE_FULL, VZoneEmpty: v1.VZoneState_VZONE_STATE_EMPTY,
}

// nodeMap is the shadow view by node id, for zone addresses.
func (s *Server) nodeMap(ctx context.Context) (map[string]NodeInfo, error) {
	nodes, err := s.a.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	m := make(map[string]NodeInfo, len(nodes))
	for _, n := range nodes {
		m[n.Record.ID] = n
	}
	return m, nil
}

func toVZone(l Layout, nodes map[string]NodeInfo) *v1.VZone {
	out := &v1.VZone{Namespace: l.Namespace, Id: l.VZone, State: vzoneStates[l.State], Generation: l.Generation,
		Capacity: uint64(l.ZonesPerVZone) * l.ZoneCapacity, Incarnation: l.Incarnation, ThreadedLogging: l.TL}
	var start uint64
	for _, g := range l.Groups {
		pg := &v1.StripeGroup{Index: g.Index, Width: g.Width, StripeBlocks: g.StripeSize / max(l.BlockSize, 1),
			Start: start, Capacity: uint64(g.Width) * l.ZoneCapacity, Copies: g.Copies, Parity: g.Parity}
		for _, z := range g.Zones {
			pz := &v1.PhysicalZone{Node: z.Node, Device: z.Device, Zone: z.Zone}
			if n, ok := nodes[z.Node]; ok {
				pz.Addr, pz.Available = n.Record.Addr, n.Available
				if d, ok := n.Record.Device(z.Device); ok {
					pz.Dies = d.ZoneDies(z.Zone)
				}
			}
			pg.Zones = append(pg.Zones, pz)
		}
		out.ZonesUsed += uint32(len(g.Zones))
		start += pg.Capacity
		out.Groups = append(out.Groups, pg)
	}
	return out
}

func toDevice(d cluster.DeviceInfo, active uint32) *v1.DeviceInfo {
	return &v1.DeviceInfo{Index: d.Index, Channels: d.Channels, Ways: d.Ways, Dzone: d.DZone, Fcgs: d.FCGs,
		MaxActiveZones: d.MAR, MaxOpenZones: d.MOR, BlockSize: d.BlockSize, PageSize: d.PageSize,
		ZoneSize: d.ZoneSize, ZoneCapacity: d.ZoneCapacity, NumZones: d.NumZones, Media: d.Media, ActiveZones: active}
}

func toNode(n NodeInfo) *v1.Node {
	out := &v1.Node{Id: n.Record.ID, Addr: n.Record.Addr, Version: n.Record.Version, Available: n.Available, Started: ts(n.Record.StartedAt)}
	for _, d := range n.Record.Devices {
		out.Devices = append(out.Devices, toDevice(d, n.DeviceActive[d.Index]))
	}
	return out
}

func (s *Server) vzone(ctx context.Context, l Layout, err error) (*v1.VZone, error) {
	if err != nil {
		return nil, rpcerr.ToError(err)
	}
	nodes, err := s.nodeMap(ctx)
	if err != nil {
		return nil, rpcerr.ToError(err)
	}
	out := toVZone(l, nodes)
	out.EtcdRevision = s.layoutRev(ctx)
	return out, nil
}

// layoutRev is the etcd revision sent with a layout: nodes serving it must
// have applied every grant event up to it (clients send it along). It is
// the serving term's last commit when there is one (at or above every grant
// of its state), else the revision of a read made now.
func (s *Server) layoutRev(ctx context.Context) int64 {
	if r := s.a.commitRev(); r > 0 {
		return r
	}
	if r, err := s.a.cli.Get(ctx, cluster.Prefix+"revision-probe"); err == nil {
		return r.Header.Revision
	}
	return 0
}

// CreateNamespace implements v1.ArbiterServer.
func (s *Server) CreateNamespace(ctx context.Context, r *v1.CreateNamespaceRequest) (*v1.Namespace, error) {
	red, err := cluster.ParseRedundancy(r.GetRedundancy()) // the one parse: the API's text to the spec's value
	if err != nil {
		return nil, rpcerr.ToError(err)
	}
	kind, err := cluster.ParseNamespaceKind(r.GetKind())
	if err != nil {
		return nil, rpcerr.ToError(err)
	}
	n, err := s.a.CreateNamespace(ctx, NamespaceSpec{Name: r.GetName(), MARLogical: r.GetMaxActiveVzones(),
		ZonesPerVZone: r.GetZonesPerVzone(), Weight: r.GetWeight(), Redundancy: red, VZones: r.GetVzones(),
		Kind: kind, FDPBytes: r.GetFdpCapacityBytes(), FDPHandles: r.GetFdpHandles()})
	if err != nil {
		return nil, rpcerr.ToError(err)
	}
	return toNamespace(n), nil
}

// UpdateNamespace implements v1.ArbiterServer.
func (s *Server) UpdateNamespace(ctx context.Context, r *v1.UpdateNamespaceRequest) (*v1.Namespace, error) {
	u := NamespaceUpdate{MARLogical: r.MaxActiveVzones, Weight: r.Weight, VZones: r.Vzones}
	if r.Redundancy != nil {
		red, err := cluster.ParseRedundancy(r.GetRedundancy()) // the API's text to the spec's value
		if err != nil {
			return nil, rpcerr.ToError(err)
		}
		u.Redundancy = &red
	}
	n, err := s.a.UpdateNamespace(ctx, r.GetName(), u)
	if err != nil {
		return nil, rpcerr.ToError(err)
	}
	return toNamespace(n), nil
}

// GetNamespace implements v1.ArbiterServer.
func (s *Server) GetNamespace(ctx context.Context, r *v1.GetNamespaceRequest) (*v1.Namespace, error) {
	n, err := s.a.GetNamespace(ctx, r.GetName())
	if err != nil {
		return nil, rpcerr.ToError(err)
	}
	return toNamespace(n), nil
}

// ListNamespaces implements v1.ArbiterServer.
func (s *Server) ListNamespaces(ctx context.Context, _ *v1.ListNamespacesRequest) (*v1.ListNamespacesResponse, error) {
	list, err := s.a.ListNamespaces(ctx)
	if err != nil {
		return nil, rpcerr.ToError(err)
	}
	out := &v1.ListNamespacesResponse{}
	for _, n := range list {
		out.Namespaces = append(out.Namespaces, toNamespace(n))
	}
	return out, nil
}

// DeleteNamespace implements v1.ArbiterServer.
func (s *Server) DeleteNamespace(ctx context.Context, r *v1.DeleteNamespaceRequest) (*v1.DeleteNamespaceResponse, error) {
	if err := s.a.DeleteNamespace(ctx, r.GetName(), r.GetForce()); err != nil {
		return nil, rpcerr.ToError(err)
	}
	return &v1.DeleteNamespaceResponse{}, nil
}

// OpenVZone implements v1.ArbiterServer: it opens the lowest empty v-zone,
// or the one the request names.
func (s *Server) OpenVZone(ctx context.Context, r *v1.OpenVZoneRequest) (*v1.VZone, error) {
	if r.Id != nil { // this v-zone, not the lowest empty one
		l, err := s.a.allocOpIDLike(ctx, r.GetNamespace(), r.GetId(), true, false, r.LikeVzone)
		return s.vzone(ctx, l, err)
	}
	if r.LikeVzone != nil {
		l, err := s.a.OpenNewVZoneLike(ctx, r.GetNamespace(), r.GetLikeVzone())
		return s.vzone(ctx, l, err)
	}
	l, err := s.a.OpenNewVZone(ctx, r.GetNamespace())
	return s.vzone(ctx, l, err)
}

// NextStripeGroup implements v1.ArbiterServer.
func (s *Server) NextStripeGroup(ctx context.Context, r *v1.VZoneRequest) (*v1.VZone, error) {
	l, err := s.a.NextStripeGroup(ctx, r.GetNamespace(), r.GetId())
	return s.vzone(ctx, l, err)
}

// FinishVZone implements v1.ArbiterServer.
func (s *Server) FinishVZone(ctx context.Context, r *v1.VZoneRequest) (*v1.VZone, error) {
	l, err := s.a.FinishVZone(ctx, r.GetNamespace(), r.GetId())
	return s.vzone(ctx, l, err)
}

// ResetVZone implements v1.ArbiterServer.
func (s *Server) ResetVZone(ctx context.Context, r *v1.VZoneRequest) (*v1.VZone, error) {
	if err := s.a.resetVZone(ctx, r.GetNamespace(), r.GetId(), r.GetIncarnation()); err != nil {
		return nil, rpcerr.ToError(err)
	}
	l, err := s.a.Layout(ctx, r.GetNamespace(), r.GetId())
	return s.vzone(ctx, l, err)
}

// ResetVZones implements v1.ArbiterServer: one state change for all of
// them, then their layouts (empty) in the order asked.
func (s *Server) ResetVZones(ctx context.Context, r *v1.ResetVZonesRequest) (*v1.ResetVZonesResponse, error) {
	refs := make([]VZoneRef, 0, len(r.GetVzones()))
	for i, v := range r.GetVzones() {
		if v.GetNamespace() != "" && v.GetNamespace() != r.GetNamespace() {
			return nil, rpcerr.ToError(&zerr.InvalidArgumentError{Field: fmt.Sprintf("vzones[%d].namespace", i),
				Reason: "must be empty or the request's namespace"})
		}
		refs = append(refs, VZoneRef{ID: v.GetId(), Incarnation: v.GetIncarnation()})
	}
	if err := s.a.resetVZones(ctx, r.GetNamespace(), refs); err != nil {
		return nil, rpcerr.ToError(err)
	}
	out := &v1.ResetVZonesResponse{}
	nodes, err := s.nodeMap(ctx)
	if err != nil {
		return nil, rpcerr.ToError(err)
	}
	rev := s.layoutRev(ctx)
	for _, ref := range refs {
		l, err := s.a.Layout(ctx, r.GetNamespace(), ref.ID)
		if err != nil {
			return nil, rpcerr.ToError(err)
		}
		vz := toVZone(l, nodes)
		vz.EtcdRevision = rev
		out.Vzones = append(out.Vzones, vz)
	}
	return out, nil
}

// GetVZone implements v1.ArbiterServer.
func (s *Server) GetVZone(ctx context.Context, r *v1.VZoneRequest) (*v1.VZone, error) {
	l, err := s.a.Layout(ctx, r.GetNamespace(), r.GetId())
	return s.vzone(ctx, l, err)
}

// ListVZones implements v1.ArbiterServer (non-empty v-zones).
func (s *Server) ListVZones(ctx context.Context, r *v1.ListVZonesRequest) (*v1.ListVZonesResponse, error) {
	list, err := s.a.ListVZones(ctx, r.GetNamespace())
	if err != nil {
		return nil, rpcerr.ToError(err)
	}
	nodes, err := s.nodeMap(ctx)
	if err != nil {
		return nil, rpcerr.ToError(err)
	}
	out := &v1.ListVZonesResponse{}
	for _, l := range list {
		out.Vzones = append(out.Vzones, toVZone(l, nodes))
	}
	return out, nil
}

// ReportActivity implements v1.ArbiterServer.
func (s *Server) ReportActivity(ctx context.Context, r *v1.ReportActivityRequest) (*v1.ReportActivityResponse, error) {
	if err := s.a.ReportWrite(ctx, r.GetNamespace()); err != nil {
		return nil, rpcerr.ToError(err)
	}
	return &v1.ReportActivityResponse{}, nil
}

// AcquireMount implements v1.ArbiterServer.
func (s *Server) AcquireMount(ctx context.Context, r *v1.AcquireMountRequest) (*v1.MountLease, error) {
	l, err := s.a.AcquireMount(ctx, r.GetNamespace(), r.GetHolder(), time.Duration(r.GetTtlSeconds())*time.Second, r.GetForce())
	if err != nil {
		return nil, rpcerr.ToError(err)
	}
	return &v1.MountLease{Namespace: l.Namespace, Holder: l.Holder, Expires: ts(l.Expires)}, nil
}

// ReleaseMount implements v1.ArbiterServer.
func (s *Server) ReleaseMount(ctx context.Context, r *v1.ReleaseMountRequest) (*v1.ReleaseMountResponse, error) {
	if err := s.a.ReleaseMount(ctx, r.GetNamespace(), r.GetHolder()); err != nil {
		return nil, rpcerr.ToError(err)
	}
	return &v1.ReleaseMountResponse{}, nil
}

// ListNodes implements v1.ArbiterServer.
func (s *Server) ListNodes(ctx context.Context, _ *v1.ListNodesRequest) (*v1.ListNodesResponse, error) {
	nodes, err := s.a.Nodes(ctx)
	if err != nil {
		return nil, rpcerr.ToError(err)
	}
	out := &v1.ListNodesResponse{}
	for _, n := range nodes {
		out.Nodes = append(out.Nodes, toNode(n))
	}
	return out, nil
}

// GetNode implements v1.ArbiterServer.
func (s *Server) GetNode(ctx context.Context, r *v1.GetNodeRequest) (*v1.Node, error) {
	n, err := s.a.GetNode(ctx, r.GetId())
	if err != nil {
		return nil, rpcerr.ToError(err)
	}
	return toNode(n), nil
}

// RemoveNode implements v1.ArbiterServer (admin only, by pkg/auth's policy):
// it forgets a node that is not registered and holds no allocated zone.
func (s *Server) RemoveNode(ctx context.Context, r *v1.RemoveNodeRequest) (*v1.RemoveNodeResponse, error) {
	if err := s.a.RemoveNode(ctx, r.GetId()); err != nil {
		return nil, rpcerr.ToError(err)
	}
	return &v1.RemoveNodeResponse{}, nil
}

// ClusterStatus implements v1.ArbiterServer (leader only, like every call).
func (s *Server) ClusterStatus(ctx context.Context, _ *v1.ClusterStatusRequest) (*v1.ClusterStatusResponse, error) {
	if !s.a.IsLeader() {
		return nil, rpcerr.ToError(s.a.notLeader(ctx))
	}
	st, err := s.a.Status(ctx)
	if err != nil {
		return nil, rpcerr.ToError(err)
	}
	members, err := s.a.Members(ctx)
	if err != nil {
		return nil, rpcerr.ToError(err)
	}
	out := &v1.ClusterStatusResponse{Leader: st.LeaderAddr, Nodes: uint32(st.Nodes), NodesAvailable: uint32(st.AvailableNodes),
		Devices: uint32(st.Devices), Dies: st.Dies, ActiveZoneSlots: st.ActiveZoneSlots, Essentials: st.Essentials,
		Spares: st.Spares, EssentialsFree: st.EssentialsFree, SparesFree: st.SparesFree, Namespaces: uint32(st.Namespaces),
		DegradedNamespaces: st.DegradedNamespaces, CapacityBlocks: st.CapacityBlocks, FreeBlocks: st.FreeBlocks,
		LostCopies: uint32(st.LostCopies), Rebuilding: uint32(st.Rebuilding), LostParityZones: uint32(st.LostParityZones)}
	for _, m := range members {
		id := m.Addr
		if m.Addr == s.a.cfg.Addr && s.a.cfg.ID != "" {
			id = s.a.cfg.ID
		}
		out.Arbiters = append(out.Arbiters, &v1.ArbiterMember{Id: id, Addr: m.Addr, Leader: m.Leader})
	}
	redactStatus(ctx, out)
	return out, nil
}

// redactStatus keeps other tenants out of a tenant's ClusterStatus: a
// namespace caller sees only its own namespace among the degraded ones
// (tenants are isolated). The operator and the components see everything; so does a
// server without the authenticator (in-process tests).
func redactStatus(ctx context.Context, out *v1.ClusterStatusResponse) {
	id, ok := auth.FromContext(ctx)
	if !ok || id.Kind != auth.KindNamespace {
		return
	}
	out.LostCopies, out.Rebuilding, out.LostParityZones = 0, 0, 0
	var own []string
	for _, ns := range out.DegradedNamespaces {
		if ns == id.Namespace {
			own = append(own, ns)
		}
	}
	out.DegradedNamespaces = own
}
