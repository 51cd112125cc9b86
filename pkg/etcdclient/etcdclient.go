// Package etcdclient connects ZoneFleet's components to etcd as clients:
// nodes, arbiters and tools link it, never the etcd server (which
// pkg/etcdlocal embeds for tests and the one-process local cluster).
//
// The endpoints' scheme decides the transport: https:// endpoints need a
// TLS configuration (the component's certificate as the client certificate
// and the cluster CA), http:// endpoints are plaintext. Connect waits for
// etcd to answer, so that a cluster's processes may start in any order.
package etcdclient

import (
	"context"
	"crypto/tls"
	"strings"
	"time"

	"github.com/zonefleet/zonefleet/pkg/zerr"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

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
