package node

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zoneowner"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Registration keeps a node's record in etcd under a lease. If the lease is
// lost (etcd unreachable longer than the TTL, e.g. a network partition), it
// registers again with a new lease as soon as etcd answers.
type Registration struct {
	cli *clientv3.Client
	rec cluster.NodeRecord
	ttl time.Duration
	log *slog.Logger

	mu      sync.Mutex
	lease   clientv3.LeaseID
	cancel  context.CancelFunc
	done    chan struct{}
	renewed int
	kept    int // keep-alive responses of the current lease
}

// Register puts rec under cluster.NodeKey(rec.ID) with a lease of ttl and keeps it alive.
func Register(ctx context.Context, cli *clientv3.Client, rec cluster.NodeRecord, ttl time.Duration, log *slog.Logger) (*Registration, error) {
	if err := rec.Validate(); err != nil {
		return nil, err
	}
	if ttl < time.Second {
		ttl = time.Second
	}
	r := &Registration{cli: cli, rec: rec, ttl: ttl, log: log, done: make(chan struct{})}
	// The keep-alives live as long as the registration, not the caller's
	// ctx: Close cancels kctx, which ends the keep-alive stream's channel at
	// once (otherwise it would close only at the next renewal, a third of
	// the TTL later, after the revoke).
	kctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	ka, err := r.put(ctx, kctx)
	if err != nil {
		cancel()
		return nil, err
	}
	go r.keepAlive(kctx, ka)
	return r, nil
}

// put grants a lease, puts the record under it and starts its keep-alives
// for as long as kctx lasts; ctx bounds the grant and the put.
func (r *Registration) put(ctx, kctx context.Context) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	val, err := cluster.EncodeNode(r.rec)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lease, err := r.cli.Grant(lctx, int64((r.ttl+time.Second-1)/time.Second))
	if err != nil {
		return nil, &zerr.UnavailableError{What: "etcd", Reason: "lease grant: " + err.Error()}
	}
	if _, err := r.cli.Put(lctx, cluster.NodeKey(r.rec.ID), string(val), clientv3.WithLease(lease.ID)); err != nil {
		return nil, &zerr.UnavailableError{What: "etcd", Reason: "register node: " + err.Error()}
	}
	ka, err := r.cli.KeepAlive(kctx, lease.ID)
	if err != nil {
		return nil, &zerr.UnavailableError{What: "etcd", Reason: "lease keep-alive: " + err.Error()}
	}
	r.mu.Lock()
	r.lease, r.kept = lease.ID, 0
	r.mu.Unlock()
	return ka, nil
}

func (r *Registration) keepAlive(ctx context.Context, ka <-chan *clientv3.LeaseKeepAliveResponse) {
	defer close(r.done)
	for {
		for range ka { // drain renewals until the lease is gone
			r.mu.Lock()
			r.kept++
			r.mu.Unlock()
		}
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("node lease lost; registering again", "node", r.rec.ID)
		backoff := 200 * time.Millisecond
		for {
			var err error
			if ka, err = r.put(ctx, ctx); err == nil {
				r.mu.Lock()
				r.renewed++
				r.mu.Unlock()
				r.log.Info("node registered again", "node", r.rec.ID)
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			if backoff < 5*time.Second {
				backoff *= 2
			}
		}
	}
}

// Reregistrations counts how often the lease was lost and registered again.
func (r *Registration) Reregistrations() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.renewed
}

// Close revokes the lease: the node disappears from the cluster at once.
func (r *Registration) Close(ctx context.Context) error {
	r.cancel()
	r.mu.Lock()
	lease := r.lease
	r.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := r.cli.Revoke(cctx, lease)
	<-r.done
	if err != nil {
		return fmt.Errorf("revoke node lease: %w", err)
	}
	return nil
}

