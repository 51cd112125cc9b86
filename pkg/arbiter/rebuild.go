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

// Rebuild of mirrored legs (namespace redundancy mirror:N).
//
// When a node is down (its registration gone for Config.NodeDownAfter, or
// an operator's `zctl node remove` of a stopped node that still holds
// zones), every copy it held of a mirrored stripe group is rebuilt on
// another node, one zone at a time (the throttle: one
// zone_compaction stream per arbiter), in phases like a reclaim:
//
//  1. (no lock) the write pointer of a surviving copy of the leg;
//  2. (one mutation) allocate a target zone on an available node holding
//     no other copy of that leg, grant it, and record it in VZone.Rebuilds
//     (granted, counted active, not in the layout);
//  3. (no lock) zone_compaction from the surviving copy into the target:
//     the source node pushes the bytes to the target's node (never through
//     the arbiter or a client), then the target is finished unless its
//     group is open;
//  4. (one mutation) commit if the v-zone is still at the same generation
//     with the same target: the target replaces the lost zone in the
//     layout (clients see a new generation and refresh), the lost zone's
//     grant goes; otherwise, or if the copy failed, the target is dropped
//     and the next check tries again. A leader lost in between leaves the
//     record for the next leader, whose abortReclaims drops it.
//
// A v-zone being rebuilt can still be finished or reset (a reset drops the
// target's grant too; the commit then finds the v-zone changed). An open
// group is rebuilt too, up to the surviving copy's write pointer, and left
// open: a write racing the copy lands on the live copies only and is
// answered as degraded (pkg/client), so it is never acknowledged and its
// blocks are never read; the writer has moved on to another v-zone, and a
// later write at the group's write pointer (the lowest of its copies')
// meets the live copies' advanced pointers and fails, so nothing diverges
// that was acknowledged.
//
// Throttle: besides one leg at a time per arbiter, every node bounds the
// bytes its devices read or write for rebuilds (pkg/node throttle.go,
// ssdnode --rebuild-rate): a mirror copy is sent as a rebuild
// (ZoneCompactionRequest.Rebuild, charged by the source and the target),
// a raid5 leg's PeerReads and writes are rebuild traffic by nature.
//
// Rebuild of raid5 legs (rebuildParityOne) runs in the same passes with
// the same phases and throttle (one leg at a time): phase 1 reads the write
// pointers of every surviving zone of the group (the other data legs, the
// parity leg, the PP logs), phase 2 grants a zone on an available node that
// holds no zone of the group — three on one node when the parity leg is
// lost, since its node held the two PP logs too — phase 3 asks the target's
// node to rebuild (node RPC RebuildParityLeg: it pulls the survivors' rows
// with PeerRead and XORs them; pkg/node rebuild.go has the write-pointer
// rules: the lost leg ends where the parity rows and the newest PP record
// say the acknowledged data ends, the seal decides for a finished group,
// lost PP logs are re-created, one with a record of the open row and the
// other empty), then
// finishes the target(s) unless the group is open; phase 4 swaps them in
// with the generation check. A group with a second zone on an unavailable
// node waits (a parity group survives one node).

type rebuildKey struct{}

// withRebuild marks ctx as a rebuild's copy: NodeCompactor.Compact sets
// ZoneCompactionRequest.Rebuild, so the nodes throttle it (pkg/node
// throttle.go) where a reclaim's copy is not.
func withRebuild(ctx context.Context) context.Context {
	return context.WithValue(ctx, rebuildKey{}, true)
}

func isRebuild(ctx context.Context) bool {
	v, _ := ctx.Value(rebuildKey{}).(bool)
	return v
}

// RebuildResult is what one CheckRebuild did.
type RebuildResult struct {
	Rebuilt int    // copies rebuilt
	Blocks  uint64 // blocks copied
	Failed  int    // copies whose rebuild failed (tried again at the next check)
	Waiting int    // copies on down nodes not rebuilt yet (no live copy, a v-zone changed meanwhile)
	// Unsupported: legs of parity groups on down nodes not rebuilt because
	// the compactor cannot rebuild parity legs (ErrParityRebuild).
	Unsupported int
}

type rebuildJob struct {
	ns    string
	vzone uint64
	gen   uint64
	group int
	pos   uint32
	lost  cluster.PhysZone
}

// nodeLost tells whether zone z's node is down (or forgotten).
func nodeLost(st *State, z cluster.PhysZone) bool {
	n := st.Nodes[z.Node]
	return n == nil || n.Down
}

