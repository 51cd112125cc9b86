package arbiter

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// # FDP namespaces
//
// An fdp namespace is a range of LBAs of one FDP drive and a set of that
// drive's placement handles, both exclusive to it, placed at creation
// (placeFDP) and kept in its record (nsState.FDP) and in its
// cluster.NamespaceRecord, which the node serving the drive watches to
// admit the tenant's FDP I/O to that range and those handles only (the
// quota and the isolation: nothing outside the grant is reachable with the
// tenant's token). Exclusive handles keep one tenant's data out of another
// tenant's reclaim units, except where the drive's GC mixes initially
// isolated handles' survivors; a tenant that needs no mixing at all asks a
// drive whose handles are persistently isolated. An fdp namespace takes no
// essentials or spares and has no v-zones.

// maxFDPHandles bounds the placement handles one namespace asks for.
const maxFDPHandles = 256

// zonedNames is the zoned namespaces, sorted: the ones essentials and
// spares are provisioned to.
func zonedNames(st *State) []string {
	var out []string
	for _, n := range sortedKeys(st.Namespaces) {
		if st.Namespaces[n].Spec.Kind == cluster.KindZoned {
			out = append(out, n)
		}
	}
	return out
}

// fdpHandles is the placement handles the spec asks for (0 means 1).
func (s NamespaceSpec) fdpHandles() uint32 { return max(s.FDPHandles, 1) }

// validateKind checks the fields that depend on the kind.
func (s NamespaceSpec) validateKind() error {
	switch s.Kind {
	case cluster.KindZoned:
		if s.FDPBytes != 0 || s.FDPHandles != 0 {
			return &zerr.InvalidArgumentError{Field: "fdp_capacity_bytes", Reason: "only an fdp namespace has an FDP capacity or handles"}
		}
		return nil
	case cluster.KindFDP:
	default:
		return &zerr.InvalidArgumentError{Field: "kind", Reason: s.Kind.String() + " is not a namespace kind (zoned or fdp)"}
	}
	switch {
	case s.MARLogical != 0 || s.ZonesPerVZone != 0 || s.VZones != 0:
		return &zerr.InvalidArgumentError{Field: "kind", Reason: "an fdp namespace has no v-zones: max_active_vzones, zones_per_vzone and vzones must be 0"}
	case !Redundancy(s).IsZero():
		return &zerr.InvalidArgumentError{Field: "redundancy", Reason: "an fdp namespace has no redundancy"}
	case s.FDPBytes == 0:
		return &zerr.InvalidArgumentError{Field: "fdp_capacity_bytes", Reason: "an fdp namespace needs a capacity"}
	case s.FDPHandles > maxFDPHandles:
		return &zerr.InvalidArgumentError{Field: "fdp_handles", Reason: fmt.Sprintf("%d: at most %d", s.FDPHandles, maxFDPHandles)}
	}
	return nil
}

// zonedNS is getNS for the v-zone calls: an fdp namespace has no v-zones.
func zonedNS(st *State, name string) (*nsState, error) {
	ns, err := getNS(st, name)
	if err == nil && ns.Spec.Kind != cluster.KindZoned {
		err = &zerr.InvalidArgumentError{Field: "namespace", Reason: fmt.Sprintf("%s is an %s namespace: it has no v-zones", name, ns.Spec.Kind)}
	}
	return ns, err
}

// fdpDrive is one FDP drive of an available node and what the fdp
// namespaces hold of it.
type fdpDrive struct {
	node    string
	info    cluster.FDPDeviceInfo
	extents []cluster.FDPExtent // sorted by FirstLBA
	handles map[uint32]bool     // taken
}

func fdpDrives(st *State, except string) []*fdpDrive {
	byKey := map[[2]string]*fdpDrive{}
	var out []*fdpDrive
	for _, id := range sortedKeys(st.Nodes) {
		n := st.Nodes[id]
		if !n.Available {
			continue
		}
		for _, d := range n.Record.FDPDevices {
			dr := &fdpDrive{node: id, info: d, handles: map[uint32]bool{}}
			byKey[[2]string{id, fmt.Sprint(d.Index)}] = dr
			out = append(out, dr)
		}
	}
	for name, ns := range st.Namespaces {
		if ns.FDP == nil || name == except {
			continue
		}
		dr := byKey[[2]string{ns.FDP.Node, fmt.Sprint(ns.FDP.Device)}]
		if dr == nil {
			continue
		}
		dr.extents = append(dr.extents, *ns.FDP)
		for _, h := range ns.FDP.Handles {
			dr.handles[h] = true
		}
	}
	for _, dr := range out {
		slices.SortFunc(dr.extents, func(a, b cluster.FDPExtent) int { return cmp.Compare(a.FirstLBA, b.FirstLBA) })
	}
	return out
}

