package arbiter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Persisted layout (format 2); see the package doc for the rules.
const (
	storePrefix  = cluster.ArbiterPrefix + "s/"
	formatKey    = storePrefix + "format"
	metaKey      = storePrefix + "meta"
	nsPrefix     = storePrefix + "ns/"
	vzPrefix     = storePrefix + "vz/"
	nodePrefix   = storePrefix + "node/"
	formatV2     = 2
	loadPageSize = 500
)

// formatRecord is the format version key's value.
type formatRecord struct {
	Version  int    `json:"version"`
	Features uint64 `json:"features"` // no feature bits are defined yet; unknown bits refuse to load
}

// metaRecord holds the small global counters.
type metaRecord struct {
	Essentials uint32 `json:"essentials"`
	Spares     uint32 `json:"spares"`
	AllocSeq   uint64 `json:"alloc_seq"`
	Loans      []Loan `json:"loans,omitempty"`
}

// nsRecord is a namespace without its v-zones.
type nsRecord struct {
	Spec       NamespaceSpec `json:"spec"`
	CreatedAt  time.Time     `json:"created_at"`
	Essentials uint32        `json:"essentials"`
	Spares     uint32        `json:"spares"`
	LastAlloc  uint64        `json:"last_alloc"`
	EWMA       float64       `json:"ewma"`
	LastWrite  time.Time     `json:"last_write"`
	Frozen     bool          `json:"frozen,omitempty"`
	// the mount lease (mount.go)
	MountHolder  string `json:"mount_holder,omitempty"`
	MountExpires int64  `json:"mount_expires,omitempty"`
}

func nsKey(name string) string            { return nsPrefix + name }
func vzNSPrefix(name string) string       { return vzPrefix + name + "/" }
func vzKey(name string, id uint64) string { return fmt.Sprintf("%s%020d", vzNSPrefix(name), id) }
func nodeKey(id string) string            { return nodePrefix + id }

func metaOf(st *State) metaRecord {
	return metaRecord{Essentials: st.Essentials, Spares: st.Spares, AllocSeq: st.AllocSeq, Loans: st.Loans}
}

func nsRecordOf(ns *nsState) nsRecord {
	return nsRecord{Spec: ns.Spec, CreatedAt: ns.CreatedAt, Essentials: ns.Essentials, Spares: ns.Spares,
		LastAlloc: ns.LastAlloc, EWMA: ns.EWMA, LastWrite: ns.LastWrite, Frozen: ns.Frozen,
		MountHolder: ns.MountHolder, MountExpires: ns.MountExpires}
}

// ---- copy on write -------------------------------------------------------

type vzRef struct {
	NS string
	ID uint64
}

// changes records what a mutation touched on a forked State (copy on write).
type changes struct {
	nodes  map[string]bool
	vzones map[vzRef]bool
	ownMap map[string]bool // namespaces whose VZones map is private to the fork
	// ownNodes: the Nodes map is private to the fork
	ownNodes bool
	// base and baseIx are the committed state the fork started from and its
	// index (deriveIndex updates a copy of baseIx by the changed v-zones).
	base   *State
	baseIx *index
}

// fork returns a State sharing everything with st; mutations must go through
// the *Mut helpers below, which copy what they change and record it.
// Namespace records and the global counters are copied (they are few and
// small) and compared by value at commit.
func (st *State) fork() *State {
	c := &State{Essentials: st.Essentials, Spares: st.Spares, AllocSeq: st.AllocSeq, Loans: slices.Clone(st.Loans),
		Nodes: st.Nodes, Namespaces: make(map[string]*nsState, len(st.Namespaces)),
		ch: &changes{nodes: map[string]bool{}, vzones: map[vzRef]bool{}, ownMap: map[string]bool{}}}
	for name, ns := range st.Namespaces {
		cp := *ns
		c.Namespaces[name] = &cp
	}
	return c
}

func (st *State) ownVZones(name string) *nsState {
	ns := st.Namespaces[name]
	if ns != nil && st.ch != nil && !st.ch.ownMap[name] {
		ns.VZones = maps.Clone(ns.VZones)
		if ns.VZones == nil {
			ns.VZones = map[uint64]*VZone{}
		}
		st.ch.ownMap[name] = true
	}
	return ns
}

