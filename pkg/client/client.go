// Package client is how programs talk to a ZoneFleet cluster: it finds the
// arbiter leader (and follows it across failovers), pools connections to the
// ssdnodes, caches v-zone layouts, and turns v-zone I/O into physical-zone
// I/O — RAID-0 striping within a stripe group, one coalesced device request
// per physical zone per user I/O, parallel fan-out, read congestion control
// per stripe group (eZNS Algorithm 1), and retries of transient failures
// within a deadline. Bytes go between the client and the nodes only.
//
// # Data path
//
// A read (ReadInto) splits into legs, one per physical zone it touches, and
// sends one call per node: ReadV with one range per leg (up to the unary
// limit; a single leg is a Read, a leg above the limit a ReadStream). The
// answers are received into wire.ReadChunks — views of the transport's
// receive buffers — and copied once, straight to their stripes' places in
// the caller's buffer. The calls run in parallel, the last on the caller's
// goroutine, so a read that needs one call starts no goroutine. A call's
// legs are admitted by their stripe groups' congestion windows, once per
// group and in group order (no wait cycles between concurrent reads), one
// unit per leg (device command); the window moves with the latency the node
// reports, its WRR slot wait included. A
// node without ReadV (an older version) is read leg by leg. A write sends every leg straight from
// the caller's data, a leg of several stripe units as several buffers of
// one message (the node writes them with one pwritev); WriteFUA sets the FUA flag on every request instead of a Flush
// round trip afterwards. Durability is per drive: Devices names the drives
// of a v-zone and FlushDevices flushes several drives in parallel, one
// result per drive. The device descriptions (block and zone sizes) are
// cached on the layout, so the hot path takes no map lookups.
//
// # Control plane
//
// The arbiter is on no byte path: layouts are cached; the write-activity
// report (for reclaim) is fire-and-forget — at most one in flight, at most
// one a second, with its own two-second deadline — so writes never wait for
// it, not even during a leader failover. A layout is never replaced by an
// older one (each carries the etcd revision it was read at), and a Reset
// whose v-zone was opened again while the reset was in flight keeps the
// newer, open layout. OpenVZoneIncarnation names the opening it made, and
// ResetIncarnation gives back exactly that opening (the arbiter refuses
// with StaleLayout when the id was reset and opened again by someone else).
//
// # Threaded logging
//
// VZone.TLOpen (tl.go) moves a v-zone to ZNS+ threaded logging: the arbiter
// first (counted as an active v-zone), then every physical zone, in
// parallel. Sparse sequential overwrites of invalid blocks follow, checked
// against the bitmap before any leg is sent; a zone whose drive ended
// threaded logging by itself (node restart) is TL_opened again on the next
// write. Finish ends it on the drives, then at the arbiter.
//
// # Redundancy
//
// A namespace created with redundancy mirror:N has stripe groups of width W
// listing W×N physical zones, copy-major, the copies of a leg on distinct
// nodes (mirror.go has the rules). In short: a write goes to every copy and
// is acknowledged only when all took it; a write that some copies took while
// the others' nodes are unavailable is answered at once as degraded
// (zerr.StateDegraded, never UNAVAILABLE, so nobody retries it in place) and
// the v-zone takes no more writes; reads pick one copy per leg and fall over
// to another copy at once; the write pointer is the lowest of the live
// copies' — except for a finished v-zone, whose write pointer is its
// capacity: a zone whose node was down when the v-zone was finished missed
// its FINISH, and the first client that derives the write pointer after
// the node returns finishes it (vzone.go writePointer). zone_compaction and TL_open are refused on mirrored v-zones. The
// arbiter rebuilds the copies of a lost node node to node (pkg/arbiter
// rebuild.go).
//
// A namespace created with redundancy raid5 has parity stripe groups:
// width k data legs, a parity leg and two partial-parity (PP) log zones
// used alternately, the k+1 legs on distinct nodes and the PP logs on the
// parity leg's node
// (parity.go has the design and why the parity leg is fixed per group).
// A stripe row is k units at one zone offset of the k data legs, its
// parity unit at that offset of the parity leg; rows are written in order
// at every leg's write pointer. A write sends its data legs, the parity
// units of the rows it completes and — when it ends inside a row — a PP
// record (the row's XOR so far, its row number, how many blocks it covers,
// CRCs; RAIZN, ASPLOS'23) in parallel, and is acknowledged only when all
// landed with the FUA the call asked for (Flush flushes the parity and PP
// zones with the rest). A write to a group with a zone on an unavailable
// node is refused as degraded (zerr.StateDegraded), like a mirror's. Normal
// reads read the data legs only; a leg on an unavailable node is
// reconstructed from the k-1 other data units and the parity unit, or,
// for a row whose parity is not written yet, the newest intact PP record
// the survivors' write pointers agree with (a torn record fails its CRC
// and is skipped). Parity namespaces recycle by host copy (zone_compaction
// and TL_open are refused, as on mirrors). The arbiter does not rebuild
// parity legs yet: a lost node's parity groups stay degraded (readable)
// until it returns or the v-zones are reset.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpclocal "google.golang.org/grpc/credentials/local"
	"google.golang.org/grpc/metadata"
)

