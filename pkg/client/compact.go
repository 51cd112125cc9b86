package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Copy moves Blocks blocks from v-zone Src at SrcOff to v-zone Dst at DstOff.
type Copy struct {
	Src, Dst       uint64
	SrcOff, DstOff uint64
	Blocks         uint64
}

// CompactStats says how the blocks of a compaction moved.
type CompactStats struct {
	Copyback    uint64 `json:"copyback"`     // on-chip copyback inside a drive
	ReadProgram uint64 `json:"read_program"` // read and program inside a drive
	Remote      uint64 `json:"remote"`       // pushed by the source node to a peer node
	HostCopy    uint64 `json:"host_copy"`    // read to the client and written back (devices of one node)
}

// Total is every block moved.
func (s CompactStats) Total() uint64 { return s.Copyback + s.ReadProgram + s.Remote + s.HostCopy }

type cpiece struct {
	src, dst       pzone
	srcLBA, dstLBA uint64
	n              uint64
}

func (p cpiece) srcKey() string { return p.src.node + "/" + fmt.Sprint(p.src.dev) }
func (p cpiece) dstKey() string { return fmt.Sprintf("%s/%d/%d", p.dst.node, p.dst.dev, p.dst.zone) }

// Compact copies v-zone ranges with the drives' zone_compaction: each
// physical piece is copied by the node holding its source, inside the drive
// (copyback or read-and-program) or pushed to the node holding its
// destination. Destinations must lie at or above their v-zone's write
// pointer, in increasing order per destination v-zone; stripe groups are
// allocated on the destination as needed. The client never carries the
// bytes, except between two devices of one node (host copy). Compact
// returns when every copy is complete: it is SubmitCompaction and Wait.
func (c *Client) Compact(ctx context.Context, copies []Copy) (CompactStats, error) {
	h, err := c.SubmitCompaction(ctx, copies)
	if err != nil {
		return CompactStats{}, err
	}
	return h.Wait(ctx)
}

// Compaction is a compaction SubmitCompaction started: a handle to wait for.
type Compaction struct {
	done chan struct{}
	st   CompactStats
	err  error
}

// Done is closed when the compaction ended, successfully or not.
func (h *Compaction) Done() <-chan struct{} { return h.done }

// Wait waits for the compaction to end (or ctx) and returns how its blocks
// moved and its error: a *CompactionError when it failed on the nodes. A
// compaction whose Wait gave up on ctx goes on; Wait may be called again,
// from any goroutine.
func (h *Compaction) Wait(ctx context.Context) (CompactStats, error) {
	select {
	case <-h.done:
		return h.st, h.err
	case <-ctx.Done():
		return CompactStats{}, ctx.Err()
	}
}

// CompactionError is a compaction that failed after its submission was
// accepted: some blocks (Moved of them) may have landed, the rest did not.
// It unwraps to the node's typed error.
type CompactionError struct {
	Moved uint64 // blocks known moved before it stopped
	Err   error
}

func (e *CompactionError) Error() string {
	return fmt.Sprintf("compaction stopped after %d blocks: %v", e.Moved, e.Err)
}
func (e *CompactionError) Unwrap() error { return e.Err }

// SubmitCompaction starts Compact's copies and returns without waiting for
// them (ZNS+ §3.2.1: zone_compaction is asynchronous). It checks the copies,
// takes every destination's writer lock, allocates the destinations' stripe
// groups and plans the physical pieces before it returns (errors there are
// returned at once and nothing was copied); the ZoneCompaction calls, their
// waits and the host copies run in the background, which releases the
// writer locks at its end. Until the handle is done the destinations must
// not be read at or above their old write pointer, nor written (writes wait
// for the lock), and the sources must not be reset. ctx governs the
// background part too: cancel it only to abandon the compaction.
func (c *Client) SubmitCompaction(ctx context.Context, copies []Copy) (*Compaction, error) {
	if len(copies) == 0 {
		return nil, &zerr.InvalidArgumentError{Field: "copies", Reason: "is empty"}
	}
	// Lock every destination's writer, in id order.
	dsts := map[uint64]*VZone{}
	lastDst := map[uint64]uint64{}
	for i, cp := range copies {
		if cp.Blocks == 0 {
			return nil, &zerr.InvalidArgumentError{Field: fmt.Sprintf("copies[%d].blocks", i), Reason: "must be at least 1"}
		}
		if end, ok := lastDst[cp.Dst]; ok && cp.DstOff < end {
			return nil, &zerr.InvalidArgumentError{Field: fmt.Sprintf("copies[%d].dst_off", i), Reason: "destinations of one v-zone must increase without overlap"}
		}
		lastDst[cp.Dst] = cp.DstOff + cp.Blocks
		dsts[cp.Dst] = c.handle(cp.Dst)
	}
	ids := make([]uint64, 0, len(dsts))
	for id := range dsts {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		dsts[id].wmu.Lock()
	}
	// unlock gives the writer locks back (with the write pointers to be
	// read again: the compaction moved them), once.
	unlock := func() {
		for _, id := range ids {
			d := dsts[id]
			d.mu.Lock()
			d.wpKnown = false
			d.wpSeq++
			d.mu.Unlock()
			d.wmu.Unlock()
		}
	}
	batches, parallel, rev, err := c.prepare(ctx, copies, ids, dsts)
	if err != nil {
		unlock()
		return nil, err
	}
	ctx = wire.WithMinRevision(ctx, rev)
	h := &Compaction{done: make(chan struct{})}
	go func() {
		defer close(h.done)
		defer unlock()
		h.st, h.err = c.runBatches(ctx, batches, parallel)
	}()
	return h, nil
}

