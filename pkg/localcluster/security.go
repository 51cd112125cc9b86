package localcluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/auth/etcdrbac"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// initPKI creates Dir/pki at the first start, exactly as `zctl cert init`
// does (CA, a certificate per component, the token signing key, a random
// admin token, all private files 0600 in a 0700 directory), and issues
// certificates for nodes added since. The server certificates name the
// loopback addresses and the cluster's host.
func (c *Cluster) initPKI() error {
	var ids []string
	for _, p := range c.nodes {
		ids = append(ids, p.id)
	}
	for i := 0; i < c.cfg.Nodes; i++ {
		ids = append(ids, fmt.Sprintf("node-%d", i+1))
	}
	hosts := []string{"localhost", "127.0.0.1", "::1", c.cfg.Host}
	if _, err := os.Stat(filepath.Join(c.pki, auth.FileCA)); os.IsNotExist(err) {
		if _, err := auth.InitDir(auth.InitOptions{Dir: c.pki, Nodes: ids, Hosts: hosts}); err != nil {
			return fmt.Errorf("local cluster PKI: %w", err)
		}
	} else if err != nil {
		return err
	}
	for _, id := range ids {
		r := pki.Role{Kind: pki.RoleNode, Name: id}
		if _, err := os.Stat(filepath.Join(c.pki, auth.ComponentFileName(r)+".crt")); os.IsNotExist(err) {
			if _, err := auth.IssueInDir(c.pki, r, hosts, 0, false); err != nil {
				return fmt.Errorf("local cluster PKI: %w", err)
			}
		}
	}
	files := auth.DirFiles(c.pki, pki.Role{Kind: pki.RoleAdmin}, true, true)
	b, err := auth.Load(files)
	if err != nil {
		return fmt.Errorf("local cluster PKI: %w", err)
	}
	c.adm = b
	return nil
}

// PKIDir is the directory of the cluster's CA, certificates and secrets.
func (c *Cluster) PKIDir() string { return c.pki }

// AdminTokenFile is the file holding the cluster's admin token (0600).
func (c *Cluster) AdminTokenFile() string { return filepath.Join(c.pki, auth.FileAdminToken) }

// AdminToken is the cluster's admin token (read from AdminTokenFile).
func (c *Cluster) AdminToken() string { return c.adm.AdminToken }

// Insecure tells whether the cluster serves plaintext.
func (c *Cluster) Insecure() bool { return c.cfg.Insecure }

// ClientTLS is the TLS configuration of a tenant client (no client
// certificate), nil on an insecure cluster.
func (c *Cluster) ClientTLS() *tls.Config {
	if c.cfg.Insecure {
		return nil
	}
	conf, _ := c.adm.ClientTLS(nil, "")
	conf.GetClientCertificate = nil
	return conf
}

// MintToken signs a namespace token offline with the cluster's signing key
// (what `zctl cert token` does).
func (c *Cluster) MintToken(ns string, ttl time.Duration) (string, error) {
	tok, _, err := c.adm.Issuer.Issue(auth.TokenRoleNamespace, ns, 0, ttl)
	return tok, err
}

// TokenSource is a refreshing namespace token for ns.
func (c *Cluster) TokenSource(ns string) auth.TokenSource {
	return auth.NewRefreshingSource(func(context.Context) (string, time.Time, error) {
		tok, cl, err := c.adm.Issuer.Issue(auth.TokenRoleNamespace, ns, 0, auth.DefaultTokenTTL)
		return tok, cl.ExpiresAt, err
	}, nil)
}

// ClientConfig is a client.Config for namespace ns with the cluster's
// addresses, TLS and a namespace token. ns "" gives the operator's
// configuration (AdminClientConfig).
func (c *Cluster) ClientConfig(ns string) client.Config {
	if ns == "" {
		return c.AdminClientConfig()
	}
	return client.Config{Arbiters: c.ArbiterAddrs(), Namespace: ns, TLS: c.ClientTLS(), Credentials: c.TokenSource(ns),
		LocalSockets: c.localSockets()}
}

// localSockets maps the nodes' ids to their unix sockets (Config.TCPOnly;
// a node keeps its socket when it restarts). Keyed by id, not address: the
// client picks a socket for the node it means, whatever address the node's
// record holds.
func (c *Cluster) localSockets() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]string{}
	for _, p := range c.nodes {
		if p.sock != "" && p.id != "" {
			m[p.id] = p.sock
		}
	}
	return m
}

// AdminClientConfig is the operator's client.Config: TLS with the admin
// client certificate (or, insecure, the admin token).
func (c *Cluster) AdminClientConfig() client.Config {
	cfg := client.Config{Arbiters: c.ArbiterAddrs()}
	if c.cfg.Insecure {
		cfg.Token = c.adm.AdminToken
		return cfg
	}
	cfg.TLS, _ = c.adm.ClientTLS(nil, "")
	return cfg
}

// adminDialOptions dial a component as the operator.
func (c *Cluster) adminDialOptions() []grpc.DialOption {
	if c.cfg.Insecure {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithPerRPCCredentials(auth.PerRPC(auth.StaticToken(c.adm.AdminToken), true))}
	}
	conf, _ := c.adm.ClientTLS(nil, "")
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(conf))}
}

// etcdLeastPrivilege turns on etcd's authentication with a role per
// component (pkg/auth/etcdrbac): a node writes only its own registration,
// only arbiters write grants, layouts, namespaces and token generations.
// It runs at every start (idempotent), with the etcd certificate, which
// etcd maps to its root role.
func (c *Cluster) etcdLeastPrivilege(ctx context.Context) error {
	cli, err := c.Etcd.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	ids := make([]string, 0, len(c.nodes))
	for _, p := range c.nodes {
		ids = append(ids, p.id)
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := etcdrbac.Apply(actx, cli, ids); err != nil {
		return fmt.Errorf("local cluster etcd roles: %w", err)
	}
	return nil
}
