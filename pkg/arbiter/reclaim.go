package arbiter

import (
	"context"
	"errors"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// CopyRange is a run of blocks of a source zone that zone_compaction appends
// to a destination zone.
type CopyRange struct {
	Src      cluster.PhysZone
	SrcBlock uint64 // first block, relative to the source zone's start
	Blocks   uint64
}

// Compactor is the drives' zone_compaction as the arbiter needs it for
// reclaim (eZNS §4.4.4). The node service implements it over gRPC.
type Compactor interface {
	// WrittenBlocks returns each zone's write pointer, in blocks from the zone start.
	WrittenBlocks(ctx context.Context, namespace string, zones []cluster.PhysZone) ([]uint64, error)
	// Compact copies ranges, in order, to the zone dst (appended at its write
	// pointer) with zone_compaction; the source node pushes the data to dst's
	// node when they differ. Every zone involved is granted to namespace. It
	// returns when the copy is done.
	Compact(ctx context.Context, namespace string, dst cluster.PhysZone, ranges []CopyRange) error
}

// ReclaimResult describes one reclaimed v-zone.
type ReclaimResult struct {
	Namespace     string
	VZone         uint64
	FromWidth     uint32
	ToWidth       uint32
	MovedBlocks   uint64
	SparesFreed   uint32
	TargetGroups  int
	ReleasedZones []cluster.PhysZone
}

// CheckReclaim freezes every namespace without writes for T_ReadOnly (by
// Config.Now) and reclaims the spares of its overdriven open stripe groups:
// each is compacted into minimum-width groups through the Compactor and its
// zones and spares return to the pool. The leader runs it every
// ReclaimInterval; tests call it directly.
func (a *Arbiter) CheckReclaim(ctx context.Context) ([]ReclaimResult, error) {
	st, _, err := a.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	now := a.cfg.Now()
	var freeze []string
	for _, name := range sortedKeys(st.Namespaces) {
		ns := st.Namespaces[name]
		if !ns.Frozen && ns.Spec.Kind == cluster.KindZoned && now.Sub(a.lastWriteOf(name, ns)) >= a.cfg.TReadOnly {
			freeze = append(freeze, name)
		}
	}
	if len(freeze) > 0 {
		err := a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
			for _, name := range freeze {
				if ns := st.Namespaces[name]; ns != nil && now.Sub(a.lastWriteOf(name, ns)) >= a.cfg.TReadOnly {
					ns.Frozen = true
					a.log.Info("namespace frozen", "namespace", name)
				}
			}
			return nil, nil
		})
		if err != nil {
			return nil, err
		}
	}
	st, _, err = a.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	var out []ReclaimResult
	var errs []error
	for _, name := range sortedKeys(st.Namespaces) {
		ns := st.Namespaces[name]
		if !ns.Frozen {
			continue
		}
		for _, id := range sortedKeys(ns.VZones) {
			vz := ns.VZones[id]
			// A mirrored group is not narrowed: its copies would have to be
			// moved together (a later design); it keeps its zones until the
			// v-zone is finished or reset.
			if g := vz.openGroup(); g == nil || vz.Reclaiming || g.Width <= ns.minWidth() || g.copies() > 1 || g.Parity {
				continue
			}
			r, err := a.reclaimVZone(ctx, name, id)
			if err != nil {
				errs = append(errs, fmt.Errorf("reclaim %s: %w", vzoneName(name, id), err))
				continue
			}
			out = append(out, r)
		}
	}
	return out, errors.Join(errs...)
}