// Config of a client.
type Config struct {
	// Arbiters are arbiter addresses; any of them will do, followers name the leader.
	Arbiters []string
	// Etcd endpoints: used to find the arbiter leader when Arbiters is empty
	// (and whenever the known arbiters do not answer).
	Etcd []string
	// Namespace the client works in.
	Namespace string
	// Token is the admin token. It is sent (as "authorization: Bearer")
	// only on the administrative calls (namespace management, GetLog, …)
	// and on a direct client's calls, never on a tenant's data path.
	Token string
	// TLS secures every connection (auth.Bundle.ClientTLS, Credentials.Load).
	// A client certificate in it (the admin's) identifies the client on every
	// call. nil dials plaintext, which a secure cluster refuses.
	TLS *tls.Config
	// Credentials is the tenant's namespace token (a file, a refreshing
	// source); it is attached to every call and refused over plaintext
	// unless TLS is nil (an explicit --insecure cluster).
	Credentials auth.TokenSource
	// RetryDeadline bounds retries of transient failures (node unavailable,
	// leader change) of one operation, in the time of Clock (the clock the
	// retries sleep on; wall time under the off clock). Default 15s.
	RetryDeadline time.Duration
	// CongestionControl enables eZNS read congestion control (default on; set
	// DisableCongestionControl to turn it off for comparison).
	DisableCongestionControl bool
	// LatThreshold is the read latency (modelled time the node reports, from
	// its device-slot request to the drive's completion) above which a
	// stripe group's window shrinks. Default 500 µs.
	LatThreshold time.Duration
	// Clock for backoff waits. Default realtime.
	Clock clock.Clock
	// Registerer receives the client's metrics; nil registers none.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// LocalSockets maps a node's id to a unix socket the same node
	// serves on this host (daemon.Config.UnixSocket): the client reaches
	// such a node through the socket, whatever address its record holds, with gRPC's local credentials instead
	// of TLS and its namespace token as everywhere (localcluster fills it in
	// for `zctl local up`'s mount). Only a client with Credentials uses it: a
	// client certificate cannot be presented over a unix socket.
	LocalSockets map[string]string
}

// Client is a connection to a cluster. It is safe for concurrent use.
type Client struct {
	cfg Config
	log *slog.Logger
	m   *metrics
	etc *clientv3.Client

	mu      sync.Mutex
	leader  string
	arbConn map[string]*grpc.ClientConn
	nodes   map[string]*nodeEntry // by node id and address
	closed  bool

	lastActivity   time.Time
	activityBlocks uint64 // written since the last report
	activityBusy   bool   // a report is in flight
	direct         bool   // no arbiter: static layouts only

	bg       context.Context // background work (activity reports); cancelled by Close
	bgCancel context.CancelFunc

	vzMu    sync.Mutex
	vzones  map[uint64]*VZone
	maps    sync.Map   // node/device → *devMapping
	suspect suspects   // nodes that failed a mirrored read lately (mirror.go)
	grants  peerGrants // PeerWrite grants of compactions (peergrant.go)
}

var (
	wallOnce sync.Once
	wall     clock.Clock
)

// wallClock is the clock of the clients given none: one wall clock (one
// timer goroutine) for the process, however many clients come and go. A
// clock per client outlived the client: Close cannot stop a clock that
// calls in flight may still sleep on.
func wallClock() clock.Clock {
	wallOnce.Do(func() { wall = clock.Realtime(1) })
	return wall
}