// gap is the first free LBA range of at least n LBAs (ok false when none),
// and the drive's free LBAs and largest free range.
func (dr *fdpDrive) gap(n uint64) (first uint64, ok bool, free, largest uint64) {
	var at uint64
	consider := func(end uint64) {
		if end <= at {
			return
		}
		free += end - at
		largest = max(largest, end-at)
		if !ok && end-at >= n {
			first, ok = at, true
		}
	}
	for _, e := range dr.extents {
		consider(e.FirstLBA)
		at = max(at, e.FirstLBA+e.LBAs)
	}
	consider(dr.info.LBAs)
	return first, ok, free, largest
}

// freeHandles is the lowest n handles of the drive no namespace holds (nil
// when fewer are free).
func (dr *fdpDrive) freeHandles(n uint32) []uint32 {
	var out []uint32
	for h := uint32(0); h < uint32(len(dr.info.Handles)) && uint32(len(out)) < n; h++ {
		if !dr.handles[h] {
			out = append(out, h)
		}
	}
	if uint32(len(out)) < n {
		return nil
	}
	return out
}

// placeFDP chooses an fdp namespace's grant: of the available nodes' FDP
// drives with spec's capacity in one free range and spec's handles free,
// the one with the most free LBAs (tenants spread over the drives), its
// lowest free range that fits. *zerr.NoResourcesError when none has both.
func placeFDP(st *State, spec NamespaceSpec) (*cluster.FDPExtent, error) {
	drives := fdpDrives(st, spec.Name)
	if len(drives) == 0 {
		return nil, &zerr.NoResourcesError{Resource: "FDP drives on available nodes (namespace " + spec.Name + ")", Requested: spec.FDPBytes}
	}
	var best *cluster.FDPExtent
	var bestFree, largestBytes uint64
	handlesShort := true
	for _, dr := range drives {
		bs := uint64(max(dr.info.BlockSize, 1))
		lbas := (spec.FDPBytes + bs - 1) / bs
		hs := dr.freeHandles(spec.fdpHandles())
		first, ok, free, largest := dr.gap(lbas)
		if hs != nil {
			handlesShort = false
			largestBytes = max(largestBytes, largest*bs)
		}
		if !ok || hs == nil || (best != nil && free <= bestFree) {
			continue
		}
		best = &cluster.FDPExtent{Node: dr.node, Device: dr.info.Index, FirstLBA: first, LBAs: lbas, Handles: hs}
		bestFree = free
	}
	if best != nil {
		return best, nil
	}
	if handlesShort {
		return nil, &zerr.NoResourcesError{Resource: fmt.Sprintf("free FDP placement handles on one drive (namespace %s)", spec.Name), Requested: uint64(spec.fdpHandles())}
	}
	return nil, &zerr.NoResourcesError{Resource: fmt.Sprintf("FDP capacity in bytes on one drive with %d free handles (namespace %s)", spec.fdpHandles(), spec.Name),
		Requested: spec.FDPBytes, Available: largestBytes}
}

// fdpGrantsByNode is the fdp namespaces granted on each node's drives,
// sorted.
func fdpGrantsByNode(st *State) map[string][]string {
	out := map[string][]string{}
	for _, name := range sortedKeys(st.Namespaces) {
		if e := st.Namespaces[name].FDP; e != nil {
			out[e.Node] = append(out[e.Node], name)
		}
	}
	return out
}

// fdpGrantedBytes is the FDP capacity granted to fdp namespaces.
func fdpGrantedBytes(st *State) uint64 {
	var n uint64
	for _, ns := range st.Namespaces {
		if e := ns.FDP; e != nil {
			bs := uint64(1)
			if node := st.Nodes[e.Node]; node != nil {
				if d, ok := node.Record.FDPDevice(e.Device); ok {
					bs = uint64(max(d.BlockSize, 1))
				}
			}
			n += e.LBAs * bs
		}
	}
	return n
}