func (st *State) markVZ(name string, id uint64) {
	if st.ch != nil {
		st.ch.vzones[vzRef{name, id}] = true
	}
}

// mutVZ returns a private copy of a v-zone to change (nil if empty).
func (st *State) mutVZ(name string, id uint64) *VZone {
	ns := st.ownVZones(name)
	if ns == nil || ns.VZones[id] == nil {
		return nil
	}
	vz := ns.VZones[id].clone()
	ns.VZones[id] = vz
	st.markVZ(name, id)
	return vz
}

// putVZ stores a new v-zone record.
func (st *State) putVZ(name string, vz *VZone) {
	st.ownVZones(name).VZones[vz.ID] = vz
	st.markVZ(name, vz.ID)
}

// delVZ empties a v-zone.
func (st *State) delVZ(name string, id uint64) {
	if ns := st.ownVZones(name); ns != nil {
		delete(ns.VZones, id)
		st.markVZ(name, id)
	}
}

// ownNodes makes the Nodes map private to the fork (copy on first write).
func (st *State) ownNodes() {
	if st.ch != nil && !st.ch.ownNodes {
		st.Nodes = maps.Clone(st.Nodes)
		if st.Nodes == nil {
			st.Nodes = map[string]*nodeState{}
		}
		st.ch.ownNodes = true
	}
}

// putNode stores a node's shadow record; delNode forgets a node.
func (st *State) putNode(id string, n *nodeState) {
	st.ownNodes()
	st.Nodes[id] = n
	if st.ch != nil {
		st.ch.nodes[id] = true
	}
}

func (st *State) delNode(id string) {
	st.ownNodes()
	delete(st.Nodes, id)
	if st.ch != nil {
		st.ch.nodes[id] = true
	}
}

// dieSlotsOf returns st's flattened die groups, cached while the Nodes map
// is the same (maps are copied on write, never changed once committed).
// Only mutations call it (under the op lock).
func (a *Arbiter) dieSlotsOf(st *State) *dieSlots {
	p := reflect.ValueOf(st.Nodes).UnsafePointer()
	if p != a.slotsFor || a.slots == nil {
		a.slots, a.slotsFor = slotsOf(st, nil), p
	}
	return a.slots
}

func (v *VZone) clone() *VZone {
	c := *v
	c.Groups = cloneGroups(v.Groups)
	c.Pending = cloneGroups(v.Pending)
	c.Rebuilds = cloneGroups(v.Rebuilds)
	return &c
}

func cloneGroups(gs []StripeGroup) []StripeGroup {
	if gs == nil {
		return nil
	}
	out := make([]StripeGroup, len(gs))
	for i, g := range gs {
		g.Zones = slices.Clone(g.Zones)
		out[i] = g
	}
	return out
}

// ---- diff --------------------------------------------------------------

// stateOp is one write of a state key.
type stateOp struct {
	key    string
	val    []byte // nil: delete
	prefix bool   // delete the range under key (a deleted namespace's v-zones)
	kind   int    // opNode, opVZ, opMain (batch order when one transaction is too small)
}

const (
	opNode = iota
	opVZ
	opNS
	opMain
)

func encodeEq(a, b any) (bool, []byte, error) {
	nb, err := cluster.Encode(b)
	if err != nil {
		return false, nil, err
	}
	ob, err := cluster.Encode(a)
	if err != nil {
		return false, nil, err
	}
	return bytes.Equal(ob, nb), nb, nil
}

