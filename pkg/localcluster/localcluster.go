// Package localcluster runs a whole ZoneFleet cluster in one process: an
// embedded etcd, arbiters and ssdnodes, each a real gRPC server on a loopback
// port with its own /metrics, exactly as the binaries run them. It backs
// `zctl local up`, the client and file-system integration tests and the
// cluster benchmarks. Nodes and arbiters can be stopped, killed and started
// again for failure tests.
//
// Each node also serves a unix socket in its data directory (grpc.sock,
// daemon.Config.UnixSocket), and ClientConfig routes a tenant's node calls
// to it (client.Config.LocalSockets): the same authentication with the
// namespace token, without TLS over loopback TCP, which on one host only
// costs CPU. Config.TCPOnly turns the sockets off.
package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/arbiterd"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/daemon"
	"github.com/zonefleet/zonefleet/pkg/etcdlocal"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/node"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// Config of a local cluster.
type Config struct {
	Dir       string // everything lives here: etcd/, node-N/, cluster.json
	Nodes     int    // default 3
	Arbiters  int    // default 1
	Devices   int    // per node, default 1
	Device    flash.Config
	Clock     string  // realtime, virtual, off (default realtime)
	TimeScale float64 // default 1
	// AdminToken is ignored: the cluster is secure by default and generates
	// its own admin token (crypto/rand) into Dir/pki/admin.token at first
	// start, with the CA and the certificates (what `zctl cert init` does).
	// Use AdminTokenFile, ClientConfig or AdminClientConfig.
	//
	// Deprecated: kept so that old callers compile.
	AdminToken string
	// Insecure serves plaintext gRPC. Calls are still authenticated (admin
	// token, namespace and node tokens). For tests and benchmarks where TLS
	// is irrelevant only.
	Insecure bool
	// BasePort: 0 picks free ports; otherwise etcd BasePort, arbiter i at
	// BasePort+10+2i (metrics +1), node i at BasePort+30+2i (metrics +1), so a
	// cluster started again on the same Dir comes back on the same addresses.
	BasePort  int
	Host      string // default 127.0.0.1
	TReadOnly time.Duration
	// MaxShare is the arbiters' default capacity share of a namespace
	// without a quota (arbiter.Config.MaxShare); 0 keeps the default.
	MaxShare float64
	// SessionTTL is the arbiters' leadership lease (default 2 s) and
	// NodeLeaseTTL the lease of every node's registration (default 2 s):
	// a stopped process revokes its lease at once, so only a crash waits
	// for the TTL, and a process starved for longer than the TTL loses
	// it. Tests take a generous one (internal/testcluster).
	SessionTTL   time.Duration
	NodeLeaseTTL time.Duration
	Admission    bool
	// RebuildRate is every node's rebuild share in MiB/s (ssdnode
	// --rebuild-rate); 0 = node.DefaultRebuildRate. UnlimitedRebuild lifts
	// the limit (--rebuild-rate 0).
	RebuildRate      float64
	UnlimitedRebuild bool
	// TCPOnly: the nodes serve no unix socket, so that clients of this
	// process reach them over TCP with TLS as remote clients do. By default
	// every node also serves its data directory's grpc.sock
	// (daemon.Config.UnixSocket) and ClientConfig routes to it: on one host
	// the kernel carries the bytes, and TLS over loopback TCP only burns CPU
	// (`zctl bench fs --tcp` measures the difference).
	TCPOnly bool
	Logger  *slog.Logger
	// FDP are every node's FDP drives (ssdnode --fdp-*); the zero value
	// (FDP.Devices 0) serves none. FDP.OnZoned (--fdp-on-zoned) books each
	// on the timing model of the node's zoned drive of its index, so
	// FDP.Devices must not exceed Devices.
	FDP node.FDPOptions
}

// SmallDevice is a drive for tests and laptops: 8 chips, 4 MiB single-die
// zones (D_zone 1), 56 zones, MAR/MOR 14.
func SmallDevice() flash.Config {
	c := flash.Defaults()
	c.Channels, c.Ways, c.PagesPerBlock, c.BlocksPerChip, c.SpareBlocksPerChip, c.DZone = 4, 2, 256, 9, 2, 1
	c.WriteCacheBytes = 4 << 20
	return c
}

