package arbiter

import (
	"context"
	"fmt"
	"slices"
	"time"
	"unicode"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zonefleet/zonefleet/pkg/auth/tokengen"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// NamespaceInfo is a namespace with its provisioning and resource use.
type NamespaceInfo struct {
	NamespaceSpec
	CreatedAt time.Time
	// Essentials is its exclusive share of N_essential; MinWidth the minimum stripe width.
	Essentials uint32
	MinWidth   uint32
	// Spares: Provisioned = Owned + Lent. Borrowed are other namespaces' spares
	// lent to it; Recalled are lent spares whose lender woke up, returned at the
	// borrower's next stripe-group finish/reset.
	SparesProvisioned uint32
	SparesOwned       uint32
	SparesLent        uint32
	SparesBorrowed    uint32
	SparesRecalled    uint32
	ActiveVZones      uint32
	EssentialsInUse   uint32
	SparesInUse       uint32
	AllocatedZones    uint32 // physical zones held by all its v-zones
	// Inactive: no allocation in the last N_essential allocations (global overdrive).
	Inactive bool
	// Frozen: no writes for T_ReadOnly; its overdriven stripe groups were reclaimed.
	Frozen bool
	// Degraded: some of its zones are on unavailable nodes (UnavailableZones) or
	// its essentials cannot cover MAR_logical after a node loss.
	Degraded         bool
	UnderProvisioned bool
	UnavailableZones []cluster.PhysZone
	LastWrite        time.Time
	// FDP is an fdp namespace's grant and FDPDrive the drive it is on (as
	// its node registered it; zero when the node is unknown), FDPAddr the
	// node's address.
	FDP      *cluster.FDPExtent
	FDPDrive cluster.FDPDeviceInfo
	FDPAddr  string
}

// Layout is a v-zone's stripe groups.
type Layout struct {
	Namespace  string
	VZone      uint64
	State      VZoneState
	Generation uint64
	Groups     []StripeGroup
	// ZonesPerVZone is the v-zone's size in physical zones (its namespace's setting).
	ZonesPerVZone uint32
	BlockSize     uint32 // bytes
	ZoneCapacity  uint64 // blocks per physical zone (smallest of its zones)
	Incarnation   uint64 // this opening of the v-zone (VZone.Incarnation)
	TL            bool   // in threaded logging
}

// NodeInfo is the shadow view of a node.
type NodeInfo struct {
	Record         cluster.NodeRecord
	Available      bool
	LostAt         time.Time
	Down           bool // gone longer than Config.NodeDownAfter, kept while it holds zones
	ActiveZones    uint32
	AllocatedZones uint32
	DeviceActive   map[uint32]uint32 // active zones per device index
}

// Status describes an arbiter replica and, on the leader, the cluster.
type Status struct {
	Addr           string
	Leader         bool
	LeaderAddr     string
	Essentials     uint32 // N_essential over available devices
	Spares         uint32 // N_spare
	Namespaces     int
	Nodes          int
	AvailableNodes int
	AllocSeq       uint64
	Loans          []Loan
	Devices        int
	Dies           uint32
	// ActiveZoneSlots is the sum of MAR over available devices (= Essentials + Spares).
	ActiveZoneSlots uint32
	// EssentialsFree/SparesFree are not provisioned to any namespace.
	EssentialsFree     uint32
	SparesFree         uint32
	DegradedNamespaces []string
	LostCopies         int    // copies of mirrored legs on down nodes not rebuilt yet
	Rebuilding         int    // rebuilds copying now
	LostParityZones    int    // zones of parity groups on down nodes (not rebuilt yet)
	CapacityBlocks     uint64 // over available devices
	FreeBlocks         uint64 // in unallocated zones of available devices
}

// ---- validation --------------------------------------------------------

func validName(field, s string) error {
	if s == "" || len(s) > 128 {
		return &zerr.InvalidArgumentError{Field: field, Reason: "must be 1 to 128 characters"}
	}
	for _, r := range s {
		if r == '/' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return &zerr.InvalidArgumentError{Field: field, Reason: fmt.Sprintf("%q contains '/', a space or a control character", s)}
		}
	}
	return nil
}

func (s NamespaceSpec) validate() error {
	if err := validName("namespace name", s.Name); err != nil {
		return err
	}
	if s.Weight > 1<<16 {
		return &zerr.InvalidArgumentError{Field: "weight", Reason: "must be at most 65536"}
	}
	if err := s.validateKind(); err != nil || s.Kind == cluster.KindFDP {
		return err
	}
	if s.MARLogical == 0 || s.MARLogical > 1<<16 {
		return &zerr.InvalidArgumentError{Field: "mar_logical", Reason: "must be in [1, 65536]"}
	}
	if !isPow2(s.ZonesPerVZone) || s.ZonesPerVZone > 1<<16 {
		return &zerr.InvalidArgumentError{Field: "zones_per_vzone", Reason: fmt.Sprintf("%d is not a power of two in [1, 65536]", s.ZonesPerVZone)}
	}
	if s.VZones > 1<<32 {
		return &zerr.InvalidArgumentError{Field: "vzones", Reason: "must be at most 2^32"}
	}
	if r := s.Redundancy; r.Copies > cluster.MaxCopies || (r.Parity && r.Copies > 1) {
		return &zerr.InvalidArgumentError{Field: "redundancy", Reason: fmt.Sprintf("%d copies (parity %t): want 1 to %d copies, or parity with 1", r.Copies, r.Parity, cluster.MaxCopies)}
	}
	return nil
}

func getNS(st *State, name string) (*nsState, error) {
	if err := validName("namespace name", name); err != nil {
		return nil, err
	}
	ns := st.Namespaces[name]
	if ns == nil {
		return nil, &zerr.NotFoundError{Kind: "namespace", Name: name}
	}
	return ns, nil
}

func checkVZoneID(ns *nsState, id uint64) error {
	if ns.Spec.VZones > 0 && id >= ns.Spec.VZones {
		return &zerr.InvalidArgumentError{Field: "vzone", Reason: fmt.Sprintf("%d is past the namespace's %d v-zones", id, ns.Spec.VZones)}
	}
	return nil
}

// ---- namespaces --------------------------------------------------------