// Grants is the node's cache of the arbiter's zone grants, kept current by an
// etcd watch on cluster.GrantsPrefix(node).
type Grants struct {
	cli      *clientv3.Client
	mu       sync.RWMutex
	m        map[[2]uint32]grantEntry
	synced   chan struct{}
	log      *slog.Logger
	node     string
	onRevoke func(device, zone uint32)
	resets   map[[2]uint32]*zoneReset // zones whose revocation reset is pending (under mu)
	workers  sync.WaitGroup           // running reset workers (WaitResets waits for them)
	// resetWaits counts the calls waiting for a pending reset (a test
	// waits for a check to block before asserting it has not returned).
	resetWaits atomic.Int64
	// drainWaits counts the calls in WaitResets.
	drainWaits atomic.Int64

	revMu sync.Mutex
	rev   int64         // etcd revision the cache reflects (every event up to it applied)
	revCh chan struct{} // closed when rev advances

	// Bounds of the minimum-revision waits (CatchUp).
	waiters      atomic.Int64 // calls waiting
	maxWaiters   int64        // 0 = wire.MaxRevisionWaiters (tests set less)
	lastProgress atomic.Int64 // unix nanoseconds of the last progress request
	// refusals counts CatchUp's refusals by limit (the node's
	// zonefleet_node_limit_refusals_total; nil: not counted).
	refusals *prometheus.CounterVec
}

func (g *Grants) refused(limit string) {
	if g.refusals != nil {
		g.refusals.WithLabelValues(limit).Inc()
	}
}

// grantEntry is a cached grant and its owner epoch: the etcd create
// revision of the grant key. A grant key is created when the arbiter gives
// the zone to a namespace and deleted when it takes it back, so every new
// assignment (even to the same namespace, even when the node never saw the
// deletion) carries a new epoch, while a rewrite of the same assignment (the
// arbiter's grant repair, a layout generation bump) keeps it. An overwrite
// that changes the namespace keeps the key's create revision but not the
// namespace, which the owner check compares too.
type grantEntry struct {
	g     cluster.Grant
	epoch uint64
}

// zoneReset is the per-zone worker of revocation resets: n resets are
// still to run for the zone; done closes when none is left.
type zoneReset struct {
	n    int
	done chan struct{}
}

// revokeLocked drops a grant from the cache and queues the zone's reset on
// its worker (g.mu held). The watch loop never waits for a reset: it goes
// on applying later events, while a pending reset keeps the zone out of
// reach (Cached is false, Check waits for it), so a new owner's I/O lands
// only after the zone was reset.
func (g *Grants) revokeLocked(k [2]uint32) {
	delete(g.m, k)
	if g.onRevoke == nil {
		return
	}
	if zr := g.resets[k]; zr != nil {
		zr.n++ // revoked again after a re-grant: reset once more after the current one
		return
	}
	zr := &zoneReset{n: 1, done: make(chan struct{})}
	if g.resets == nil {
		g.resets = map[[2]uint32]*zoneReset{}
	}
	g.resets[k] = zr
	g.workers.Add(1)
	go g.resetWorker(k, zr)
}

// WaitResets waits until no revocation reset is running. The node calls it
// after cancelling the watch and before closing its devices and owner
// files, which the resets use (a reset that starts after the cancel sees
// it and returns without touching them).
func (g *Grants) WaitResets() {
	g.drainWaits.Add(1)
	defer g.drainWaits.Add(-1)
	g.workers.Wait()
}