// LocalDevice is `zctl local up`'s drive: SmallDevice's chips and 4 MiB
// zones with four times the blocks per chip: 272 zones, 1088 MiB. With three
// nodes and 32 MiB segments that is a 2.7 GiB file system whose data log has
// free segments beyond its cleaning reserve to open a second write lane (on
// SmallDevice's 56 zones free space sits at the reserve and concurrent
// writers share one lane). The backing files are sparse: space is used as
// data is written.
func LocalDevice() flash.Config {
	c := SmallDevice()
	c.BlocksPerChip = 36
	return c
}

// ExistingDevice returns the geometry of the drives an earlier run left in
// dir (node-1's first backing file) over base, and whether there was one: a
// cluster keeps the geometry it was created with, whatever the defaults of
// the build that brings it back. A file that is there but unreadable is an
// error.
func ExistingDevice(dir string, base flash.Config) (flash.Config, bool, error) {
	c, err := zns.ReadGeometry(node.DevicePath(filepath.Join(dir, nodeID(0)), 0), base)
	if errors.Is(err, zerr.ErrNotFound) {
		return base, false, nil
	}
	if err != nil {
		return base, false, err
	}
	return c, true, nil
}

// nodeID is the ID (and data subdirectory) of the cluster's node i.
func nodeID(i int) string { return fmt.Sprintf("node-%d", i+1) }

// TinyDevice is a drive for tests: 8 chips, 512 KiB single-die zones (128
// blocks), 112 zones, MAR/MOR 14.
func TinyDevice() flash.Config {
	c := SmallDevice()
	c.PagesPerBlock, c.BlocksPerChip = 32, 16
	c.WriteCacheBytes = 1 << 20
	return c
}

// Info is what cluster.json holds: how other zctl commands find the cluster.
type Info struct {
	Dir        string     `json:"dir"`
	Etcd       []string   `json:"etcd"`
	Arbiters   []Endpoint `json:"arbiters"`
	Nodes      []Endpoint `json:"nodes"`
	AdminToken string     `json:"admin_token,omitempty"` // no longer written: see AdminTokenFile
	// What a local user needs to connect (paths; the secrets stay in their
	// 0600 files).
	PKIDir         string `json:"pki_dir,omitempty"`
	CAFile         string `json:"ca_file,omitempty"`
	AdminCertFile  string `json:"admin_cert_file,omitempty"`
	AdminKeyFile   string `json:"admin_key_file,omitempty"`
	AdminTokenFile string `json:"admin_token_file,omitempty"`
	Insecure       bool   `json:"insecure,omitempty"`
	Namespace      string `json:"namespace,omitempty"`
	Mount          string `json:"mount,omitempty"`
	PID            int    `json:"pid"`
}

// Endpoint is one process of the cluster.
type Endpoint struct {
	ID      string `json:"id"`
	GRPC    string `json:"grpc"`
	Metrics string `json:"metrics"`
	// Unix is the node's unix socket for clients of this host ("": none).
	Unix string `json:"unix,omitempty"`
}

// Cluster is a running local cluster.
type Cluster struct {
	cfg  Config
	log  *slog.Logger
	Etcd *etcdlocal.Server
	lock *dirLock
	pki  string       // Dir/pki
	adm  *auth.Bundle // the operator's credentials (admin certificate, admin token, signing key)

	mu       sync.Mutex
	arbiters []*proc
	nodes    []*proc
}

type proc struct {
	id       string
	grpc     string
	http     string
	cancel   context.CancelFunc
	done     chan error
	running  bool
	fixedRPC string
	fixedWeb string
	sock     string // the node's unix socket ("": none)
	// exited is closed when this run of the process returns, exitErr
	// (set before) is what it returned: waitReady gives up on the first
	// process that stopped instead of waiting out its deadline.
	exited  chan struct{}
	exitErr error
}

