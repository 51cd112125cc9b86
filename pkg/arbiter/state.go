package arbiter

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"time"

	"github.com/zonefleet/zonefleet/pkg/cluster"
)

// The arbiter's control state is kept in memory by the leader and persisted
// as one etcd record per node, namespace and v-zone plus one key of global
// counters (store.go); grants are separate keys (cluster.GrantKey) written in
// the same transactions, so nodes can watch them.

// VZoneState is the state of a v-zone. A v-zone that was never opened (or was
// reset) has no record and is empty.
type VZoneState string

// V-zone states.
const (
	VZoneEmpty VZoneState = "empty"
	VZoneOpen  VZoneState = "open" // has an open stripe group holding active resources
	VZoneFull  VZoneState = "full" // finished: its zones hold data, no active resources
)

// StripeGroup is a set of physical zones written RAID-0 with StripeSize bytes
// per stripe unit. Only the last stripe group of an open v-zone is open.
type StripeGroup struct {
	Index      uint32             `json:"index"`
	Zones      []cluster.PhysZone `json:"zones"`
	Width      uint32             `json:"width"`
	StripeSize uint32             `json:"stripe_size"` // bytes
	Essentials uint32             `json:"essentials"`  // active zones taken from the namespace's essentials
	Spares     uint32             `json:"spares"`      // active zones taken from spares (overdrive)
	Open       bool               `json:"open"`
	Generation uint64             `json:"generation"` // v-zone generation that created the group
	// Copies of every leg (0 or 1: none). Zones holds Width × Copies zones,
	// copy-major: copy c's leg i is Zones[c*Width+i], and the copies of leg
	// i are on distinct nodes. Essentials and Spares count all of them.
	Copies uint32 `json:"copies,omitempty"`
	// Parity: a raid5 group (cluster.Redundancy.Parity). Zones holds
	// Width data legs, then the parity leg Zones[Width], then the two
	// partial-parity log zones Zones[Width+1] and Zones[Width+2] on the
	// parity leg's node (a group laid out before there were two has only
	// Zones[Width+1]); the data legs and the parity leg are on Width+1
	// distinct nodes (pkg/client has the design). Essentials and Spares
	// count all Width+3 zones.
	Parity bool `json:"parity,omitempty"`
	// Rebuild is set on a group of VZone.Rebuilds (rebuild.go): the one
	// zone being filled with a copy of a lost leg.
	Rebuild *RebuildOf `json:"rebuild,omitempty"`
}

// RebuildOf names the copy a rebuild target replaces: position Pos of
// Groups[Group] of the v-zone, which was on the lost zone Lost.
type RebuildOf struct {
	Group uint32           `json:"group"`
	Pos   uint32           `json:"pos"`
	Lost  cluster.PhysZone `json:"lost"`
	Src   cluster.PhysZone `json:"src"`
}

// copies is the number of copies of every leg of g (at least 1).
func (g *StripeGroup) copies() uint32 { return max(g.Copies, 1) }

// zoneCount is the physical zones g lists: Width × copies, or Width + 3
// for a parity group (Width + 2 in an older layout with one PP log).
func (g *StripeGroup) zoneCount() uint32 {
	if g.Parity {
		if uint32(len(g.Zones)) == g.Width+2 {
			return g.Width + 2 // an older layout: one PP log
		}
		return g.Width + parityExtraZones
	}
	return g.Width * g.copies()
}

// VZone is the persisted record of a non-empty v-zone.
type VZone struct {
	ID         uint64        `json:"id"`
	State      VZoneState    `json:"state"`
	Generation uint64        `json:"generation"`
	Groups     []StripeGroup `json:"groups"`
	Reclaiming bool          `json:"reclaiming,omitempty"`
	// Pending holds the minimum-width stripe groups a reclaim is copying into;
	// they are granted and hold active zones but are not in the layout yet.
	Pending []StripeGroup `json:"pending,omitempty"`
	// Incarnation names this opening of the v-zone (the allocation clock
	// after its first stripe group; 0 when opened by an arbiter older than
	// the field). A reset that names it releases only this opening.
	Incarnation uint64 `json:"incarnation,omitempty"`
	// TL: in threaded logging (tl.go). State is VZoneOpen, no group is open,
	// and every physical zone counts as active on its device.
	TL bool `json:"tl,omitempty"`
	// Like is the v-zone whose dies the stripe groups should share (a
	// copyback-aware layout hint given at open; tl.go).
	Like *uint64 `json:"like,omitempty"`
	// Rebuilds holds the zone a rebuild is copying a lost leg's copy into
	// (rebuild.go): granted and counted active, not in the layout until
	// the copy is complete.
	Rebuilds []StripeGroup `json:"rebuilds,omitempty"`
}