// CreateNamespace creates a namespace and reprovisions essentials and spares
// over all namespaces (eZNS §4.4.1). It fails with *zerr.NoResourcesError if
// some namespace's share of essentials would not cover its MAR_logical v-zones.
func (a *Arbiter) CreateNamespace(ctx context.Context, spec NamespaceSpec) (NamespaceInfo, error) {
	if err := spec.validate(); err != nil {
		return NamespaceInfo{}, err
	}
	spec.Redundancy = Redundancy(spec)
	now := a.cfg.Now()
	err := a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
		if st.Namespaces[spec.Name] != nil {
			return nil, &zerr.AlreadyExistsError{Kind: "namespace", Name: spec.Name}
		}
		ns := &nsState{Spec: spec, CreatedAt: now, LastWrite: now, LastAlloc: st.AllocSeq, VZones: map[uint64]*VZone{}}
		if spec.Kind == cluster.KindFDP {
			ext, err := placeFDP(st, spec)
			if err != nil {
				return nil, err
			}
			ns.FDP = ext
		}
		st.Namespaces[spec.Name] = ns
		short := reprovision(st)
		for _, sf := range short {
			if sf.Namespace == spec.Name {
				return nil, &zerr.NoResourcesError{Resource: "essential zones for namespace " + spec.Name, Requested: uint64(sf.Need), Available: uint64(sf.Got)}
			}
		}
		if len(short) > 0 {
			sf := short[0]
			return nil, &zerr.NoResourcesError{Resource: fmt.Sprintf("essential zones (namespace %s would keep too few)", sf.Namespace), Requested: uint64(sf.Need), Available: uint64(sf.Got)}
		}
		if err := checkQuotaReservable(st, spec); err != nil {
			return nil, err
		}
		// The nodes' round robin learns the weight from this record, the
		// node of an fdp namespace's drive its grant.
		rec, err := cluster.EncodeNamespace(cluster.NamespaceRecord{Name: spec.Name, Weight: uint32(ns.weight()), FDP: ns.FDP})
		if err != nil {
			return nil, err
		}
		return []clientv3.Op{clientv3.OpPut(cluster.NamespaceKey(spec.Name), string(rec))}, nil
	})
	if err != nil {
		return NamespaceInfo{}, err
	}
	a.touch(spec.Name, now)
	a.m.namespaceEvents.WithLabelValues("create").Inc()
	return a.GetNamespace(ctx, spec.Name)
}

// NamespaceUpdate is a change of a namespace's spec: the fields set replace
// the namespace's.
type NamespaceUpdate struct {
	MARLogical *uint32
	Weight     *uint32
	// VZones is the capacity quota (0 removes it).
	VZones     *uint64
	Redundancy *cluster.Redundancy
}

// UpdateNamespace changes an existing namespace, all or nothing, and
// reprovisions essentials and spares like CreateNamespace. Refused, typed,
// changing nothing: a spec CreateNamespace would refuse; a quota below the
// v-zone ids the namespace holds or below the physical zones it holds
// (*zerr.InvalidArgumentError); a larger quota the cluster cannot reserve,
// or essentials some namespace would no longer get (*zerr.NoResourcesError);
// a new redundancy while the namespace holds a v-zone, since its layouts
// were placed for the old one (*zerr.ZoneStateError).
func (a *Arbiter) UpdateNamespace(ctx context.Context, name string, u NamespaceUpdate) (NamespaceInfo, error) {
	err := a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
		ns, err := getNS(st, name)
		if err != nil {
			return nil, err
		}
		spec := ns.Spec
		if u.MARLogical != nil {
			spec.MARLogical = *u.MARLogical
		}
		if u.Weight != nil {
			spec.Weight = *u.Weight
		}
		if u.VZones != nil {
			spec.VZones = *u.VZones
		}
		if u.Redundancy != nil {
			spec.Redundancy = u.Redundancy.Normal()
		}
		if err := spec.validate(); err != nil {
			return nil, err
		}
		if Redundancy(spec) != Redundancy(ns.Spec) {
			for _, id := range sortedKeys(ns.VZones) {
				if len(ns.VZones[id].allGroups()) > 0 {
					return nil, &zerr.ZoneStateError{Zone: id, State: string(ns.VZones[id].State), Op: "change the namespace's redundancy (its v-zones were laid out for " + Redundancy(ns.Spec).String() + ")"}
				}
			}
		}
		if spec.VZones > 0 {
			if ids := sortedKeys(ns.VZones); len(ids) > 0 && ids[len(ids)-1] >= spec.VZones {
				return nil, &zerr.InvalidArgumentError{Field: "vzones", Reason: fmt.Sprintf("the namespace holds v-zone %d: a quota of %d v-zones would not cover it", ids[len(ids)-1], spec.VZones)}
			}
			if held := allocatedZones(ns); held > spec.quotaZones() {
				return nil, &zerr.InvalidArgumentError{Field: "vzones", Reason: fmt.Sprintf("the namespace holds %d physical zones, more than the %d a quota of %d v-zones reserves", held, spec.quotaZones(), spec.VZones)}
			}
		}
		ns.Spec = spec
		if short := reprovision(st); len(short) > 0 {
			sf := short[0]
			return nil, &zerr.NoResourcesError{Resource: fmt.Sprintf("essential zones (namespace %s would keep too few)", sf.Namespace), Requested: uint64(sf.Need), Available: uint64(sf.Got)}
		}
		if err := checkQuotaReservable(st, spec); err != nil {
			return nil, err
		}
		rec, err := cluster.EncodeNamespace(cluster.NamespaceRecord{Name: spec.Name, Weight: uint32(ns.weight()), FDP: ns.FDP})
		if err != nil {
			return nil, err
		}
		return []clientv3.Op{clientv3.OpPut(cluster.NamespaceKey(spec.Name), string(rec))}, nil
	})
	if err != nil {
		return NamespaceInfo{}, err
	}
	a.m.namespaceEvents.WithLabelValues("update").Inc()
	return a.GetNamespace(ctx, name)
}

