// Package etcdlocal runs an embedded single-member etcd server: for tests and
// for `zctl local up`, which runs a whole cluster in one process.
//
// History never fills the database: the server compacts its MVCC history
// by itself (periodic auto-compaction keeping AutoCompactionRetention, 5
// minutes by default) on top of the arbiter's own compaction, and bbolt
// reuses the freed pages, so the file stays bounded under a steady write
// rate. The space quota (QuotaBackendBytes, 2 GiB) still applies: when it
// is exceeded etcd raises the NOSPACE alarm and refuses writes, which the
// arbiter reports as an error and the zonefleet_arbiter_etcd_alarm gauge.
//
// # Logging and overload
//
// etcd logs through the process's slog logger (Options.Logger; stderr by
// default) at warn level and above, so that when it must stop — it exits
// the process on a failure it cannot survive, such as a WAL segment it
// cannot create — the reason is in the log.
//
// etcd shares the process's file descriptors with everything else in it.
// Its client listener takes at most Options.MaxClientConns connections
// (DefaultMaxClientConns; the rest wait in the kernel's accept queue and
// cost no descriptor), so a flood of connections to it cannot take the
// descriptors etcd needs for its own files. etcd sizes that limit from the
// soft RLIMIT_NOFILE when it starts (the limit less 150): StartWith lowers
// the soft limit for the start, under a process-wide lock, and raises it to
// the hard limit afterwards. etcd would put no limit at all on a peer
// listener, so the single member opens none: it advertises its peer URL
// (part of its stored identity) and takes no peer connections.
//
// Clients connect with pkg/etcdclient, which links no server code.
package etcdlocal

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zonefleet/zonefleet/pkg/pki"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// DefaultMaxClientConns is the client listener's connection limit when
// Options.MaxClientConns is 0: far more than a cluster's components open
// (a few per process), far below any file descriptor limit.
const DefaultMaxClientConns = 1024

// etcdReservedFDs is what etcd keeps out of its client listener's limit
// (its reservedInternalFDNum).
const etcdReservedFDs = 150

// Server is a running embedded etcd.
type Server struct {
	e         *embed.Etcd
	endpoints []string
	tls       *tls.Config // client side of Client when the server runs TLS
	connLimit int         // client listener's connection limit (0: unknown)
	closing   *atomic.Bool
}

// ClientConnLimit is the connection limit etcd's client listener took
// (MaxClientConns, or more when the process held many descriptors at the
// start; 0 if unknown).
func (s *Server) ClientConnLimit() int { return s.connLimit }

// Options tune an embedded server; the zero value means the defaults.
type Options struct {
	// AutoCompactionRetention is the history etcd keeps (periodic
	// auto-compaction). Default 5m; negative disables auto-compaction.
	AutoCompactionRetention time.Duration
	// QuotaBackendBytes is the database quota (NOSPACE above it). Default 2 GiB.
	QuotaBackendBytes int64
	// PeerAddr is host:port of the (single) member's peer URL; "" picks a
	// free loopback port. It is advertised and stored with the member's
	// data, nothing listens on it: a single member has no peers, and etcd
	// bounds no connections on a peer listener. A restart over the same
	// data directory needs the same peer address.
	PeerAddr string
	// TLS, if set, serves clients over TLS with
	// client-certificate authentication (certificates from `zctl cert
	// init`: etcd.crt/etcd.key, ca.crt); Endpoints are then https://.
	TLS *TLSFiles
	// Logger receives etcd's warnings and errors; nil = stderr.
	Logger *slog.Logger
	// MaxClientConns bounds the client listener's open connections;
	// 0 = DefaultMaxClientConns.
	MaxClientConns int
}

// TLSFiles name etcd's certificate, key and the CA its clients'
// certificates must chain to.
type TLSFiles struct {
	CertFile, KeyFile, CAFile string
}

// Start runs etcd with its data in dir. clientAddr is host:port for clients;
// an empty string or port 0 picks a free loopback port.
func Start(dir, clientAddr string) (*Server, error) {
	return StartWith(dir, clientAddr, Options{})
}

// StartWith is Start with options.
//
// A free port is picked by listening on port 0 and closing the listener
// before etcd binds it, so another process (a parallel test package) can
// take it in between: when etcd's bind then fails with EADDRINUSE and a port
// was picked here, it starts again with new ports (at most 5 attempts).
func StartWith(dir, clientAddr string, o Options) (*Server, error) {
	picked := picksPort(clientAddr) || picksPort(o.PeerAddr)
	for attempt := 1; ; attempt++ {
		s, err := startOnce(dir, clientAddr, o)
		if err == nil || !picked || attempt == 5 || !addrInUse(err) {
			return s, err
		}
	}
}

// picksPort: the address leaves the port to Start (empty or port 0).
func picksPort(addr string) bool {
	if addr == "" {
		return true
	}
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port == "0"
}

// addrInUse: a listen failed because the address was taken (etcd does not
// always wrap the net error, so its text is checked too).
func addrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