// prepare checks the destinations' write pointers and plans the batches of
// a compaction (the destinations' writer locks held).
func (c *Client) prepare(ctx context.Context, copies []Copy, ids []uint64, dsts map[uint64]*VZone) ([][]cpiece, bool, int64, error) {
	for _, id := range ids {
		d := dsts[id]
		if err := d.ensureLayout(ctx); err != nil {
			return nil, false, 0, err
		}
		wp, err := d.writePointer(ctx)
		if err != nil {
			return nil, false, 0, err
		}
		for i, cp := range copies {
			if cp.Dst == id && cp.DstOff < wp {
				return nil, false, 0, fmt.Errorf("copies[%d]: %w", i, &zerr.WritePointerError{Zone: id, Expected: wp, Got: cp.DstOff})
			}
		}
	}
	pieces, err := c.plan(ctx, copies)
	if err != nil {
		return nil, false, 0, err
	}
	// Every node involved must serve grants as fresh as the newest layout used.
	var rev int64
	for _, cp := range copies {
		for _, h := range []*VZone{c.handle(cp.Src), c.handle(cp.Dst)} {
			h.mu.Lock()
			rev = max(rev, h.rev)
			h.mu.Unlock()
		}
	}

	// Batches by source device; parallel unless one destination zone is fed
	// by two sources (its pieces must then land in order).
	sources := map[string]map[string]bool{}
	for _, p := range pieces {
		if sources[p.dstKey()] == nil {
			sources[p.dstKey()] = map[string]bool{}
		}
		sources[p.dstKey()][p.srcKey()] = true
	}
	parallel := true
	for _, s := range sources {
		if len(s) > 1 {
			parallel = false
		}
	}
	var batches [][]cpiece
	if parallel {
		idx := map[string]int{}
		for _, p := range pieces {
			i, ok := idx[p.srcKey()]
			if !ok {
				i = len(batches)
				idx[p.srcKey()] = i
				batches = append(batches, nil)
			}
			batches[i] = append(batches[i], p)
		}
	} else {
		for _, p := range pieces {
			if n := len(batches); n > 0 && batches[n-1][0].srcKey() == p.srcKey() {
				batches[n-1] = append(batches[n-1], p)
			} else {
				batches = append(batches, []cpiece{p})
			}
		}
	}
	return batches, parallel, rev, nil
}

// runBatches runs a compaction's batches (in parallel when they feed
// disjoint destination zones) and counts its blocks.
func (c *Client) runBatches(ctx context.Context, batches [][]cpiece, parallel bool) (CompactStats, error) {
	var st CompactStats
	var err error
	var mu sync.Mutex
	run := func(b []cpiece) error {
		s, err := c.runBatch(ctx, b)
		mu.Lock()
		st.Copyback += s.Copyback
		st.ReadProgram += s.ReadProgram
		st.Remote += s.Remote
		st.HostCopy += s.HostCopy
		mu.Unlock()
		return err
	}
	if parallel {
		errs := make([]error, len(batches))
		var wg sync.WaitGroup
		for i, b := range batches {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = run(b) }()
		}
		wg.Wait()
		err = errors.Join(errs...)
	} else {
		for _, b := range batches {
			if err = run(b); err != nil {
				break
			}
		}
	}
	c.m.compacted.WithLabelValues("copyback").Add(float64(st.Copyback))
	c.m.compacted.WithLabelValues("read_program").Add(float64(st.ReadProgram))
	c.m.compacted.WithLabelValues("remote").Add(float64(st.Remote))
	c.m.compacted.WithLabelValues("host_copy").Add(float64(st.HostCopy))
	if err != nil {
		return st, &CompactionError{Moved: st.Total(), Err: err}
	}
	c.m.ops.WithLabelValues("compact").Inc()
	return st, nil
}