// ---- capacity quotas ----------------------------------------------------
//
// A namespace created with a quota (NamespaceSpec.VZones > 0) has
// quotaZones physical zones reserved: creation is refused unless the
// reservations, plus the zones the namespaces without a quota hold, fit in
// the available nodes' zones; it never holds more than its reservation;
// and a namespace without a quota allocates only zones no reservation still
// needs. So a tenant with a quota can always fill it, whatever the others
// write (unless nodes are lost). Without any quota nothing is checked (and
// nothing is counted on the allocation path).

// allocatedZones is the physical zones ns's v-zones hold.
func allocatedZones(ns *nsState) uint64 {
	var n uint64
	for _, vz := range ns.VZones {
		for _, g := range vz.allGroups() {
			n += uint64(len(g.Zones))
		}
	}
	return n
}

// availableZones is the zones of the available nodes' devices.
func availableZones(st *State) uint64 {
	var n uint64
	for _, node := range st.Nodes {
		if node.Available {
			for _, d := range node.Record.Devices {
				n += uint64(d.NumZones)
			}
		}
	}
	return n
}

// committedZones is what the namespaces hold or have reserved: a quota's
// reservation (at least what it holds), the allocated zones of one without.
func committedZones(st *State, except string) uint64 {
	var n uint64
	for name, ns := range st.Namespaces {
		if name == except {
			continue
		}
		n += max(ns.Spec.quotaZones(), allocatedZones(ns))
	}
	return n
}

// checkQuotaReservable refuses a new namespace's quota the cluster cannot
// reserve (its record is already in st).
func checkQuotaReservable(st *State, spec NamespaceSpec) error {
	q := spec.quotaZones()
	if q == 0 {
		return nil
	}
	total, others := availableZones(st), committedZones(st, spec.Name)
	if others+q > total {
		return &zerr.NoResourcesError{Resource: fmt.Sprintf("physical zones for the quota of namespace %s (%d v-zones)", spec.Name, spec.VZones),
			Requested: q, Available: total - min(total, others)}
	}
	return nil
}

// checkQuotaAlloc refuses a stripe group of n zones for namespace name
// beyond its quota, or, for a namespace without one, beyond its default
// share (maxShare of the cluster's zones, when in (0,1)) or into what the
// quotas still reserve.
func checkQuotaAlloc(st *State, name string, ns *nsState, n uint64, maxShare float64) error {
	if q := ns.Spec.quotaZones(); q > 0 {
		if held := allocatedZones(ns); held+n > q {
			return &zerr.NoResourcesError{Resource: fmt.Sprintf("physical zones of namespace %s's quota (%d v-zones)", name, ns.Spec.VZones),
				Requested: n, Available: q - min(q, held)}
		}
		return nil
	}
	if maxShare > 0 && maxShare < 1 {
		total := availableZones(st)
		limit := uint64(float64(total) * maxShare)
		if held := allocatedZones(ns); held+n > limit {
			return &zerr.NoResourcesError{Resource: fmt.Sprintf("physical zones of namespace %s's default share (%.0f%% of the cluster's %d zones; an operator can give it a quota: zctl ns create --vzones)",
				name, maxShare*100, total), Requested: n, Available: limit - min(limit, held)}
		}
	}
	quotas := false
	for _, o := range st.Namespaces {
		quotas = quotas || o.Spec.VZones > 0
	}
	if !quotas {
		return nil
	}
	var unmet, used uint64
	for _, o := range st.Namespaces {
		held := allocatedZones(o)
		used += held
		if q := o.Spec.quotaZones(); q > 0 {
			unmet += q - min(q, held)
		}
	}
	total := availableZones(st)
	free := total - min(total, used)
	if unmet+n > free {
		return &zerr.NoResourcesError{Resource: "physical zones not reserved by other namespaces' quotas", Requested: n, Available: free - min(free, unmet)}
	}
	return nil
}

// GetNamespace returns one namespace.
func (a *Arbiter) GetNamespace(ctx context.Context, name string) (NamespaceInfo, error) {
	st, ix, err := a.snapshot(ctx)
	if err != nil {
		return NamespaceInfo{}, err
	}
	ns, err := getNS(st, name)
	if err != nil {
		return NamespaceInfo{}, err
	}
	return a.nsInfo(st, ix, name, ns), nil
}

// ListNamespaces returns every namespace, sorted by name.
func (a *Arbiter) ListNamespaces(ctx context.Context) ([]NamespaceInfo, error) {
	st, ix, err := a.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]NamespaceInfo, 0, len(st.Namespaces))
	for _, name := range sortedKeys(st.Namespaces) {
		out = append(out, a.nsInfo(st, ix, name, st.Namespaces[name]))
	}
	return out, nil
}

func (a *Arbiter) nsInfo(st *State, ix *index, name string, ns *nsState) NamespaceInfo {
	u := ix.usage[name]
	if u == nil {
		u = &nsUsage{}
	}
	info := NamespaceInfo{
		NamespaceSpec: ns.Spec, CreatedAt: ns.CreatedAt, Essentials: ns.Essentials, MinWidth: ns.minWidth(),
		SparesProvisioned: ns.Spares, SparesOwned: ns.Spares - min(u.Lent, ns.Spares), SparesLent: u.Lent,
		SparesBorrowed: u.Borrowed, SparesRecalled: u.Recalled,
		ActiveVZones: u.ActiveVZones, EssentialsInUse: u.EssentialsInUse, SparesInUse: u.SparesInUse,
		Inactive: st.Essentials > 0 && st.AllocSeq-ns.LastAlloc >= uint64(st.Essentials),
		Frozen:   ns.Frozen, UnderProvisioned: ns.Essentials < ns.needEssentials(),
		LastWrite: a.lastWriteOf(name, ns),
	}
	for _, id := range sortedKeys(ns.VZones) {
		for _, g := range ns.VZones[id].allGroups() {
			info.AllocatedZones += uint32(len(g.Zones))
			for _, z := range g.Zones {
				if n := st.Nodes[z.Node]; n == nil || !n.Available {
					info.UnavailableZones = append(info.UnavailableZones, z)
				}
			}
		}
	}
	if e := ns.FDP; e != nil {
		info.FDP = e
		if n := st.Nodes[e.Node]; n != nil {
			info.FDPAddr = n.Record.Addr
			info.FDPDrive, _ = n.Record.FDPDevice(e.Device)
			info.Degraded = !n.Available
		} else {
			info.Degraded = true
		}
	}
	info.Degraded = info.Degraded || len(info.UnavailableZones) > 0 || info.UnderProvisioned
	return info
}