// lostParityZones lists the zones of parity (raid5) groups on down nodes
// (every one: the partial-parity log zones too) for the status counts.
func lostParityZones(st *State) []rebuildJob {
	var out []rebuildJob
	for _, name := range sortedKeys(st.Namespaces) {
		ns := st.Namespaces[name]
		if !ns.Spec.parity() {
			continue
		}
		for _, id := range sortedKeys(ns.VZones) {
			vz := ns.VZones[id]
			for gi, g := range vz.Groups {
				if !g.Parity {
					continue
				}
				for k, z := range g.Zones {
					if nodeLost(st, z) {
						out = append(out, rebuildJob{ns: name, vzone: id, gen: vz.Generation, group: gi, pos: uint32(k), lost: z})
					}
				}
			}
		}
	}
	return out
}

// parityJobs are the lost legs of parity groups to rebuild: data legs and
// parity legs (a lost partial-parity log zone is on its parity leg's node
// and is rebuilt with it).
func parityJobs(st *State) []rebuildJob {
	return slices.DeleteFunc(lostParityZones(st), func(j rebuildJob) bool {
		g := st.Namespaces[j.ns].VZones[j.vzone].Groups[j.group]
		return j.pos > g.Width
	})
}

// ErrParityRebuild says a lost zone of a parity group cannot be rebuilt
// now: another zone of its group is lost too (a parity group survives one
// node), or the compactor cannot rebuild parity legs.
var ErrParityRebuild = &zerr.ZoneStateError{State: "parity", Op: "rebuild a lost leg of a raid5 stripe group (another zone of the group is unavailable, or the nodes cannot rebuild parity legs: the group stays degraded, reads reconstruct from parity)"}

func rebuildJobs(st *State) []rebuildJob {
	var jobs []rebuildJob
	for _, name := range sortedKeys(st.Namespaces) {
		ns := st.Namespaces[name]
		if ns.Spec.copies() < 2 {
			continue
		}
		for _, id := range sortedKeys(ns.VZones) {
			vz := ns.VZones[id]
			for gi, g := range vz.Groups {
				if g.copies() < 2 {
					continue
				}
				for k, z := range g.Zones {
					if nodeLost(st, z) {
						jobs = append(jobs, rebuildJob{ns: name, vzone: id, gen: vz.Generation, group: gi, pos: uint32(k), lost: z})
					}
				}
			}
		}
	}
	return jobs
}

// CheckRebuild rebuilds, one at a time, the copies of mirrored legs that
// sit on down nodes (see above). The leader runs it in the background every
// Config.RebuildInterval, after CheckNodes and when an operator declares a
// node lost; tests call it directly. Errors of single copies are counted in Failed and
// logged; the error is for the check itself (not the leader, etcd).
func (a *Arbiter) CheckRebuild(ctx context.Context) (RebuildResult, error) {
	a.rebuildMu.Lock()
	defer a.rebuildMu.Unlock()
	var total RebuildResult
	// passes until one rebuilds nothing: a node that went down during a
	// pass, or a copy that failed, is seen by the next
	for pass := 0; pass < 64; pass++ {
		res, err := a.rebuildPass(ctx)
		total.Rebuilt += res.Rebuilt
		total.Blocks += res.Blocks
		total.Failed += res.Failed
		total.Waiting = res.Waiting
		total.Unsupported = res.Unsupported
		if err != nil || res.Rebuilt == 0 {
			return total, err
		}
	}
	return total, nil
}

// triggerRebuild runs CheckRebuild in the background (the leader's loop
// must go on watching nodes while data is copied); a trigger while one
// runs makes it scan again when done.
func (a *Arbiter) triggerRebuild(ctx context.Context) {
	a.rebuildAgain.Store(true)
	if !a.rebuildBusy.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer a.rebuildBusy.Store(false)
		for a.rebuildAgain.Swap(false) && ctx.Err() == nil {
			if _, err := a.CheckRebuild(ctx); err != nil && !errors.Is(err, zerr.ErrNotLeader) && ctx.Err() == nil {
				a.log.Warn("rebuild check failed", "err", err)
			}
		}
	}()
}