// diff returns the state key writes that turn old into st (a fork of old).
// Unchanged records are not written.
func diff(old, st *State) ([]stateOp, error) {
	var ops []stateOp
	if eq, b, err := encodeEq(metaOf(old), metaOf(st)); err != nil {
		return nil, err
	} else if !eq {
		ops = append(ops, stateOp{key: metaKey, val: b, kind: opMain})
	}
	for _, name := range sortedKeys(st.Namespaces) {
		rec := nsRecordOf(st.Namespaces[name])
		if o := old.Namespaces[name]; o != nil {
			eq, b, err := encodeEq(nsRecordOf(o), rec)
			if err != nil {
				return nil, err
			}
			if !eq {
				ops = append(ops, stateOp{key: nsKey(name), val: b, kind: opNS})
			}
			continue
		}
		b, err := cluster.Encode(rec)
		if err != nil {
			return nil, err
		}
		ops = append(ops, stateOp{key: nsKey(name), val: b, kind: opNS})
	}
	for _, name := range sortedKeys(old.Namespaces) {
		if st.Namespaces[name] == nil {
			ops = append(ops, stateOp{key: nsKey(name), kind: opMain}, stateOp{key: vzNSPrefix(name), prefix: true, kind: opMain})
		}
	}
	if st.ch == nil {
		return ops, nil
	}
	refs := slices.SortedFunc(maps.Keys(st.ch.vzones), func(a, b vzRef) int {
		if c := strings.Compare(a.NS, b.NS); c != 0 {
			return c
		}
		return int(a.ID) - int(b.ID)
	})
	for _, r := range refs {
		nns := st.Namespaces[r.NS]
		if nns == nil {
			continue // the namespace is gone: its range delete covers it
		}
		var ov, nv *VZone
		if ons := old.Namespaces[r.NS]; ons != nil {
			ov = ons.VZones[r.ID]
		}
		nv = nns.VZones[r.ID]
		switch {
		case nv == nil && ov != nil:
			ops = append(ops, stateOp{key: vzKey(r.NS, r.ID), kind: opVZ})
		case nv != nil:
			if ov != nil {
				eq, b, err := encodeEq(ov, nv)
				if err != nil {
					return nil, err
				}
				if !eq {
					ops = append(ops, stateOp{key: vzKey(r.NS, r.ID), val: b, kind: opVZ})
				}
				continue
			}
			b, err := cluster.Encode(nv)
			if err != nil {
				return nil, err
			}
			ops = append(ops, stateOp{key: vzKey(r.NS, r.ID), val: b, kind: opVZ})
		}
	}
	for _, id := range sortedKeys(st.ch.nodes) {
		ov, nv := old.Nodes[id], st.Nodes[id]
		switch {
		case nv == nil && ov != nil:
			ops = append(ops, stateOp{key: nodeKey(id), kind: opNode})
		case nv != nil:
			if ov != nil {
				eq, b, err := encodeEq(ov, nv)
				if err != nil {
					return nil, err
				}
				if !eq {
					ops = append(ops, stateOp{key: nodeKey(id), val: b, kind: opNode})
				}
				continue
			}
			b, err := cluster.Encode(nv)
			if err != nil {
				return nil, err
			}
			ops = append(ops, stateOp{key: nodeKey(id), val: b, kind: opNode})
		}
	}
	return ops, nil
}

// allOps writes a whole state (migration): every record.
func allOps(st *State) ([]stateOp, error) {
	empty := newState()
	c := st.fork()
	for name, ns := range st.Namespaces {
		for id := range ns.VZones {
			c.markVZ(name, id)
		}
	}
	for id := range st.Nodes {
		c.ch.nodes[id] = true
	}
	ops, err := diff(empty, c)
	if err != nil {
		return nil, err
	}
	if b, err := cluster.Encode(metaOf(st)); err == nil && !slices.ContainsFunc(ops, func(o stateOp) bool { return o.key == metaKey }) {
		ops = append(ops, stateOp{key: metaKey, val: b, kind: opMain})
	}
	return ops, nil
}

// ---- commit ------------------------------------------------------------

func (o stateOp) etcdOp() clientv3.Op {
	switch {
	case o.prefix:
		return clientv3.OpDelete(o.key, clientv3.WithPrefix())
	case o.val == nil:
		return clientv3.OpDelete(o.key)
	default:
		return clientv3.OpPut(o.key, string(o.val))
	}
}

// commitResult is what a commit wrote.
type commitResult struct {
	rev   int64 // revision of the last transaction (0: nothing written)
	txns  int
	bytes int // keys + values put
}

// errConflict: a state key's mod revision is not the one this leader last
// wrote (reload and retry).
var errConflict = errors.New("arbiter state changed under the leader")