// active tells whether the v-zone holds an active (open) v-zone slot of its
// namespace: an open stripe group, or threaded logging.
func (v *VZone) active() bool { return v.openGroup() != nil || v.TL }

// zoneActive tells whether the zones of group g of v count as active on
// their devices.
func (v *VZone) zoneActive(g *StripeGroup) bool { return g.Open || v.TL }

// allGroups is Groups followed by Pending and Rebuilds.
func (v *VZone) allGroups() []StripeGroup {
	if len(v.Pending) == 0 && len(v.Rebuilds) == 0 {
		return v.Groups
	}
	return append(append(slices.Clone(v.Groups), v.Pending...), v.Rebuilds...)
}

// sealedGroup is the group whose grants are sealed: the open group while a
// reclaim moves it (nil otherwise).
func (v *VZone) sealedGroup() *StripeGroup {
	if !v.Reclaiming {
		return nil
	}
	return v.openGroup()
}

func (v *VZone) openGroup() *StripeGroup {
	if v.State != VZoneOpen || len(v.Groups) == 0 {
		return nil
	}
	g := &v.Groups[len(v.Groups)-1]
	if !g.Open {
		return nil
	}
	return g
}

// zoneCount is the data zones of v's stripe groups (their widths; the
// copies of a mirrored group do not count against ZonesPerVZone).
func (v *VZone) zoneCount() uint32 {
	var n uint32
	for _, g := range v.Groups {
		n += g.Width
	}
	return n
}

// NamespaceSpec is what a namespace is created with.
type NamespaceSpec struct {
	Name string `json:"name"`
	// MARLogical is the maximum number of active (open) v-zones.
	MARLogical uint32 `json:"mar_logical"`
	// ZonesPerVZone is the number of physical zones of every v-zone; a power of two.
	ZonesPerVZone uint32 `json:"zones_per_vzone"`
	// VZones is the number of v-zones (ids 0..VZones-1); 0 means unbounded
	// ids. It is the namespace's capacity quota: quotaZones physical zones
	// are reserved for it at creation (see checkQuota).
	VZones uint64 `json:"vzones,omitempty"`
	// Weight of the namespace in the partition of essentials and spares; 0 means 1.
	Weight uint32 `json:"weight,omitempty"`
	// Redundancy of every stripe group. Parsed where it enters (the API
	// request, a stored record: "none", "mirror:N" or "raid5", left out for
	// none); the zero value is none.
	Redundancy cluster.Redundancy `json:"redundancy,omitzero"`
	// Kind: zoned (the zero value, left out of the record, so a record
	// without a kind reads back as zoned) or fdp. An fdp namespace has no
	// v-zones: MARLogical, ZonesPerVZone, VZones are 0, redundancy none,
	// and it takes no essentials or spares.
	Kind cluster.NamespaceKind `json:"kind,omitzero"`
	// FDPBytes is an fdp namespace's capacity quota (rounded up to whole
	// LBAs of the drive it is placed on), FDPHandles its placement handles
	// (0 means 1).
	FDPBytes   uint64 `json:"fdp_bytes,omitempty"`
	FDPHandles uint32 `json:"fdp_handles,omitempty"`
}

// UnmarshalJSON reads a stored spec: a record without a redundancy (none
// is left out) reads back as the none a creation stores.
func (s *NamespaceSpec) UnmarshalJSON(b []byte) error {
	type plain NamespaceSpec
	if err := json.Unmarshal(b, (*plain)(s)); err != nil {
		return err
	}
	s.Redundancy = s.Redundancy.Normal()
	return nil
}

// Redundancy is the namespace's redundancy (the zero value made none).
func Redundancy(s NamespaceSpec) cluster.Redundancy { return s.Redundancy.Normal() }

// parity tells whether the namespace's stripe groups are raid5 groups.
func (s NamespaceSpec) parity() bool { return Redundancy(s).Parity }

