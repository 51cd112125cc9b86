// Package arbiterd runs an arbiter process: flags, the etcd connection, the
// node compactor for reclaim, the arbiter itself and its gRPC service on a
// daemon skeleton. cmd/arbiter and the in-process local cluster both use it.
package arbiterd

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/pflag"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/arbiter"
	"github.com/zonefleet/zonefleet/pkg/daemon"
	"github.com/zonefleet/zonefleet/pkg/etcdclient"
)

// Options of an arbiter process.
type Options struct {
	ID        string
	Etcd      string // comma-separated endpoints
	Advertise string // address clients and followers use; default the listen address
	// AdminToken is the legacy token the compactor attaches for servers
	// without the authenticator (in-process tests). A real arbiter reaches
	// the nodes with its certificate (daemon PeerDialOptions), or with the
	// admin token from --admin-token-file on an --insecure cluster; there is
	// no flag: secrets never come from argv.
	AdminToken string
	SessionTTL time.Duration
	TReadOnly  time.Duration
	StripeSize uint32 // bytes at minimum width
	// CompactInterval: etcd history compaction by the leader (negative: off).
	CompactInterval time.Duration
	// NodeDownAfter: a node gone this long is down; its records go once it holds no zone (negative: never).
	NodeDownAfter time.Duration
	// ReclaimTimeout bounds one v-zone's reclaim copy.
	ReclaimTimeout time.Duration
	// RebuildInterval: how often the leader looks for mirrored copies to rebuild (negative: never).
	RebuildInterval time.Duration
	// MaxShare: the default capacity share of a namespace without a quota
	// (arbiter.Config.MaxShare).
	MaxShare float64
}

// DefaultOptions are the flag defaults.
func DefaultOptions() Options {
	return Options{ID: "arbiter-1", Etcd: "127.0.0.1:2379", SessionTTL: 5 * time.Second, TReadOnly: 5 * time.Minute, StripeSize: 32 << 10,
		CompactInterval: 5 * time.Minute, NodeDownAfter: 10 * time.Minute, ReclaimTimeout: 10 * time.Minute,
		RebuildInterval: 10 * time.Second, MaxShare: arbiter.DefaultMaxShare}
}

// AddFlags registers the arbiter's flags.
func AddFlags(fs *pflag.FlagSet, o *Options) {
	fs.StringVar(&o.ID, "id", o.ID, "arbiter id, unique in the cluster")
	fs.StringVar(&o.Etcd, "etcd-endpoints", o.Etcd, "comma-separated etcd endpoints")
	fs.StringVar(&o.Advertise, "advertise-addr", o.Advertise, "address clients use to reach this arbiter (default: the listen address)")
	fs.DurationVar(&o.SessionTTL, "session-ttl", o.SessionTTL, "leadership lease: a crashed leader is replaced after about this long")
	fs.DurationVar(&o.TReadOnly, "t-readonly", o.TReadOnly, "a namespace with no writes for this long is frozen and its spares reclaimed (eZNS T_ReadOnly)")
	fs.DurationVar(&o.CompactInterval, "compact-interval", o.CompactInterval, "the leader compacts etcd's history this often, one interval behind, and polls etcd's alarms (negative: off)")
	fs.DurationVar(&o.NodeDownAfter, "node-down-after", o.NodeDownAfter, "a node whose registration is gone this long is marked down; its records are removed once it holds no zone (negative: never)")
	fs.DurationVar(&o.RebuildInterval, "rebuild-interval", o.RebuildInterval, "the leader looks for copies of mirrored legs on down nodes to rebuild this often, and at once when a node goes down or is removed (negative: never)")
	fs.DurationVar(&o.ReclaimTimeout, "reclaim-timeout", o.ReclaimTimeout, "a reclaim whose node I/O (write pointers, zone_compaction) takes longer is rolled back")
	fs.Float64Var(&o.MaxShare, "namespace-max-share", o.MaxShare, "the fraction of the cluster's physical zones a namespace without a capacity quota (zctl ns create --vzones) may hold, so no tenant takes the last free zones (>= 1: no cap)")
	fs.Uint32Var(&o.StripeSize, "stripe-size", o.StripeSize, "stripe size in bytes at minimum stripe width (halved per doubling of the width)")
}

// Run serves the arbiter on d until ctx ends.
func Run(ctx context.Context, d *daemon.Daemon, o Options, log *slog.Logger) error {
	etcdTLS, err := d.SecurityConfig().EtcdClientTLS()
	if err != nil {
		return err
	}
	cli, err := etcdclient.ConnectWith(ctx, o.Etcd, etcdTLS, 30*time.Second)
	if err != nil {
		return err
	}
	defer cli.Close()
	if err := d.SecurityConfig().FollowTokenGenerations(ctx, cli, log); err != nil {
		return err
	}
	addr := o.Advertise
	if addr == "" {
		addr = d.GRPCAddr()
	}
	comp := arbiter.NewNodeCompactor(cli, o.AdminToken, d.PeerDialOptions()...)
	if sec := d.SecurityConfig(); sec != nil && !sec.Insecure && sec.Bundle != nil {
		// Nodes are dialled by id, their certificates pinned to node:<id>;
		// the arbiter's certificate is the credential, no token is sent.
		conf, err := sec.Bundle.ClientTLS(nil, "")
		if err != nil {
			return err
		}
		comp.WithNodeTLS(conf).WithPeerGrants(sec.Issuer())
	}
	a, err := arbiter.New(arbiter.Config{Addr: addr, ID: o.ID, SessionTTL: o.SessionTTL, TReadOnly: o.TReadOnly,
		BaseStripeSize: o.StripeSize, CompactInterval: o.CompactInterval, NodeDownAfter: o.NodeDownAfter, ReclaimTimeout: o.ReclaimTimeout, RebuildInterval: o.RebuildInterval, MaxShare: o.MaxShare, Registerer: d.Registry, Logger: log}, cli, comp)
	if err != nil {
		return err
	}
	v1.RegisterArbiterServer(d.GRPC, arbiter.NewServer(a).WithIssuer(d.SecurityConfig().Issuer()))
	actx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(actx) }()
	err = d.Run(ctx)
	stop()
	<-done
	return err
}