// New connects to the cluster: it finds the arbiter leader and checks that
// the namespace exists.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if len(cfg.Arbiters) == 0 && len(cfg.Etcd) == 0 {
		return nil, &zerr.InvalidArgumentError{Field: "arbiters", Reason: "give arbiter addresses or etcd endpoints"}
	}
	if cfg.RetryDeadline <= 0 {
		cfg.RetryDeadline = 15 * time.Second
	}
	if cfg.LatThreshold <= 0 {
		cfg.LatThreshold = 500 * time.Microsecond
	}
	if cfg.Clock == nil {
		cfg.Clock = wallClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Client{cfg: cfg, log: cfg.Logger, m: newMetrics(cfg.Registerer), arbConn: map[string]*grpc.ClientConn{},
		nodes: map[string]*nodeEntry{}, vzones: map[uint64]*VZone{}}
	c.bg, c.bgCancel = context.WithCancel(context.Background())
	if ecfg, ok := etcdConfig(cfg); ok {
		etc, err := clientv3.New(ecfg)
		if err != nil {
			return nil, &zerr.UnavailableError{What: "etcd", Reason: err.Error()}
		}
		c.etc = etc
	} else if len(cfg.Arbiters) == 0 {
		return nil, &zerr.InvalidArgumentError{Field: "arbiters", Reason: "etcd (https://) needs a cluster certificate; give arbiter addresses"}
	}
	// A namespace token is renewed through the arbiter (tokens.go).
	c.cfg.Credentials = c.renewCredentials(cfg.Credentials)
	if cfg.Namespace == "" { // cluster administration only: check the arbiter answers
		_, err := c.ClusterStatus(ctx)
		if err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	if _, err := c.GetNamespace(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// NewDirect returns a client that talks to nodes only: its v-zones come from
// layouts the caller gives to StaticVZone (experiments and benchmarks that
// need exact widths and stripe sizes). Arbiter calls fail. On nodes that
// follow an arbiter's grants, zones written this way are granted to no one:
// a node resets every non-empty zone without a grant when it starts
// (grants deleted while it was down), so such data does not survive a node
// restart; on standalone nodes (no grants) it does.
func NewDirect(cfg Config) *Client {
	if cfg.RetryDeadline <= 0 {
		cfg.RetryDeadline = 15 * time.Second
	}
	if cfg.LatThreshold <= 0 {
		cfg.LatThreshold = 500 * time.Microsecond
	}
	if cfg.Clock == nil {
		cfg.Clock = wallClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Client{cfg: cfg, log: cfg.Logger, m: newMetrics(cfg.Registerer), arbConn: map[string]*grpc.ClientConn{},
		nodes: map[string]*nodeEntry{}, vzones: map[uint64]*VZone{}, direct: true}
}

// StaticVZone returns a handle over a fixed layout: no stripe group is ever
// allocated, the layout is never refreshed.
func (c *Client) StaticVZone(l *v1.VZone) *VZone {
	vz := &VZone{c: c, id: l.GetId(), static: true}
	vz.setLayout(l)
	return vz
}

// Namespace is the namespace the client works in.
// Clock is the clock the client waits on (Config.Clock).
func (c *Client) Clock() clock.Clock { return c.cfg.Clock }

func (c *Client) Namespace() string { return c.cfg.Namespace }

// Close closes every connection.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	if c.bgCancel != nil {
		c.bgCancel()
	}
	for _, cc := range c.arbConn {
		_ = cc.Close()
	}
	for _, e := range c.nodes {
		_ = e.cc.Close()
	}
	if c.etc != nil {
		_ = c.etc.Close()
	}
}

// reconnect is how fast a connection to a node or arbiter that went away is
// tried again: gRPC's default backs off to 120 s, so after an outage of a few
// seconds a returned node would stay unreachable for longer than the mount's
// retry deadline. Nodes are on the cluster's network; a try a second is cheap.
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 2 * time.Second,
}

// dialOpts are the options of a connection: TLS (or plaintext on an
// --insecure cluster), or with local the local credentials of a node's unix
// socket (Config.LocalSockets), which gRPC counts as a secure transport, so
// the namespace token goes with every call as over TLS.
func (c *Client) dialOpts(local bool) []grpc.DialOption {
	opts := append(rpcerr.DialOptions(), grpc.WithConnectParams(reconnect))
	opts = append(opts, wire.TransportDialOptions(!local && c.cfg.TLS != nil)...)
	switch {
	case local:
		opts = append(opts, grpc.WithTransportCredentials(grpclocal.NewCredentials()))
	case c.cfg.TLS != nil:
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(c.cfg.TLS)))
	default:
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if c.cfg.Credentials != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.PerRPC(c.cfg.Credentials, !local && c.cfg.TLS == nil)))
	}
	return append(opts,
		grpc.WithDefaultCallOptions(append(wire.CallOptions(), grpc.MaxCallRecvMsgSize(wire.MaxMessageBytes), grpc.MaxCallSendMsgSize(wire.MaxMessageBytes))...))
}

// conn is the pooled connection to an arbiter at addr.
func (c *Client) conn(pool map[string]*grpc.ClientConn, addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, &zerr.ClosedError{What: "client"}
	}
	if cc, ok := pool[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, c.dialOpts(false)...)
	if err != nil {
		return nil, &zerr.UnavailableError{What: addr, Reason: err.Error()}
	}
	pool[addr] = cc
	return cc, nil
}