func (g *Grants) resetWorker(k [2]uint32, zr *zoneReset) {
	defer g.workers.Done()
	for {
		g.onRevoke(k[0], k[1])
		g.mu.Lock()
		zr.n--
		if zr.n == 0 {
			delete(g.resets, k)
			close(zr.done)
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
	}
}

// waitReset waits (up to the context) until no reset of the zone is pending.
func (g *Grants) waitReset(ctx context.Context, k [2]uint32) error {
	g.mu.RLock()
	zr := g.resets[k]
	g.mu.RUnlock()
	if zr == nil {
		return nil
	}
	g.resetWaits.Add(1)
	defer g.resetWaits.Add(-1)
	select {
	case <-zr.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PendingResets is the number of zones whose revocation reset has not run yet.
func (g *Grants) PendingResets() int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.resets)
}

func (g *Grants) setRev(r int64) {
	g.revMu.Lock()
	defer g.revMu.Unlock()
	if r > g.rev {
		g.rev = r
		close(g.revCh)
		g.revCh = make(chan struct{})
	}
}

// waitProgress waits until the cache reflects revision r, asking the watch
// for a progress notification every 100 ms: a request sent before the watch
// stream exists (or lost) is simply sent again. The request must carry the
// watch's own metadata (WithRequireLeader): etcd's client keys watch streams
// by it, and a request on another key reaches no watch.
//
// All waiters of the node share the progress requests: at most one per
// wire.RevisionProgressInterval goes to etcd, whatever the number of calls
// waiting.
func (g *Grants) waitProgress(ctx context.Context, r int64) error {
	for {
		now := time.Now().UnixNano()
		if last := g.lastProgress.Load(); now-last >= int64(wire.RevisionProgressInterval) && g.lastProgress.CompareAndSwap(last, now) {
			_ = g.cli.RequestProgress(clientv3.WithRequireLeader(ctx))
		}
		wctx, cancel := context.WithTimeout(ctx, wire.RevisionProgressInterval)
		err := g.waitRev(wctx, r)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
	}
}

// waitRev waits until the cache reflects revision r.
func (g *Grants) waitRev(ctx context.Context, r int64) error {
	for {
		g.revMu.Lock()
		if g.rev >= r {
			g.revMu.Unlock()
			return nil
		}
		ch := g.revCh
		g.revMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WatchGrants loads the node's grants and follows changes until ctx ends.
func WatchGrants(ctx context.Context, cli *clientv3.Client, nodeID string, log *slog.Logger) (*Grants, error) {
	return WatchGrantsFunc(ctx, cli, nodeID, log, nil)
}

// WatchGrantsFunc is WatchGrants with a callback for every grant that goes
// away (the arbiter returned the zone to the free pool): the node resets the
// zone so that its next owner finds it empty. The callback runs on a
// per-zone worker, never in the watch loop (a reset waits for the zone's
// I/O, and one slow reader must not stall every grant update of the node);
// until it has run, the zone counts as not granted to anyone (Cached) and
// Check waits for it, so a re-grant's I/O lands after the reset.
func WatchGrantsFunc(ctx context.Context, cli *clientv3.Client, nodeID string, log *slog.Logger, onRevoke func(device, zone uint32)) (*Grants, error) {
	g := &Grants{cli: cli, m: map[[2]uint32]grantEntry{}, synced: make(chan struct{}), log: log, node: nodeID, onRevoke: onRevoke, revCh: make(chan struct{})}
	rev, err := g.load(ctx, cli)
	if err != nil {
		return nil, err
	}
	close(g.synced)
	go g.follow(ctx, cli, rev)
	return g, nil
}

func (g *Grants) load(ctx context.Context, cli *clientv3.Client) (int64, error) {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.Get(lctx, cluster.GrantsPrefix(g.node), clientv3.WithPrefix())
	if err != nil {
		return 0, &zerr.UnavailableError{What: "etcd", Reason: "load grants: " + err.Error()}
	}
	m := map[[2]uint32]grantEntry{}
	for _, kv := range resp.Kvs {
		pz, gr, err := decodeGrant(string(kv.Key), kv.Value)
		if err != nil {
			g.log.Warn("ignoring malformed grant", "key", string(kv.Key), "err", err)
			continue
		}
		m[[2]uint32{pz.Device, pz.Zone}] = grantEntry{g: gr, epoch: uint64(kv.CreateRevision)}
	}
	g.mu.Lock()
	old := g.m
	g.m = m
	for k := range old {
		if _, ok := m[k]; !ok {
			g.revokeLocked(k)
		}
	}
	g.mu.Unlock()
	g.setRev(resp.Header.Revision)
	return resp.Header.Revision, nil
}

func decodeGrant(key string, val []byte) (cluster.PhysZone, cluster.Grant, error) {
	pz, err := cluster.ParseGrantKey(key)
	if err != nil {
		return pz, cluster.Grant{}, err
	}
	gr, err := cluster.DecodeGrant(key, val)
	return pz, gr, err
}

func (g *Grants) follow(ctx context.Context, cli *clientv3.Client, rev int64) {
	for ctx.Err() == nil {
		wch := cli.Watch(clientv3.WithRequireLeader(ctx), cluster.GrantsPrefix(g.node), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for resp := range wch {
			if err := resp.Err(); err != nil {
				g.log.Warn("grant watch interrupted", "err", err)
				break
			}
			for _, ev := range resp.Events {
				pz, err := cluster.ParseGrantKey(string(ev.Kv.Key))
				if err != nil {
					continue
				}
				k := [2]uint32{pz.Device, pz.Zone}
				if ev.Type == clientv3.EventTypeDelete {
					g.mu.Lock()
					if _, had := g.m[k]; had {
						g.revokeLocked(k) // marked pending before any later event of this zone applies
					}
					g.mu.Unlock()
					continue
				}
				if gr, err := cluster.DecodeGrant(string(ev.Kv.Key), ev.Kv.Value); err == nil {
					g.mu.Lock()
					g.m[k] = grantEntry{g: gr, epoch: uint64(ev.Kv.CreateRevision)}
					g.mu.Unlock()
				}
			}
			rev = resp.Header.Revision
			g.setRev(rev) // events and progress notifications alike
		}
		if ctx.Err() != nil {
			return
		}
		// Compacted or disconnected: load everything again, then watch on.
		time.Sleep(200 * time.Millisecond)
		if r, err := g.load(ctx, cli); err == nil {
			rev = r
		}
	}
}

// CatchUp waits until the cache reflects etcd revision rev, asking the watch
// for a progress notification if it is behind; it fails (UNAVAILABLE) after
// wire.RevisionWaitTimeout. The revision comes from the caller's metadata,
// so the wait is bounded: a revision more than wire.MaxRevisionLead past
// the cache's is refused at once, and so is a wait past
// wire.MaxRevisionWaiters calls waiting already (zerr.LimitError,
// RESOURCE_EXHAUSTED).
func (g *Grants) CatchUp(ctx context.Context, rev int64) error {
	g.revMu.Lock()
	cur := g.rev
	g.revMu.Unlock()
	if cur >= rev || g.cli == nil {
		return nil
	}
	if rev-cur > wire.MaxRevisionLead {
		g.refused("revision_lead")
		return &zerr.LimitError{What: fmt.Sprintf("minimum revision %d is %d past node %s's view of etcd (revision %d)", rev, rev-cur, g.node, cur), Limit: wire.MaxRevisionLead}
	}
	max := int64(wire.MaxRevisionWaiters)
	if g.maxWaiters > 0 {
		max = g.maxWaiters
	}
	if g.waiters.Add(1) > max {
		g.waiters.Add(-1)
		g.refused("revision_waiters")
		return &zerr.LimitError{What: fmt.Sprintf("calls waiting for a minimum revision on node %s", g.node), Limit: uint64(max)}
	}
	defer g.waiters.Add(-1)
	ctx, cancel := context.WithTimeout(ctx, wire.RevisionWaitTimeout)
	defer cancel()
	if err := g.waitProgress(ctx, rev); err != nil {
		return &zerr.UnavailableError{What: "node " + g.node, Reason: fmt.Sprintf("grants not yet at etcd revision %d", rev)}
	}
	return nil
}

// Check returns nil when namespace ns holds the grant of (device, zone). A
// miss in the cache is checked once more with a linearizable read of the
// grant's key: a grant the arbiter has just written may not have reached the
// watch yet, and a client that got it from the arbiter must not be refused.
func (g *Grants) Check(ns string, device, zone uint32) error {
	k := [2]uint32{device, zone}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := g.waitReset(ctx, k); err != nil {
		return &zerr.UnavailableError{What: "node " + g.node, Reason: fmt.Sprintf("zone %d/%d is still being reset after its revocation", device, zone)}
	}
	g.mu.RLock()
	gr, ok := g.m[k]
	g.mu.RUnlock()
	if ok && gr.g.Namespace == ns && ns != "" {
		return nil
	}
	if ns != "" && g.cli != nil {
		switch ok, err := g.catchUp(ns, device, zone); {
		case err != nil:
			return err
		case ok:
			return nil
		}
	}
	return &zerr.NotOwnerError{Zone: cluster.PhysZone{Node: g.node, Device: device, Zone: zone}.String(), Namespace: ns}
}

// catchUp handles a cache miss: if etcd holds a grant of the zone to ns, it
// waits until the watch has applied every event up to that read (a revocation
// of the zone before the new grant resets the zone first), then checks the
// cache again. Only then may the write land. It fails (UNAVAILABLE, to be
// retried) when etcd cannot be read or the grant it holds could not be
// applied in time: the caller may well own the zone.
func (g *Grants) catchUp(ns string, device, zone uint32) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	pz := cluster.PhysZone{Node: g.node, Device: device, Zone: zone}
	resp, err := g.cli.Get(ctx, cluster.GrantKey(g.node, device, zone))
	if err != nil {
		return false, &zerr.UnavailableError{What: "node " + g.node, Reason: fmt.Sprintf("grant of zone %s not readable: %v", pz, err)}
	}
	if len(resp.Kvs) != 1 {
		return false, nil
	}
	fresh, err := cluster.DecodeGrant(string(resp.Kvs[0].Key), resp.Kvs[0].Value)
	if err != nil || fresh.Namespace != ns {
		return false, nil
	}
	if g.waitProgress(ctx, resp.Kvs[0].ModRevision) != nil {
		return false, &zerr.UnavailableError{What: "node " + g.node, Reason: fmt.Sprintf("grants not yet at etcd revision %d (zone %s)", resp.Kvs[0].ModRevision, pz)}
	}
	if g.waitReset(ctx, [2]uint32{device, zone}) != nil {
		return false, &zerr.UnavailableError{What: "node " + g.node, Reason: fmt.Sprintf("zone %s is still being reset after its revocation", pz)}
	}
	g.mu.RLock()
	gr, ok := g.m[[2]uint32{device, zone}]
	g.mu.RUnlock()
	return ok && gr.g.Namespace == ns, nil
}

// Cached tells whether the cache holds a grant of (device, zone) to ns and
// no revocation reset of the zone is pending (no etcd access, no wait).
func (g *Grants) Cached(ns string, device, zone uint32) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	k := [2]uint32{device, zone}
	gr, ok := g.m[k]
	return ok && ns != "" && gr.g.Namespace == ns && g.resets[k] == nil
}

// Held tells whether the cache holds a grant of (device, zone) to ns,
// whether or not the revocation reset of an earlier grant is still pending
// (no etcd access, no wait).
func (g *Grants) Held(ns string, device, zone uint32) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	gr, ok := g.m[[2]uint32{device, zone}]
	return ok && ns != "" && gr.g.Namespace == ns
}

// Sealed tells whether the grant of (device, zone) is sealed: the arbiter
// is moving the zone's data and the namespace may read it, not write it.
func (g *Grants) Sealed(device, zone uint32) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	gr, ok := g.m[[2]uint32{device, zone}]
	return ok && gr.g.Sealed
}