// rebuildPass is one scan of CheckRebuild.
func (a *Arbiter) rebuildPass(ctx context.Context) (RebuildResult, error) {
	var res RebuildResult
	st, _, err := a.snapshot(ctx)
	if err != nil {
		return res, err
	}
	jobs := rebuildJobs(st)
	pjobs := parityJobs(st)
	a.m.rebuildWaiting.Set(float64(len(jobs) + len(pjobs)))
	pr, canParity := a.comp.(parityRebuilder)
	if len(pjobs) > 0 && !canParity {
		res.Unsupported = len(pjobs)
		a.log.Warn("zones of parity stripe groups on down nodes are not rebuilt", "zones", len(pjobs),
			"first", vzoneName(pjobs[0].ns, pjobs[0].vzone), "err", ErrParityRebuild)
		pjobs = nil
	}
	if a.comp == nil || len(jobs)+len(pjobs) == 0 {
		res.Waiting = len(jobs)
		return res, nil
	}
	type job struct {
		rebuildJob
		parity bool
	}
	var all []job
	for _, j := range jobs {
		all = append(all, job{rebuildJob: j})
	}
	for _, j := range pjobs {
		all = append(all, job{rebuildJob: j, parity: true})
	}
	for _, j := range all {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		var n uint64
		var err error
		what := "a mirrored copy"
		if j.parity {
			what = "a raid5 leg"
			n, err = a.rebuildParityOne(ctx, pr, j.rebuildJob)
		} else {
			n, err = a.rebuildOne(ctx, j.rebuildJob)
		}
		switch {
		case err == nil:
			res.Rebuilt++
			res.Blocks += n
			a.m.rebuilds.WithLabelValues("ok").Inc()
			a.m.rebuildBlocks.Add(float64(n))
		case errors.Is(err, errRebuildWait):
			res.Waiting++
		default:
			res.Failed++
			a.m.rebuilds.WithLabelValues("error").Inc()
			a.log.Warn("rebuild of "+what+" failed; tried again at the next check", "vzone", vzoneName(j.ns, j.vzone),
				"group", j.group, "lost", j.lost.String(), "err", err)
		}
	}
	after, _, err := a.snapshot(ctx)
	if err == nil {
		a.m.rebuildWaiting.Set(float64(len(rebuildJobs(after)) + len(parityJobs(after))))
	}
	return res, nil
}

// errRebuildWait: the copy cannot be rebuilt now (no live copy of the leg,
// a rebuild of the v-zone in progress, the v-zone changed); not a failure.
var errRebuildWait = errors.New("rebuild waits")

