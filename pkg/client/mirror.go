package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Mirrored stripe groups (namespace redundancy mirror:N).
//
// A mirrored group lists width × copies physical zones, copy-major: copy c
// of leg i is zones[c*width+i], and the arbiter puts the copies of a leg on
// distinct nodes. Striping is the same for every copy, so a leg's zone
// offset is the same on each.
//
// Writes go to every copy in parallel and are acknowledged only when every
// copy took them (with FUA: is durable). A copy that fails fails the write:
// nothing that was acknowledged is on fewer than all copies, so every copy
// below the acknowledged write pointer holds the same bytes and any copy can
// serve a read of them. (A drive reads zeroes above its write pointer, so a
// copy that missed an acknowledged write could not be told from a good one
// by its answer alone: that is why writes are never acknowledged degraded.)
// The file system moves on to a new v-zone, which the arbiter places on
// live nodes, when a write fails (the node's outage outlasts the retries).
//
// Reads pick, for each leg, the first copy whose node is not suspected
// (failed a read within suspectFor) and that the arbiter reports available;
// a read tries every other copy at once (one attempt, no retries) when a
// copy's node fails with UNAVAILABLE, and retries with the usual deadline
// only on the last copy left. Such degraded reads are counted
// (zonefleet_client_degraded_reads_total).
//
// Compaction (zone_compaction) and threaded logging (TL_open) run per
// physical zone and would have to keep the copies in step; they are
// refused on mirrored v-zones (*zerr.UnsupportedError), and the file
// system recycles mirrored segments by host copy, which writes through
// Write and so keeps every copy.

// suspectFor is how long reads avoid a node that failed a call.
const suspectFor = 5 * time.Second

type failFastKey struct{}

// failFast marks ctx so that nodeCall makes one attempt (another copy can
// serve the request).
func failFast(ctx context.Context) context.Context {
	return context.WithValue(ctx, failFastKey{}, true)
}

func isFailFast(ctx context.Context) bool { v, _ := ctx.Value(failFastKey{}).(bool); return v }

// copies is the number of copies of every leg of g.
func (g *group) copies() int {
	if g.parity {
		return 1
	}
	return max(len(g.zones)/max(g.width, 1), 1)
}

// redundant tells whether g is mirrored or a parity group: operations on
// one physical zone (zone_compaction, TL_open) would break its redundancy.
func (g *group) redundant() bool { return g.parity || g.copies() > 1 }

// copyZone is copy c of leg i.
func (g *group) copyZone(c, i int) pzone { return g.zones[c*g.width+i] }

// suspects remembers nodes that failed a call (a mirrored or parity read,
// a parity write) and have not answered one since. Reads avoid such a node
// for suspectFor after its last failure, then try it again; writes to a
// parity group refuse while any of its nodes is suspected, however long
// ago it failed (the file system continues in another v-zone), because
// data written meanwhile would be protected by nothing. Any call the node
// answers clears it (nodeCall).
type suspects struct {
	mu sync.Mutex
	n  atomic.Int32 // len(at): answered's fast path
	at map[string]time.Time
}

func (s *suspects) mark(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = map[string]time.Time{}
	}
	s.at[node] = time.Now()
	s.n.Store(int32(len(s.at)))
}

// suspected tells whether reads should avoid node: it failed a call within
// suspectFor and has answered none since.
func (s *suspects) suspected(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.at[node]
	return ok && time.Since(t) <= suspectFor
}

// down tells whether node failed a call and has answered none since.
func (s *suspects) down(node string) bool {
	if s.n.Load() == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.at[node]
	return ok
}

// answered clears node: it answered a call.
func (s *suspects) answered(node string) {
	if s.n.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.at, node)
	s.n.Store(int32(len(s.at)))
}

// writeCopies writes buf at zone offset zoff of every copy of leg i, in
// parallel; it fails when any copy fails. Each copy gets one attempt: when
// some copies took the write and the others' nodes are unavailable, the
// zone can take no more writes until its copies are rebuilt, so the caller
// gets a *zerr.ZoneStateError ("degraded") at once and continues in
// another v-zone (the file system does) instead of waiting out the
// retries; when every copy's node is unavailable (the client's own
// network, more likely), the write is retried as usual.
func (v *VZone) writeCopies(ctx context.Context, g *group, i int, zoff uint64, buf [][]byte, bs uint64, fua bool) error {
	n := g.copies()
	if n == 1 {
		return v.writeLeg(ctx, g.zones[i], zoff, buf, bs, fua)
	}
	errs := make([]error, n)
	run := func(ctx context.Context, skip []bool) {
		var wg sync.WaitGroup
		for c := 1; c < n; c++ {
			if skip[c] {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[c] = v.writeLeg(ctx, g.copyZone(c, i), zoff, buf, bs, fua)
			}()
		}
		if !skip[0] {
			errs[0] = v.writeLeg(ctx, g.copyZone(0, i), zoff, buf, bs, fua)
		}
		wg.Wait()
	}
	run(failFast(ctx), make([]bool, n))
	ok, down := 0, 0
	for c, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, zerr.ErrUnavailable):
			down++
			v.c.suspect.mark(g.copyZone(c, i).node)
		}
	}
	switch {
	case ok == n:
		return nil
	case ok+down == n && ok > 0:
		v.c.m.degradedWrites.Inc()
		// the copies' errors as text only: this is not UNAVAILABLE (a retry
		// of the same write would meet the live copies' advanced pointers)
		return fmt.Errorf("%w: %v", &zerr.ZoneStateError{Zone: v.id, State: zerr.StateDegraded,
			Op: "write (a copy's node is unavailable: continue in another v-zone)"}, errors.Join(errs...))
	case down == n:
		skip := make([]bool, n)
		run(ctx, skip) // nobody answered: retry as usual (the write pointer check recognizes a landed attempt)
	}
	return errors.Join(errs...)
}