func startOnce(dir, clientAddr string, o Options) (*Server, error) {
	if clientAddr == "" {
		clientAddr = "127.0.0.1:0"
	}
	clientAddr, err := resolve(clientAddr)
	if err != nil {
		return nil, err
	}
	if o.PeerAddr == "" {
		o.PeerAddr = "127.0.0.1:0"
	}
	peerAddr, err := resolve(o.PeerAddr)
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = "zonefleet"
	scheme := "http://"
	if o.TLS != nil {
		scheme = "https://"
		cfg.ClientTLSInfo.CertFile, cfg.ClientTLSInfo.KeyFile, cfg.ClientTLSInfo.TrustedCAFile = o.TLS.CertFile, o.TLS.KeyFile, o.TLS.CAFile
		cfg.ClientTLSInfo.ClientCertAuth = true
		cfg.PeerTLSInfo = cfg.ClientTLSInfo
	}
	cu, _ := url.Parse(scheme + clientAddr)
	pu, _ := url.Parse(scheme + peerAddr)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	// The member advertises its peer URL (stored with its data) but listens
	// for no peers: a single-member cluster has none, and a listener nobody
	// needs would be one more port anyone on the host can flood (etcd puts
	// no connection limit on it). See Options.PeerAddr.
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = nil, []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	if o.AutoCompactionRetention == 0 {
		o.AutoCompactionRetention = 5 * time.Minute
	}
	if o.AutoCompactionRetention > 0 {
		cfg.AutoCompactionMode = embed.CompactorModePeriodic
		cfg.AutoCompactionRetention = o.AutoCompactionRetention.String()
	}
	if o.QuotaBackendBytes > 0 {
		cfg.QuotaBackendBytes = o.QuotaBackendBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	cfg.LogLevel = "warn"
	closing := new(atomic.Bool)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(newZapLogger(o.Logger, zapcore.WarnLevel, closing))
	if o.MaxClientConns <= 0 {
		o.MaxClientConns = DefaultMaxClientConns
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded etcd data directory: %w", err)
	}
	_ = os.Chmod(dir, 0o700) // etcd's data: its owner's only
	e, connLimit, err := startLimited(cfg, o.MaxClientConns)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd in %s: %w", dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s not ready after 30s", dir)
	}
	ep := clientAddr
	if o.TLS != nil {
		ep = "https://" + clientAddr
	}
	srv := &Server{e: e, endpoints: []string{ep}, connLimit: connLimit, closing: closing}
	if o.TLS != nil {
		// The server's own certificate (server and client usage) is the
		// client certificate of Client: for the process that runs etcd.
		cert, err := pki.LoadKeyPair(o.TLS.CertFile, o.TLS.KeyFile)
		if err != nil {
			e.Close()
			return nil, err
		}
		roots, err := pki.LoadCertPool(o.TLS.CAFile)
		if err != nil {
			e.Close()
			return nil, err
		}
		srv.tls = &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, Certificates: []tls.Certificate{cert}}
	}
	return srv, nil
}

// rlimitMu serialises the starts that lower RLIMIT_NOFILE.
var rlimitMu sync.Mutex

// startLimited starts etcd with its client listener limited to maxConns
// connections: etcd takes that limit from the soft RLIMIT_NOFILE as it
// starts, which is set for the start and raised to the hard limit after.
// The soft limit for the start stays well above the descriptors the
// process holds, so nothing else in the process runs short meanwhile.
//
// It returns the limit etcd took (0 if unknown).
func startLimited(cfg *embed.Config, maxConns int) (*embed.Etcd, int, error) {
	rlimitMu.Lock()
	defer rlimitMu.Unlock()
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		e, err := embed.StartEtcd(cfg)
		return e, 0, err
	}
	want := uint64(maxConns + etcdReservedFDs)
	if floor := uint64(openFDs() + 256); want < floor {
		want = floor
	}
	restore := r
	restore.Cur = r.Max // a server process wants every descriptor it may have
	defer func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &restore) }()
	took := r.Cur
	if want < r.Cur {
		low := r
		low.Cur = want
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low) == nil {
			took = want
		}
	}
	e, err := embed.StartEtcd(cfg)
	return e, int(took) - etcdReservedFDs, err
}

// openFDs counts the process's open file descriptors (0 if unknown).
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(ents)
}

// resolve turns port 0 into a free port (etcd needs the address up front).
func resolve(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("etcd address %q: %w", addr, err)
	}
	if port != "0" {
		return addr, nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Endpoints are the client addresses.
func (s *Server) Endpoints() []string { return s.endpoints }

// Client returns a new client of this server; the caller closes it.
func (s *Server) Client() (*clientv3.Client, error) {
	var tc *tls.Config
	if s.tls != nil {
		tc = s.tls.Clone()
	}
	return clientv3.New(clientv3.Config{Endpoints: s.endpoints, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// ClientTLS is the TLS configuration Client uses (nil: plaintext).
func (s *Server) ClientTLS() *tls.Config {
	if s.tls == nil {
		return nil
	}
	return s.tls.Clone()
}

// DBSize is the size of the server's database file in bytes.
func (s *Server) DBSize() int64 { return s.e.Server.Backend().Size() }

// Close stops the server. What etcd logs while stopping (its listeners
// closing under its servers) is dropped, short of a fatal error.
func (s *Server) Close() {
	s.closing.Store(true)
	s.e.Close()
	<-s.e.Server.StopNotify()
}