// commit writes state ops and extra ops (grants, namespace records) with the
// leader fence. When everything fits MaxTxnOps it is one transaction.
// Otherwise (documented order, all under the serialized queue): node,
// v-zone and then namespace records beyond the budget go first in fenced
// batches, then one transaction with the rest (always the global record)
// plus as many extra ops as fit (grant deletes before grant puts), then the
// remaining extra ops in fenced batches. A crash between batches is repaired
// by the next leader before it serves (reprovisioning when the namespaces'
// shares do not match the nodes, reconcileGrants).
func (a *Arbiter) commit(ctx context.Context, t *term, sops []stateOp, extra []clientv3.Op) (commitResult, error) {
	var res commitResult
	if len(sops) == 0 && len(extra) == 0 {
		return res, nil
	}
	if t.inMemory() { // NewInMemory: publishing the fork is the commit
		return commitResult{txns: 1}, nil
	}
	budget := a.cfg.MaxTxnOps
	leaderCmp := clientv3.Compare(clientv3.CreateRevision(t.election.Key()), "=", t.election.Rev())
	// extra: deletes first, so a zone released and reused never carries two grants.
	slices.SortStableFunc(extra, func(x, y clientv3.Op) int {
		return boolInt(x.IsPut()) - boolInt(y.IsPut())
	})
	var pre [][]stateOp
	main := sops
	if len(sops)+len(extra) > budget-1 || len(sops)+1 > budget {
		slices.SortStableFunc(main, func(x, y stateOp) int { return x.kind - y.kind })
		for len(main) > budget-1 && main[0].kind != opMain {
			n := 0
			for n < len(main) && n < budget-1 && main[n].kind != opMain {
				n++
			}
			pre = append(pre, main[:n])
			main = main[n:]
		}
		if len(main) > budget-1 {
			return res, &zerr.InvalidArgumentError{Field: "mutation", Reason: fmt.Sprintf("%d global and namespace records exceed max_txn_ops %d", len(main), budget)}
		}
	}
	run := func(batch []stateOp, ex []clientv3.Op) error {
		cmps := []clientv3.Cmp{leaderCmp}
		var then []clientv3.Op
		for _, o := range batch {
			if !o.prefix {
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(o.key), "=", t.revs[o.key]))
			}
			then = append(then, o.etcdOp())
			res.bytes += len(o.key) + len(o.val)
		}
		for _, op := range ex {
			res.bytes += len(op.KeyBytes()) + len(op.ValueBytes())
		}
		then = append(then, ex...)
		resp, err := a.cli.Txn(ctx).If(cmps...).Then(then...).Else(clientv3.OpGet(t.election.Key())).Commit()
		if err != nil {
			a.setStale(t)
			return a.etcdError(err, "commit outcome unknown")
		}
		res.txns++
		if !resp.Succeeded {
			gr := resp.Responses[0].GetResponseRange()
			if gr == nil || len(gr.Kvs) == 0 || gr.Kvs[0].CreateRevision != t.election.Rev() {
				a.stepDown(t)
				return a.notLeader(ctx)
			}
			a.setStale(t)
			return errConflict
		}
		res.rev = resp.Header.Revision
		a.mu.Lock()
		for _, o := range batch {
			switch {
			case o.prefix:
				for k := range t.revs {
					if strings.HasPrefix(k, o.key) {
						delete(t.revs, k)
					}
				}
			case o.val == nil:
				delete(t.revs, o.key)
			default:
				t.revs[o.key] = resp.Header.Revision
			}
		}
		a.mu.Unlock()
		return nil
	}
	for _, b := range pre {
		if err := run(b, nil); err != nil {
			return res, err
		}
	}
	n := min(len(extra), budget-1-len(main))
	if err := run(main, extra[:n]); err != nil {
		return res, err
	}
	for rest := extra[n:]; len(rest) > 0; {
		k := min(len(rest), budget-1)
		if err := run(nil, rest[:k]); err != nil {
			// The state is committed but some grants are not: end the term so
			// the next one reconciles the grants before it serves.
			a.log.Warn("grant batch not committed; stepping down to reconcile", "err", err)
			a.stepDown(t)
			return res, err
		}
		rest = rest[k:]
	}
	return res, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// etcdError turns an etcd client error into a typed error; NOSPACE and other