// nodeEntry is the pooled connection to one node at one address. creds
// (nil on a plaintext or unix-socket connection) pin the TLS handshake to
// the node's certificate role node:<id>.
type nodeEntry struct {
	cc    *grpc.ClientConn
	creds *auth.NodeCredentials
}

// nodeConn is the pooled connection to node id at addr (the address its
// record or layout gives). The node is dialled by its id: over TLS the
// server must present a certificate naming node:<id> (auth.NodeCredentials),
// whatever the address; a unix socket is used only when Config.LocalSockets
// names one for this node id. A node id is required over TLS.
func (c *Client) nodeConnOf(node, addr string) (*nodeEntry, error) {
	key := node + "\x00" + addr
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, &zerr.ClosedError{What: "client"}
	}
	if e, ok := c.nodes[key]; ok {
		return e, nil
	}
	sock := ""
	if node != "" && c.cfg.Credentials != nil {
		sock = c.cfg.LocalSockets[node]
	}
	var (
		cc    *grpc.ClientConn
		creds *auth.NodeCredentials
		err   error
	)
	switch {
	case sock != "":
		c.log.Debug("node reached over its unix socket", "node", node, "socket", sock)
		cc, err = grpc.NewClient("unix://"+sock, c.dialOpts(true)...)
	case c.cfg.TLS != nil:
		if creds, err = auth.NewNodeCredentials(c.cfg.TLS, node); err != nil {
			return nil, err
		}
		cc, err = grpc.NewClient(addr, append(c.dialOpts(false), grpc.WithTransportCredentials(creds),
			grpc.WithChainUnaryInterceptor(creds.UnaryInterceptor))...)
	default:
		cc, err = grpc.NewClient(addr, c.dialOpts(false)...)
	}
	if err != nil {
		return nil, &zerr.UnavailableError{What: addr, Reason: err.Error()}
	}
	e := &nodeEntry{cc: cc, creds: creds}
	c.nodes[key] = e
	return e, nil
}

// NodeConn returns the connection to node at addr, dialled as every node
// call is (TLS pinned to the node's certificate role node:<id>, the
// client's credentials), for the node's services beside ZonedDevice (FDP).
// The client owns the connection: it is closed with the client.
func (c *Client) NodeConn(node, addr string) (grpc.ClientConnInterface, error) {
	e, err := c.nodeConnOf(node, addr)
	if err != nil {
		return nil, err
	}
	return e.cc, nil
}

func (c *Client) nodeClient(node, addr string) (v1.ZonedDeviceClient, error) {
	e, err := c.nodeConnOf(node, addr)
	if err != nil {
		return nil, err
	}
	return nodeConn{v1.NewZonedDeviceClient(e.cc), e.cc}, nil
}

// nodeErr turns the UNAVAILABLE of a refused handshake into the node's
// *zerr.PeerIdentityError (not retried: the same address answers the same).
func (c *Client) nodeErr(node, addr string, err error) error {
	if err == nil || !errors.Is(err, zerr.ErrUnavailable) {
		return err
	}
	c.mu.Lock()
	e := c.nodes[node+"\x00"+addr]
	c.mu.Unlock()
	if e == nil {
		return err
	}
	return e.creds.RefusedOr(err)
}

// nodeConn is a node's client with its connection, for the calls the
// generated client cannot make: a write of several buffers as one
// wire.WriteChunk (writeBlocks).
type nodeConn struct {
	v1.ZonedDeviceClient
	cc grpc.ClientConnInterface
}

// ctx adds the namespace to outgoing node calls. The admin token is never
// sent to a node: a node cannot verify it (nodes hold no admin token), and
// a node — or a server that took over its address — must not capture the
// credential that administers the cluster. Administrative node calls
// (`zctl zone`, a direct client's calls) are the operator's by its client
// certificate. Only on an --insecure cluster, which has no identities, does
// a direct client send the token it was given, as before.
func (c *Client) ctx(ctx context.Context) context.Context {
	if c.direct && c.cfg.TLS == nil {
		return c.withAdminToken(wire.WithNamespace(ctx, c.cfg.Namespace))
	}
	return wire.WithNamespace(ctx, c.cfg.Namespace)
}

// adminCtx adds the namespace and the admin token: arbiter calls only.
func (c *Client) adminCtx(ctx context.Context) context.Context {
	if c.direct {
		return c.ctx(ctx)
	}
	return c.withAdminToken(c.ctx(ctx))
}

