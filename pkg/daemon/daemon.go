// Package daemon is the skeleton every ZoneFleet server process shares: a gRPC
// server with the error table's interceptors, request metrics and the standard
// health service; an HTTP server with /metrics and /healthz; slog logging; and
// graceful shutdown when its context ends (SIGINT/SIGTERM in the mains).
//
// # Overload
//
// Every server is bounded whatever its callers do (the limits are wire's
// constants, Config.Limits in tests):
//
//   - Each listener (gRPC over TCP, the unix socket, HTTP) admits at most
//     wire.MaxConnsPerListener connections, wire.MaxConnsPerSource from one
//     IP address, and all listeners of the process together stay within
//     ConnBudget, below RLIMIT_NOFILE (raised to its hard limit). A
//     connection past a limit is closed as soon as it is accepted, before
//     any TLS work; the connections already served are unaffected.
//   - gRPC's transport limits: the TLS and HTTP/2 handshakes within
//     wire.HandshakeTimeout, idle connections closed after
//     wire.MaxConnectionIdle, wire.MaxConcurrentStreams per connection,
//     header lists of wire.MaxHeaderListBytes (a block past it closes its
//     connection), messages of wire.MaxMessageBytes.
//   - The request of a unary or server-streaming call must arrive within
//     wire.RequestTimeout of its headers, or its connection is closed (the
//     stats handler of limits.go): gRPC reads such a request whole before
//     any interceptor runs and would hold one sent in part for ever.
//     Client streams are bounded by their handlers (the node's WriteStream
//     idle deadline).
//
// Refused and closed connections are counted in
// zonefleet_server_connections_refused_total{listener,reason} and logged at
// warn at most once a second per listener.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"github.com/zonefleet/zonefleet/pkg/buildinfo"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// MaxMessageBytes and MaxUnaryData are the protocol's message limits
// (wire.MaxMessageBytes, wire.MaxUnaryData), which every server applies.
const (
	MaxMessageBytes = wire.MaxMessageBytes
	MaxUnaryData    = wire.MaxUnaryData
)

// Config of the process skeleton.
type Config struct {
	Name            string        // "arbiter", "ssdnode": the gRPC metrics' subsystem label
	GRPCListen      string        // host:port; port 0 picks one
	HTTPListen      string        // host:port for /metrics and /healthz; empty disables
	LogFormat       string        // text | json
	LogLevel        string        // debug | info | warn | error
	ShutdownTimeout time.Duration // graceful stop, then hard stop
	// Security: TLS and authentication (LoadSecurity). nil serves plaintext
	// without authentication; only in-process test servers do that — every
	// binary and the local cluster set it (TLS, or an explicit --insecure).
	Security *Security
	// Trust holds the trust flags (AddFlags registers them); the binaries
	// turn them into Security with LoadSecurity.
	Trust SecurityFlags
	// UnixSocket, when set, is a unix socket the services registered through
	// the Daemon (RegisterService) are also served on, for clients on this
	// host: `zctl local up`'s mount reaches its in-process nodes this way.
	// No TLS there (gRPC's local credentials: the kernel carries the bytes
	// between two processes of this host, and the socket file is created
	// 0600, so only its owner and root can connect); every call must still
	// carry a token (no client certificates over a unix socket), and the
	// authenticator checks it as on the TCP listener. A stale socket file
	// (nothing accepts on it) is replaced; a socket still served, or any
	// other file at the path, is an error.
	UnixSocket string
	// Limits bound the connections and requests of every listener (zero:
	// wire's limits).
	Limits Limits
	// Clock times the request deadline (Limits.RequestTimeout); nil = real
	// time.
	Clock clock.Clock
}

// MaxUnixSocketPath is the longest unix socket path Linux takes (sun_path
// 108 bytes with the terminating NUL).
const MaxUnixSocketPath = 107

// AddFlags registers the skeleton's flags with the given defaults.
func AddFlags(fs *pflag.FlagSet, c *Config) {
	fs.StringVar(&c.GRPCListen, "listen", c.GRPCListen, "gRPC listen address")
	fs.StringVar(&c.HTTPListen, "http-listen", c.HTTPListen, "HTTP listen address for /metrics and /healthz, served without authentication (loopback by default; empty disables)")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 4*time.Second, "how long a graceful shutdown may drain requests")
	AddSecurityFlags(fs, &c.Trust)
}

