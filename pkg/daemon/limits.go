package daemon

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// Limits bound what callers can make a server hold (wire's limits by
// default; tests set smaller ones). Zero fields take the wire defaults.
type Limits struct {
	MaxConns          int           // open connections per listener (wire.MaxConnsPerListener)
	MaxConnsPerSource int           // per source IP on one listener (wire.MaxConnsPerSource)
	RequestTimeout    time.Duration // first message of a call after its headers (wire.RequestTimeout)
}

func (l Limits) withDefaults() Limits {
	if l.MaxConns <= 0 {
		l.MaxConns = wire.MaxConnsPerListener
	}
	if l.MaxConnsPerSource <= 0 {
		l.MaxConnsPerSource = wire.MaxConnsPerSource
	}
	if l.RequestTimeout <= 0 {
		l.RequestTimeout = wire.RequestTimeout
	}
	return l
}

// The process's connection budget: every listener of every Daemon in the
// process draws its connections from it, so that all of them together stay
// below RLIMIT_NOFILE with room to spare for the process's own files
// (drive files, etcd's WAL and database when it is embedded, outgoing
// connections). A process that runs out of file descriptors fails in
// places that cannot fail gracefully (an embedded etcd exits when it cannot
// create a WAL segment), so a connection past the budget is refused like
// one past a listener's limit.
var (
	budgetOnce sync.Once
	budgetMax  int64
	budgetUsed atomic.Int64
)

// fdReserve is the share of RLIMIT_NOFILE kept out of the connection
// budget: a fifth, at least 1024 descriptors.
func fdReserve(limit uint64) uint64 { return max(limit/5, 1024) }

// RaiseFileLimit raises the soft RLIMIT_NOFILE to the hard limit (a
// server's connections are file descriptors; the soft default of many
// systems, 1024, is far below what the connection limits allow) and
// returns the soft limit in force.
func RaiseFileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 1024
	}
	if r.Cur < r.Max {
		n := r
		n.Cur = n.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &n) == nil {
			r = n
		}
	}
	return r.Cur
}

// ConnBudget is how many connections all the listeners of this process may
// hold together (RLIMIT_NOFILE, raised to its hard limit, less the reserve).
func ConnBudget() int {
	budgetOnce.Do(func() {
		limit := RaiseFileLimit()
		if r := fdReserve(limit); limit > r+64 {
			budgetMax = int64(limit - r)
		} else {
			budgetMax = 64
		}
	})
	return int(budgetMax)
}

// connGuard counts and refuses connections (limitListener) and closes the
// connections whose request did not arrive in time (its stats handler).
type connGuard struct {
	name   string // listener: "grpc", "unix", "http"
	lim    Limits
	clk    clock.Clock
	log    *slog.Logger
	logged atomic.Int64 // unix nanoseconds of the last refusal logged (rate limit)

	refused *prometheus.CounterVec // reason
	open    prometheus.Gauge

	// clientStreams are the full names of the server's client-streaming
	// methods (setMethods), which the request deadline leaves alone.
	clientStreams atomic.Pointer[map[string]bool]

	mu     sync.Mutex
	total  int
	source map[string]int
	byAddr map[string]*limitConn // remote address → connection (TCP only)
}

type guardMetrics struct {
	refused *prometheus.CounterVec
	open    *prometheus.GaugeVec
}

func newGuardMetrics(reg prometheus.Registerer) *guardMetrics {
	m := &guardMetrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zonefleet_server_connections_refused_total",
			Help: "Connections refused or closed by a server's limits, by listener and reason (listener, source, process, request_timeout).",
		}, []string{"listener", "reason"}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "zonefleet_server_connections_open",
			Help: "Open connections of a server, by listener.",
		}, []string{"listener"}),
	}
	reg.MustRegister(m.refused, m.open)
	return m
}

func newConnGuard(name string, lim Limits, clk clock.Clock, log *slog.Logger, m *guardMetrics) *connGuard {
	return &connGuard{
		name: name, lim: lim.withDefaults(), clk: clk, log: log,
		refused: m.refused.MustCurryWith(prometheus.Labels{"listener": name}),
		open:    m.open.WithLabelValues(name),
		source:  map[string]int{}, byAddr: map[string]*limitConn{},
	}
}

// refuse counts a refusal and logs it at warn, at most once a second per
// listener (a flood must not become a flood of log lines).
func (g *connGuard) refuse(reason, remote string) {
	g.refused.WithLabelValues(reason).Inc()
	now := time.Now().UnixNano()
	last := g.logged.Load()
	if now-last < int64(time.Second) || !g.logged.CompareAndSwap(last, now) {
		return
	}
	g.log.Warn("connection refused: server limit reached (further refusals within a second are counted, not logged)",
		"listener", g.name, "reason", reason, "remote", remote,
		"max_conns", g.lim.MaxConns, "max_conns_per_source", g.lim.MaxConnsPerSource, "process_budget", ConnBudget())
}