// zonesFor is the physical zones a stripe group of width w takes: w ×
// copies, or w + 3 for parity (the parity leg and the two partial-parity
// logs).
func (s NamespaceSpec) zonesFor(w uint32) uint32 {
	if s.parity() {
		return w + parityExtraZones
	}
	return w * s.copies()
}

// quotaZones is the physical zones a namespace's quota reserves: every
// v-zone full with one stripe group of full width (a mirrored leg takes one
// zone per copy, a parity group its parity leg and partial-parity logs);
// 0 without a quota. A parity namespace whose v-zones got narrower groups
// (more parity zones) reaches this before its v-zone count.
func (s NamespaceSpec) quotaZones() uint64 {
	return s.VZones * uint64(s.zonesFor(s.ZonesPerVZone))
}

// widthFor is the widest stripe group z physical zones can hold (the
// inverse of zonesFor, rounded down; 0 when z cannot hold width 1).
func (s NamespaceSpec) widthFor(z uint32) uint32 {
	if s.parity() {
		return sub(z, parityExtraZones)
	}
	return z / s.copies()
}

// copies is the number of copies of every leg of the namespace's stripe
// groups (1 without redundancy; an unparsable stored value counts as 1,
// validate refuses it at creation).
func (s NamespaceSpec) copies() uint32 { return Redundancy(s).Copies }

// nsState is the persisted record of a namespace.
type nsState struct {
	Spec       NamespaceSpec     `json:"spec"`
	CreatedAt  time.Time         `json:"created_at"`
	Essentials uint32            `json:"essentials"` // provisioned, exclusive
	Spares     uint32            `json:"spares"`     // provisioned
	LastAlloc  uint64            `json:"last_alloc"` // State.AllocSeq after its last allocation (or at creation)
	EWMA       float64           `json:"ewma"`       // EWMA of active v-zones at stripe-group opens
	LastWrite  time.Time         `json:"last_write"` // last persisted write activity
	Frozen     bool              `json:"frozen,omitempty"`
	VZones     map[uint64]*VZone `json:"vzones"`
	// The mount lease (AcquireMount): who writes the namespace's file
	// system, until when (Unix nanoseconds of the arbiter's clock).
	MountHolder  string `json:"mount_holder,omitempty"`
	MountExpires int64  `json:"mount_expires,omitempty"`
	// FDP is an fdp namespace's grant (fdp.go), placed at creation.
	FDP *cluster.FDPExtent `json:"fdp,omitempty"`
}

func (n *nsState) weight() uint64 {
	if n.Spec.Weight == 0 {
		return 1
	}
	return uint64(n.Spec.Weight)
}

// minWidth is N_essential/(N_ns × MAR_logical) for this namespace: its
// essentials over its MAR_logical, rounded down to a power of two, at least 1,
// at most ZonesPerVZone.
//
// A mirrored namespace's v-zones need Copies zones per leg, so its minimum
// width is its essentials over MAR_logical × Copies.
//
// A parity namespace's stripe group of width w takes w+3 zones, so its
// minimum width is the widest whose zones, times MAR_logical, its
// essentials cover.
func (n *nsState) minWidth() uint32 {
	w := uint32(1)
	if n.Spec.parity() {
		if mar := n.Spec.MARLogical; mar > 0 && n.Spec.widthFor(n.Essentials/mar) > 1 {
			w = pow2Floor(n.Spec.widthFor(n.Essentials / mar))
		}
	} else if need := n.needEssentials(); need > 0 && n.Essentials/need > 1 {
		w = pow2Floor(n.Essentials / need)
	}
	return min(w, n.Spec.ZonesPerVZone)
}

// needEssentials is the essentials that give every one of MAR_logical
// v-zones a stripe group of width 1: MAR_logical × Copies (× 4 for parity:
// data, parity and two partial-parity log zones).
func (n *nsState) needEssentials() uint32 { return n.Spec.MARLogical * n.Spec.zonesFor(1) }

// Loan is spares lent by an inactive namespace to an active one (global
// overdrive). A recalled loan is returned at the borrower's next finish/reset.
type Loan struct {
	Lender   string `json:"lender"`
	Borrower string `json:"borrower"`
	Count    uint32 `json:"count"`
	Recalled bool   `json:"recalled,omitempty"`
}

