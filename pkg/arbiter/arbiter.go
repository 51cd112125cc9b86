// Package arbiter is the eZNS zone arbiter of ZoneFleet: the control plane that
// hands out active physical zones of every ssdnode to tenant namespaces.
//
// # Replicas and state
//
// Several arbiters run against one etcd; one is elected leader
// (cluster.ElectionPrefix, the campaign value is the leader's address) and
// serves every request; the others answer *zerr.NotLeaderError{Leader}. The
// leader holds the control state in memory and persists it in etcd as many
// small records, so that a change writes only what it touches (bytes per
// change do not grow with the cluster). Mutations are serialized by one queue
// (the op lock), which is also the eZNS serialized allocation queue; reads
// use the last committed state without waiting for it. A new leader reloads
// the records, reconciles the node registrations and the grant keys, rolls
// back a reclaim its predecessor left half done, and only then serves.
//
// # Key layout (format 2)
//
// Under cluster.ArbiterPrefix+"s/" (store.go):
//
//	format               {"version":2,"features":0}; other versions or unknown feature bits refuse to load
//	meta                 N_essential, N_spare, the allocation clock and the overdrive loans (small, global)
//	ns/<name>            a namespace: spec, provisioned essentials/spares, EWMA, activity, frozen
//	vz/<name>/<%020d id> a non-empty v-zone: state, generation, stripe groups, reclaim targets,
//	                     incarnation and threaded logging (omitted when zero/false: older records read unchanged; tl.go)
//	node/<id>            the shadow view of a node: its last registration, availability, when lost
//
// Nodes' grants stay at cluster.GrantKey and namespace records at
// cluster.NamespaceKey. Format 1 was one JSON document at
// cluster.ArbiterPrefix+"state"; a leader that finds no format key migrates
// it: it writes the records in fenced batches and, in its last transaction
// (comparing the document's mod revision), the format key and the
// document's deletion, so an interrupted migration starts over.
//
// # Transaction rules
//
// A mutation runs on a copy-on-write fork of the state; the records it
// changed are found by comparing their encodings with the committed ones (a
// mutation that changes nothing writes nothing). They are written in one
// transaction that compares the leader's election key (the fence) and the
// ModRevision of every written key with the revision this leader last wrote
// or read (a mismatch reloads and retries; a lost fence steps down), together
// with the grant ops of the change: a zone's layout and its grant change
// atomically. When a change exceeds MaxTxnOps (etcd --max-txn-ops) it is
// split in this order, under the queue, every batch fenced: first node and
// v-zone and namespace records beyond the budget, then one transaction with
// the rest (the global record) and as many grant ops as fit (revocations
// first), then the remaining grant ops. A zone is never exposed to two owners: a free zone
// has no grant key, a new grant is written only after the state owns the
// zone, and a released zone is reused only after its revocation completed
// (the queue) or after the next leader's reconcileGrants, which runs before
// it serves; a failed trailing batch ends the term for that reason.
//
// Mutations that arrive while the queue is busy are committed as a group:
// each runs on the state the previous ones left (a refused one fails alone)
// and their records and grant ops go in one transaction; a member whose
// grant ops touch a key of another member (a zone released and allocated
// again) or that would overflow one transaction waits for the next group,
// so the rule above holds (mutate).
//
// # Compaction
//
// The leader compacts etcd's history every CompactInterval at the revision it
// observed one interval earlier (history newer than that stays for watchers
// and the election), and polls etcd's alarms: NOSPACE turns every mutation
// into an *zerr.UnavailableError naming the alarm and sets the
// zonefleet_arbiter_etcd_alarm gauge; it never stalls silently.
//
// # Resources (eZNS §4.4)
//
// A device contributes min(FCGs, MAR) essentials (one active zone per flash
// chip group saturates its write bandwidth) and MAR minus that as spares.
// Namespaces share N_essential and N_spare by weight; a namespace's minimum
// stripe width is its essentials over MAR_logical, rounded down to a power of
// two. A stripe group takes that many essentials plus spares reaped by local
// overdrive (namespace spares / EWMA of its active v-zones), rounded down to
// a power of two, on distinct die groups (node, device, FCG), least populated
// dies first, spread across nodes. Global overdrive lends the unused spares
// of namespaces without an allocation in the last N_essential zone
// allocations to the active ones; a lender that allocates again recalls them
// and they return at the borrower's next stripe-group finish or reset.
// Reclaim compacts the overdriven open stripe groups of a namespace without
// writes for T_ReadOnly into minimum-width groups through a Compactor, in
// phases: only the state transitions take the queue; the copy runs outside
// it (bounded by ReclaimTimeout) and commits with a generation check. The
// source zones' grants are sealed for the copy (the nodes refuse the
// namespace's writes to them), the write pointers are read again at the
// seal's revision before the commit, and a write the namespace reports
// meanwhile gives the reclaim up at once (rolled back, unsealed): no
// acknowledged write is lost with the source zones' reset, and no writer
// waits for a long copy.
//
// # Redundancy
//
// A mirror:N namespace's stripe group lists width × N zones, the copies of
// a leg on distinct nodes (pickCopies); a raid5 namespace's lists width
// data legs and a parity leg on width+1 distinct nodes plus two
// partial-parity log zones on the parity leg's node (pickParity; pkg/client
// parity.go has the data layout and why the parity leg is fixed). Both
// narrow the width until the group fits, count every zone as an active
// zone of the namespace (its minimum width and needed essentials too), and
// are never reclaimed (the copy would have to keep the copies or the
// parity). Copies on down nodes are rebuilt node to node (rebuild.go), and
// so are lost legs of parity groups: the target's node pulls the rows of
// the surviving legs and XORs them (rebuildParityOne, pkg/node rebuild.go);
// until then the group stays degraded.
//
// # Activity
//
// Write activity (for T_ReadOnly) is signalled by allocations (OpenVZone,
// NextStripeGroup) and by ReportWrite (gRPC ReportActivity), which clients
// call at least once per T_ReadOnly/2 while a namespace writes. It is kept in
// the leader's memory: a new leader starts every namespace's T_ReadOnly afresh.
package arbiter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// stateKey held the whole State as one JSON document (format 1); it is
// migrated to the per-record keys of store.go and deleted.
const stateKey = cluster.ArbiterPrefix + "state"