// rebuildOne rebuilds one copy and returns the blocks copied.
func (a *Arbiter) rebuildOne(ctx context.Context, j rebuildJob) (uint64, error) {
	st, _, err := a.snapshot(ctx)
	if err != nil {
		return 0, err
	}
	ns := st.Namespaces[j.ns]
	if ns == nil || ns.VZones[j.vzone] == nil {
		return 0, errRebuildWait
	}
	vz := ns.VZones[j.vzone]
	j.gen = vz.Generation // an earlier rebuild of this check may have bumped it: the position says whether the job stands
	if vz.Reclaiming || len(vz.Rebuilds) > 0 || j.group >= len(vz.Groups) {
		return 0, errRebuildWait
	}
	g := vz.Groups[j.group]
	open := g.Open && vz.State == VZoneOpen
	if int(j.pos) >= len(g.Zones) || g.Zones[j.pos] != j.lost {
		return 0, errRebuildWait
	}
	leg := j.pos % g.Width
	var src *cluster.PhysZone
	for c := uint32(0); c < g.copies(); c++ {
		p := c*g.Width + leg
		if z := g.Zones[p]; p != j.pos && !nodeLost(st, z) && st.Nodes[z.Node].Available {
			src = &z
			break
		}
	}
	if src == nil {
		return 0, errRebuildWait // no live copy of the leg now
	}
	ioctx, cancel := context.WithTimeout(ctx, a.cfg.ReclaimTimeout)
	defer cancel()

	// Phase 1: how much the surviving copy holds (node I/O, no lock).
	written, err := a.comp.WrittenBlocks(ioctx, j.ns, []cluster.PhysZone{*src})
	if err != nil {
		return 0, err
	}
	if len(written) != 1 {
		return 0, &zerr.UnavailableError{What: "compactor", Reason: "wrong number of write pointers"}
	}

	// Phase 2: allocate and grant the target.
	var target StripeGroup
	err = a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
		ns := st.Namespaces[j.ns]
		if ns == nil || ns.VZones[j.vzone] == nil {
			return nil, errRebuildWait
		}
		if cur := ns.VZones[j.vzone]; cur.Generation != j.gen || cur.Reclaiming || len(cur.Rebuilds) > 0 {
			return nil, errRebuildWait
		}
		vz := st.mutVZ(j.ns, j.vzone)
		g := vz.Groups[j.group]
		holds := map[string]bool{} // nodes with a copy of the leg
		for c := uint32(0); c < g.copies(); c++ {
			holds[g.Zones[c*g.Width+leg].Node] = true
		}
		dies := map[dieKey]bool{} // dies of the group (no collision inside a group, eZNS §4.2)
		for _, z := range g.Zones {
			dies[st.dieOf(z)] = true
		}
		cands := slices.DeleteFunc(candidatesOf(a.dieSlotsOf(st), ix, nil), func(c candidate) bool { return holds[c.die.Node] || dies[c.die] })
		zones := pickZones(st, ix, cands, 1)
		if len(zones) == 0 {
			return nil, &zerr.NoResourcesError{Resource: "a free zone on an available node without a copy of the leg", Requested: 1}
		}
		target = StripeGroup{Index: g.Index, Zones: zones, Width: 1, StripeSize: g.StripeSize, Open: true, Generation: g.Generation,
			Rebuild: &RebuildOf{Group: uint32(j.group), Pos: j.pos, Lost: j.lost, Src: *src}}
		vz.Rebuilds = []StripeGroup{target}
		return []clientv3.Op{grantPut(zones[0], cluster.Grant{Namespace: j.ns, VZone: j.vzone, Group: g.Index, Generation: g.Generation})}, nil
	})
	if err != nil {
		return 0, err
	}
	ioctx = a.atCommit(ioctx) // the nodes apply the target's grant (and revocations before it) first
	dst := target.Zones[0]
	same := func(vz *VZone) bool {
		return vz != nil && vz.Generation == j.gen && len(vz.Rebuilds) == 1 && slices.Equal(vz.Rebuilds[0].Zones, target.Zones)
	}

	// Phase 3: the copy, node to node (no lock).
	if written[0] > 0 {
		// marked a rebuild: both nodes charge it to their rebuild rate limit
		err = a.comp.Compact(withRebuild(ioctx), j.ns, dst, []CopyRange{{Src: *src, SrcBlock: 0, Blocks: written[0]}})
	}
	if f, ok := a.comp.(zoneFinisher); ok && err == nil && !open {
		err = f.FinishZone(ioctx, j.ns, dst)
	}
	if err != nil {
		rerr := a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
			ns := st.Namespaces[j.ns]
			if ns == nil || !same(ns.VZones[j.vzone]) {
				return nil, nil // reset or deleted meanwhile: its grants went with it
			}
			vz := st.mutVZ(j.ns, j.vzone)
			vz.Rebuilds = nil
			return []clientv3.Op{grantDel(dst)}, nil
		})
		return 0, errors.Join(fmt.Errorf("copy %s into %s: %w", src, dst, err), rerr)
	}

	// Phase 4: commit.
	err = a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
		ns := st.Namespaces[j.ns]
		if ns == nil || !same(ns.VZones[j.vzone]) {
			return nil, &zerr.ZoneStateError{Zone: j.vzone, State: "changed during the rebuild copy", Op: "rebuild"}
		}
		vz := st.mutVZ(j.ns, j.vzone)
		vz.Groups[j.group].Zones[j.pos] = dst
		vz.Rebuilds = nil
		vz.Generation++
		return []clientv3.Op{grantDel(j.lost)}, nil
	})
	if err != nil {
		return 0, err
	}
	a.log.Info("rebuilt a mirrored copy", "vzone", vzoneName(j.ns, j.vzone), "group", j.group, "lost", j.lost.String(),
		"from", src.String(), "to", dst.String(), "blocks", written[0])
	return written[0], nil
}

// zoneFinisher is an optional Compactor method: finish a zone (a rebuilt
// copy of a finished leg is finished too).
type zoneFinisher interface {
	FinishZone(ctx context.Context, namespace string, z cluster.PhysZone) error
}