// admit takes a slot for a connection from remote, or says which limit
// refuses it.
func (g *connGuard) admit(c net.Conn) (*limitConn, string) {
	src := sourceOf(c.RemoteAddr())
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.total >= g.lim.MaxConns:
		return nil, "listener"
	case src != "" && g.source[src] >= g.lim.MaxConnsPerSource:
		return nil, "source"
	}
	if budgetUsed.Add(1) > int64(ConnBudget()) {
		budgetUsed.Add(-1)
		return nil, "process"
	}
	g.total++
	if src != "" {
		g.source[src]++
	}
	lc := &limitConn{Conn: c, g: g, src: src}
	if src != "" {
		g.byAddr[c.RemoteAddr().String()] = lc
	}
	g.open.Inc()
	return lc, ""
}

func (g *connGuard) release(lc *limitConn) {
	g.mu.Lock()
	g.total--
	if lc.src != "" {
		if g.source[lc.src]--; g.source[lc.src] <= 0 {
			delete(g.source, lc.src)
		}
		if g.byAddr[lc.RemoteAddr().String()] == lc {
			delete(g.byAddr, lc.RemoteAddr().String())
		}
	}
	g.mu.Unlock()
	budgetUsed.Add(-1)
	g.open.Dec()
}

// conn returns the open connection from remote (nil if none: closed, or a
// unix socket, whose peers have no distinct addresses).
func (g *connGuard) conn(remote net.Addr) *limitConn {
	if remote == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.byAddr[remote.String()]
}

// sourceOf is the IP address of a TCP peer ("" for other transports).
func sourceOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	return ""
}

// limitListener accepts connections within the guard's limits and closes
// the others at once, before any TLS work, and goes on accepting.
type limitListener struct {
	net.Listener
	g *connGuard
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc, reason := l.g.admit(c)
		if lc != nil {
			return lc, nil
		}
		l.g.refuse(reason, c.RemoteAddr().String())
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset: no TIME_WAIT kept for a refused peer
		}
		_ = c.Close()
	}
}

// limitConn gives its slot back when it is closed (once).
type limitConn struct {
	net.Conn
	g      *connGuard
	src    string
	once   sync.Once
	closed atomic.Bool
}

func (c *limitConn) Close() error {
	c.closed.Store(true)
	err := c.Conn.Close()
	c.once.Do(func() { c.g.release(c) })
	return err
}

// The stats handler of a gRPC server: it closes a connection when the
// request of a unary or server-streaming call has not arrived
// RequestTimeout after the call began (gRPC reads such a request whole
// before any handler or interceptor runs, and has no deadline of its own
// for it). Client-streaming calls are left to their handlers, which
// receive as they go and may pace their senders (setMethods).
type connKey struct{}
type rpcKey struct{}

type rpcState struct {
	stop func() bool
	done atomic.Bool
}

// TagConn finds the connection once (under g.mu); its calls' TagRPC read
// it from the context, so a call takes no lock of the guard.
func (g *connGuard) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	if lc := g.conn(info.RemoteAddr); lc != nil {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

func (g *connGuard) HandleConn(context.Context, stats.ConnStats) {}

func (g *connGuard) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if cs := g.clientStreams.Load(); cs != nil && (*cs)[info.FullMethodName] {
		return ctx
	}
	lc, _ := ctx.Value(connKey{}).(*limitConn)
	if lc == nil {
		return ctx // nothing to close (unix socket)
	}
	st := &rpcState{}
	st.stop = g.clk.AfterFunc(g.clk.Now()+g.lim.RequestTimeout, func() {
		if st.done.Load() || lc.closed.Load() {
			return
		}
		g.refuse("request_timeout", lc.RemoteAddr().String())
		_ = lc.Close()
	})
	return context.WithValue(ctx, rpcKey{}, st)
}

func (g *connGuard) HandleRPC(ctx context.Context, s stats.RPCStats) {
	switch s.(type) {
	case *stats.InPayload, *stats.End:
	default:
		return
	}
	if st, ok := ctx.Value(rpcKey{}).(*rpcState); ok && st.done.CompareAndSwap(false, true) {
		st.stop()
	}
}

// setMethods records the client-streaming methods of the server's
// registered services (called before it serves).
func (g *connGuard) setMethods(s *grpc.Server) {
	m := map[string]bool{}
	for svc, info := range s.GetServiceInfo() {
		for _, md := range info.Methods {
			if md.IsClientStream {
				m["/"+svc+"/"+md.Name] = true
			}
		}
	}
	g.clientStreams.Store(&m)
}