// NewLogger builds the slog logger of a process.
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}

// PeerDialOptions are the transport options towards other components (see
// Security.PeerDialOptions).
func (d *Daemon) PeerDialOptions() []grpc.DialOption { return d.cfg.Security.PeerDialOptions() }

// SecurityConfig is the security the daemon runs with (nil: none).
func (d *Daemon) SecurityConfig() *Security { return d.cfg.Security }

// Daemon is a running process skeleton. Register services on GRPC before Run.
type Daemon struct {
	cfg      Config
	Logger   *slog.Logger
	GRPC     *grpc.Server
	Health   *health.Server
	Registry *prometheus.Registry
	Mux      *http.ServeMux
	// Local serves the unix socket (Config.UnixSocket; nil without one).
	Local *grpc.Server

	grpcLis net.Listener
	httpLis net.Listener
	unixLis net.Listener

	guards map[string]*connGuard // by listener: grpc, unix, http
	rpcm   *rpcMetrics
	// ownClock is the real-time clock New started when Config.Clock was
	// nil; Run stops it when it returns.
	ownClock *clock.RealtimeClock

	mu     sync.Mutex
	checks map[string]func() error
}

// New listens on both addresses (so the ports are known before Run) and builds
// the servers. extra gRPC options are appended to the skeleton's.
func New(cfg Config, logger *slog.Logger, extra ...grpc.ServerOption) (*Daemon, error) {
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 4 * time.Second
	}
	d := &Daemon{cfg: cfg, Logger: logger, Registry: prometheus.NewRegistry(), Mux: http.NewServeMux(), checks: map[string]func() error{}}
	bi := buildinfo.Get()
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "zonefleet_build_info", Help: "Build of the running binary; always 1.",
	}, []string{"version", "revision", "goversion", "component"})
	buildInfo.WithLabelValues(bi.Version, bi.Revision, bi.GoVersion, cfg.Name).Set(1)
	d.Registry.MustRegister(buildInfo, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	d.Registry.MustRegister(newCertExpiry(cfg.Security)) // zonefleet_tls_certificate_expiry_timestamp_seconds
	m := newRPCMetrics(d.Registry)
	d.rpcm = m
	if cfg.Security != nil && cfg.Security.Auth != nil {
		d.Registry.MustRegister(cfg.Security.Auth) // zonefleet_auth_refusals_total
	}
	clk := cfg.Clock
	if clk == nil {
		d.ownClock = clock.Realtime(1)
		clk = d.ownClock
	}
	gm := newGuardMetrics(d.Registry)
	d.guards = map[string]*connGuard{}
	for _, name := range []string{"grpc", "unix", "http"} {
		d.guards[name] = newConnGuard(name, cfg.Limits, clk, logger, gm)
	}
	// The authenticator runs first: a refused call reaches neither the
	// error table nor a handler. Every server takes wire's limits.
	server := func(local bool, g *connGuard) *grpc.Server {
		opts := append(cfg.Security.serverOptions(local), rpcerr.ServerOptions()...)
		opts = append(opts, wire.TransportServerOptions(!local && cfg.Security != nil && cfg.Security.TLS != nil)...)
		opts = append(opts, wire.LimitServerOptions()...)
		opts = append(opts, grpc.StatsHandler(g),
			grpc.ChainUnaryInterceptor(m.unary), grpc.ChainStreamInterceptor(m.stream))
		return grpc.NewServer(append(opts, extra...)...)
	}
	d.GRPC = server(false, d.guards["grpc"])
	if cfg.UnixSocket != "" {
		d.Local = server(true, d.guards["unix"])
	}
	d.Health = health.NewServer()
	d.Health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(d, d.Health)
	if cfg.Security == nil || cfg.Security.Insecure {
		reflection.Register(d.GRPC) // not on secure servers: no API map for strangers
	}

	var err error
	if d.grpcLis, err = net.Listen("tcp", cfg.GRPCListen); err != nil {
		return nil, fmt.Errorf("gRPC listen on %s: %w", cfg.GRPCListen, err)
	}
	d.grpcLis = &limitListener{Listener: d.grpcLis, g: d.guards["grpc"]}
	if cfg.HTTPListen != "" {
		if d.httpLis, err = net.Listen("tcp", cfg.HTTPListen); err != nil {
			_ = d.grpcLis.Close()
			return nil, fmt.Errorf("HTTP listen on %s: %w", cfg.HTTPListen, err)
		}
		d.httpLis = &limitListener{Listener: d.httpLis, g: d.guards["http"]}
	}
	if cfg.UnixSocket != "" {
		if d.unixLis, err = listenUnix(cfg.UnixSocket); err != nil {
			_ = d.grpcLis.Close()
			if d.httpLis != nil {
				_ = d.httpLis.Close()
			}
			return nil, err
		}
		d.unixLis = &limitListener{Listener: d.unixLis, g: d.guards["unix"]}
	}
	d.Mux.Handle("/metrics", promhttp.HandlerFor(d.Registry, promhttp.HandlerOpts{Registry: d.Registry}))
	d.Mux.HandleFunc("/healthz", d.healthz)
	if cfg.Security != nil && cfg.Security.Auth != nil {
		// A refused call never reaches the metrics interceptors: the
		// authenticator reports it, so the request metrics count it too
		// (once the daemon exists: a failed New leaves no observer).
		cfg.Security.Auth.OnDecision(m.refused)
	}
	return d, nil
}