// DeleteNamespace deletes a namespace, revokes all its grants and
// reprovisions the others. Without force it fails with *zerr.ZoneStateError
// while the namespace has an open v-zone.
//
// The same transaction raises the namespace's token generation (tokengen):
// every token of this incarnation is refused from then on, also by a
// namespace created later under the same name, whose tokens carry the new
// generation; the generation record outlives the namespace for that
// reason. A RevokeTokens racing the deletion may be overwritten by it (both
// raise the generation past every token issued before the deletion).
func (a *Arbiter) DeleteNamespace(ctx context.Context, name string, force bool) error {
	gen, _, err := tokengen.Current(ctx, a.cli, name)
	if err != nil {
		return err
	}
	err = a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
		ns, err := getNS(st, name)
		if err != nil {
			return nil, err
		}
		for _, id := range sortedKeys(ns.VZones) {
			if vz := ns.VZones[id]; vz.Reclaiming || (!force && vz.State == VZoneOpen) {
				return nil, &zerr.ZoneStateError{Zone: id, State: string(vz.State), Op: "delete the namespace (force resets open v-zones)"}
			}
		}
		var ops []clientv3.Op
		for _, id := range sortedKeys(ns.VZones) {
			for _, g := range ns.VZones[id].allGroups() {
				for _, z := range g.Zones {
					ops = append(ops, grantDel(z))
				}
			}
		}
		delete(st.Namespaces, name)
		reprovision(st)
		return append(ops, clientv3.OpDelete(cluster.NamespaceKey(name)),
			clientv3.OpPut(tokengen.Key(name), string(tokengen.Encode(gen+1)))), nil
	})
	if err != nil {
		return err
	}
	a.actMu.Lock()
	delete(a.lastWrite, name)
	a.actMu.Unlock()
	a.m.namespaceEvents.WithLabelValues("delete").Inc()
	a.m.forget(name)
	return nil
}

// ---- v-zones -----------------------------------------------------------

// events collects what a mutation did, for metrics after it commits.
type events struct {
	allocs   []allocEvent
	lent     int
	recalled int
	returned int
}

type allocEvent struct {
	ns                 string
	width, minW, zones uint32
}

func (e *events) apply(m *metrics) {
	for _, al := range e.allocs {
		m.allocations.WithLabelValues(al.ns).Inc()
		m.allocatedZones.WithLabelValues(al.ns).Add(float64(al.zones))
		m.width.Observe(float64(al.width))
		if al.width > al.minW {
			m.overdrive.WithLabelValues("local").Inc()
		}
	}
	m.overdrive.WithLabelValues("lend").Add(float64(e.lent))
	m.overdrive.WithLabelValues("recall").Add(float64(e.recalled))
	m.overdrive.WithLabelValues("return").Add(float64(e.returned))
}

// OpenVZone opens an empty v-zone and allocates its first stripe group.
func (a *Arbiter) OpenVZone(ctx context.Context, namespace string, vzone uint64) (Layout, error) {
	return a.allocOpID(ctx, namespace, vzone, true, false)
}

// OpenNewVZone opens the lowest-numbered empty v-zone of a namespace.
func (a *Arbiter) OpenNewVZone(ctx context.Context, namespace string) (Layout, error) {
	return a.allocOpID(ctx, namespace, 0, true, true)
}

// NextStripeGroup finishes the open stripe group of an open v-zone (its
// active resources return) and allocates the next one. It fails with
// *zerr.ZoneFullError when the v-zone has no physical zones left (FinishVZone it).
func (a *Arbiter) NextStripeGroup(ctx context.Context, namespace string, vzone uint64) (Layout, error) {
	return a.allocOpID(ctx, namespace, vzone, false, false)
}

// allocOpID opens (open) or advances a v-zone; with pick, the lowest empty id.
func (a *Arbiter) allocOpID(ctx context.Context, name string, id uint64, open, pick bool) (Layout, error) {
	return a.allocOpIDLike(ctx, name, id, open, pick, nil)
}

// allocOpIDLike is allocOpID; an open with like places the new v-zone's
// groups on the dies of v-zone *like's groups where it can (tl.go).
func (a *Arbiter) allocOpIDLike(ctx context.Context, name string, id uint64, open, pick bool, like *uint64) (Layout, error) {
	start := time.Now()
	now := a.cfg.Now()
	var ev events
	var out Layout
	err := a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
		ev = events{}
		ns, err := zonedNS(st, name)
		if err != nil {
			return nil, err
		}
		if pick {
			for id = 0; ns.VZones[id] != nil; id++ {
			}
			if ns.Spec.VZones > 0 && id >= ns.Spec.VZones {
				return nil, &zerr.NoResourcesError{Resource: "empty v-zones of namespace " + name, Requested: 1, Available: 0}
			}
		}
		if err := checkVZoneID(ns, id); err != nil {
			return nil, err
		}
		vz := ns.VZones[id]
		if open {
			if vz != nil {
				return nil, &zerr.ZoneStateError{Zone: id, State: string(vz.State), Op: "open"}
			}
			if u := ix.usage[name]; u != nil && u.ActiveVZones >= ns.Spec.MARLogical {
				return nil, &zerr.TooManyActiveError{Limit: ns.Spec.MARLogical}
			}
			vz = &VZone{ID: id, State: VZoneOpen}
			if like != nil {
				if err := checkVZoneID(ns, *like); err != nil {
					return nil, err
				}
				l := *like
				vz.Like = &l
			}
			st.putVZ(name, vz)
		} else {
			if vz == nil || vz.openGroup() == nil {
				st := VZoneEmpty
				if vz != nil {
					st = vz.State
				}
				return nil, &zerr.ZoneStateError{Zone: id, State: string(st), Op: "open the next stripe group"}
			}
			if vz.Reclaiming {
				return nil, &zerr.ZoneStateError{Zone: id, State: "reclaiming", Op: "open the next stripe group"}
			}
			if vz.zoneCount() >= ns.Spec.ZonesPerVZone {
				return nil, &zerr.ZoneFullError{Zone: id, Capacity: uint64(vz.zoneCount()) * layoutOf(st, name, vz).ZoneCapacity}
			}
			vz = st.mutVZ(name, id)
			vz.openGroup().Open = false
			ev.returned += settleRecalls(st, name)
		}
		ops, err := a.allocGroup(st, name, ns, vz, now, &ev, false)
		if err != nil {
			return nil, err
		}
		if open {
			// The allocation clock only grows and this open moved it: no
			// other opening of any v-zone has this value.
			vz.Incarnation = st.AllocSeq
		}
		ev.lent += globalOverdrive(st)
		out = layoutOf(st, name, vz)
		return ops, nil
	})
	if err != nil {
		return Layout{}, err
	}
	a.touch(name, now)
	ev.apply(a.m)
	a.m.allocLatency.Observe(time.Since(start).Seconds())
	return out, nil
}