// ParityRebuild is one raid5 leg rebuild for a parityRebuilder: position
// Lost of a group (0..Width-1 a data leg, Width the parity leg) is rebuilt
// into Target (and, for the parity leg, the partial-parity logs into
// PPTarget and PPTargetB on the same node; PPTargetB is zero for a group
// with one log) from the surviving legs Legs (Width+1 entries, Legs[Lost]
// unused) whose write pointers are Written; PPLog and PPLogB are the
// surviving logs when a data leg is rebuilt (PPLogB zero for a group with
// one log).
type ParityRebuild struct {
	Target, PPTarget, PPTargetB cluster.PhysZone
	Group                       uint32
	Width                       uint32
	StripeBlocks                uint64
	Lost                        uint32
	Legs                        []cluster.PhysZone
	Written                     []uint64
	PPLog, PPLogB               cluster.PhysZone
	PPWritten, PPWrittenB       uint64
	Sealed                      bool
}

// parityRebuilder is an optional Compactor method: rebuild a raid5 leg on
// the target's node, which pulls the rows from the survivors' nodes
// (NodeCompactor: the node RPC RebuildParityLeg). It returns the leg's
// extent in blocks.
type parityRebuilder interface {
	RebuildParityLeg(ctx context.Context, namespace string, r ParityRebuild) (uint64, error)
}