// Config configures an arbiter.
type Config struct {
	// Addr is this arbiter's gRPC address, published as the election value.
	Addr string
	// ID names this arbiter in ClusterStatus (optional; default Addr).
	ID string
	// SessionTTL is the etcd lease TTL of the leadership (rounded to seconds, min 1s). Default 5s.
	SessionTTL time.Duration
	// Clock is what the arbiter waits on: the reclaim, node, rebuild and
	// compaction ticks and the pause between leadership terms. Default the
	// wall clock (clock.Realtime(1) for each Run). Under a virtual clock the
	// ticks fire as the clock is advanced, and nothing waits on wall time.
	Clock clock.Clock
	// Now is the clock used for every timestamp and for T_ReadOnly. Default
	// Clock's time from the wall time at New when Clock is set, else
	// time.Now.
	Now func() time.Time
	// TReadOnly: a namespace with no writes for this long is frozen and reclaimed. Default 5m.
	TReadOnly time.Duration
	// ReclaimInterval is how often the leader looks for frozen namespaces (on
	// Clock). 0 means TReadOnly/4; negative disables the background check
	// (CheckReclaim can still be called).
	ReclaimInterval time.Duration
	// EWMAAlpha weighs the newest sample of active v-zones in local overdrive. Default 0.5.
	EWMAAlpha float64
	// BaseStripeSize is the stripe size at minimum width, bytes. Default 32 KiB.
	BaseStripeSize uint32
	// MaxTxnOps bounds operations per etcd transaction (etcd's --max-txn-ops). Default 128.
	MaxTxnOps int
	// ReclaimTimeout bounds the node I/O of one v-zone's reclaim (write
	// pointers and copies); past it the reclaim is rolled back. Default 10m.
	ReclaimTimeout time.Duration
	// CompactInterval: the leader compacts etcd's history every interval at
	// the revision of the previous tick and polls etcd's alarms. Default 5m;
	// negative disables (etcd's own auto-compaction may then do it).
	CompactInterval time.Duration
	// NodeDownAfter: a node whose registration is gone this long is marked
	// down and its records are removed once it holds no allocated zone.
	// Default 10m; negative disables.
	NodeDownAfter time.Duration
	// RebuildInterval: the leader looks for copies of mirrored legs on down
	// nodes to rebuild this often (and at once when a node is declared
	// lost or goes down). Default 10s; negative disables.
	RebuildInterval time.Duration
	// MaxShare is the default capacity share of a namespace without a
	// capacity quota (NamespaceSpec.VZones): the fraction of the cluster's
	// physical zones it may hold, so that no tenant takes the last free
	// zones from the others. A namespace with a quota is bound by its quota
	// instead (its zones reserved). Default DefaultMaxShare; negative or >= 1
	// disables the cap.
	MaxShare float64
	// Registerer receives the arbiter's metrics; nil means none are registered.
	Registerer prometheus.Registerer
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultMaxShare is Config.MaxShare's default: a namespace without a quota
// holds at most half of the cluster's physical zones.
const DefaultMaxShare = 0.5

func (c *Config) setDefaults() error {
	if c.Addr == "" {
		return &zerr.InvalidArgumentError{Field: "addr", Reason: "the arbiter's address is required"}
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = 5 * time.Second
	}
	if c.MaxShare == 0 {
		c.MaxShare = DefaultMaxShare
	}
	if c.Now == nil {
		c.Now = time.Now
		if clk := c.Clock; clk != nil && clk.Kind() != clock.KindOff {
			epoch := time.Now().Add(-clk.Now())
			c.Now = func() time.Time { return epoch.Add(clk.Now()) }
		}
	}
	if c.TReadOnly <= 0 {
		c.TReadOnly = 5 * time.Minute
	}
	if c.ReclaimInterval == 0 {
		c.ReclaimInterval = c.TReadOnly / 4
	}
	if c.EWMAAlpha <= 0 || c.EWMAAlpha > 1 {
		c.EWMAAlpha = 0.5
	}
	if c.BaseStripeSize == 0 {
		c.BaseStripeSize = 32 << 10
	}
	if c.ReclaimTimeout <= 0 {
		c.ReclaimTimeout = 10 * time.Minute
	}
	if c.CompactInterval == 0 {
		c.CompactInterval = 5 * time.Minute
	}
	if c.NodeDownAfter == 0 {
		c.NodeDownAfter = 10 * time.Minute
	}
	if c.RebuildInterval == 0 {
		c.RebuildInterval = 10 * time.Second
	}
	if c.MaxTxnOps <= 0 {
		c.MaxTxnOps = 128
	}
	if c.MaxTxnOps < 8 {
		return &zerr.InvalidArgumentError{Field: "max_txn_ops", Reason: "must be at least 8"}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Arbiter is one arbiter replica.
type Arbiter struct {
	cfg  Config
	cli  *clientv3.Client
	comp Compactor
	log  *slog.Logger
	m    *metrics

	opMu sync.Mutex // the serialized queue: every mutation holds it

	groupMu sync.Mutex
	group   []*member // mutations waiting for the next group commit (mutate)

	mu   sync.RWMutex
	term *term // non-nil while leader

	rebuildMu    sync.Mutex  // one CheckRebuild at a time (rebuild.go)
	rebuildBusy  atomic.Bool // a background rebuild runs (triggerRebuild)
	rebuildAgain atomic.Bool // triggered while it ran: scan again

	actMu     sync.Mutex
	lastWrite map[string]time.Time // in-memory write activity (leader)
	// actWait: channels closed at a namespace's next reported write (a
	// reclaim copying its data gives up at once).
	actWait map[string][]chan struct{}

	runMu   sync.Mutex
	running bool

	crashed atomic.Bool  // test hook: stop like a crash (no lease revocation)
	lastRev atomic.Int64 // etcd revision of the last commit (compaction)

	slots    *dieSlots      // die groups of the Nodes map at slotsFor (op lock)
	slotsFor unsafe.Pointer // identity of that map
	candBuf  []candidate    // reused by the allocator (op lock)
}

// term is one leadership term.
type term struct {
	session  *concurrency.Session
	election *concurrency.Election
	state    *State // committed state; never mutated in place
	ix       *index
	revs     map[string]int64 // mod revision of every state key (absent: 0)
	stale    bool             // an etcd call had an unknown outcome; reload before the next op
	ready    bool             // startup reconciliation done: serving requests
	// rev is the etcd revision of this term's last commit, 0 before the
	// first one and after an etcd call with an unknown outcome. Every grant
	// the state names was written at or below it: the term loaded the state
	// before its first commit, and an outcome it does not know resets it.
	rev atomic.Int64
}

// New makes an arbiter; it does nothing until Run. comp may be nil, in which
// case reclaim of stripe groups holding data fails with UnavailableError.
func New(cfg Config, cli *clientv3.Client, comp Compactor) (*Arbiter, error) {
	if cli == nil {
		return nil, &zerr.InvalidArgumentError{Field: "etcd client", Reason: "nil"}
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Arbiter{cfg: cfg, cli: cli, comp: comp, log: cfg.Logger.With("arbiter", cfg.Addr), m: m,
		lastWrite: map[string]time.Time{}}, nil
}

// Addr is this arbiter's address.
func (a *Arbiter) Addr() string { return a.cfg.Addr }

// Run campaigns for leadership and, while leader, serves the state, watches
// node registrations and runs reclaim. It returns when ctx is done.
func (a *Arbiter) Run(ctx context.Context) error {
	a.runMu.Lock()
	if a.running {
		a.runMu.Unlock()
		return &zerr.InvalidArgumentError{Field: "run", Reason: "arbiter is already running"}
	}
	a.running = true
	a.runMu.Unlock()
	defer func() {
		a.runMu.Lock()
		a.running = false
		a.runMu.Unlock()
	}()
	clk := a.cfg.Clock
	if clk == nil {
		rt := clock.Realtime(1)
		defer rt.Stop()
		clk = rt
	}
	for ctx.Err() == nil {
		if err := a.runTerm(ctx, clk); err != nil && ctx.Err() == nil {
			a.log.Warn("leadership term ended", "err", err)
		}
		_ = clock.Sleep(ctx, clk, 100*time.Millisecond) // the pause before campaigning again
	}
	return nil
}

func (a *Arbiter) runTerm(ctx context.Context, clk clock.Clock) error {
	ttl := max(int((a.cfg.SessionTTL+time.Second-1)/time.Second), 1)
	// The session outlives ctx so that a graceful stop can revoke the lease
	// (immediate failover); a crash leaves the lease to expire after its TTL.
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	defer scancel()
	sess, err := concurrency.NewSession(a.cli, concurrency.WithTTL(ttl), concurrency.WithContext(sctx))
	if err != nil {
		return err
	}
	defer func() {
		if a.crashed.Load() {
			sess.Orphan()
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_, _ = a.cli.Revoke(rctx, sess.Lease())
		sess.Orphan()
	}()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sess.Done():
			cancel()
		case <-cctx.Done():
		}
	}()
	el := concurrency.NewElection(sess, cluster.ElectionPrefix)
	if err := el.Campaign(cctx, a.cfg.Addr); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	a.log.Info("elected leader")
	t := &term{session: sess, election: el}
	if err := a.load(cctx, t); err != nil {
		return err
	}
	a.mu.Lock()
	a.term = t
	a.mu.Unlock()
	a.actMu.Lock()
	a.lastWrite = map[string]time.Time{} // grace: T_ReadOnly counts from the later of this and persisted activity
	now := a.cfg.Now()
	for name := range t.state.Namespaces {
		a.lastWrite[name] = now
	}
	a.actMu.Unlock()
	a.m.leader.Set(1)
	defer func() {
		a.opMu.Lock()
		a.mu.Lock()
		a.term = nil
		a.mu.Unlock()
		a.opMu.Unlock()
		a.m.leader.Set(0)
		a.m.clearNamespaces()
		a.log.Info("leadership lost")
	}()

	// Shadow view: list node registrations, reconcile, then watch from there.
	resp, err := a.cli.Get(cctx, cluster.NodesPrefix(), clientv3.WithPrefix())
	if err != nil {
		return err
	}
	recs := map[string]cluster.NodeRecord{}
	for _, kv := range resp.Kvs {
		if rec, err := a.decodeNodeKV(kv.Key, kv.Value); err == nil {
			recs[rec.ID] = rec
		}
	}
	if err := a.syncNodes(cctx, recs, nil, true); err != nil {
		return err
	}
	if err := a.abortReclaims(cctx); err != nil {
		return err
	}
	if err := a.reconcileGrants(cctx); err != nil {
		return err
	}
	a.mu.Lock()
	t.ready = true
	a.mu.Unlock()
	a.log.Info("serving as leader")
	a.refreshMetrics()

	wch := a.cli.Watch(clientv3.WithRequireLeader(cctx), cluster.NodesPrefix(), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	var tick <-chan struct{}
	if a.cfg.ReclaimInterval > 0 {
		c, stop := every(clk, a.cfg.ReclaimInterval)
		defer stop()
		tick = c
	}
	var downTick <-chan struct{}
	if a.cfg.NodeDownAfter > 0 {
		c, stop := every(clk, max(a.cfg.NodeDownAfter/4, time.Second))
		defer stop()
		downTick = c
	}
	var rebuildTick <-chan struct{}
	if a.cfg.RebuildInterval > 0 {
		c, stop := every(clk, a.cfg.RebuildInterval)
		defer stop()
		rebuildTick = c
	}
	var compact <-chan struct{}
	hist := &historyKeeper{}
	if a.cfg.CompactInterval > 0 {
		c, stop := every(clk, a.cfg.CompactInterval)
		defer stop()
		compact = c
		if err := a.historyTick(cctx, hist); err != nil {
			a.log.Warn("etcd compaction failed", "err", err)
		}
	}
	for {
		select {
		case <-cctx.Done():
			return cctx.Err()
		case wr, ok := <-wch:
			if !ok {
				return errors.New("node watch closed")
			}
			if err := wr.Err(); err != nil {
				return fmt.Errorf("node watch: %w", err)
			}
			up := map[string]cluster.NodeRecord{}
			var gone []string
			for _, ev := range wr.Events {
				id, err := cluster.ParseNodeKey(string(ev.Kv.Key))
				if err != nil {
					continue
				}
				if ev.Type == clientv3.EventTypeDelete {
					delete(up, id)
					gone = append(gone, id)
					continue
				}
				if rec, err := a.decodeNodeKV(ev.Kv.Key, ev.Kv.Value); err == nil {
					up[id] = rec
					gone = deleteString(gone, id)
				}
			}
			if err := a.syncNodes(cctx, up, gone, false); err != nil && !errors.Is(err, zerr.ErrNotLeader) {
				a.log.Warn("node sync failed", "err", err)
			}
		case <-tick:
			if _, err := a.CheckReclaim(cctx); err != nil && !errors.Is(err, zerr.ErrNotLeader) && cctx.Err() == nil {
				a.log.Warn("reclaim check failed", "err", err)
			}
		case <-downTick:
			if err := a.CheckNodes(cctx); err != nil && !errors.Is(err, zerr.ErrNotLeader) && cctx.Err() == nil {
				a.log.Warn("dead node check failed", "err", err)
			}
			a.triggerRebuild(cctx)
		case <-rebuildTick:
			a.triggerRebuild(cctx)
		case <-compact:
			if err := a.historyTick(cctx, hist); err != nil && cctx.Err() == nil {
				a.log.Warn("etcd compaction failed", "err", err)
			}
		}
	}
}

// every returns a channel that gets a token every d of clk's time, and the
// function that stops it. Like a time.Ticker it holds one token at most (a
// slow receiver misses ticks) and skips the ticks a jump of the clock
// passed over. The clock's callback never blocks: it only offers the token
// and arms the next tick.
func every(clk clock.Clock, d time.Duration) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	var mu sync.Mutex
	stopped := false
	var cancel func() bool
	var arm func(at time.Duration)
	arm = func(at time.Duration) {
		cancel = clk.AfterFunc(at, func() {
			select {
			case ch <- struct{}{}:
			default:
			}
			mu.Lock()
			defer mu.Unlock()
			if !stopped {
				next := at + d
				if now := clk.Now(); next <= now {
					next = now + d
				}
				arm(next)
			}
		})
	}
	mu.Lock()
	arm(clk.Now() + d)
	mu.Unlock()
	return ch, func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		cancel()
	}
}

func deleteString(s []string, v string) []string {
	out := s[:0]
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}

func (a *Arbiter) decodeNodeKV(k, v []byte) (cluster.NodeRecord, error) {
	rec, err := cluster.DecodeNode(string(k), v)
	if err != nil {
		a.log.Warn("ignoring bad node registration", "key", string(k), "err", err)
		return rec, err
	}
	if id, _ := cluster.ParseNodeKey(string(k)); id != rec.ID {
		err := &zerr.CorruptError{Path: string(k), Reason: fmt.Sprintf("record id %q does not match key", rec.ID)}
		a.log.Warn("ignoring bad node registration", "key", string(k), "err", err)
		return rec, err
	}
	return rec, nil
}

// load reads the state records (migrating a format-1 document) and
// publishes them in t.
func (a *Arbiter) load(ctx context.Context, t *term) error {
	st, revs, err := a.loadStore(ctx, t)
	if err != nil {
		return err
	}
	a.mu.Lock()
	t.revs = revs
	a.mu.Unlock()
	a.publish(t, st, buildIndex(st))
	return nil
}

// notLeader builds the NotLeaderError with the current leader's address.
func (a *Arbiter) notLeader(ctx context.Context) error {
	addr, _ := a.LeaderAddr(ctx)
	if addr == a.cfg.Addr {
		addr = ""
	}
	return &zerr.NotLeaderError{Leader: addr}
}

// IsLeader reports whether this arbiter currently serves as leader.
func (a *Arbiter) IsLeader() bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.term != nil && a.term.ready
}

// LeaderAddr returns the address of the current leader ("" if none is elected).
func (a *Arbiter) LeaderAddr(ctx context.Context) (string, error) {
	if a.IsLeader() {
		return a.cfg.Addr, nil
	}
	resp, err := a.cli.Get(ctx, cluster.ElectionPrefix+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", &zerr.UnavailableError{What: "etcd", Reason: err.Error()}
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// snapshot returns the committed state (read-only) while leader.
func (a *Arbiter) snapshot(ctx context.Context) (*State, *index, error) {
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
		return nil, nil, a.notLeader(ctx)
	}
	return st, ix, nil
}

// mutation changes st (a private copy) and returns the etcd ops to commit with
// it (grants). An error leaves nothing changed.
type mutation func(st *State, ix *index) ([]clientv3.Op, error)

// mutate runs fn on a fork of the state (copy on write) and commits the
// records it changed, with its extra ops (grants), through commit: one
// transaction guarded by the changed keys' mod revisions and this arbiter's
// leadership whenever it fits MaxTxnOps. A mutation that changes nothing
// writes nothing.
//
// Group commit: mutations that arrive while another one holds the queue
// wait in a.group; whichever caller takes the queue next runs all of them,
// each on the state the previous ones left (a failing one is dropped and
// gets its own error), and commits their records and grant ops in one
// transaction: one etcd round trip and one WAL sync for all. A member whose
// grant ops touch a key another member of the group touches (a zone one
// releases and the next one allocates), or that would take the group past
// one transaction, waits for the next group. When the group's commit meets
// a conflict every member runs again on its own; any other failure (etcd
// unavailable, an unknown outcome, leadership lost) is every member's
// answer, as it would have been had it run alone.
func (a *Arbiter) mutate(ctx context.Context, fn mutation) error {
	m := &member{ctx: ctx, fn: fn, done: make(chan struct{})}
	a.groupMu.Lock()
	a.group = append(a.group, m)
	a.groupMu.Unlock()
	a.opMu.Lock()
	defer a.opMu.Unlock()
	for {
		select {
		case <-m.done:
			return m.err
		default:
		}
		a.groupMu.Lock()
		g := a.group
		a.group = nil
		a.groupMu.Unlock()
		a.runGroup(ctx, g)
	}
}

// member is one mutation waiting for a group commit.
type member struct {
	ctx  context.Context
	fn   mutation
	done chan struct{} // closed with err set once it ran (or failed)
	err  error
}

func (m *member) finish(err error) {
	m.err = err
	close(m.done)
}

// runGroup runs and commits the waiting mutations g (op lock held); members
// held back go back to the front of the queue.
func (a *Arbiter) runGroup(ctx context.Context, g []*member) {
	live := g[:0:0]
	for _, m := range g {
		if err := m.ctx.Err(); err != nil {
			m.finish(err) // the caller gave up before it ran: nothing changed
			continue
		}
		live = append(live, m)
	}
	if len(live) == 0 {
		return
	}
	if len(live) == 1 {
		live[0].finish(a.mutateTerm(live[0].ctx, false, live[0].fn))
		return
	}
	// The group's etcd calls run on a live member's context, not on the
	// draining caller's: a caller whose request was cancelled while it
	// waited for the queue must not fail the others' commit.
	ctx = live[0].ctx
	a.mu.RLock()
	t := a.term
	ok := t != nil && t.ready
	a.mu.RUnlock()
	if !ok {
		err := a.notLeader(ctx)
		for _, m := range live {
			m.finish(err)
		}
		return
	}
	if t.stale {
		if err := a.load(ctx, t); err != nil {
			for _, m := range live {
				m.finish(err)
			}
			return
		}
	}
	old, oldIx := t.state, t.ix
	cur, curIx := old, oldIx
	var (
		extra   []clientv3.Op
		keys    = map[string]bool{}
		in      []*member
		held    []*member
		changed = &changes{nodes: map[string]bool{}, vzones: map[vzRef]bool{}}
	)
	budget := a.cfg.MaxTxnOps - 8 // the global and namespace records, the fence
	for _, m := range live {
		st := cur.fork()
		st.ch.base, st.ch.baseIx = cur, curIx
		var before []byte
		if cowCheck {
			before, _ = cluster.Encode(cur)
		}
		ops, err := m.fn(st, curIx)
		if cowCheck {
			if after, _ := cluster.Encode(cur); !bytes.Equal(before, after) {
				err = fmt.Errorf("internal error: a mutation changed the committed state in place")
			}
		}
		if err != nil {
			m.finish(err) // only this member: the next ones run on cur
			continue
		}
		overlap := false
		for _, op := range ops {
			overlap = overlap || keys[string(op.KeyBytes())]
		}
		if overlap || len(in) > 0 && len(extra)+len(ops)+len(changed.vzones)+len(st.ch.vzones)+len(changed.nodes)+len(st.ch.nodes) > budget {
			held = append(held, m) // runs again in the next group, on the committed state
			continue
		}
		for _, op := range ops {
			keys[string(op.KeyBytes())] = true
		}
		extra = append(extra, ops...)
		for k := range st.ch.vzones {
			changed.vzones[k] = true
		}
		for k := range st.ch.nodes {
			changed.nodes[k] = true
		}
		changed.ownNodes = changed.ownNodes || st.ch.ownNodes
		ix, err := checkedIndex(st, false)
		if err != nil {
			m.finish(err)
			continue
		}
		st.ch = nil
		cur, curIx = st, ix
		in = append(in, m)
	}
	defer func() {
		if len(held) > 0 {
			a.groupMu.Lock()
			a.group = append(held, a.group...)
			a.groupMu.Unlock()
		}
	}()
	if len(in) == 0 {
		return
	}
	// The group's state as one fork of the committed one.
	final := cur.fork()
	final.ch = changed
	final.ch.ownMap = map[string]bool{}
	final.ch.base, final.ch.baseIx = old, oldIx
	sops, err := diff(old, final)
	if err != nil {
		for _, m := range in {
			m.finish(err)
		}
		return
	}
	res, err := a.commit(ctx, t, sops, extra)
	if errors.Is(err, errConflict) {
		for _, m := range in { // each on its own (mutateTerm reloads and retries)
			m.finish(a.mutateTerm(m.ctx, false, m.fn))
		}
		return
	}
	if err == nil && res.txns > 0 {
		a.m.txns.Add(float64(res.txns))
		a.m.txnBytes.Add(float64(res.bytes))
		a.m.mutations.Add(float64(len(in)))
		a.lastRev.Store(res.rev)
		t.rev.Store(res.rev)
		var ix *index
		if ix, err = checkedIndex(final, false); err == nil {
			final.ch = nil
			a.publish(t, final, ix)
		}
	} else if err == nil {
		a.m.noops.Add(float64(len(in)))
	}
	for _, m := range in {
		m.finish(err)
	}
}

// mutateInternal is mutate for the leader's own startup reconciliation,
// allowed before the term serves requests.
func (a *Arbiter) mutateInternal(ctx context.Context, fn mutation) error {
	a.opMu.Lock()
	defer a.opMu.Unlock()
	return a.mutateTerm(ctx, true, fn)
}

// mutateLocked is mutate with the op lock already held.
func (a *Arbiter) mutateLocked(ctx context.Context, fn mutation) error {
	return a.mutateTerm(ctx, false, fn)
}

func (a *Arbiter) mutateTerm(ctx context.Context, internal bool, fn mutation) error {
	a.mu.RLock()
	t := a.term
	ok := t != nil && (t.ready || internal)
	a.mu.RUnlock()
	if !ok {
		return a.notLeader(ctx)
	}
	for attempt := 0; ; attempt++ {
		if t.stale {
			if err := a.load(ctx, t); err != nil {
				return err
			}
		}
		old := t.state
		st := old.fork()
		st.ch.base, st.ch.baseIx = old, t.ix
		var before []byte
		if cowCheck {
			before, _ = cluster.Encode(old)
		}
		ops, err := fn(st, t.ix)
		if cowCheck {
			if after, _ := cluster.Encode(old); !bytes.Equal(before, after) {
				return fmt.Errorf("internal error: a mutation changed the committed state in place")
			}
		}
		if err != nil {
			return err
		}
		sops, err := diff(old, st)
		if err != nil {
			return err
		}
		res, err := a.commit(ctx, t, sops, ops)
		if errors.Is(err, errConflict) {
			if attempt >= 2 {
				return &zerr.UnavailableError{What: "arbiter state", Reason: "concurrent modification"}
			}
			continue
		}
		if res.txns > 0 {
			a.m.txns.Add(float64(res.txns))
			a.m.txnBytes.Add(float64(res.bytes))
			a.m.mutations.Inc()
			a.lastRev.Store(res.rev)
			t.rev.Store(res.rev)
			ix, err := checkedIndex(st, false)
			if err != nil {
				return err
			}
			st.ch = nil
			a.publish(t, st, ix)
		} else {
			a.m.noops.Inc()
		}
		return err
	}
}

// cowCheck (tests) verifies that no mutation changes the committed state in
// place (copy on write), at the price of encoding it twice per mutation,
// and that every derived index equals a full rebuild.
var cowCheck bool

// checkedIndex is deriveIndex, compared with buildIndex under cowCheck.
func checkedIndex(st *State, overlay bool) (*index, error) {
	ix := deriveIndex(st, overlay)
	if cowCheck {
		cp := *ix
		cp.materialize()
		if !reflect.DeepEqual(&cp, buildIndex(st)) {
			return nil, fmt.Errorf("internal error: the derived index differs from a rebuild")
		}
	}
	return ix, nil
}

// stepDown stops serving at once after this arbiter found its election key
// gone; ending the session makes runTerm end the term and campaign again.
func (a *Arbiter) stepDown(t *term) {
	a.log.Warn("lost leadership (election key gone)")
	a.mu.Lock()
	t.ready = false
	a.mu.Unlock()
	t.session.Orphan()
	_ = t.session.Close()
}

func (a *Arbiter) setStale(t *term) {
	a.mu.Lock()
	t.stale = true
	t.rev.Store(0)
	a.mu.Unlock()
}

// commitRev is the etcd revision of the serving term's last commit: at or
// above the revision of every grant of the state it serves (0: unknown).
func (a *Arbiter) commitRev() int64 {
	a.mu.RLock()
	t := a.term
	a.mu.RUnlock()
	if t == nil {
		return 0
	}
	return t.rev.Load()
}

// atCommit asks the nodes that ctx's calls reach to serve them only once
// their grant caches reflect this term's last commit (wire.WithMinRevision).
// Node I/O that follows a mutation granting zones carries it: a zone
// reclaimed or rebuilt into may have been revoked from another v-zone of the
// same namespace a moment before, and a node that had not yet applied that
// revocation would take the copy under the old grant and then wipe it with
// the revocation's reset.
func (a *Arbiter) atCommit(ctx context.Context) context.Context {
	return wire.WithMinRevision(ctx, a.commitRev())
}

func (a *Arbiter) publish(t *term, st *State, ix *index) {
	a.mu.Lock()
	t.state, t.ix, t.stale = st, ix, false
	a.mu.Unlock()
	a.m.refresh(st, ix)
}

func (a *Arbiter) refreshMetrics() {
	a.mu.RLock()
	t := a.term
	var st *State
	var ix *index
	if t != nil {
		st, ix = t.state, t.ix
	}
	a.mu.RUnlock()
	if t != nil {
		a.m.refresh(st, ix)
	}
}

// ---- shadow view -------------------------------------------------------

// syncNodes applies node registrations (up) and deregistrations (gone). With
// full, every node of the state missing from up is gone.
func (a *Arbiter) syncNodes(ctx context.Context, up map[string]cluster.NodeRecord, gone []string, full bool) error {
	now := a.cfg.Now()
	return a.mutateInternal(ctx, func(st *State, ix *index) ([]clientv3.Op, error) {
		e0, s0 := st.Essentials, st.Spares
		for id, rec := range up {
			n := st.Nodes[id]
			if n == nil {
				st.putNode(id, &nodeState{Record: rec, Available: true})
				a.log.Info("node joined", "node", id, "devices", len(rec.Devices))
				continue
			}
			if !n.Available {
				a.log.Info("node back", "node", id)
			}
			st.putNode(id, &nodeState{Record: rec, Available: true})
		}
		lost := gone
		if full {
			for id := range st.Nodes {
				if _, ok := up[id]; !ok {
					lost = append(lost, id)
				}
			}
		}
		for _, id := range lost {
			if n := st.Nodes[id]; n != nil && n.Available {
				st.putNode(id, &nodeState{Record: n.Record, Available: false, LostAt: now})
				a.log.Warn("node lost; its zones are unavailable", "node", id)
			}
		}
		if e, s := clusterResources(st); e != e0 || s != s0 || (full && !sharesConsistent(st)) {
			for _, sf := range reprovision(st) {
				a.log.Warn("namespace under-provisioned", "namespace", sf.Namespace, "need", sf.Need, "essentials", sf.Got)
			}
		}
		return nil, nil
	})
}

// reconcileGrants makes the grant keys match the state (after a crash between
// a state commit and its trailing grant batches).
func (a *Arbiter) reconcileGrants(ctx context.Context) error {
	a.opMu.Lock()
	defer a.opMu.Unlock()
	a.mu.RLock()
	t := a.term
	a.mu.RUnlock()
	if t == nil {
		return a.notLeader(ctx)
	}
	resp, err := a.cli.Get(ctx, cluster.GrantsRoot(), clientv3.WithPrefix())
	if err != nil {
		return &zerr.UnavailableError{What: "etcd", Reason: err.Error()}
	}
	want := wantedGrants(t.state)
	// Nodes reset a zone when its grant key is deleted: a grant of a zone the
	// state still gives out is overwritten, never deleted.
	var ops []clientv3.Op
	ok := map[cluster.PhysZone]bool{}
	for _, kv := range resp.Kvs {
		pz, err := cluster.ParseGrantKey(string(kv.Key))
		if err != nil {
			ops = append(ops, clientv3.OpDelete(string(kv.Key)))
			continue
		}
		w, wanted := want[pz]
		if !wanted {
			ops = append(ops, clientv3.OpDelete(string(kv.Key)))
			continue
		}
		if string(kv.Key) != pz.GrantKey() {
			continue // a non-canonical spelling of a wanted zone: leave it, the canonical key is put below
		}
		if g, err := cluster.DecodeGrant(string(kv.Key), kv.Value); err == nil && g == w {
			ok[pz] = true
		}
	}
	for pz, g := range want {
		if !ok[pz] {
			ops = append(ops, grantPut(pz, g))
		}
	}
	if len(ops) > 0 {
		a.log.Info("reconciling grants", "ops", len(ops))
	}
	leaderCmp := clientv3.Compare(clientv3.CreateRevision(t.election.Key()), "=", t.election.Rev())
	for len(ops) > 0 {
		n := min(len(ops), a.cfg.MaxTxnOps-1)
		r, err := a.cli.Txn(ctx).If(leaderCmp).Then(ops[:n]...).Commit()
		if err != nil {
			return &zerr.UnavailableError{What: "etcd", Reason: err.Error()}
		}
		if !r.Succeeded {
			a.stepDown(t)
			return a.notLeader(ctx)
		}
		ops = ops[n:]
	}
	return nil
}

// wantedGrants is every grant the state implies.
func wantedGrants(st *State) map[cluster.PhysZone]cluster.Grant {
	out := map[cluster.PhysZone]cluster.Grant{}
	for name, ns := range st.Namespaces {
		for _, vz := range ns.VZones {
			sealed := vz.sealedGroup()
			for gi, g := range vz.allGroups() {
				for _, z := range g.Zones {
					out[z] = cluster.Grant{Namespace: name, VZone: vz.ID, Group: g.Index, Generation: g.Generation,
						Sealed: sealed != nil && gi == len(vz.Groups)-1}
				}
			}
		}
	}
	return out
}

func grantPut(z cluster.PhysZone, g cluster.Grant) clientv3.Op {
	b, _ := cluster.EncodeGrant(g) // a Grant always marshals
	return clientv3.OpPut(z.GrantKey(), string(b))
}

func grantDel(z cluster.PhysZone) clientv3.Op { return clientv3.OpDelete(z.GrantKey()) }