// allocGroup allocates the next stripe group of vz (local overdrive, eZNS
// §4.4.2) on distinct die groups (§4.2) and returns the grant ops. With
// reclaim, the group has the minimum width, takes only essentials and does
// not count as write activity (no wake, no allocation history).
func (a *Arbiter) allocGroup(st *State, name string, ns *nsState, vz *VZone, now time.Time, ev *events, reclaim bool) ([]clientv3.Op, error) {
	if !reclaim {
		for i := range st.Loans { // a waking lender recalls its spares
			if st.Loans[i].Lender == name && !st.Loans[i].Recalled {
				st.Loans[i].Recalled = true
				ev.recalled++
			}
		}
		ns.Frozen = false
		ns.LastWrite = now
	}
	g, err := a.planGroup(st, name, ns, vz, reclaim, nil)
	if err != nil {
		return nil, err
	}
	if !reclaim { // a reclaim gives back the group it replaces
		if err := checkQuotaAlloc(st, name, ns, uint64(len(g.Zones)), a.cfg.MaxShare); err != nil {
			return nil, err
		}
	}
	vz.Generation++
	g.Index, g.Generation = uint32(len(vz.Groups)), vz.Generation
	vz.Groups = append(vz.Groups, g)
	vz.State = VZoneOpen
	ops := grantOps(name, vz.ID, g)
	if !reclaim {
		st.AllocSeq += uint64(len(g.Zones))
		ns.LastAlloc = st.AllocSeq
		ev.allocs = append(ev.allocs, allocEvent{ns: name, width: g.Width, minW: ns.minWidth(), zones: uint32(len(g.Zones))})
	}
	return ops, nil
}

func grantOps(name string, vzone uint64, g StripeGroup) []clientv3.Op {
	return sealOps(name, vzone, g, false)
}

// sealOps puts the grants of g's zones again, sealed or not (a reclaim
// moving the group; the keys stay, so the zones keep their data and owner).
func sealOps(name string, vzone uint64, g StripeGroup, sealed bool) []clientv3.Op {
	var ops []clientv3.Op
	for _, z := range g.Zones {
		ops = append(ops, grantPut(z, cluster.Grant{Namespace: name, VZone: vzone, Group: g.Index, Generation: g.Generation, Sealed: sealed}))
	}
	return ops
}

// planGroup chooses the width and the zones of a new open stripe group. With
// reclaim the width is the minimum width from essentials, outside the
// namespace's budget (the group it replaces gives them back).
func (a *Arbiter) planGroup(st *State, name string, ns *nsState, vz *VZone, reclaim bool, srcZones []cluster.PhysZone) (StripeGroup, error) {
	ix, err := checkedIndex(st, true)
	if err != nil {
		return StripeGroup{}, err
	}
	u := ix.usage[name]
	m := ns.minWidth()
	copies := ns.Spec.copies()
	parity := ns.Spec.parity()
	if reclaim && (copies > 1 || parity) {
		return StripeGroup{}, &zerr.InvalidArgumentError{Field: "reclaim", Reason: "redundant (mirrored or parity) stripe groups are not reclaimed"}
	}
	one := ns.Spec.zonesFor(1) // the zones of the narrowest group
	remaining := sub(ns.Spec.ZonesPerVZone, vz.zoneCount())
	essAvail := sub(ns.Essentials, u.EssentialsInUse)
	spareTotal := sub(ns.Spares, u.Lent) + u.BorrowedLive
	spareAvail := sub(spareTotal, u.SparesInUse)
	ess := min(ns.Spec.zonesFor(m), essAvail) // zones: a mirrored leg takes one per copy, a parity group two more
	var reap uint32
	if reclaim {
		ess, remaining = m, m
	} else {
		active := float64(u.ActiveVZones + 1) // this v-zone's group is not open yet
		if ns.EWMA <= 0 {
			ns.EWMA = active
		} else {
			ns.EWMA = a.cfg.EWMAAlpha*active + (1-a.cfg.EWMAAlpha)*ns.EWMA
		}
		reap = min(uint32(float64(spareTotal)/max(ns.EWMA, 1)), spareAvail)
		if ess+reap < one && ess+spareAvail >= one {
			reap = one - ess // one leg at least, from spares
		}
	}
	want := ess + reap
	if want < one {
		return StripeGroup{}, &zerr.NoResourcesError{Resource: "active zones of namespace " + name, Requested: uint64(ns.Spec.zonesFor(m)), Available: uint64(want)}
	}
	cands := candidatesOf(a.dieSlotsOf(st), ix, a.candBuf)
	a.candBuf = cands
	if len(srcZones) > 0 {
		cands = nodeToNodeOnly(cands, srcZones)
	}
	dies := distinctUsableDies(st, ix, cands)
	if parity {
		dies += cluster.ParityPPLogs // the partial-parity logs may share the parity leg's die
	}
	width := pow2Floor(min(ns.Spec.widthFor(want), remaining, ns.Spec.widthFor(dies)))
	if reclaim && width < m {
		return StripeGroup{}, &zerr.NoResourcesError{Resource: "die groups for a minimum-width reclaim target", Requested: uint64(m), Available: uint64(width)}
	}
	if width == 0 {
		return StripeGroup{}, &zerr.NoResourcesError{Resource: "free physical zones on available dies", Requested: uint64(min(want, ns.Spec.zonesFor(remaining))), Available: 0}
	}
	var zones []cluster.PhysZone
	switch ref := likeRef(st, name, vz); {
	case !reclaim && len(ref) > 0 && copies == 1 && !parity:
		zones = pickLike(st, ix, cands, width, ref)
	case parity:
		// data legs and parity leg on width+1 distinct nodes: narrow the group until they fit
		for zones = pickParity(st, ix, cands, width); width > 1 && uint32(len(zones)) < width+parityExtraZones; {
			width /= 2
			zones = pickParity(st, ix, cands, width)
		}
	default:
		// copies of a leg need distinct nodes: narrow the group until they fit
		for zones = pickCopies(st, ix, cands, width, copies); copies > 1 && width > 1 && uint32(len(zones)) < width*copies; {
			width /= 2
			zones = pickCopies(st, ix, cands, width, copies)
		}
	}
	if need := ns.Spec.zonesFor(width); uint32(len(zones)) < need {
		what := "free physical zones on available dies"
		switch {
		case parity:
			what = fmt.Sprintf("free physical zones on %d distinct available nodes (%s: %d data legs + parity; at least %d nodes)",
				width+1, Redundancy(ns.Spec), width, cluster.ParityMinNodes)
		case copies > 1:
			what = fmt.Sprintf("free physical zones on %d distinct available nodes (%s)", copies, Redundancy(ns.Spec))
		}
		return StripeGroup{}, &zerr.NoResourcesError{Resource: what, Requested: uint64(need), Available: uint64(len(zones))}
	}
	total := uint32(len(zones))
	essUsed := min(total, ess)
	g := StripeGroup{
		Zones: zones, Width: width,
		StripeSize: stripeSize(a.cfg.BaseStripeSize, st.blockSize(zones), width, m),
		Essentials: essUsed, Spares: total - essUsed, Open: true,
	}
	if copies > 1 {
		g.Copies = copies
	}
	g.Parity = parity
	return g, nil
}