// chooseCopy picks the copy of leg i to read, skipping nodes in bad; ok is
// false when every copy's node is bad. more tells whether another copy
// would be left if this one failed.
func (v *VZone) chooseCopy(g *group, i int, bad map[string]bool) (z pzone, more, ok bool) {
	best, usable := -1, 0
	for c := 0; c < g.copies(); c++ {
		x := g.copyZone(c, i)
		if bad[x.node] {
			continue
		}
		usable++
		if best < 0 || (!v.preferred(g.copyZone(best, i)) && v.preferred(x)) {
			best = c
		}
	}
	if best < 0 {
		return pzone{}, false, false
	}
	return g.copyZone(best, i), usable > 1, true
}

func (v *VZone) preferred(z pzone) bool { return z.available && !v.c.suspect.suspected(z.node) }

// readMirrored is ReadInto's part for reads that touch a mirrored group.
func (v *VZone) readMirrored(ctx context.Context, parts []*group, off, n uint64, buf []byte) error {
	bad := map[string]bool{}
	for {
		refs, fast, err := v.mirroredRefs(ctx, parts, off, n, bad)
		if err != nil {
			return err
		}
		if refs == nil {
			continue // a copy's drive did not answer identify: another copy
		}
		cctx := ctx
		if fast {
			cctx = failFast(ctx)
		}
		err = v.runCalls(cctx, planRead(refs), buf, off)
		if err == nil || !errors.Is(err, zerr.ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		failed := 0
		for _, node := range unavailableNodes(err) {
			if !bad[node] {
				bad[node] = true
				failed++
				v.c.suspect.mark(node)
			}
		}
		if failed == 0 {
			return err
		}
		v.c.m.degradedReads.Inc()
	}
}

// mirroredRefs picks a copy for every leg of the read. It returns nil refs
// (and no error) when a chosen copy's drive failed identify and another
// copy is left: the caller picks again. fast tells whether every leg has
// another copy to fall back on.
func (v *VZone) mirroredRefs(ctx context.Context, parts []*group, off, n uint64, bad map[string]bool) ([]readLegRef, bool, error) {
	var refs []readLegRef
	fast := true
	for _, g := range parts {
		lo, hi := max(off, g.start), min(off+n, g.start+g.capacity)
		for _, l := range g.legs(lo, hi-lo) {
			z, more, ok := v.chooseCopy(g, l.idx, bad)
			if !ok {
				return nil, false, fmt.Errorf("no copy of leg %d of stripe group %d left to read", l.idx, g.index)
			}
			fast = fast && more
			dctx := ctx
			if more {
				dctx = failFast(ctx)
			}
			d, err := v.c.device(dctx, z)
			if err != nil {
				if more && errors.Is(err, zerr.ErrUnavailable) {
					bad[z.node] = true
					v.c.suspect.mark(z.node)
					v.c.m.degradedReads.Inc()
					return nil, false, nil
				}
				return nil, false, err
			}
			refs = append(refs, readLegRef{g: g, l: l, z: z, lba: uint64(z.zone)*d.zoneSize + l.zoff, bs: d.bs})
		}
	}
	return refs, fast, nil
}

// unavailableNodes lists the nodes of the UNAVAILABLE NodeErrors in err
// (errors.Join trees included).
func unavailableNodes(err error) []string {
	var out []string
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		var ne *NodeError
		if x, ok := e.(*NodeError); ok {
			ne = x
		}
		if ne != nil {
			if errors.Is(ne.Err, zerr.ErrUnavailable) {
				out = append(out, ne.Node)
			}
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// mirroredError refuses an operation that would change one copy of a
// mirrored v-zone without the others (or a data leg of a parity group
// without its parity).
func mirroredError(vzone uint64, op string) error {
	return &zerr.ZoneStateError{Zone: vzone, State: "mirrored", Op: op + " (copies or parity would diverge; recycle by host copy)"}
}