// RegisterService registers a service on the gRPC server and on the unix
// socket's (Config.UnixSocket), so that a Daemon is a grpc.ServiceRegistrar:
// register the services clients of this host may reach locally through it,
// and those for TCP callers only (peers with certificates) on GRPC.
func (d *Daemon) RegisterService(desc *grpc.ServiceDesc, impl any) {
	d.GRPC.RegisterService(desc, impl)
	if d.Local != nil {
		d.Local.RegisterService(desc, impl)
	}
}

// UnixSocket is the path of the unix socket the services are also served on
// ("" without one).
func (d *Daemon) UnixSocket() string {
	if d.unixLis == nil {
		return ""
	}
	return d.cfg.UnixSocket
}

// listenUnix listens on a unix socket at path, readable and writable by
// its owner only. A socket file left by a process that died (nothing
// accepts on it) is replaced; a socket still served, or anything else at
// the path, is refused.
func listenUnix(path string) (net.Listener, error) {
	if len(path) > MaxUnixSocketPath {
		return nil, fmt.Errorf("unix socket %s: path longer than %d bytes", path, MaxUnixSocketPath)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("unix socket %s: a file that is not a socket is in the way", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("unix socket %s: in use by a running process", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("unix socket %s: removing the stale socket: %w", path, err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("gRPC listen on unix socket %s: %w", path, err)
	}
	// (the directory is the caller's; the socket itself is its owner's only)
	if err := os.Chmod(path, 0o600); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("unix socket %s: %w", path, err)
	}
	return l, nil
}

// GRPCAddr is the address the gRPC server listens on.
func (d *Daemon) GRPCAddr() string { return d.grpcLis.Addr().String() }

// HTTPAddr is the address of /metrics and /healthz ("" when disabled).
func (d *Daemon) HTTPAddr() string {
	if d.httpLis == nil {
		return ""
	}
	return d.httpLis.Addr().String()
}

// AddHealthCheck adds a check to /healthz and the gRPC health status: the
// process is healthy while every check returns nil.
func (d *Daemon) AddHealthCheck(name string, check func() error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.checks[name] = check
}

// Check runs every health check and returns the failures, sorted by name.
func (d *Daemon) Check() []string {
	d.mu.Lock()
	names := make([]string, 0, len(d.checks))
	for n := range d.checks {
		names = append(names, n)
	}
	checks := make(map[string]func() error, len(d.checks))
	for k, v := range d.checks {
		checks[k] = v
	}
	d.mu.Unlock()
	sort.Strings(names)
	var failed []string
	for _, n := range names {
		if err := checks[n](); err != nil {
			failed = append(failed, n+": "+err.Error())
		}
	}
	return failed
}

func (d *Daemon) healthz(w http.ResponseWriter, _ *http.Request) {
	if failed := d.Check(); len(failed) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintln(w, strings.Join(failed, "\n"))
		return
	}
	_, _ = fmt.Fprintln(w, "ok")
}

// Run serves until ctx ends, then drains: health NOT_SERVING, graceful stop
// of gRPC within the shutdown timeout (hard stop after), HTTP shutdown. It
// returns nil after a clean shutdown.
func (d *Daemon) Run(ctx context.Context) error {
	errc := make(chan error, 3)
	d.guards["grpc"].setMethods(d.GRPC)
	go func() { errc <- d.GRPC.Serve(d.grpcLis) }()
	if d.unixLis != nil {
		d.guards["unix"].setMethods(d.Local)
		go func() { errc <- d.Local.Serve(d.unixLis) }()
	}
	var hs *http.Server
	if d.httpLis != nil {
		hs = &http.Server{Handler: d.Mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: wire.MaxConnectionIdle,
			MaxHeaderBytes: wire.MaxHeaderListBytes}
		go func() {
			if err := hs.Serve(d.httpLis); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	if d.unixLis != nil {
		d.Logger.Info("serving", "grpc", d.GRPCAddr(), "unix", d.cfg.UnixSocket, "http", d.HTTPAddr())
	} else {
		d.Logger.Info("serving", "grpc", d.GRPCAddr(), "http", d.HTTPAddr())
	}
	if d.httpLis != nil && !isLoopback(d.httpLis.Addr()) {
		d.Logger.Warn("/metrics and /healthz are served without authentication beyond loopback: namespace names and I/O counts are visible to anyone who reaches this address; listen on loopback or firewall it",
			"http", d.HTTPAddr())
	}

	// Keep the gRPC health status in step with the checks.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	d.updateHealth()
	var runErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-errc:
			runErr = err
			break loop
		case <-tick.C:
			d.updateHealth()
		}
	}
	d.Health.Shutdown()
	d.Logger.Info("shutting down", "timeout", d.cfg.ShutdownTimeout)
	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, s := range d.servers() {
			wg.Add(1)
			go func() { defer wg.Done(); s.GracefulStop() }()
		}
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d.cfg.ShutdownTimeout):
		d.Logger.Warn("graceful stop timed out; stopping hard")
		for _, s := range d.servers() {
			s.Stop()
		}
	}
	if hs != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = hs.Shutdown(sctx)
		cancel()
	}
	if d.ownClock != nil {
		d.ownClock.Stop()
	}
	return runErr
}