// nodeToNodeOnly drops the candidates a reclaim copy could only reach by a
// copy between two devices of one node (which would move the data through
// the arbiter): a target may sit on a node holding source zones only on the
// device that holds all of them there; zone_compaction then copies within
// the device or pushes node to node.
func nodeToNodeOnly(cands []candidate, src []cluster.PhysZone) []candidate {
	devs := map[string]map[uint32]bool{}
	for _, z := range src {
		if devs[z.Node] == nil {
			devs[z.Node] = map[uint32]bool{}
		}
		devs[z.Node][z.Device] = true
	}
	return slices.DeleteFunc(cands, func(c candidate) bool {
		d := devs[c.die.Node]
		return d != nil && (len(d) > 1 || !d[c.die.Device])
	})
}

func sub(a, b uint32) uint32 {
	if a > b {
		return a - b
	}
	return 0
}

// settleRecalls returns the recalled spares a borrower holds (called when it
// finishes or resets a stripe group).
func settleRecalls(st *State, borrower string) int {
	n := 0
	st.Loans = slices.DeleteFunc(st.Loans, func(l Loan) bool {
		if l.Borrower == borrower && l.Recalled {
			n++
			return true
		}
		return false
	})
	return n
}

// globalOverdrive (eZNS §4.4.3): a namespace with no allocation in the last
// N_essential physical zone allocations is inactive; its unused spares are lent
// equally to the active (not frozen) namespaces. It returns the loans made.
func globalOverdrive(st *State) int {
	if st.Essentials == 0 {
		return 0
	}
	var active, inactive []string
	for _, name := range sortedKeys(st.Namespaces) {
		ns := st.Namespaces[name]
		if st.AllocSeq-ns.LastAlloc >= uint64(st.Essentials) {
			inactive = append(inactive, name)
		} else if !ns.Frozen {
			active = append(active, name)
		}
	}
	if len(active) == 0 {
		return 0
	}
	made := 0
	for _, lender := range inactive {
		ix := buildIndex(st)
		ns, u := st.Namespaces[lender], ix.usage[lender]
		own := sub(ns.Spares, u.Lent)
		unused := min(sub(own+u.BorrowedLive, u.SparesInUse), own)
		if unused == 0 {
			continue
		}
		n := uint32(len(active))
		q, r := unused/n, unused%n
		for i, b := range active {
			c := q
			if uint32(i) < r {
				c++
			}
			if c == 0 {
				continue
			}
			made++
			merged := false
			for j := range st.Loans {
				if l := &st.Loans[j]; l.Lender == lender && l.Borrower == b && !l.Recalled {
					l.Count += c
					merged = true
					break
				}
			}
			if !merged {
				st.Loans = append(st.Loans, Loan{Lender: lender, Borrower: b, Count: c})
			}
		}
	}
	return made
}

// FinishVZone finishes an open v-zone: its open stripe group's active
// resources return; its zones keep their data and grants. Finishing a full
// v-zone is a no-op.
func (a *Arbiter) FinishVZone(ctx context.Context, namespace string, vzone uint64) (Layout, error) {
	var ev events
	var out Layout
	err := a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
		ev = events{}
		ns, err := getNS(st, namespace)
		if err != nil {
			return nil, err
		}
		if err := checkVZoneID(ns, vzone); err != nil {
			return nil, err
		}
		vz := ns.VZones[vzone]
		switch {
		case vz == nil:
			return nil, &zerr.ZoneStateError{Zone: vzone, State: string(VZoneEmpty), Op: "finish"}
		case vz.Reclaiming:
			return nil, &zerr.ZoneStateError{Zone: vzone, State: "reclaiming", Op: "finish"}
		case vz.State == VZoneOpen:
			vz = st.mutVZ(namespace, vzone)
			if g := vz.openGroup(); g != nil {
				g.Open = false
			}
			vz.State = VZoneFull
			vz.TL = false // threaded logging ends with the finish (the client finished the drives' zones)
			vz.Generation++
			ev.returned += settleRecalls(st, namespace)
			ev.lent += globalOverdrive(st)
		}
		out = layoutOf(st, namespace, vz)
		return nil, nil
	})
	if err != nil {
		return Layout{}, err
	}
	ev.apply(a.m)
	return out, nil
}