// plan splits copies into physical pieces at stripe and group boundaries of
// both sides, merging pieces that stay contiguous on both.
func (c *Client) plan(ctx context.Context, copies []Copy) ([]cpiece, error) {
	var out []cpiece
	for i, cp := range copies {
		src, dst := c.handle(cp.Src), c.handle(cp.Dst)
		if err := src.ensureLayout(ctx); err != nil {
			return nil, err
		}
		for o := uint64(0); o < cp.Blocks; {
			sg, err := src.groupAt(cp.SrcOff + o)
			if err != nil {
				return nil, fmt.Errorf("copies[%d] source: %w", i, err)
			}
			dg, err := dst.groupFor(ctx, cp.DstOff+o)
			if err != nil {
				return nil, fmt.Errorf("copies[%d] destination: %w", i, err)
			}
			if sg.redundant() || dg.redundant() {
				return nil, mirroredError(cp.Src, "zone_compaction")
			}
			so, do := cp.SrcOff+o, cp.DstOff+o
			si, szoff := sg.locate(so)
			di, dzoff := dg.locate(do)
			run := min(cp.Blocks-o, sg.stripe-(so-sg.start)%sg.stripe, dg.stripe-(do-dg.start)%dg.stripe)
			sz, dz := sg.zones[si], dg.zones[di]
			sd, err := c.device(ctx, sz)
			if err != nil {
				return nil, err
			}
			dd, err := c.device(ctx, dz)
			if err != nil {
				return nil, err
			}
			p := cpiece{src: sz, dst: dz, srcLBA: uint64(sz.zone)*sd.zoneSize + szoff, dstLBA: uint64(dz.zone)*dd.zoneSize + dzoff, n: run}
			if n := len(out); n > 0 {
				q := &out[n-1]
				if q.src == p.src && q.dst == p.dst && q.srcLBA+q.n == p.srcLBA && q.dstLBA+q.n == p.dstLBA {
					q.n += p.n
					o += run
					continue
				}
			}
			out = append(out, p)
			o += run
		}
	}
	return out, nil
}

// groupAt returns the allocated group holding off.
func (v *VZone) groupAt(off uint64) (*group, error) {
	_, groups := v.snapshot()
	for _, g := range groups {
		if off >= g.start && off < g.start+g.capacity {
			return g, nil
		}
	}
	return nil, &zerr.OutOfRangeError{LBA: off, Count: 1, Limit: v.allocatedEnd()}
}

// runBatch runs the pieces of one source device: one ZoneCompaction for
// in-drive and cross-node pieces, host copies for pieces to another device
// of the same node.
func (c *Client) runBatch(ctx context.Context, b []cpiece) (CompactStats, error) {
	var st CompactStats
	src := b[0].src
	req := &v1.ZoneCompactionRequest{Device: src.dev}
	var host []cpiece
	var remote []string // destination zones on other nodes: the PeerWrite grant's (peergrant.go)
	for _, p := range b {
		cc := &v1.CompactionCopy{SrcLba: p.srcLBA, Blocks: uint32(p.n), DstLba: p.dstLBA}
		switch {
		case p.dst.node == src.node && p.dst.dev == src.dev:
		case p.dst.node != src.node:
			if k := p.dstKey(); !slices.Contains(remote, k) {
				if c.cfg.TLS != nil && len(remote) == auth.MaxGrantZones {
					host = append(host, p) // past one grant's zones: copied by the client
					continue
				}
				remote = append(remote, k)
			}
			cc.Peer = &v1.PeerTarget{NodeId: p.dst.node, Addr: p.dst.addr, Device: p.dst.dev}
		default:
			host = append(host, p)
			continue
		}
		req.Copies = append(req.Copies, cc)
	}
	if len(req.Copies) > 0 {
		grant, err := c.peerWriteGrant(ctx, src.node, remote)
		if err != nil {
			return st, err
		}
		op, err := nodeCall(ctx, c, src.node, src.addr, "zone compaction", func(ctx context.Context, n v1.ZonedDeviceClient) (*v1.ZoneCompactionResponse, error) {
			return n.ZoneCompaction(auth.WithPeerGrant(ctx, grant), req)
		})
		if err != nil {
			return st, err
		}
		res, err := nodeCall(ctx, c, src.node, src.addr, "wait compaction", func(ctx context.Context, n v1.ZonedDeviceClient) (*v1.CompactionResult, error) {
			return n.WaitCompaction(ctx, &v1.WaitCompactionRequest{Device: src.dev, OperationId: op.GetOperationId()})
		})
		if err != nil {
			return st, err
		}
		st.Copyback, st.ReadProgram, st.Remote = res.GetCopybackBlocks(), res.GetReadProgramBlocks(), res.GetRemoteBlocks()
	}
	for _, p := range host {
		d, err := c.device(ctx, p.src)
		if err != nil {
			return st, err
		}
		data := make([]byte, p.n*d.bs)
		l := &leg{zoff: p.srcLBA - uint64(p.src.zone)*d.zoneSize, blocks: p.n, pieces: []piece{{voff: 0, n: p.n}}}
		if _, err := (&VZone{c: c}).readLeg(ctx, p.src, l, 0, data, d.bs); err != nil {
			return st, err
		}
		_, err = nodeCall(ctx, c, p.dst.node, p.dst.addr, "host copy write", func(ctx context.Context, n v1.ZonedDeviceClient) (struct{}, error) {
			return struct{}{}, writeBlocks(ctx, n, p.dst.dev, p.dstLBA, [][]byte{data}, false)
		})
		if err != nil {
			return st, err
		}
		st.HostCopy += p.n
	}
	return st, nil
}

// Compact on a handle copies from this v-zone.
func (v *VZone) Compact(ctx context.Context, copies []Copy) (CompactStats, error) {
	for i := range copies {
		copies[i].Src = v.id
	}
	return v.c.Compact(ctx, copies)
}