// rebuildParityOne rebuilds one lost leg of a parity group (see the
// package notes above): phases as rebuildOne's, with the target(s) on an
// available node holding no zone of the group.
func (a *Arbiter) rebuildParityOne(ctx context.Context, pr parityRebuilder, j rebuildJob) (uint64, error) {
	st, _, err := a.snapshot(ctx)
	if err != nil {
		return 0, err
	}
	ns := st.Namespaces[j.ns]
	if ns == nil || ns.VZones[j.vzone] == nil {
		return 0, errRebuildWait
	}
	vz := ns.VZones[j.vzone]
	j.gen = vz.Generation
	if vz.Reclaiming || len(vz.Rebuilds) > 0 || j.group >= len(vz.Groups) {
		return 0, errRebuildWait
	}
	g := vz.Groups[j.group]
	k := g.Width
	if !g.Parity || int(j.pos) > int(k) || (len(g.Zones) != int(k)+parityExtraZones && len(g.Zones) != int(k)+2) || g.Zones[j.pos] != j.lost {
		return 0, errRebuildWait
	}
	open := g.Open && vz.State == VZoneOpen
	// every other zone must be there: a parity group survives one node
	var probe []cluster.PhysZone
	for p, z := range g.Zones {
		if p == int(j.pos) || (j.pos == k && p > int(k)) { // the PP logs are on the parity leg's node
			continue
		}
		if nodeLost(st, z) || !st.Nodes[z.Node].Available {
			return 0, errRebuildWait
		}
		probe = append(probe, z)
	}
	bs := uint64(st.blockSize(g.Zones))
	stripe := uint64(g.StripeSize) / bs
	if stripe == 0 {
		return 0, &zerr.InvalidArgumentError{Field: "stripe_size", Reason: fmt.Sprintf("%d bytes: less than a %d-byte block", g.StripeSize, bs)}
	}
	ioctx, cancel := context.WithTimeout(ctx, a.cfg.ReclaimTimeout)
	defer cancel()

	// Phase 1: the survivors' write pointers (node I/O, no lock).
	written, err := a.comp.WrittenBlocks(ioctx, j.ns, probe)
	if err != nil {
		return 0, err
	}
	if len(written) != len(probe) {
		return 0, &zerr.UnavailableError{What: "compactor", Reason: "wrong number of write pointers"}
	}
	req := ParityRebuild{Group: g.Index, Width: k, StripeBlocks: stripe, Lost: j.pos, Legs: slices.Clone(g.Zones[:k+1]),
		Written: make([]uint64, k+1), Sealed: !open}
	for i, z := range probe {
		switch p := slices.Index(g.Zones, z); {
		case p <= int(k):
			req.Written[p] = written[i]
		case p == int(k)+1:
			req.PPLog, req.PPWritten = z, written[i]
		default:
			req.PPLogB, req.PPWrittenB = z, written[i]
		}
	}

	// Phase 2: allocate and grant the target(s).
	var target StripeGroup
	err = a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
		ns := st.Namespaces[j.ns]
		if ns == nil || ns.VZones[j.vzone] == nil {
			return nil, errRebuildWait
		}
		if cur := ns.VZones[j.vzone]; cur.Generation != j.gen || cur.Reclaiming || len(cur.Rebuilds) > 0 {
			return nil, errRebuildWait
		}
		vz := st.mutVZ(j.ns, j.vzone)
		g := vz.Groups[j.group]
		holds := map[string]bool{} // nodes of the group
		dies := map[dieKey]bool{}
		for _, z := range g.Zones {
			holds[z.Node] = true
			dies[st.dieOf(z)] = true
		}
		cands := slices.DeleteFunc(candidatesOf(a.dieSlotsOf(st), ix, nil), func(c candidate) bool { return holds[c.die.Node] || dies[c.die] })
		n := uint32(1)
		if j.pos == k {
			n = uint32(len(g.Zones)) - k // the parity leg and the partial-parity logs, on one node
		}
		zones := pickWith(st, ix, cands, n, func(out []cluster.PhysZone, c *candidate) bool {
			return len(out) >= 1 && c.die.Node != out[0].Node
		})
		if uint32(len(zones)) < n {
			return nil, &zerr.NoResourcesError{Resource: "free zones on an available node holding no zone of the raid5 group", Requested: uint64(n), Available: uint64(len(zones))}
		}
		target = StripeGroup{Index: g.Index, Zones: zones, Width: n, StripeSize: g.StripeSize, Open: true, Generation: g.Generation,
			Rebuild: &RebuildOf{Group: uint32(j.group), Pos: j.pos, Lost: j.lost}}
		vz.Rebuilds = []StripeGroup{target}
		var ops []clientv3.Op
		for _, z := range zones {
			ops = append(ops, grantPut(z, cluster.Grant{Namespace: j.ns, VZone: j.vzone, Group: g.Index, Generation: g.Generation}))
		}
		return ops, nil
	})
	if err != nil {
		return 0, err
	}
	ioctx = a.atCommit(ioctx) // the nodes apply the targets' grants (and revocations before them) first
	same := func(vz *VZone) bool {
		return vz != nil && vz.Generation == j.gen && len(vz.Rebuilds) == 1 && slices.Equal(vz.Rebuilds[0].Zones, target.Zones)
	}
	req.Target = target.Zones[0]
	if j.pos == k {
		req.PPTarget = target.Zones[1]
		if len(target.Zones) > 2 {
			req.PPTargetB = target.Zones[2]
		}
	}

	// Phase 3: the rebuild, on the target's node (no lock).
	extent, err := pr.RebuildParityLeg(ioctx, j.ns, req)
	if f, ok := a.comp.(zoneFinisher); ok && err == nil && !open {
		for _, z := range target.Zones {
			if err = f.FinishZone(ioctx, j.ns, z); err != nil {
				break
			}
		}
	}
	if err != nil {
		rerr := a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
			ns := st.Namespaces[j.ns]
			if ns == nil || !same(ns.VZones[j.vzone]) {
				return nil, nil
			}
			vz := st.mutVZ(j.ns, j.vzone)
			vz.Rebuilds = nil
			var ops []clientv3.Op
			for _, z := range target.Zones {
				ops = append(ops, grantDel(z))
			}
			return ops, nil
		})
		return 0, errors.Join(fmt.Errorf("rebuild raid5 leg %d of %s group %d into %s: %w", j.pos, vzoneName(j.ns, j.vzone), j.group, req.Target, err), rerr)
	}

	// Phase 4: commit.
	err = a.mutate(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
		ns := st.Namespaces[j.ns]
		if ns == nil || !same(ns.VZones[j.vzone]) {
			return nil, &zerr.ZoneStateError{Zone: j.vzone, State: "changed during the rebuild", Op: "rebuild"}
		}
		vz := st.mutVZ(j.ns, j.vzone)
		g := &vz.Groups[j.group]
		ops := []clientv3.Op{grantDel(g.Zones[j.pos])}
		g.Zones[j.pos] = target.Zones[0]
		if j.pos == k {
			for i := 1; i < len(target.Zones); i++ { // the partial-parity logs
				ops = append(ops, grantDel(g.Zones[k+uint32(i)]))
				g.Zones[k+uint32(i)] = target.Zones[i]
			}
		}
		vz.Rebuilds = nil
		vz.Generation++
		return ops, nil
	})
	if err != nil {
		return 0, err
	}
	a.log.Info("rebuilt a raid5 leg", "vzone", vzoneName(j.ns, j.vzone), "group", j.group, "pos", j.pos, "lost", j.lost.String(),
		"to", req.Target.String(), "blocks", extent)
	return extent, nil
}