// ResetVZone empties a v-zone: all its physical zones return to the free pool
// and their grants are deleted (the nodes reset a physical zone before it is
// written again). Resetting an empty v-zone is a no-op.
func (a *Arbiter) ResetVZone(ctx context.Context, namespace string, vzone uint64) error {
	return a.resetVZone(ctx, namespace, vzone, 0)
}

// resetVZone is ResetVZone; a non-zero incarnation resets the v-zone only
// if it is still that opening (*zerr.StaleLayoutError otherwise, nothing
// changes; an empty v-zone is a no-op either way).
func (a *Arbiter) resetVZone(ctx context.Context, namespace string, vzone, incarnation uint64) error {
	return a.resetVZones(ctx, namespace, []VZoneRef{{ID: vzone, Incarnation: incarnation}})
}

// VZoneRef names one v-zone of a namespace to reset, and optionally the
// opening (incarnation, non-zero) it must still be.
type VZoneRef struct {
	ID          uint64
	Incarnation uint64
}

// MaxResetBatch is the most v-zones ResetVZones takes in one call: their
// records and grants stay within one etcd transaction of the default
// max-txn-ops (128) for v-zones of up to six zones.
const MaxResetBatch = 64

// ResetVZones resets several v-zones of one namespace in one mutation, each
// as resetVZone would: all of them, or none when one fails (that v-zone's
// error). At most MaxResetBatch, each at most once.
func (a *Arbiter) ResetVZones(ctx context.Context, namespace string, refs []VZoneRef) error {
	return a.resetVZones(ctx, namespace, refs)
}

func (a *Arbiter) resetVZones(ctx context.Context, namespace string, refs []VZoneRef) error {
	if len(refs) > MaxResetBatch {
		return &zerr.InvalidArgumentError{Field: "vzones", Reason: fmt.Sprintf("%d v-zones, at most %d per call", len(refs), MaxResetBatch)}
	}
	seen := make(map[uint64]bool, len(refs))
	for _, r := range refs {
		if seen[r.ID] {
			return &zerr.InvalidArgumentError{Field: "vzones", Reason: fmt.Sprintf("v-zone %d named twice", r.ID)}
		}
		seen[r.ID] = true
	}
	if len(refs) == 0 {
		return nil
	}
	var ev events
	err := a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
		ev = events{}
		ns, err := getNS(st, namespace)
		if err != nil {
			return nil, err
		}
		var ops []clientv3.Op
		changed := false
		for _, r := range refs {
			if err := checkVZoneID(ns, r.ID); err != nil {
				return nil, err
			}
			vz := ns.VZones[r.ID]
			if vz == nil {
				continue // resetting an empty v-zone is a no-op
			}
			if r.Incarnation != 0 && vz.Incarnation != r.Incarnation {
				return nil, &zerr.StaleLayoutError{VZone: vzoneName(namespace, r.ID), Generation: r.Incarnation, Current: vz.Incarnation}
			}
			if vz.Reclaiming {
				return nil, &zerr.ZoneStateError{Zone: r.ID, State: "reclaiming", Op: "reset"}
			}
			for _, g := range vz.allGroups() { // a rebuild's target too
				for _, z := range g.Zones {
					ops = append(ops, grantDel(z))
				}
			}
			st.delVZ(namespace, r.ID)
			changed = true
		}
		if !changed {
			return nil, nil
		}
		ev.returned += settleRecalls(st, namespace)
		ev.lent += globalOverdrive(st)
		return ops, nil
	})
	if err == nil {
		ev.apply(a.m)
	}
	return err
}

// Layout returns a v-zone's layout (State empty and no groups if never opened).
func (a *Arbiter) Layout(ctx context.Context, namespace string, vzone uint64) (Layout, error) {
	st, _, err := a.snapshot(ctx)
	if err != nil {
		return Layout{}, err
	}
	ns, err := getNS(st, namespace)
	if err != nil {
		return Layout{}, err
	}
	if err := checkVZoneID(ns, vzone); err != nil {
		return Layout{}, err
	}
	vz := ns.VZones[vzone]
	if vz == nil {
		return Layout{Namespace: namespace, VZone: vzone, State: VZoneEmpty, ZonesPerVZone: ns.Spec.ZonesPerVZone,
			BlockSize: st.minBlockSize(), ZoneCapacity: st.minZoneCapacity()}, nil
	}
	return layoutOf(st, namespace, vz), nil
}

// ListVZones returns the layouts of a namespace's non-empty v-zones, by id.
func (a *Arbiter) ListVZones(ctx context.Context, namespace string) ([]Layout, error) {
	st, _, err := a.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	ns, err := getNS(st, namespace)
	if err != nil {
		return nil, err
	}
	out := make([]Layout, 0, len(ns.VZones))
	for _, id := range sortedKeys(ns.VZones) {
		out = append(out, layoutOf(st, namespace, ns.VZones[id]))
	}
	return out, nil
}

func layoutOf(st *State, ns string, vz *VZone) Layout {
	l := Layout{Namespace: ns, VZone: vz.ID, State: vz.State, Generation: vz.Generation, Incarnation: vz.Incarnation, TL: vz.TL}
	if n := st.Namespaces[ns]; n != nil {
		l.ZonesPerVZone = n.Spec.ZonesPerVZone
	}
	var zones []cluster.PhysZone
	for _, g := range vz.Groups {
		g.Zones = slices.Clone(g.Zones)
		l.Groups = append(l.Groups, g)
		zones = append(zones, g.Zones...)
	}
	l.BlockSize = st.blockSize(zones)
	if len(zones) == 0 {
		l.BlockSize, l.ZoneCapacity = st.minBlockSize(), st.minZoneCapacity()
	}
	for _, z := range zones {
		if d, ok := st.device(z.Node, z.Device); ok && (l.ZoneCapacity == 0 || d.ZoneCapacity < l.ZoneCapacity) {
			l.ZoneCapacity = d.ZoneCapacity
		}
	}
	return l
}

// ---- activity ----------------------------------------------------------