// reclaimVZone shrinks the open stripe group of a frozen namespace's v-zone
// to minimum width, in phases so that the serialized queue is held only for
// state transitions, never across node I/O:
//
//  1. (no lock) read the source zones' write pointers from the nodes;
//  2. (one mutation) check the source group's generation, mark the v-zone
//     reclaiming, seal the source zones' grants (the nodes refuse the
//     namespace's writes to them from then on; reads go on) and allocate
//     and grant the target groups (pending, not in the layout: clients keep
//     reading the source);
//  3. (no lock) zone_compaction copies the data into the targets, node to
//     node; other tenants' and this namespace's other v-zones' operations
//     run meanwhile (this v-zone's NextStripeGroup/Finish/Reset are refused
//     while it is reclaiming);
//  4. (one mutation) commit if the v-zone is still reclaiming the same
//     source generation into the same pending groups and the source write
//     pointers did not move since phase 1 (read again at the revision of
//     phase 2: every node applied the seal and waited for the writes it had
//     admitted before): swap the layout and release the source zones and
//     their grants; otherwise, or if the copy failed, roll the targets back
//     and unseal. A leader lost in between leaves the flag for the next
//     leader, whose abortReclaims rolls it back.
func (a *Arbiter) reclaimVZone(ctx context.Context, name string, id uint64) (ReclaimResult, error) {
	st, _, err := a.snapshot(ctx)
	if err != nil {
		return ReclaimResult{}, err
	}
	ns := st.Namespaces[name]
	if ns == nil || !ns.Frozen || ns.VZones[id] == nil || ns.VZones[id].openGroup() == nil || ns.VZones[id].Reclaiming {
		return ReclaimResult{}, &zerr.ZoneStateError{Zone: id, State: "not frozen and open", Op: "reclaim"}
	}
	src := *ns.VZones[id].openGroup()
	src.Zones = slices.Clone(src.Zones)
	m := ns.minWidth()
	res := ReclaimResult{Namespace: name, VZone: id, FromWidth: src.Width, ToWidth: m, SparesFreed: src.Spares,
		ReleasedZones: slices.Clone(src.Zones)}
	if a.comp == nil {
		return res, &zerr.UnavailableError{What: "compactor", Reason: "none configured"}
	}
	block := st.blockSize(src.Zones)
	zoneCap := layoutOf(st, name, &VZone{Groups: []StripeGroup{src}}).ZoneCapacity

	// Node I/O is bounded: a stuck node rolls the reclaim back.
	ioctx, cancel := context.WithTimeout(ctx, a.cfg.ReclaimTimeout)
	defer cancel()

	// Phase 1: write pointers (node I/O, no lock).
	written, err := a.comp.WrittenBlocks(ioctx, name, src.Zones)
	if err == nil && len(written) != len(src.Zones) {
		err = &zerr.UnavailableError{What: "compactor", Reason: "wrong number of write pointers"}
	}
	if err != nil {
		return res, err
	}
	total := writtenPrefix(src, written, uint64(block), zoneCap)
	targets := 1
	if total > 0 {
		targets = int((total + uint64(m)*zoneCap - 1) / (uint64(m) * zoneCap))
	}
	res.TargetGroups, res.MovedBlocks = targets, total

	// A write (or a write attempt refused by the seal) reported from here
	// on gives the reclaim up at once: the namespace is active again, and
	// its writers must not wait for a copy that may take long.
	woke, stopWatch := a.onWrite(name)
	defer stopWatch()

	// Phase 2: transition under the queue: allocate and grant the targets.
	var pending []StripeGroup
	err = a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
		ns := st.Namespaces[name]
		if ns == nil || !ns.Frozen {
			return nil, &zerr.ZoneStateError{Zone: id, State: "not frozen", Op: "reclaim"}
		}
		if cur := ns.VZones[id]; cur == nil || cur.Reclaiming {
			return nil, &zerr.ZoneStateError{Zone: id, State: "changed", Op: "reclaim"}
		}
		vz := st.mutVZ(name, id)
		if g := vz.openGroup(); g == nil || g.Generation != src.Generation {
			return nil, &zerr.ZoneStateError{Zone: id, State: "changed", Op: "reclaim"}
		}
		vz.Reclaiming = true
		vz.Pending = nil
		// The source zones are sealed: from here on the nodes refuse the
		// namespace's writes to them (it retries), so what the copy and the
		// re-check below see is all there is.
		ops := sealOps(name, id, src, true)
		for i := 0; i < targets; i++ {
			g, err := a.planGroup(st, name, ns, vz, true, src.Zones)
			if err != nil {
				return nil, err
			}
			g.Index, g.Generation = src.Index+uint32(i), vz.Generation+1
			vz.Pending = append(vz.Pending, g)
			ops = append(ops, grantOps(name, id, g)...)
		}
		pending = cloneGroups(vz.Pending)
		return ops, nil
	})
	if err != nil {
		return res, err
	}
	ioctx = a.atCommit(ioctx) // the nodes apply the targets' grants (and revocations before them) first
	copyCtx, cancelCopy := context.WithCancel(ioctx)
	defer cancelCopy()
	written2 := make(chan struct{})
	go func() {
		select {
		case <-woke:
			close(written2)
			cancelCopy()
		case <-copyCtx.Done():
		}
	}()
	samePending := func(vz *VZone) bool {
		if vz == nil || !vz.Reclaiming || len(vz.Pending) != len(pending) {
			return false
		}
		if g := vz.openGroup(); g == nil || g.Generation != src.Generation {
			return false
		}
		for i := range pending {
			if vz.Pending[i].Generation != pending[i].Generation || !slices.Equal(vz.Pending[i].Zones, pending[i].Zones) {
				return false
			}
		}
		return true
	}

	// Phase 3: zone_compaction of the written data into the targets (no lock).
	if total > 0 {
		plan := copyPlan(src, total, pending, uint64(block), zoneCap)
	copying:
		for _, g := range pending {
			for _, dst := range g.Zones {
				if len(plan[dst]) == 0 {
					continue
				}
				if err = a.comp.Compact(copyCtx, name, dst, plan[dst]); err != nil {
					break copying
				}
			}
		}
	}
	if err == nil {
		// A write that reached the source zones after phase 1 was not
		// copied, and the commit would lose it with the old zones' reset:
		// the namespace is active again, so give the reclaim up. No write
		// lands after this read: the sealed zones refuse them, and the
		// nodes answer it only once the seal applied and the writes they
		// had admitted before it are done.
		again, werr := a.comp.WrittenBlocks(copyCtx, name, src.Zones)
		switch {
		case werr != nil:
			err = werr
		case !slices.Equal(again, written):
			err = &zerr.ZoneStateError{Zone: id, State: "written during the reclaim copy", Op: "reclaim"}
		}
	}
	select {
	case <-written2:
		err = &zerr.ZoneStateError{Zone: id, State: "written during the reclaim copy", Op: "reclaim"}
	default:
	}
	// rollback drops the targets and their grants and unseals the sources.
	rollback := func(st *State) []clientv3.Op {
		vz := st.mutVZ(name, id)
		ops := sealOps(name, id, *vz.openGroup(), false) // the writes go on where they were
		for _, g := range vz.Pending {
			for _, z := range g.Zones {
				ops = append(ops, grantDel(z))
			}
		}
		vz.Pending, vz.Reclaiming = nil, false
		return ops
	}
	if err != nil {
		rerr := a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
			if ns := st.Namespaces[name]; ns == nil || !samePending(ns.VZones[id]) {
				return nil, nil // (if still ours)
			}
			return rollback(st), nil
		})
		return res, errors.Join(err, rerr)
	}

	// Phase 4: commit with the generation check: swap the layout, release
	// the source zones and their spares.
	gaveUp := false
	err = a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
		gaveUp = false // (a mutation may run again on a reloaded state)
		ns := st.Namespaces[name]
		if ns == nil {
			return nil, &zerr.NotFoundError{Kind: "namespace", Name: name}
		}
		if !samePending(ns.VZones[id]) {
			return nil, &zerr.ZoneStateError{Zone: id, State: "changed during the reclaim copy", Op: "reclaim"}
		}
		if !ns.Frozen { // a write reported since (ReportWrite thawed it)
			gaveUp = true
			return rollback(st), nil
		}
		vz := st.mutVZ(name, id)
		var ops []clientv3.Op
		for _, z := range src.Zones {
			ops = append(ops, grantDel(z))
		}
		groups := vz.Groups[:len(vz.Groups)-1]
		for i, g := range vz.Pending {
			g.Open = i == len(vz.Pending)-1
			groups = append(groups, g)
		}
		vz.Groups, vz.Pending, vz.Reclaiming = groups, nil, false
		vz.Generation++
		return ops, nil
	})
	if err != nil {
		return res, err
	}
	if gaveUp {
		return res, &zerr.ZoneStateError{Zone: id, State: "written during the reclaim copy", Op: "reclaim"}
	}
	a.m.overdrive.WithLabelValues("reclaim").Inc()
	a.log.Info("reclaimed v-zone", "vzone", vzoneName(name, id), "from", src.Width, "to", m, "blocks", total)
	return res, nil
}