// nodeState is the shadow view of one node.
type nodeState struct {
	Record    cluster.NodeRecord `json:"record"`
	Available bool               `json:"available"`
	LostAt    time.Time          `json:"lost_at,omitempty"`
	// Down: unavailable for longer than Config.NodeDownAfter; kept while it holds zones.
	Down bool `json:"down,omitempty"`
}

// State is the arbiter's persisted control state.
type State struct {
	Nodes      map[string]*nodeState `json:"nodes"`
	Namespaces map[string]*nsState   `json:"namespaces"`
	Loans      []Loan                `json:"loans"`
	// Essentials and Spares are the cluster's N_essential and N_spare over available devices.
	Essentials uint32 `json:"essentials"`
	Spares     uint32 `json:"spares"`
	// AllocSeq counts physical zones allocated to stripe groups (the allocation history clock).
	AllocSeq uint64 `json:"alloc_seq"`

	ch *changes // non-nil on a fork being mutated (copy on write)
}

func newState() *State {
	return &State{Nodes: map[string]*nodeState{}, Namespaces: map[string]*nsState{}}
}

func (st *State) normalize() {
	if st.Nodes == nil {
		st.Nodes = map[string]*nodeState{}
	}
	if st.Namespaces == nil {
		st.Namespaces = map[string]*nsState{}
	}
	for _, ns := range st.Namespaces {
		if ns.VZones == nil {
			ns.VZones = map[uint64]*VZone{}
		}
	}
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// pow2Floor rounds down to a power of two (0 stays 0).
func pow2Floor(x uint32) uint32 {
	if x == 0 {
		return 0
	}
	return 1 << (bits.Len32(x) - 1)
}

func isPow2(x uint32) bool { return x != 0 && x&(x-1) == 0 }

// ---- derived view -------------------------------------------------------

type devKey struct {
	Node   string
	Device uint32
}

type dieKey struct {
	Node   string
	Device uint32
	FCG    uint32
}

type zoneOwner struct {
	Namespace string
	VZone     uint64
	Group     uint32
	Open      bool
}

// nsUsage is the derived resource use of one namespace.
type nsUsage struct {
	ActiveVZones    uint32
	EssentialsInUse uint32
	SparesInUse     uint32
	Lent            uint32 // spares lent to others (recalled included until returned)
	Borrowed        uint32 // spares borrowed (recalled included until returned)
	BorrowedLive    uint32 // borrowed and not recalled
	Recalled        uint32 // lent and recalled, not yet returned
}

// index is the derived view of a State: zone ownership and active counts.
type index struct {
	owner     map[cluster.PhysZone]zoneOwner
	devActive map[devKey]uint32
	dieActive map[dieKey]uint32
	usage     map[string]*nsUsage
	busy      map[string]int // allocated zones per node (nodes without any are absent)
	// dieOwned is the allocated zones of each die group as a bitset (see
	// dieBits): the allocator finds a die's lowest free zone with one
	// lookup instead of one owner lookup per allocated zone (profiled: those
	// lookups were a quarter of the CPU at 1000 nodes with 16k zones
	// allocated). Its slices are shared between indexes: copied on write.
	dieOwned map[dieKey]dieBits
	// ownerAdd/ownerDel overlay owner when it is shared with the committed
	// index (a derived index inside a mutation, see deriveIndex).
	ownerAdd map[cluster.PhysZone]zoneOwner
	ownerDel map[cluster.PhysZone]bool
}

// owned tells whether a zone is allocated.
func (ix *index) owned(z cluster.PhysZone) bool {
	if ix.ownerAdd != nil {
		if _, ok := ix.ownerAdd[z]; ok {
			return true
		}
		if ix.ownerDel[z] {
			return false
		}
	}
	_, ok := ix.owner[z]
	return ok
}

// dieBits is a set of the zones of one die group: bit k is zone fcg +
// k*fcgs. Canonical: no trailing zero words, never empty (an empty set is
// absent from the map), so a derived index equals a rebuilt one.
type dieBits []uint64

// firstFree returns the lowest k < limit not in the set.
func (b dieBits) firstFree(limit uint32) (uint32, bool) {
	for w, x := range b {
		if x != ^uint64(0) {
			k := uint32(w*64 + bits.TrailingZeros64(^x))
			return k, k < limit
		}
	}
	k := uint32(len(b) * 64)
	return k, k < limit
}

// with returns a copy of b with bit k set (on) or cleared.
func (b dieBits) with(k uint32, on bool) dieBits {
	w := int(k / 64)
	n := max(len(b), w+1)
	out := make(dieBits, n)
	copy(out, b)
	if on {
		out[w] |= 1 << (k % 64)
	} else {
		out[w] &^= 1 << (k % 64)
	}
	for len(out) > 0 && out[len(out)-1] == 0 {
		out = out[:len(out)-1]
	}
	return out
}

// markDie records zone z as allocated (or free) in dieOwned.
func (ix *index) markDie(st *State, z cluster.PhysZone, on bool) {
	d, ok := st.device(z.Node, z.Device)
	if !ok || d.FCGs == 0 {
		return // no die groups: the allocator never looks it up
	}
	dk := dieKey{z.Node, z.Device, d.ZoneFCG(z.Zone)}
	b := ix.dieOwned[dk].with(z.Zone/d.FCGs, on)
	if len(b) == 0 {
		delete(ix.dieOwned, dk)
	} else {
		ix.dieOwned[dk] = b
	}
}

// materialize turns an overlaid owner map into a private one.
func (ix *index) materialize() {
	if ix.ownerAdd == nil {
		return
	}
	owner := maps.Clone(ix.owner)
	for z := range ix.ownerDel {
		delete(owner, z)
	}
	for z, o := range ix.ownerAdd {
		owner[z] = o
	}
	ix.owner, ix.ownerAdd, ix.ownerDel = owner, nil, nil
}

func buildIndex(st *State) *index {
	ix := &index{
		owner:     map[cluster.PhysZone]zoneOwner{},
		devActive: map[devKey]uint32{},
		dieActive: map[dieKey]uint32{},
		usage:     map[string]*nsUsage{},
		busy:      map[string]int{},
		dieOwned:  map[dieKey]dieBits{},
	}
	for name, ns := range st.Namespaces {
		u := &nsUsage{}
		ix.usage[name] = u
		for _, vz := range ns.VZones {
			if vz.active() {
				u.ActiveVZones++
			}
			for _, g := range vz.allGroups() {
				if g.Open {
					u.EssentialsInUse += g.Essentials
					u.SparesInUse += g.Spares
				}
				for _, z := range g.Zones {
					ix.owner[z] = zoneOwner{Namespace: name, VZone: vz.ID, Group: g.Index, Open: g.Open}
					ix.busy[z.Node]++
					ix.markDie(st, z, true)
					if vz.zoneActive(&g) {
						ix.devActive[devKey{z.Node, z.Device}]++
						ix.dieActive[st.dieOf(z)]++
					}
				}
			}
		}
	}
	ix.accountLoans(st)
	return ix
}

// accountLoans adds the loans to the usage of their namespaces.
func (ix *index) accountLoans(st *State) {
	for _, l := range st.Loans {
		if u := ix.usage[l.Lender]; u != nil {
			u.Lent += l.Count
			if l.Recalled {
				u.Recalled += l.Count
			}
		}
		if u := ix.usage[l.Borrower]; u != nil {
			u.Borrowed += l.Count
			if !l.Recalled {
				u.BorrowedLive += l.Count
			}
		}
	}
}

func (st *State) device(node string, dev uint32) (cluster.DeviceInfo, bool) {
	n := st.Nodes[node]
	if n == nil {
		return cluster.DeviceInfo{}, false
	}
	return n.Record.Device(dev)
}

func (st *State) dieOf(z cluster.PhysZone) dieKey {
	d, _ := st.device(z.Node, z.Device)
	return dieKey{z.Node, z.Device, d.ZoneFCG(z.Zone)}
}

// ---- provisioning (eZNS §4.4.1) ------------------------------------------

// clusterResources returns N_essential and N_spare over available devices: a
// device's essentials are the active zones that saturate its write bandwidth,
// one per flash chip group (min(FCGs, MAR)); the rest of its MAR are spares.
func clusterResources(st *State) (ess, spare uint32) {
	for _, n := range st.Nodes {
		if !n.Available {
			continue
		}
		for _, d := range n.Record.Devices {
			e := min(d.FCGs, d.MAR)
			ess += e
			spare += d.MAR - e
		}
	}
	return ess, spare
}

// split divides total by weight with the largest-remainder method (ties by name).
func split(total uint32, names []string, weights map[string]uint64) map[string]uint32 {
	out := map[string]uint32{}
	var sum uint64
	for _, n := range names {
		sum += weights[n]
	}
	if sum == 0 {
		return out
	}
	type rem struct {
		name string
		r    uint64
	}
	var rems []rem
	var given uint32
	for _, n := range names {
		q := uint64(total) * weights[n]
		out[n] = uint32(q / sum)
		given += out[n]
		rems = append(rems, rem{n, q % sum})
	}
	slices.SortStableFunc(rems, func(a, b rem) int { return cmp.Compare(b.r, a.r) })
	for i := 0; given < total && i < len(rems); i++ {
		out[rems[i].name]++
		given++
	}
	return out
}

// shortfall describes a namespace whose essentials cannot cover MAR_logical v-zones.
type shortfall struct {
	Namespace string
	Need, Got uint32
}

// sharesConsistent tells whether the namespaces' provisioned essentials and
// spares are what reprovision would give them (false after a crash between
// the batches of a change too large for one transaction).
func sharesConsistent(st *State) bool {
	e, sp := clusterResources(st)
	if e != st.Essentials || sp != st.Spares {
		return false
	}
	names := zonedNames(st)
	weights := map[string]uint64{}
	for _, n := range names {
		weights[n] = st.Namespaces[n].weight()
	}
	ess, spa := split(e, names, weights), split(sp, names, weights)
	for _, n := range names {
		if ns := st.Namespaces[n]; ns.Essentials != ess[n] || ns.Spares != spa[n] {
			return false
		}
	}
	return true
}

// reprovision recomputes N_essential/N_spare and every namespace's share.
// Open stripe groups are left as they are; loans are cancelled (global
// overdrive lends again from the new shares). It returns the namespaces whose
// share of essentials is below their MAR_logical (minimum width 1 each).
func reprovision(st *State) []shortfall {
	st.Essentials, st.Spares = clusterResources(st)
	names := zonedNames(st)
	weights := map[string]uint64{}
	for _, n := range names {
		weights[n] = st.Namespaces[n].weight()
	}
	ess := split(st.Essentials, names, weights)
	spa := split(st.Spares, names, weights)
	var short []shortfall
	for _, n := range names {
		ns := st.Namespaces[n]
		ns.Essentials, ns.Spares = ess[n], spa[n]
		if need := ns.needEssentials(); ns.Essentials < need {
			short = append(short, shortfall{n, need, ns.Essentials})
		}
	}
	st.Loans = nil
	return short
}

// ---- serialized die-aware allocation (eZNS §4.2/4.3) ---------------------

type candidate struct {
	die    dieKey
	zone   uint32 // lowest free zone of the die group
	order  int    // position in the cluster's serial order
	node   int    // ordinal of its node in the cluster's serial order
	dev    int    // ordinal of its device in the cluster's serial order
	mar    uint32 // its device's MAR
	devAct uint32 // active zones of its device
	dieAct uint32 // active zones of its die group
}

// dieSlot is the static part of a die group: what candidates needs of the
// node records, flattened once per Nodes map (slotsOf).
type dieSlot struct {
	node     string
	nodeOrd  int
	dev      uint32
	devOrd   int
	fcg      uint32
	fcgs     uint32
	numZones uint32
	mar      uint32
	order    int
	avail    bool
}

// dieSlots are every die group of the cluster in serial order.
type dieSlots struct {
	slots   []dieSlot
	nodeOrd map[string]int
	nodes   int
	devs    int
}

// slotsOf flattens st's node records (sorted node ids, devices by index).
func slotsOf(st *State, ids []string) *dieSlots {
	if ids == nil {
		ids = sortedKeys(st.Nodes)
	}
	ds := &dieSlots{nodeOrd: make(map[string]int, len(ids)), nodes: len(ids)}
	byIndex := func(a, b cluster.DeviceInfo) int { return cmp.Compare(a.Index, b.Index) }
	order := 0
	for ni, nodeID := range ids {
		ds.nodeOrd[nodeID] = ni
		n := st.Nodes[nodeID]
		devs := n.Record.Devices
		if !slices.IsSortedFunc(devs, byIndex) {
			devs = slices.Clone(devs)
			slices.SortFunc(devs, byIndex)
		}
		for _, d := range devs {
			if d.FCGs == 0 {
				continue
			}
			for g := uint32(0); g < d.FCGs; g++ {
				order++
				ds.slots = append(ds.slots, dieSlot{node: nodeID, nodeOrd: ni, dev: d.Index, devOrd: ds.devs, fcg: g, fcgs: d.FCGs,
					numZones: d.NumZones, mar: d.MAR, order: order, avail: n.Available})
			}
			ds.devs++
		}
	}
	return ds
}

// candidates returns, for every die group (node, device, FCG) of an available
// node whose device is below MAR and which has a free zone, that free zone.
func candidates(st *State, ix *index) []candidate {
	return candidatesOf(slotsOf(st, nil), ix, nil)
}

// candidatesOf is candidates over flattened slots, appended to buf. Nodes
// without any allocated zone (most of a large cluster) cost no lookup.
func candidatesOf(ds *dieSlots, ix *index, buf []candidate) []candidate {
	out := buf[:0]
	busy := make([]bool, ds.nodes)
	for id := range ix.busy {
		if o, ok := ds.nodeOrd[id]; ok {
			busy[o] = true
		}
	}
	for i := 0; i < len(ds.slots); {
		// one device: its slots are consecutive
		s0 := &ds.slots[i]
		j := i
		for j < len(ds.slots) && ds.slots[j].devOrd == s0.devOrd {
			j++
		}
		b := busy[s0.nodeOrd]
		var devAct uint32
		if b {
			devAct = ix.devActive[devKey{s0.node, s0.dev}]
		}
		if s0.avail && devAct < s0.mar {
			for k := i; k < j; k++ {
				sl := &ds.slots[k]
				if sl.fcg >= sl.numZones {
					continue // no zone in this chip group
				}
				zone := sl.fcg
				if b {
					k, ok := ix.dieOwned[dieKey{sl.node, sl.dev, sl.fcg}].firstFree((sl.numZones - sl.fcg + sl.fcgs - 1) / sl.fcgs)
					if !ok {
						continue
					}
					zone = sl.fcg + k*sl.fcgs
				}
				dk := dieKey{sl.node, sl.dev, sl.fcg}
				var dieAct uint32
				if b {
					dieAct = ix.dieActive[dk]
				}
				out = append(out, candidate{die: dk, zone: zone, order: sl.order, node: sl.nodeOrd, dev: sl.devOrd,
					mar: sl.mar, devAct: devAct, dieAct: dieAct})
			}
		}
		i = j
	}
	return out
}

// pickZones chooses width zones on distinct die groups: least populated die
// groups first (so dies collide only once every die is populated), then the
// node with fewest zones already in this group (spread across nodes), then the
// least active device, then a serial order rotated by the allocation clock.
// It respects each device's MAR.
func pickZones(st *State, ix *index, cands []candidate, width uint32) []cluster.PhysZone {
	return pickCopies(st, ix, cands, width, 1)
}

// pickCopies is pickZones for width × copies zones, copy-major (see
// StripeGroup.Copies): the zone for leg i of copy c is never on a node that
// holds leg i of an earlier copy, so losing one node loses at most one copy
// of every leg. It returns fewer zones when the candidates do not allow it.
func pickCopies(st *State, ix *index, cands []candidate, width, copies uint32) []cluster.PhysZone {
	return pickWith(st, ix, cands, width*copies, func(out []cluster.PhysZone, c *candidate) bool {
		if copies <= 1 {
			return false
		}
		k := uint32(len(out))
		for j := k % width; j < k; j += width { // a node holding this leg already
			if out[j].Node == c.die.Node {
				return true
			}
		}
		return false
	})
}

// pickParity is pickZones for a parity group (StripeGroup.Parity): width
// data legs and the parity leg on width+1 distinct nodes, then the two
// partial-parity log zones on the parity leg's node (which holds no data
// unit of any row, so losing one node never loses a unit and the record
// protecting it). It returns fewer zones when the candidates do not allow it.
func pickParity(st *State, ix *index, cands []candidate, width uint32) []cluster.PhysZone {
	return pickWith(st, ix, cands, width+parityExtraZones, func(out []cluster.PhysZone, c *candidate) bool {
		if uint32(len(out)) > width {
			return c.die.Node != out[width].Node
		}
		for _, z := range out {
			if z.Node == c.die.Node {
				return true
			}
		}
		return false
	})
}

// pickWith chooses n zones on distinct die groups (pickZones's order),
// skipping the candidates reject refuses given the zones chosen so far.
func pickWith(st *State, ix *index, cands []candidate, n uint32, reject func(out []cluster.PhysZone, c *candidate) bool) []cluster.PhysZone {
	total := len(cands)
	if total == 0 {
		return nil
	}
	rot := int(st.AllocSeq % uint64(max(total, 1)))
	var nodes, devs int
	for i := range cands {
		nodes, devs = max(nodes, cands[i].node+1), max(devs, cands[i].dev+1)
	}
	perNode := make([]int, nodes)
	devUse := make([]uint32, devs)
	used := make([]bool, total)
	var out []cluster.PhysZone
	for uint32(len(out)) < n {
		best := -1
		better := func(i, j int) bool { // is cands[i] better than cands[j]
			a, b := &cands[i], &cands[j]
			if a.dieAct != b.dieAct {
				return a.dieAct < b.dieAct
			}
			if na, nb := perNode[a.node], perNode[b.node]; na != nb {
				return na < nb
			}
			if va, vb := a.devAct+devUse[a.dev], b.devAct+devUse[b.dev]; va != vb {
				return va < vb
			}
			return (i-rot+total)%total < (j-rot+total)%total
		}
		for i := range cands {
			if used[i] {
				continue
			}
			c := &cands[i]
			if c.devAct+devUse[c.dev] >= c.mar || reject(out, c) {
				continue
			}
			if best < 0 || better(i, best) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		used[best] = true
		c := cands[best]
		perNode[c.node]++
		devUse[c.dev]++
		out = append(out, cluster.PhysZone{Node: c.die.Node, Device: c.die.Device, Zone: c.zone})
	}
	return out
}

// distinctUsableDies is how many die groups could go into one stripe group
// now (bounded by each device's remaining MAR).
func distinctUsableDies(st *State, ix *index, cands []candidate) uint32 {
	// candidates lists the die groups device by device: count each run.
	var n uint32
	for i := 0; i < len(cands); {
		j := i
		for j < len(cands) && cands[j].dev == cands[i].dev {
			j++
		}
		n += min(uint32(j-i), sub(cands[i].mar, cands[i].devAct))
		i = j
	}
	return n
}

// stripeSize is 32 KiB (base) at the minimum width, halved each time the
// width doubles, never below one block (eZNS §4.4.2).
func stripeSize(base, block, width, minWidth uint32) uint32 {
	s := base
	for w := max(minWidth, 1); w < width && s > block; w *= 2 {
		s /= 2
	}
	return max(s, block)
}

func (st *State) blockSize(zones []cluster.PhysZone) uint32 {
	var b uint32
	for _, z := range zones {
		if d, ok := st.device(z.Node, z.Device); ok && d.BlockSize > b {
			b = d.BlockSize
		}
	}
	if b == 0 {
		b = 4096
	}
	return b
}

func vzoneName(ns string, id uint64) string { return fmt.Sprintf("%s/%d", ns, id) }

// minBlockSize and minZoneCapacity describe the available devices (for
// v-zones that have no zone yet).
func (st *State) minBlockSize() uint32 {
	var b uint32
	for _, n := range st.Nodes {
		for _, d := range n.Record.Devices {
			if n.Available && d.BlockSize > b {
				b = d.BlockSize
			}
		}
	}
	if b == 0 {
		b = 4096
	}
	return b
}

func (st *State) minZoneCapacity() uint64 {
	var c uint64
	for _, n := range st.Nodes {
		for _, d := range n.Record.Devices {
			if n.Available && (c == 0 || d.ZoneCapacity < c) {
				c = d.ZoneCapacity
			}
		}
	}
	return c
}

// parityExtraZones is the zones a parity stripe group takes besides its
// data legs: the parity leg and the partial-parity logs.
const parityExtraZones = 1 + cluster.ParityPPLogs