func (d *Daemon) servers() []*grpc.Server {
	if d.Local != nil {
		return []*grpc.Server{d.GRPC, d.Local}
	}
	return []*grpc.Server{d.GRPC}
}

func (d *Daemon) updateHealth() {
	if failed := d.Check(); len(failed) > 0 {
		d.Health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		return
	}
	d.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
}

type rpcMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newRPCMetrics(reg prometheus.Registerer) *rpcMetrics {
	m := &rpcMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zonefleet_grpc_requests_total", Help: "gRPC requests served, by method and status code.",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "zonefleet_grpc_request_duration_seconds", Help: "Time to serve a gRPC request, by method.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10),
		}, []string{"method"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// refused counts a call the authenticator refused (its method label is an
// API method or "unknown": bounded).
func (m *rpcMetrics) refused(full string, code codes.Code) {
	if code == codes.OK || strings.HasPrefix(full, "/grpc.") {
		return
	}
	m.requests.WithLabelValues(method(full), code.String()).Inc()
}

// method keeps the label bounded: the method name without the package path.
func method(full string) string {
	if i := strings.LastIndex(full, "/"); i >= 0 {
		return full[i+1:]
	}
	return full
}

func (m *rpcMetrics) observe(full string, start time.Time, err error) {
	if strings.HasPrefix(full, "/grpc.") { // health and reflection are not the API
		return
	}
	name := method(full)
	m.requests.WithLabelValues(name, status.Code(err).String()).Inc()
	m.duration.WithLabelValues(name).Observe(time.Since(start).Seconds())
}

// The metrics interceptors run inside the error interceptor, so they see the
// handler's typed error; status.Code of it would be Unknown — convert first.
func (m *rpcMetrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	m.observe(info.FullMethod, start, rpcerr.ToError(err))
	return resp, err
}

func (m *rpcMetrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	start := time.Now()
	err := h(srv, ss)
	m.observe(info.FullMethod, start, rpcerr.ToError(err))
	return err
}

// isLoopback says whether a listener's address is reachable from this host
// only.
func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