// abortReclaims rolls back reclaims a previous leader left half done (its
// pending target groups are released); CheckReclaim starts them again.
func (a *Arbiter) abortReclaims(ctx context.Context) error {
	a.mu.RLock()
	t := a.term
	var st *State
	if t != nil {
		st = t.state
	}
	a.mu.RUnlock()
	if t == nil {
		return a.notLeader(ctx)
	}
	found := false
	for _, ns := range st.Namespaces {
		for _, vz := range ns.VZones {
			found = found || vz.Reclaiming || len(vz.Pending) > 0 || len(vz.Rebuilds) > 0
		}
	}
	if !found {
		return nil
	}
	return a.mutateInternal(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
		var ops []clientv3.Op
		for _, name := range sortedKeys(st.Namespaces) {
			ns := st.Namespaces[name]
			for _, id := range sortedKeys(ns.VZones) {
				if vz := ns.VZones[id]; !vz.Reclaiming && len(vz.Pending) == 0 && len(vz.Rebuilds) == 0 {
					continue
				}
				vz := st.mutVZ(name, id)
				if g := vz.sealedGroup(); g != nil {
					ops = append(ops, sealOps(name, id, *g, false)...)
				}
				for _, g := range append(vz.Pending, vz.Rebuilds...) {
					for _, z := range g.Zones {
						ops = append(ops, grantDel(z))
					}
				}
				vz.Pending, vz.Reclaiming, vz.Rebuilds = nil, false, nil
				a.log.Warn("rolled back an interrupted reclaim", "vzone", vzoneName(name, id))
			}
		}
		return ops, nil
	})
}

