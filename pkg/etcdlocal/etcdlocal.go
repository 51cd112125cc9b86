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
package etcdlocal

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is a running embedded etcd.
type Server struct {
	e         *embed.Etcd
	endpoints []string
	tls       *tls.Config // client side of Client when the server runs TLS
}

// Options tune an embedded server; the zero value means the defaults.
type Options struct {
	// AutoCompactionRetention is the history etcd keeps (periodic
	// auto-compaction). Default 5m; negative disables auto-compaction.
	AutoCompactionRetention time.Duration
	// QuotaBackendBytes is the database quota (NOSPACE above it). Default 2 GiB.
	QuotaBackendBytes int64
	// PeerAddr is host:port of the (single) member's peer listener; "" picks
	// a free loopback port. A restart over the same data directory needs the
	// same peer address (the member's URLs are stored with its data).
	PeerAddr string
	// TLS, if set, serves clients and the peer port over TLS with
	// client-certificate authentication (certificates from `zctl cert
	// init`: etcd.crt/etcd.key, ca.crt); Endpoints are then https://.
	TLS *TLSFiles
}

// TLSFiles name etcd's certificate, key and the CA its clients' (and
// peers') certificates must chain to.
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
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	cfg.LogLevel = "error"
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
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
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
	srv := &Server{e: e, endpoints: []string{ep}}
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

// Close stops the server.
func (s *Server) Close() {
	s.e.Close()
	<-s.e.Server.StopNotify()
}

// Connect returns a client of the comma-separated endpoints once etcd
// answers, waiting up to wait (a cluster's processes may start in any order).
func Connect(ctx context.Context, endpoints string, wait time.Duration) (*clientv3.Client, error) {
	return ConnectWith(ctx, endpoints, nil, wait)
}

// UsesTLS reports whether the comma-separated endpoints ask for TLS (every
// one is https://). The scheme decides, not the component's own trust
// settings, so that a plaintext development etcd and a TLS one are both
// explicit in the configuration.
func UsesTLS(endpoints string) bool {
	eps := strings.Split(endpoints, ",")
	for _, ep := range eps {
		if !strings.HasPrefix(strings.TrimSpace(ep), "https://") {
			return false
		}
	}
	return len(eps) > 0
}

// ConnectWith is Connect with a TLS client configuration, used when the
// endpoints are https:// (UsesTLS): a client certificate for etcd's
// client-certificate authentication and the CA that signed etcd's
// certificate. https:// endpoints without a configuration are refused
// (there is nothing to verify etcd with); tc is ignored for http://.
func ConnectWith(ctx context.Context, endpoints string, tc *tls.Config, wait time.Duration) (*clientv3.Client, error) {
	if !UsesTLS(endpoints) {
		tc = nil
	} else if tc == nil {
		return nil, &zerr.InvalidArgumentError{Field: "etcd", Reason: endpoints + " asks for TLS but no CA/certificate is configured (--pki-dir)"}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(endpoints, ","), TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, &zerr.UnavailableError{What: "etcd " + endpoints, Reason: err.Error()}
	}
	deadline := time.Now().Add(wait)
	for {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = cli.Get(sctx, "/zonefleet/v1/ping")
		cancel()
		if err == nil {
			return cli, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = cli.Close()
			return nil, &zerr.UnavailableError{What: "etcd " + endpoints, Reason: err.Error()}
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}