// alarms are surfaced as such (and counted) rather than as a generic failure.
func (a *Arbiter) etcdError(err error, what string) error {
	if errors.Is(err, rpctypes.ErrNoSpace) || errors.Is(err, rpctypes.ErrGRPCNoSpace) || strings.Contains(err.Error(), rpctypes.ErrNoSpace.Error()) {
		a.m.alarm.WithLabelValues("nospace").Set(1)
		a.log.Error("etcd NOSPACE alarm: the control plane cannot change state until etcd is compacted, defragmented and the alarm disarmed", "err", err)
		return &zerr.UnavailableError{What: "etcd", Reason: "NOSPACE alarm (database quota exceeded): compact, defragment and disarm etcd: " + err.Error()}
	}
	if errors.Is(err, rpctypes.ErrCorrupt) || errors.Is(err, rpctypes.ErrGRPCCorrupt) {
		a.m.alarm.WithLabelValues("corrupt").Set(1)
		return &zerr.UnavailableError{What: "etcd", Reason: "CORRUPT alarm: " + err.Error()}
	}
	return &zerr.UnavailableError{What: "etcd", Reason: what + ": " + err.Error()}
}

// ---- load and migration --------------------------------------------------

// loadStore reads the format-2 records (or migrates the format-1 document).
// It returns the state and the mod revision of every state key.
func (a *Arbiter) loadStore(ctx context.Context, t *term) (*State, map[string]int64, error) {
	kvs, err := a.getPrefix(ctx, storePrefix)
	if err != nil {
		return nil, nil, err
	}
	st := newState()
	revs := map[string]int64{}
	var format *formatRecord
	for _, kv := range kvs {
		k := string(kv.Key)
		if k == formatKey {
			format = &formatRecord{}
			if err := cluster.Decode(k, kv.Value, format); err != nil {
				return nil, nil, err
			}
			break
		}
	}
	if format == nil {
		return a.migrate(ctx, t, kvs)
	}
	if format.Version != formatV2 || format.Features != 0 {
		return nil, nil, &zerr.CorruptError{Path: formatKey, Reason: fmt.Sprintf("format version %d features %#x: this arbiter reads version %d without features", format.Version, format.Features, formatV2)}
	}
	for _, kv := range kvs {
		k := string(kv.Key)
		revs[k] = kv.ModRevision
		switch {
		case k == formatKey:
		case k == metaKey:
			var m metaRecord
			if err := cluster.Decode(k, kv.Value, &m); err != nil {
				return nil, nil, err
			}
			st.Essentials, st.Spares, st.AllocSeq, st.Loans = m.Essentials, m.Spares, m.AllocSeq, m.Loans
		case strings.HasPrefix(k, nsPrefix):
			var r nsRecord
			if err := cluster.Decode(k, kv.Value, &r); err != nil {
				return nil, nil, err
			}
			name := strings.TrimPrefix(k, nsPrefix)
			ns := st.Namespaces[name]
			if ns == nil {
				ns = &nsState{VZones: map[uint64]*VZone{}}
				st.Namespaces[name] = ns
			}
			ns.Spec, ns.CreatedAt, ns.Essentials, ns.Spares = r.Spec, r.CreatedAt, r.Essentials, r.Spares
			ns.LastAlloc, ns.EWMA, ns.LastWrite, ns.Frozen = r.LastAlloc, r.EWMA, r.LastWrite, r.Frozen
			ns.MountHolder, ns.MountExpires = r.MountHolder, r.MountExpires
		case strings.HasPrefix(k, vzPrefix):
			name, idS, ok := strings.Cut(strings.TrimPrefix(k, vzPrefix), "/")
			id, err := strconv.ParseUint(idS, 10, 64)
			if !ok || err != nil {
				return nil, nil, &zerr.CorruptError{Path: k, Reason: "bad v-zone key"}
			}
			vz := &VZone{}
			if err := cluster.Decode(k, kv.Value, vz); err != nil {
				return nil, nil, err
			}
			if vz.ID != id {
				return nil, nil, &zerr.CorruptError{Path: k, Reason: fmt.Sprintf("record id %d does not match the key", vz.ID)}
			}
			ns := st.Namespaces[name]
			if ns == nil { // v-zone keys sort after their namespace keys ("ns/" < "vz/")
				return nil, nil, &zerr.CorruptError{Path: k, Reason: "v-zone of an unknown namespace"}
			}
			ns.VZones[id] = vz
		case strings.HasPrefix(k, nodePrefix):
			n := &nodeState{}
			if err := cluster.Decode(k, kv.Value, n); err != nil {
				return nil, nil, err
			}
			st.Nodes[strings.TrimPrefix(k, nodePrefix)] = n
		default:
			a.log.Warn("ignoring unknown arbiter state key", "key", k)
		}
	}
	st.normalize()
	return st, revs, nil
}

