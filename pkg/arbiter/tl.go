package arbiter

import (
	"context"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Threaded logging (ZNS+ §3.2.2) of a v-zone.
//
// TL_open reopens a v-zone that holds data so the file system can write the
// invalid blocks of a victim segment in place (sparse sequential overwrite)
// while the drives plug the valid ones. On the drives every physical zone of
// the v-zone becomes active again (a LogFBG each), so the arbiter must know:
// TLOpenVZone moves the v-zone's record to threaded logging (State open, TL
// set, no group open) in one fenced transaction, counting it as an active
// v-zone of its namespace (MAR_logical: *zerr.TooManyOpenError) and each of
// its physical zones as active on its device (device MAR:
// *zerr.TooManyActiveError). The client TL_opens the physical zones only
// after the arbiter agreed. FinishVZone ends it (State full, TL cleared); a
// reset releases it like any v-zone. The record's "tl" field is omitted when
// false, so the persisted format is unchanged for every other v-zone, and an
// arbiter without this code reads a TL v-zone as an open one without an open
// group (it counts no resources for it and refuses a next stripe group,
// which is safe).
//
// No stripe group is added in threaded logging: the blocks a TL write may
// cover are those of the groups already allocated.

// TLOpenVZone moves v-zone vzone of namespace to threaded logging. A non-zero
// generation must be the v-zone's (*zerr.StaleLayoutError otherwise: the
// caller's valid bitmap was computed from another layout). Calling it on a
// v-zone already in threaded logging returns its layout unchanged.
func (a *Arbiter) TLOpenVZone(ctx context.Context, namespace string, vzone, generation uint64) (Layout, error) {
	var ev events
	var out Layout
	err := a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
		ev = events{}
		ns, err := zonedNS(st, namespace)
		if err != nil {
			return nil, err
		}
		if err := checkVZoneID(ns, vzone); err != nil {
			return nil, err
		}
		vz := ns.VZones[vzone]
		switch {
		case vz == nil:
			return nil, &zerr.ZoneStateError{Zone: vzone, State: string(VZoneEmpty), Op: "TL_open"}
		case vz.TL:
			out = layoutOf(st, namespace, vz)
			return nil, nil
		case vz.Reclaiming:
			return nil, &zerr.ZoneStateError{Zone: vzone, State: "reclaiming", Op: "TL_open"}
		case len(vz.Groups) == 0:
			return nil, &zerr.ZoneStateError{Zone: vzone, State: string(vz.State) + " (no stripe group)", Op: "TL_open"}
		case generation != 0 && generation != vz.Generation:
			return nil, &zerr.StaleLayoutError{VZone: vzoneName(namespace, vzone), Generation: generation, Current: vz.Generation}
		}
		if !vz.active() {
			if u := ix.usage[namespace]; u != nil && u.ActiveVZones >= ns.Spec.MARLogical {
				return nil, &zerr.TooManyOpenError{Limit: ns.Spec.MARLogical}
			}
		}
		// Every zone not active yet becomes active on its device.
		add := map[devKey]uint32{}
		for _, g := range vz.Groups {
			if g.Open {
				continue
			}
			for _, z := range g.Zones {
				add[devKey{z.Node, z.Device}]++
			}
		}
		for dk, n := range add {
			d, ok := st.device(dk.Node, dk.Device)
			if !ok {
				return nil, &zerr.UnavailableError{What: fmt.Sprintf("device %s/%d", dk.Node, dk.Device), Reason: "not registered"}
			}
			if ix.devActive[dk]+n > d.MAR {
				return nil, &zerr.TooManyActiveError{Limit: d.MAR}
			}
		}
		vz = st.mutVZ(namespace, vzone)
		if g := vz.openGroup(); g != nil {
			g.Open = false // its essentials and spares return; the zones stay active through TL
			ev.returned += settleRecalls(st, namespace)
			ev.lent += globalOverdrive(st)
		}
		vz.State = VZoneOpen
		vz.TL = true
		vz.Generation++
		out = layoutOf(st, namespace, vz)
		return nil, nil
	})
	if err != nil {
		return Layout{}, err
	}
	ev.apply(a.m)
	return out, nil
}