// Since returns the etcd revision at which the grant of (device, zone) was
// created (its owner epoch), and false when the cache holds none.
func (g *Grants) Since(device, zone uint32) (int64, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	gr, ok := g.m[[2]uint32{device, zone}]
	return int64(gr.epoch), ok
}

// Current returns the owner the grant of (device, zone) gives the zone's
// data (namespace and owner epoch), and false when there is no grant or its
// revocation reset is still pending (no etcd access, no wait).
func (g *Grants) Current(device, zone uint32) (zoneowner.Owner, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	k := [2]uint32{device, zone}
	gr, ok := g.m[k]
	if !ok || g.resets[k] != nil {
		return zoneowner.Owner{}, false
	}
	return zoneowner.Owner{Namespace: gr.g.Namespace, Epoch: gr.epoch}, true
}

// Lookup returns the grant of (device, zone).
func (g *Grants) Lookup(device, zone uint32) (cluster.Grant, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	gr, ok := g.m[[2]uint32{device, zone}]
	return gr.g, ok
}

// Len is the number of granted zones.
func (g *Grants) Len() int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.m)
}

// WatchWeights follows the namespace records (cluster.NamespacesPrefix) until
// ctx ends and calls set with each namespace's weight (1 when a record goes).
// It loads the current records before returning.
func WatchWeights(ctx context.Context, cli *clientv3.Client, log *slog.Logger, set func(ns string, weight int)) error {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	resp, err := cli.Get(lctx, cluster.NamespacesPrefix(), clientv3.WithPrefix())
	cancel()
	if err != nil {
		return &zerr.UnavailableError{What: "etcd", Reason: "load namespaces: " + err.Error()}
	}
	apply := func(key string, val []byte) {
		rec, err := cluster.DecodeNamespace(key, val)
		if err != nil {
			log.Warn("ignoring malformed namespace record", "key", key, "err", err)
			return
		}
		set(rec.Name, int(max(rec.Weight, 1)))
	}
	for _, kv := range resp.Kvs {
		apply(string(kv.Key), kv.Value)
	}
	rev := resp.Header.Revision
	go func() {
		for ctx.Err() == nil {
			for wr := range cli.Watch(clientv3.WithRequireLeader(ctx), cluster.NamespacesPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
				if wr.Err() != nil {
					break
				}
				for _, ev := range wr.Events {
					key := string(ev.Kv.Key)
					if ev.Type == clientv3.EventTypeDelete {
						set(strings.TrimPrefix(key, cluster.NamespacesPrefix()), 1)
						continue
					}
					apply(key, ev.Kv.Value)
				}
				rev = wr.Header.Revision
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return nil
}