// getPrefix reads every key under prefix in pages, at one revision.
func (a *Arbiter) getPrefix(ctx context.Context, prefix string) ([]*mvccKV, error) {
	var out []*mvccKV
	end := clientv3.GetPrefixRangeEnd(prefix)
	key := prefix
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(loadPageSize)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := a.cli.Get(ctx, key, opts...)
		if err != nil {
			return nil, a.etcdError(err, "read state")
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			out = append(out, &mvccKV{Key: kv.Key, Value: kv.Value, ModRevision: kv.ModRevision})
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

type mvccKV struct {
	Key, Value  []byte
	ModRevision int64
}

// migrate converts the format-1 document (one JSON value at stateKey) into
// format-2 records, or starts a fresh store when there is none. Records are
// written in fenced batches; the last transaction writes the format key and
// deletes the old document (compared by its mod revision), so a crash
// before it leaves the old document authoritative and the next leader
// migrates again from scratch.
func (a *Arbiter) migrate(ctx context.Context, t *term, partial []*mvccKV) (*State, map[string]int64, error) {
	resp, err := a.cli.Get(ctx, stateKey)
	if err != nil {
		return nil, nil, a.etcdError(err, "read state")
	}
	st := newState()
	var oldRev int64
	if len(resp.Kvs) == 1 {
		if err := cluster.Decode(stateKey, resp.Kvs[0].Value, st); err != nil {
			return nil, nil, err
		}
		oldRev = resp.Kvs[0].ModRevision
		a.log.Info("migrating the arbiter state document to per-record keys", "bytes", len(resp.Kvs[0].Value))
	}
	st.normalize()
	ops, err := allOps(st)
	if err != nil {
		return nil, nil, err
	}
	fb, err := cluster.Encode(formatRecord{Version: formatV2})
	if err != nil {
		return nil, nil, err
	}
	leaderCmp := clientv3.Compare(clientv3.CreateRevision(t.election.Key()), "=", t.election.Rev())
	txn := func(cmps []clientv3.Cmp, then []clientv3.Op) error {
		r, err := a.cli.Txn(ctx).If(cmps...).Then(then...).Commit()
		if err != nil {
			return a.etcdError(err, "migrate state")
		}
		if !r.Succeeded {
			return &zerr.UnavailableError{What: "arbiter state", Reason: "leadership or state changed during migration"}
		}
		return nil
	}
	if len(partial) > 0 { // leftovers of an interrupted migration
		if err := txn([]clientv3.Cmp{leaderCmp}, []clientv3.Op{clientv3.OpDelete(storePrefix, clientv3.WithPrefix())}); err != nil {
			return nil, nil, err
		}
	}
	var batch []clientv3.Op
	for _, o := range ops {
		batch = append(batch, o.etcdOp())
		if len(batch) >= a.cfg.MaxTxnOps-1 {
			if err := txn([]clientv3.Cmp{leaderCmp}, batch); err != nil {
				return nil, nil, err
			}
			batch = nil
		}
	}
	batch = append(batch, clientv3.OpPut(formatKey, string(fb)))
	if oldRev > 0 {
		batch = append(batch, clientv3.OpDelete(stateKey))
	}
	if len(batch) > a.cfg.MaxTxnOps-2 {
		if err := txn([]clientv3.Cmp{leaderCmp}, batch[:len(batch)-2]); err != nil {
			return nil, nil, err
		}
		batch = batch[len(batch)-2:]
	}
	if err := txn([]clientv3.Cmp{leaderCmp, clientv3.Compare(clientv3.ModRevision(stateKey), "=", oldRev)}, batch); err != nil {
		return nil, nil, err
	}
	return a.loadStore(ctx, t)
}

// cloneState is a deep copy of st (through its JSON form).
func cloneState(st *State) (*State, error) {
	b, err := cluster.Encode(st)
	if err != nil {
		return nil, err
	}
	c := newState()
	if err := cluster.Decode(stateKey, b, c); err != nil {
		return nil, err
	}
	c.normalize()
	return c, nil
}

// deriveIndex is buildIndex(st) for a fork: a copy of the committed index
// updated by the v-zones the fork changed, so a mutation costs what it
// touches rather than every allocated zone (profiled: rebuilding the index
// was 40% of the CPU with 8k zones allocated). Changes of the node set or of
// the namespace set, and states that are not forks, are rebuilt in full.
//
// With overlay, the owner map is shared with the committed index (read
// only) and the changes go to an overlay: for the allocator, which only
// looks zones up; a published index is materialized.
func deriveIndex(st *State, overlay bool) *index {
	ch := st.ch
	if ch == nil || ch.base == nil || ch.baseIx == nil || ch.ownNodes || len(ch.base.Namespaces) != len(st.Namespaces) {
		return buildIndex(st)
	}
	for name := range st.Namespaces {
		if ch.base.Namespaces[name] == nil {
			return buildIndex(st)
		}
	}
	b := ch.baseIx
	ix := &index{owner: b.owner, devActive: maps.Clone(b.devActive), dieActive: maps.Clone(b.dieActive),
		usage: make(map[string]*nsUsage, len(b.usage)), busy: maps.Clone(b.busy), dieOwned: maps.Clone(b.dieOwned),
		ownerAdd: map[cluster.PhysZone]zoneOwner{}, ownerDel: map[cluster.PhysZone]bool{}}
	if b.ownerAdd != nil { // never: committed indexes are materialized
		return buildIndex(st)
	}
	for name, u := range b.usage {
		c := *u
		c.Lent, c.Borrowed, c.BorrowedLive, c.Recalled = 0, 0, 0, 0
		ix.usage[name] = &c
	}
	for r := range ch.vzones {
		var ov, nv *VZone
		if ns := ch.base.Namespaces[r.NS]; ns != nil {
			ov = ns.VZones[r.ID]
		}
		if ns := st.Namespaces[r.NS]; ns != nil {
			nv = ns.VZones[r.ID]
		}
		if ov != nil {
			ix.account(ch.base, r.NS, ov, false)
		}
		if nv != nil {
			ix.account(st, r.NS, nv, true)
		}
	}
	ix.accountLoans(st)
	if !overlay {
		ix.materialize()
	}
	return ix
}

// account adds (or removes) a v-zone's zones and resource use.
func (ix *index) account(st *State, name string, vz *VZone, add bool) {
	u := ix.usage[name]
	if u == nil {
		u = &nsUsage{}
		ix.usage[name] = u
	}
	step := func(v *uint32, d uint32) {
		if add {
			*v += d
		} else {
			*v -= d
		}
	}
	if vz.active() {
		step(&u.ActiveVZones, 1)
	}
	for _, g := range vz.allGroups() {
		if g.Open {
			step(&u.EssentialsInUse, g.Essentials)
			step(&u.SparesInUse, g.Spares)
		}
		for _, z := range g.Zones {
			if add {
				o := zoneOwner{Namespace: name, VZone: vz.ID, Group: g.Index, Open: g.Open}
				if ix.ownerAdd != nil {
					ix.ownerAdd[z] = o
					delete(ix.ownerDel, z)
				} else {
					ix.owner[z] = o
				}
				ix.busy[z.Node]++
				ix.markDie(st, z, true)
			} else {
				if ix.ownerAdd != nil {
					delete(ix.ownerAdd, z)
					ix.ownerDel[z] = true
				} else {
					delete(ix.owner, z)
				}
				if ix.busy[z.Node]--; ix.busy[z.Node] <= 0 {
					delete(ix.busy, z.Node)
				}
				ix.markDie(st, z, false)
			}
			if vz.zoneActive(&g) {
				dk, die := devKey{z.Node, z.Device}, st.dieOf(z)
				if add {
					ix.devActive[dk]++
					ix.dieActive[die]++
				} else {
					if ix.devActive[dk]--; ix.devActive[dk] == 0 {
						delete(ix.devActive, dk)
					}
					if ix.dieActive[die]--; ix.dieActive[die] == 0 {
						delete(ix.dieActive, die)
					}
				}
			}
		}
	}
}