// ResetVZoneIncarnation resets v-zone vzone only if it is still the opening
// named by incarnation (see VZone.Incarnation): a process giving back a
// v-zone it opened (a spare) can never reset a later opening of the same id
// by someone else. *zerr.StaleLayoutError when it is another opening
// (nothing changes); an empty v-zone is a no-op.
func (a *Arbiter) ResetVZoneIncarnation(ctx context.Context, namespace string, vzone, incarnation uint64) error {
	return a.resetVZone(ctx, namespace, vzone, incarnation)
}

// TLOpenVZone implements v1.ArbiterServer.
func (s *Server) TLOpenVZone(ctx context.Context, r *v1.TLOpenVZoneRequest) (*v1.VZone, error) {
	l, err := s.a.TLOpenVZone(ctx, r.GetNamespace(), r.GetId(), r.GetGeneration())
	if err != nil {
		return nil, rpcerr.ToError(err)
	}
	return s.vzone(ctx, l, nil)
}

// ---- copyback-aware layout (ZNS+ §3.3.1) ----------------------------------
//
// Copyback moves a chunk inside one flash chip without the channel, so a
// compaction gains from it only when the destination of a block sits on the
// chip of its source. With single-die zones striped across nodes, two
// v-zones placed independently share few dies, and the file system's
// copyback-aware allocation finds few same-chip destinations. OpenVZone may
// therefore name a v-zone to be "like" (the victim whose valid blocks the new
// v-zone will receive): each stripe group of the new v-zone takes, leg by
// leg, a free zone on the die group (node, device, FCG) of the same leg of
// the reference's group of the same index, then on the dies of the
// reference's other groups, as far as the device MAR and the free zones
// allow, and the usual placement fills the rest. The hint is kept
// in the record (VZone.Like), so the stripe groups NextStripeGroup adds
// follow it too; a reference reset meanwhile simply stops guiding.

// OpenNewVZoneLike is OpenNewVZone with the layout hint: the new v-zone's
// stripe groups go to the dies of v-zone like's groups where they can.
func (a *Arbiter) OpenNewVZoneLike(ctx context.Context, namespace string, like uint64) (Layout, error) {
	return a.allocOpIDLike(ctx, namespace, 0, true, true, &like)
}

// likeRef is the zones of the reference group for the next group of vz, in
// leg order, then those of the reference's other groups (nil without a hint
// or a reference).
func likeRef(st *State, name string, vz *VZone) []cluster.PhysZone {
	if vz.Like == nil || *vz.Like == vz.ID {
		return nil
	}
	ns := st.Namespaces[name]
	if ns == nil {
		return nil
	}
	ref := ns.VZones[*vz.Like]
	if ref == nil || len(ref.Groups) == 0 {
		return nil
	}
	k := min(len(vz.Groups), len(ref.Groups)-1)
	// The legs of group k first (same offsets, same dies), then the dies of
	// the other groups (a wider new group still lands on the reference's
	// dies, where the file system's copyback-aware allocation can use them).
	out := slices.Clone(ref.Groups[k].Zones)
	for i, g := range ref.Groups {
		if i != k {
			out = append(out, g.Zones...)
		}
	}
	return out
}

// pickLike chooses width zones: first, leg by leg, the candidate on the die
// group of each reference zone (when its device is below MAR), then the
// usual choice (pickZones) among the other candidates.
func pickLike(st *State, ix *index, cands []candidate, width uint32, ref []cluster.PhysZone) []cluster.PhysZone {
	byDie := make(map[dieKey]int, len(cands))
	for i := range cands {
		byDie[cands[i].die] = i
	}
	devUse := map[int]uint32{}
	used := map[int]bool{}
	var out []cluster.PhysZone
	for _, rz := range ref {
		if uint32(len(out)) == width {
			break
		}
		i, ok := byDie[st.dieOf(rz)]
		if !ok || used[i] {
			continue
		}
		c := cands[i]
		if c.devAct+devUse[c.dev] >= c.mar {
			continue
		}
		used[i] = true
		devUse[c.dev]++
		out = append(out, cluster.PhysZone{Node: c.die.Node, Device: c.die.Device, Zone: c.zone})
	}
	if uint32(len(out)) == width {
		return out
	}
	rest := make([]candidate, 0, len(cands)-len(used))
	for i, c := range cands {
		if !used[i] {
			c.devAct += devUse[c.dev]
			rest = append(rest, c)
		}
	}
	return append(out, pickZones(st, ix, rest, width-uint32(len(out)))...)
}