// writtenPrefix is how many logical blocks of the RAID-0 stripe group are
// written contiguously from its start, given each zone's write pointer: a
// torn tail (a later stripe unit landed, an earlier one did not) is not part
// of the v-zone's data.
func writtenPrefix(g StripeGroup, written []uint64, block, zoneCap uint64) uint64 {
	s := max(uint64(g.StripeSize)/block, 1)
	w := uint64(len(g.Zones))
	prefix := w * zoneCap
	for j, wp := range written {
		if wp >= zoneCap {
			continue
		}
		// the first logical block zone j is missing
		first := ((wp/s)*w+uint64(j))*s + wp%s
		prefix = min(prefix, first)
	}
	return prefix
}

// copyPlan maps the first total logical blocks of src (RAID-0, src.StripeSize)
// onto the target groups (filled one after the other, each RAID-0 with its
// StripeSize) and returns, per destination zone, the source runs in
// destination order.
func copyPlan(src StripeGroup, total uint64, targets []StripeGroup, block, zoneCap uint64) map[cluster.PhysZone][]CopyRange {
	out := map[cluster.PhysZone][]CopyRange{}
	sw := uint64(src.Width)
	ss := max(uint64(src.StripeSize)/block, 1)
	for b := uint64(0); b < total; {
		u := b / ss
		sz := src.Zones[u%sw]
		soff := (u/sw)*ss + b%ss
		n := ss - b%ss

		tw := uint64(targets[0].Width)
		per := tw * zoneCap
		t := b / per
		if t >= uint64(len(targets)) {
			break
		}
		tg := targets[t]
		ts := max(uint64(tg.StripeSize)/block, 1)
		bt := b % per
		du := bt / ts
		dz := tg.Zones[du%tw]
		n = min(n, ts-bt%ts, total-b, (t+1)*per-b)

		rs := out[dz]
		if k := len(rs) - 1; k >= 0 && rs[k].Src == sz && rs[k].SrcBlock+rs[k].Blocks == soff {
			rs[k].Blocks += n
		} else {
			rs = append(rs, CopyRange{Src: sz, SrcBlock: soff, Blocks: n})
		}
		out[dz] = rs
		b += n
	}
	return out
}