// ReportWrite signals write activity of a namespace (for T_ReadOnly). Clients
// (or nodes) call it at least every T_ReadOnly/2 while they write; OpenVZone
// and NextStripeGroup count as writes too. Activity is kept in the leader's
// memory (a new leader starts every namespace's T_ReadOnly afresh); reporting
// a write to a frozen namespace unfreezes it.
func (a *Arbiter) ReportWrite(ctx context.Context, namespace string) error {
	st, _, err := a.snapshot(ctx)
	if err != nil {
		return err
	}
	ns, err := getNS(st, namespace)
	if err != nil {
		return err
	}
	now := a.cfg.Now()
	a.touch(namespace, now)
	if !ns.Frozen {
		return nil
	}
	return a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
		ns, err := getNS(st, namespace)
		if err != nil {
			return nil, err
		}
		ns.Frozen = false
		ns.LastWrite = now
		return nil, nil
	})
}

func (a *Arbiter) touch(name string, now time.Time) {
	a.actMu.Lock()
	if now.After(a.lastWrite[name]) {
		a.lastWrite[name] = now
	}
	for _, ch := range a.actWait[name] {
		close(ch)
	}
	delete(a.actWait, name)
	a.actMu.Unlock()
}

// onWrite returns a channel closed when the namespace next reports a write
// (or a write attempt) and a func that stops watching.
func (a *Arbiter) onWrite(name string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	a.actMu.Lock()
	if a.actWait == nil {
		a.actWait = map[string][]chan struct{}{}
	}
	a.actWait[name] = append(a.actWait[name], ch)
	a.actMu.Unlock()
	return ch, func() {
		a.actMu.Lock()
		defer a.actMu.Unlock()
		a.actWait[name] = slices.DeleteFunc(a.actWait[name], func(c chan struct{}) bool { return c == ch })
		if len(a.actWait[name]) == 0 {
			delete(a.actWait, name)
		}
	}
}

func (a *Arbiter) lastWriteOf(name string, ns *nsState) time.Time {
	a.actMu.Lock()
	defer a.actMu.Unlock()
	t := a.lastWrite[name]
	if ns.LastWrite.After(t) {
		t = ns.LastWrite
	}
	return t
}

// ---- cluster view ------------------------------------------------------

// Nodes returns the shadow view of every node ever registered, sorted by ID.
func (a *Arbiter) Nodes(ctx context.Context) ([]NodeInfo, error) {
	st, ix, err := a.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	var out []NodeInfo
	for _, id := range sortedKeys(st.Nodes) {
		n := st.Nodes[id]
		info := NodeInfo{Record: n.Record, Available: n.Available, LostAt: n.LostAt, Down: n.Down, DeviceActive: map[uint32]uint32{}}
		for dk, c := range ix.devActive {
			if dk.Node == id {
				info.ActiveZones += c
				info.DeviceActive[dk.Device] += c
			}
		}
		for z := range ix.owner {
			if z.Node == id {
				info.AllocatedZones++
			}
		}
		out = append(out, info)
	}
	return out, nil
}

// GetNode returns the shadow view of one node.
func (a *Arbiter) GetNode(ctx context.Context, id string) (NodeInfo, error) {
	if err := validName("node id", id); err != nil {
		return NodeInfo{}, err
	}
	nodes, err := a.Nodes(ctx)
	if err != nil {
		return NodeInfo{}, err
	}
	for _, n := range nodes {
		if n.Record.ID == id {
			return n, nil
		}
	}
	return NodeInfo{}, &zerr.NotFoundError{Kind: "node", Name: id}
}

// Member is an arbiter replica taking part in the election.
type Member struct {
	Addr   string
	Leader bool
}

// Members lists the arbiters campaigning (the leader first).
func (a *Arbiter) Members(ctx context.Context) ([]Member, error) {
	resp, err := a.cli.Get(ctx, cluster.ElectionPrefix+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, &zerr.UnavailableError{What: "etcd", Reason: err.Error()}
	}
	var out []Member
	for i, kv := range resp.Kvs {
		out = append(out, Member{Addr: string(kv.Value), Leader: i == 0})
	}
	return out, nil
}

// Status reports this replica's role and, on the leader, the cluster totals.
func (a *Arbiter) Status(ctx context.Context) (Status, error) {
	s := Status{Addr: a.cfg.Addr}
	leader, err := a.LeaderAddr(ctx)
	if err != nil {
		return s, err
	}
	s.LeaderAddr = leader
	a.mu.RLock()
	t := a.term
	var st *State
	var ix *index
	if t != nil {
		st, ix = t.state, t.ix
	}
	ready := t != nil && t.ready
	a.mu.RUnlock()
	if !ready {
		return s, nil
	}
	s.Leader = true
	s.Essentials, s.Spares, s.AllocSeq = st.Essentials, st.Spares, st.AllocSeq
	s.Namespaces, s.Nodes = len(st.Namespaces), len(st.Nodes)
	for _, n := range st.Nodes {
		if n.Available {
			s.AvailableNodes++
		}
	}
	s.Loans = slices.Clone(st.Loans)
	s.ActiveZoneSlots = st.Essentials + st.Spares
	s.EssentialsFree, s.SparesFree = st.Essentials, st.Spares
	for _, ns := range st.Namespaces {
		s.EssentialsFree = sub(s.EssentialsFree, ns.Essentials)
		s.SparesFree = sub(s.SparesFree, ns.Spares)
	}
	for _, name := range sortedKeys(st.Namespaces) {
		if a.nsInfo(st, ix, name, st.Namespaces[name]).Degraded {
			s.DegradedNamespaces = append(s.DegradedNamespaces, name)
		}
		for _, vz := range st.Namespaces[name].VZones {
			s.Rebuilding += len(vz.Rebuilds)
		}
	}
	s.LostCopies = len(rebuildJobs(st))
	s.LostParityZones = len(lostParityZones(st))
	for id, n := range st.Nodes {
		if !n.Available {
			continue
		}
		for _, d := range n.Record.Devices {
			s.Devices++
			s.Dies += d.Dies()
			s.CapacityBlocks += uint64(d.NumZones) * d.ZoneCapacity
			var used uint64
			for z := range ix.owner {
				if z.Node == id && z.Device == d.Index {
					used++
				}
			}
			s.FreeBlocks += (uint64(d.NumZones) - min(used, uint64(d.NumZones))) * d.ZoneCapacity
		}
	}
	return s, nil
}