// Start brings the cluster up and waits until every node is registered and an
// arbiter leads.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, &zerr.InvalidArgumentError{Field: "dir", Reason: "is empty"}
	}
	if cfg.Nodes <= 0 {
		cfg.Nodes = 3
	}
	if cfg.Arbiters <= 0 {
		cfg.Arbiters = 1
	}
	if cfg.Devices <= 0 {
		cfg.Devices = 1
	}
	if cfg.Device.Channels == 0 {
		cfg.Device = SmallDevice()
	}
	if cfg.Clock == "" {
		cfg.Clock = "realtime"
	}
	if cfg.TimeScale <= 0 {
		cfg.TimeScale = 1
	}
	if _, err := node.RebuildRateBytes(cfg.RebuildRate); err != nil {
		return nil, err
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 2 * time.Second
	}
	if cfg.NodeLeaseTTL <= 0 {
		cfg.NodeLeaseTTL = 2 * time.Second
	}
	if cfg.TReadOnly <= 0 {
		cfg.TReadOnly = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	lock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, log: cfg.Logger, lock: lock, pki: filepath.Join(cfg.Dir, "pki")}
	if err := c.initPKI(); err != nil {
		lock.release()
		return nil, err
	}
	etcdAddr := net.JoinHostPort(cfg.Host, "0")
	if cfg.BasePort > 0 {
		etcdAddr = net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.BasePort))
	}
	var eopts etcdlocal.Options
	if !cfg.Insecure { // etcd over TLS with client-certificate authentication, like compose
		eopts.TLS = &etcdlocal.TLSFiles{CertFile: filepath.Join(c.pki, "etcd.crt"), KeyFile: filepath.Join(c.pki, "etcd.key"), CAFile: filepath.Join(c.pki, auth.FileCA)}
	}
	if c.Etcd, err = etcdlocal.StartWith(filepath.Join(cfg.Dir, "etcd"), etcdAddr, eopts); err != nil {
		lock.release()
		return nil, err
	}
	port := func(base, i, off int) string {
		if cfg.BasePort == 0 {
			return net.JoinHostPort(cfg.Host, "0")
		}
		return net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.BasePort+base+2*i+off))
	}
	for i := 0; i < cfg.Nodes; i++ {
		c.nodes = append(c.nodes, &proc{id: nodeID(i), fixedRPC: port(30, i, 0), fixedWeb: port(30, i, 1)})
	}
	if !cfg.Insecure {
		if err := c.etcdLeastPrivilege(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	for i := 0; i < cfg.Arbiters; i++ {
		c.arbiters = append(c.arbiters, &proc{id: fmt.Sprintf("arbiter-%d", i+1), fixedRPC: port(10, i, 0), fixedWeb: port(10, i, 1)})
	}
	for i := range c.nodes {
		if err := c.StartNode(ctx, i); err != nil {
			c.Close()
			return nil, err
		}
	}
	for i := range c.arbiters {
		if err := c.StartArbiter(ctx, i); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.waitReady(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// readyGuard bounds waitReady when its context has no deadline: a hang
// guard, not a timing assumption. A cluster is ready in about a second on
// an idle machine and in seconds on a saturated one; the guard is more
// than ten times that.
const readyGuard = 5 * time.Minute

// waitReady waits until every running node is registered in etcd and the
// arbiter leader counts them all available. It wakes on every change under
// the cluster's etcd prefix (a registration, an election) and asks the
// leader again at a short interval (its count follows the registrations
// through its own watch). It gives up when ctx ends, or after readyGuard
// when ctx has no deadline.
func (c *Cluster) waitReady(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, readyGuard)
		defer cancel()
	}
	cli, err := c.Etcd.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	changes := cli.Watch(wctx, cluster.Prefix, clientv3WithPrefix())
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	missing := "etcd not read yet"
	for {
		if err := c.stoppedEarly(); err != nil {
			return err
		}
		want := c.runningNodes()
		nodes, errN := cli.Get(ctx, cluster.NodesPrefix(), clientv3WithPrefix())
		leader, errL := cli.Get(ctx, cluster.Prefix+"arbiter/election", clientv3WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
		switch {
		case errN != nil || errL != nil:
			missing = fmt.Sprintf("etcd: %v", errors.Join(errN, errL))
		case int(nodes.Count) < want:
			missing = fmt.Sprintf("%d of %d nodes registered", nodes.Count, want)
		case len(leader.Kvs) == 0:
			missing = "no arbiter leader elected"
		default:
			sees := c.leaderSees(ctx, string(leader.Kvs[0].Value))
			if sees >= want {
				return nil
			}
			missing = fmt.Sprintf("the arbiter leader counts %d of %d nodes available", sees, want)
		}
		select {
		case <-ctx.Done():
			return &zerr.UnavailableError{What: "local cluster", Reason: fmt.Sprintf("not ready (%s): %v", missing, ctx.Err())}
		case _, ok := <-changes:
			if !ok {
				changes = nil // the watch ended: the interval alone
			}
		case <-tick.C:
		}
	}
}

// stoppedEarly is the error of a process that should run but has returned
// (a node that cannot open its drives, say), or nil.
func (c *Cluster) stoppedEarly() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range append(append([]*proc(nil), c.nodes...), c.arbiters...) {
		if !p.running || p.exited == nil {
			continue
		}
		select {
		case <-p.exited:
			if p.exitErr == nil {
				return &zerr.UnavailableError{What: p.id, Reason: "stopped during start"}
			}
			return fmt.Errorf("%s: %w", p.id, p.exitErr)
		default:
		}
	}
	return nil
}

// leaderSees asks the leader how many nodes it counts as available.
func (c *Cluster) leaderSees(ctx context.Context, addr string) int {
	conn, err := grpc.NewClient(addr, append(rpcerr.DialOptions(), c.adminDialOptions()...)...)
	if err != nil {
		return 0
	}
	defer conn.Close()
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := v1.NewArbiterClient(conn).ClusterStatus(sctx, &v1.ClusterStatusRequest{})
	if err != nil {
		return 0
	}
	return int(st.GetNodesAvailable())
}

// WaitReady waits until every running node is registered and the arbiter
// leader counts them all (after a restart, say).
func (c *Cluster) WaitReady(ctx context.Context) error { return c.waitReady(ctx) }

func (c *Cluster) runningNodes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, p := range c.nodes {
		if p.running {
			n++
		}
	}
	return n
}

func (c *Cluster) startProc(p *proc, name string, role pki.Role, run func(ctx context.Context, d *daemon.Daemon) error) error {
	log := c.log.With("proc", p.id)
	flags := daemon.SecurityFlags{PKIDir: c.pki, Insecure: c.cfg.Insecure}
	withSigning := role.Kind == pki.RoleArbiter
	if c.cfg.Insecure && role.Kind == pki.RoleNode {
		withSigning = true // node tokens towards peers on a plaintext cluster
	}
	sec, err := daemon.LoadSecurity(flags, role, withSigning, nil, log)
	if err != nil {
		return err
	}
	rpcAddr, webAddr := p.fixedRPC, p.fixedWeb
	if p.grpc != "" && strings.HasSuffix(rpcAddr, ":0") {
		rpcAddr, webAddr = p.grpc, p.http // a restart keeps its addresses
	}
	var d *daemon.Daemon
	for try := 0; try < 50; try++ { // a killed process's port may linger briefly
		d, err = daemon.New(daemon.Config{Name: name, GRPCListen: rpcAddr, HTTPListen: webAddr, ShutdownTimeout: 2 * time.Second, Security: sec, UnixSocket: p.sock}, log, wire.ServerOptions()...)
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.grpc, p.http, p.cancel, p.done, p.running = d.GRPCAddr(), d.HTTPAddr(), cancel, make(chan error, 1), true
	exited := make(chan struct{})
	p.exited = exited
	go func() {
		err := run(ctx, d)
		p.exitErr = err
		close(exited)
		p.done <- err
	}()
	return nil
}

// StartNode starts (or restarts) node i on its backing files.
func (c *Cluster) StartNode(ctx context.Context, i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.nodes[i]
	if p.running {
		return nil
	}
	o := node.DefaultOptions()
	o.ID, o.DataDir, o.Devices, o.Device = p.id, filepath.Join(c.cfg.Dir, p.id), c.cfg.Devices, c.cfg.Device
	o.Clock, o.TimeScale, o.Etcd, o.LeaseTTL = c.cfg.Clock, c.cfg.TimeScale, c.Etcd.Endpoints()[0], c.cfg.NodeLeaseTTL
	o.Admission.Enabled = c.cfg.Admission
	if c.cfg.FDP.Devices > 0 {
		o.FDP = c.cfg.FDP
	}
	switch {
	case c.cfg.UnlimitedRebuild:
		o.RebuildRateMiB = 0
	case c.cfg.RebuildRate > 0:
		o.RebuildRateMiB = c.cfg.RebuildRate
	}
	p.sock = ""
	if !c.cfg.TCPOnly {
		if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
			return err
		}
		if sock := filepath.Join(o.DataDir, "grpc.sock"); len(sock) <= daemon.MaxUnixSocketPath {
			p.sock = sock
		} else {
			c.log.Info("node serves no unix socket: its path would be too long; clients of this process reach it over TCP", "node", p.id, "path", sock)
		}
	}
	return c.startProc(p, "ssdnode", pki.Role{Kind: pki.RoleNode, Name: p.id}, func(ctx context.Context, d *daemon.Daemon) error {
		err := node.Run(ctx, d, o, c.log.With("node", p.id))
		if err != nil && ctx.Err() == nil {
			c.log.Error("node stopped", "node", p.id, "err", err)
		}
		return err
	})
}

// StartArbiter starts (or restarts) arbiter i.
func (c *Cluster) StartArbiter(ctx context.Context, i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.arbiters[i]
	if p.running {
		return nil
	}
	o := arbiterd.DefaultOptions()
	o.ID, o.Etcd, o.SessionTTL, o.TReadOnly = p.id, c.Etcd.Endpoints()[0], c.cfg.SessionTTL, c.cfg.TReadOnly
	if c.cfg.MaxShare != 0 {
		o.MaxShare = c.cfg.MaxShare
	}
	return c.startProc(p, "arbiter", pki.Role{Kind: pki.RoleArbiter}, func(ctx context.Context, d *daemon.Daemon) error {
		return arbiterd.Run(ctx, d, o, c.log.With("arbiter", p.id))
	})
}

func (c *Cluster) stop(p *proc) error {
	c.mu.Lock()
	if !p.running {
		c.mu.Unlock()
		return nil
	}
	p.running = false
	c.mu.Unlock()
	p.cancel()
	select {
	case err := <-p.done:
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	case <-time.After(20 * time.Second):
		return &zerr.UnavailableError{What: p.id, Reason: "did not stop within 20s"}
	}
}

// StopNode stops node i gracefully (drain, unregister, close the devices).
func (c *Cluster) StopNode(i int) error { return c.stop(c.nodes[i]) }

// StopArbiter stops arbiter i gracefully (its leadership is released at once).
func (c *Cluster) StopArbiter(i int) error { return c.stop(c.arbiters[i]) }

// Info describes the running cluster.
func (c *Cluster) Info() Info {
	c.mu.Lock()
	defer c.mu.Unlock()
	in := Info{Dir: c.cfg.Dir, Etcd: c.Etcd.Endpoints(), PID: os.Getpid(), PKIDir: c.pki, Insecure: c.cfg.Insecure,
		CAFile: filepath.Join(c.pki, auth.FileCA), AdminTokenFile: c.AdminTokenFile()}
	f := auth.DirFiles(c.pki, pki.Role{Kind: pki.RoleAdmin}, false, false)
	in.AdminCertFile, in.AdminKeyFile = f.Cert, f.Key
	for _, p := range c.arbiters {
		in.Arbiters = append(in.Arbiters, Endpoint{ID: p.id, GRPC: p.grpc, Metrics: "http://" + p.http + "/metrics"})
	}
	for _, p := range c.nodes {
		in.Nodes = append(in.Nodes, Endpoint{ID: p.id, GRPC: p.grpc, Metrics: "http://" + p.http + "/metrics", Unix: p.sock})
	}
	return in
}

// ArbiterAddrs lists the arbiters' gRPC addresses.
func (c *Cluster) ArbiterAddrs() []string {
	var out []string
	for _, a := range c.Info().Arbiters {
		out = append(out, a.GRPC)
	}
	return out
}

// WriteInfo writes Dir/cluster.json (plus extra fields set by the caller).
func WriteInfo(in Info) error {
	b, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(in.Dir, "cluster.json.tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(in.Dir, "cluster.json"))
}

// ReadInfo reads a cluster.json.
func ReadInfo(path string) (Info, error) {
	var in Info
	b, err := os.ReadFile(path)
	if err != nil {
		return in, err
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return in, &zerr.CorruptError{Path: path, Reason: err.Error()}
	}
	return in, nil
}

// Close stops everything: arbiters, nodes, etcd.
func (c *Cluster) Close() error {
	var errs []error
	for _, p := range c.arbiters {
		errs = append(errs, c.stop(p))
	}
	for _, p := range c.nodes {
		errs = append(errs, c.stop(p))
	}
	if c.Etcd != nil {
		c.Etcd.Close()
	}
	c.lock.release()
	return errors.Join(errs...)
}

func clientv3WithPrefix() clientv3.OpOption { return clientv3.WithPrefix() }