// withAdminToken attaches the admin token as a bearer token (and in the
// legacy metadata key for servers without the authenticator). A tenant
// credential, when configured, is the call's only authorization.
func (c *Client) withAdminToken(ctx context.Context) context.Context {
	if c.cfg.Token == "" {
		return ctx
	}
	ctx = wire.WithToken(ctx, c.cfg.Token)
	if c.cfg.Credentials != nil {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, auth.AuthorizationKey, "Bearer "+c.cfg.Token)
}

// leaderFromEtcd reads the election: the leader's address is the value of
// the oldest key under the election prefix.
func (c *Client) leaderFromEtcd(ctx context.Context) string {
	if c.etc == nil {
		return ""
	}
	ectx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := c.etc.Get(ectx, cluster.Prefix+"arbiter/election", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil || len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// candidates lists the arbiters to try, the known leader first.
func (c *Client) candidates(ctx context.Context) []string {
	c.mu.Lock()
	leader := c.leader
	c.mu.Unlock()
	var out []string
	seen := map[string]bool{}
	add := func(a string) {
		if a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	add(leader)
	for _, a := range c.cfg.Arbiters {
		add(a)
	}
	add(c.leaderFromEtcd(ctx))
	return out
}

// arbiterCall runs fn against the leader, following NotLeader answers and
// retrying unavailable arbiters with backoff until the retry deadline.
func arbiterCall[T any](ctx context.Context, c *Client, op string, fn func(context.Context, v1.ArbiterClient) (T, error)) (T, error) {
	var zero T
	if c.direct {
		return zero, &zerr.UnavailableError{What: "arbiter", Reason: "a direct client has no arbiter (" + op + ")"}
	}
	expired := c.retryDeadline(c.cfg.RetryDeadline)
	backoff := 50 * time.Millisecond
	var last error
	for attempt := 0; ; attempt++ {
		cands := c.candidates(ctx)
		if len(cands) == 0 {
			last = &zerr.UnavailableError{What: "arbiter", Reason: "no arbiter address known (give --arbiter or --etcd)"}
		}
		for i := 0; i < len(cands); i++ {
			addr := cands[i]
			cc, err := c.conn(c.arbConn, addr)
			if err != nil {
				last = err
				continue
			}
			cctx, cancel := context.WithTimeout(c.adminCtx(ctx), 10*time.Second)
			res, err := fn(cctx, v1.NewArbiterClient(cc))
			cancel()
			if err == nil {
				c.mu.Lock()
				c.leader = addr
				c.mu.Unlock()
				return res, nil
			}
			last = err
			var nl *zerr.NotLeaderError
			if errors.As(err, &nl) {
				if nl.Leader != "" && nl.Leader != addr {
					c.mu.Lock()
					c.leader = nl.Leader
					c.mu.Unlock()
					cands = append(cands[:i+1], append([]string{nl.Leader}, cands[i+1:]...)...)
				}
				continue
			}
			if !errors.Is(err, zerr.ErrUnavailable) && !isDeadline(err) {
				return zero, err // a real answer from the leader
			}
		}
		if ctx.Err() != nil {
			return zero, ctx.Err()
		}
		if expired() {
			return zero, fmt.Errorf("%s: no arbiter leader answered within %s: %w", op, c.cfg.RetryDeadline, last)
		}
		c.m.retries.WithLabelValues("arbiter").Inc()
		if err := clock.Sleep(ctx, c.cfg.Clock, backoff); err != nil {
			return zero, err
		}
		backoff = min(2*backoff, time.Second)
	}
}

func isDeadline(err error) bool {
	return errors.Is(err, context.DeadlineExceeded)
}

// Arbiter returns a client of the leader for calls this package does not wrap.
// Prefer the typed methods: they follow leader changes.
func (c *Client) Arbiter(ctx context.Context) (v1.ArbiterClient, error) {
	return arbiterCall(ctx, c, "find leader", func(ctx context.Context, a v1.ArbiterClient) (v1.ArbiterClient, error) {
		_, err := a.ClusterStatus(ctx, &v1.ClusterStatusRequest{})
		return a, err
	})
}

// GetNamespace returns the client's namespace.
func (c *Client) GetNamespace(ctx context.Context) (*v1.Namespace, error) {
	if c.cfg.Namespace == "" {
		return nil, &zerr.InvalidArgumentError{Field: "namespace", Reason: "the client has none (give --namespace)"}
	}
	return c.Namespaces().Get(ctx, c.cfg.Namespace)
}

// AcquireMount takes or renews the client namespace's mount lease for
// holder (see the arbiter's AcquireMount): *zerr.AlreadyExistsError while
// another holder's lease runs, unless force.
func (c *Client) AcquireMount(ctx context.Context, holder string, ttl time.Duration, force bool) (*v1.MountLease, error) {
	if c.cfg.Namespace == "" {
		return nil, &zerr.InvalidArgumentError{Field: "namespace", Reason: "the client has none (give --namespace)"}
	}
	return arbiterCall(ctx, c, "acquire the mount lease", func(ctx context.Context, a v1.ArbiterClient) (*v1.MountLease, error) {
		return a.AcquireMount(ctx, &v1.AcquireMountRequest{Namespace: c.cfg.Namespace, Holder: holder,
			TtlSeconds: uint32(min(max(ttl/time.Second, 1), 3600)), Force: force})
	})
}

// ReleaseMount gives the mount lease back when holder holds it.
func (c *Client) ReleaseMount(ctx context.Context, holder string) error {
	_, err := arbiterCall(ctx, c, "release the mount lease", func(ctx context.Context, a v1.ArbiterClient) (*v1.ReleaseMountResponse, error) {
		return a.ReleaseMount(ctx, &v1.ReleaseMountRequest{Namespace: c.cfg.Namespace, Holder: holder})
	})
	return err
}

// NamespaceAdmin manages namespaces.
type NamespaceAdmin struct{ c *Client }

// Namespaces returns the namespace administration of the cluster.
func (c *Client) Namespaces() NamespaceAdmin { return NamespaceAdmin{c} }

// Create creates a namespace.
func (n NamespaceAdmin) Create(ctx context.Context, req *v1.CreateNamespaceRequest) (*v1.Namespace, error) {
	return arbiterCall(ctx, n.c, "create namespace", func(ctx context.Context, a v1.ArbiterClient) (*v1.Namespace, error) {
		return a.CreateNamespace(ctx, req)
	})
}

// Get returns a namespace.
func (n NamespaceAdmin) Get(ctx context.Context, name string) (*v1.Namespace, error) {
	return arbiterCall(ctx, n.c, "get namespace", func(ctx context.Context, a v1.ArbiterClient) (*v1.Namespace, error) {
		return a.GetNamespace(ctx, &v1.GetNamespaceRequest{Name: name})
	})
}

// List lists the namespaces.
func (n NamespaceAdmin) List(ctx context.Context) ([]*v1.Namespace, error) {
	r, err := arbiterCall(ctx, n.c, "list namespaces", func(ctx context.Context, a v1.ArbiterClient) (*v1.ListNamespacesResponse, error) {
		return a.ListNamespaces(ctx, &v1.ListNamespacesRequest{})
	})
	return r.GetNamespaces(), err
}

// Update changes an existing namespace (admin only; the fields set in req).
func (n NamespaceAdmin) Update(ctx context.Context, req *v1.UpdateNamespaceRequest) (*v1.Namespace, error) {
	return arbiterCall(ctx, n.c, "update namespace", func(ctx context.Context, a v1.ArbiterClient) (*v1.Namespace, error) {
		return a.UpdateNamespace(ctx, req)
	})
}

// Delete deletes a namespace (force: even with open v-zones).
func (n NamespaceAdmin) Delete(ctx context.Context, name string, force bool) error {
	_, err := arbiterCall(ctx, n.c, "delete namespace", func(ctx context.Context, a v1.ArbiterClient) (*v1.DeleteNamespaceResponse, error) {
		return a.DeleteNamespace(ctx, &v1.DeleteNamespaceRequest{Name: name, Force: force})
	})
	return err
}

// ListNodes lists the cluster's nodes.
func (c *Client) ListNodes(ctx context.Context) ([]*v1.Node, error) {
	r, err := arbiterCall(ctx, c, "list nodes", func(ctx context.Context, a v1.ArbiterClient) (*v1.ListNodesResponse, error) {
		return a.ListNodes(ctx, &v1.ListNodesRequest{})
	})
	return r.GetNodes(), err
}

// GetNode returns one node.
func (c *Client) GetNode(ctx context.Context, id string) (*v1.Node, error) {
	return arbiterCall(ctx, c, "get node", func(ctx context.Context, a v1.ArbiterClient) (*v1.Node, error) {
		return a.GetNode(ctx, &v1.GetNodeRequest{Id: id})
	})
}

// RemoveNode makes the arbiter forget a node (admin only): the node must not
// be registered and must hold no allocated zone. Unknown nodes are
// *zerr.NotFoundError, a node holding zones *zerr.ZoneStateError, a
// registered node *zerr.InvalidArgumentError.
func (c *Client) RemoveNode(ctx context.Context, id string) error {
	_, err := arbiterCall(ctx, c, "remove node", func(ctx context.Context, a v1.ArbiterClient) (*v1.RemoveNodeResponse, error) {
		return a.RemoveNode(ctx, &v1.RemoveNodeRequest{Id: id})
	})
	return err
}

// Device returns a client of node's ZonedDevice service at addr and a
// context carrying the client's namespace. The node is dialled by its id
// (its certificate must name node:<node>); calls carry the client's
// certificate or namespace token, never the admin token. A refused
// handshake fails a unary call with *zerr.PeerIdentityError.
func (c *Client) Device(node, addr string) (v1.ZonedDeviceClient, context.Context, error) {
	n, err := c.nodeClient(node, addr)
	return n, c.ctx(context.Background()), err
}

// ClusterStatus returns the cluster's status from the leader.
func (c *Client) ClusterStatus(ctx context.Context) (*v1.ClusterStatusResponse, error) {
	return arbiterCall(ctx, c, "cluster status", func(ctx context.Context, a v1.ArbiterClient) (*v1.ClusterStatusResponse, error) {
		return a.ClusterStatus(ctx, &v1.ClusterStatusRequest{})
	})
}

// ListVZones lists the namespace's v-zones.
func (c *Client) ListVZones(ctx context.Context) ([]*v1.VZone, error) {
	r, err := arbiterCall(ctx, c, "list v-zones", func(ctx context.Context, a v1.ArbiterClient) (*v1.ListVZonesResponse, error) {
		return a.ListVZones(ctx, &v1.ListVZonesRequest{Namespace: c.cfg.Namespace})
	})
	if err != nil {
		return nil, err
	}
	// A cached handle whose layout the list shows changed (a reclaim moved
	// its group, a rebuild, another mount reset and reopened it) is
	// refreshed, so that what the caller does next with it — its write
	// pointer, a read — goes through the current zones: through the old
	// ones, reset after a reclaim, a v-zone full of data reads as empty.
	for _, l := range r.GetVzones() {
		c.vzMu.Lock()
		vz := c.vzones[l.GetId()]
		c.vzMu.Unlock()
		if vz == nil {
			continue
		}
		vz.mu.Lock()
		cur := vz.layout
		vz.mu.Unlock()
		if cur != nil && (cur.GetGeneration() != l.GetGeneration() || cur.GetIncarnation() != l.GetIncarnation()) {
			if err := vz.refresh(ctx); err != nil {
				return nil, err
			}
		}
	}
	return r.GetVzones(), nil
}

// OpenVZone opens a new v-zone (the lowest empty id) and returns its handle.
func (c *Client) OpenVZone(ctx context.Context) (*VZone, error) {
	vz, _, err := c.OpenVZoneIncarnation(ctx)
	return vz, err
}

// OpenVZoneIncarnation is OpenVZone that also returns the incarnation of
// this opening (VZone.ResetIncarnation gives exactly it back; 0 from an
// arbiter that predates incarnations).
func (c *Client) OpenVZoneIncarnation(ctx context.Context) (*VZone, uint64, error) {
	return c.openVZone(ctx, &v1.OpenVZoneRequest{Namespace: c.cfg.Namespace})
}

// OpenVZoneLike is OpenVZoneIncarnation with a copyback-aware layout hint:
// the new v-zone's stripe groups go to the dies of v-zone like's where they
// can (best effort), so compacting like into it finds same-chip
// destinations.
func (c *Client) OpenVZoneLike(ctx context.Context, like uint64) (*VZone, uint64, error) {
	return c.openVZone(ctx, &v1.OpenVZoneRequest{Namespace: c.cfg.Namespace, LikeVzone: &like})
}

// OpenVZoneID opens v-zone id, which must be empty (a *zerr.ZoneStateError
// otherwise), instead of the lowest empty one: for users that address
// v-zones by index, as a zoned block device's users address zones. An
// arbiter that predates the request's id opens another v-zone: that one is
// given back at once and the call fails with *zerr.UnavailableError.
func (c *Client) OpenVZoneID(ctx context.Context, id uint64) (*VZone, uint64, error) {
	vz, inc, err := c.openVZone(ctx, &v1.OpenVZoneRequest{Namespace: c.cfg.Namespace, Id: &id})
	if err != nil || vz.ID() == id {
		return vz, inc, err
	}
	if inc != 0 {
		_ = vz.ResetIncarnation(ctx, inc)
	}
	return nil, 0, &zerr.UnavailableError{What: "arbiter", Reason: fmt.Sprintf("it opened v-zone %d when asked for %d: it does not open v-zones by id (upgrade it)", vz.ID(), id)}
}

func (c *Client) openVZone(ctx context.Context, req *v1.OpenVZoneRequest) (*VZone, uint64, error) {
	l, err := arbiterCall(ctx, c, "open v-zone", func(ctx context.Context, a v1.ArbiterClient) (*v1.VZone, error) {
		return a.OpenVZone(ctx, req)
	})
	if err != nil {
		return nil, 0, err
	}
	vz := c.handle(l.GetId())
	vz.applyLayout(l, func() {
		vz.wp, vz.wpKnown = 0, true
		if vz.resetting > 0 {
			vz.reopened = true // the reset's answer (empty) is older than this layout
		}
	})
	return vz, l.GetIncarnation(), nil
}

// VZone returns the handle of v-zone id (its layout is loaded on first use).
func (c *Client) VZone(id uint64) *VZone { return c.handle(id) }

func (c *Client) handle(id uint64) *VZone {
	c.vzMu.Lock()
	defer c.vzMu.Unlock()
	if vz, ok := c.vzones[id]; ok {
		return vz
	}
	vz := &VZone{c: c, id: id}
	c.vzones[id] = vz
	return vz
}

// retryDeadline returns the test of a retry loop's deadline, d from now on
// the clock the loop sleeps its backoff on: a virtual clock's retries end on
// modelled time, a realtime clock's on its scaled time, never on a wall
// clock the sleeps do not follow. The off clock does not move (its sleeps
// return at once): under it the wall clock counts. A zero d has expired at
// once (one attempt).
func (c *Client) retryDeadline(d time.Duration) (expired func() bool) {
	if d <= 0 {
		return func() bool { return true }
	}
	clk := c.cfg.Clock
	if clk.Kind() == clock.KindOff {
		end := time.Now().Add(d)
		return func() bool { return time.Now().After(end) }
	}
	end := clk.Now() + d
	return func() bool { return clk.Now() >= end }
}

// nodeCall runs one call on a node, retrying while the node is unavailable
// (restarting, partitioned) or refuses the call at a per-namespace limit
// (zerr.LimitError: the namespace's other calls end and free their share)
// until the retry deadline; the error names the node.
func nodeCall[T any](ctx context.Context, c *Client, node, addr, op string, fn func(context.Context, v1.ZonedDeviceClient) (T, error)) (T, error) {
	var zero T
	d := c.cfg.RetryDeadline
	if isFailFast(ctx) {
		d = 0 // another copy can serve it (mirror.go): one attempt
	}
	expired := c.retryDeadline(d)
	backoff := 20 * time.Millisecond
	for {
		nc, err := c.nodeClient(node, addr)
		if err == nil {
			var res T
			res, err = fn(c.ctx(ctx), nc)
			if err == nil {
				c.suspect.answered(node)
				return res, nil
			}
			err = c.nodeErr(node, addr, err)
		}
		if !errors.Is(err, zerr.ErrUnavailable) && !errors.Is(err, zerr.ErrLimit) || ctx.Err() != nil || expired() {
			return zero, &NodeError{Node: node, Addr: addr, Op: op, Err: err}
		}
		c.m.retries.WithLabelValues(op).Inc()
		if err := clock.Sleep(ctx, c.cfg.Clock, backoff); err != nil {
			return zero, &NodeError{Node: node, Addr: addr, Op: op, Err: err}
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// NodeError is an error from one node, named. It unwraps to the typed error.
type NodeError struct {
	Node, Addr, Op string
	Err            error
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("node %s (%s): %s: %v", e.Node, e.Addr, e.Op, e.Err)
}
func (e *NodeError) Unwrap() error { return e.Err }

// String is for logs.
func (c *Client) String() string {
	return fmt.Sprintf("client(namespace %s, arbiters %s)", c.cfg.Namespace, strings.Join(c.cfg.Arbiters, ","))
}

// etcdConfig is the etcd client configuration for leader discovery. etcd
// over TLS (https:// endpoints) authenticates clients by certificate: a
// client with a cluster certificate (the operator) presents it; a tenant,
// which has none, does not use etcd and finds the leader through the
// arbiters (false).
func etcdConfig(cfg Config) (clientv3.Config, bool) {
	ecfg := clientv3.Config{Endpoints: cfg.Etcd, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if len(cfg.Etcd) == 0 {
		return ecfg, false
	}
	secure := 0
	for _, ep := range cfg.Etcd {
		if strings.HasPrefix(ep, "https://") {
			secure++
		}
	}
	if secure == 0 {
		return ecfg, true
	}
	if cfg.TLS == nil || (cfg.TLS.GetClientCertificate == nil && len(cfg.TLS.Certificates) == 0) {
		return ecfg, false
	}
	ecfg.TLS = cfg.TLS.Clone()
	return ecfg, true
}
