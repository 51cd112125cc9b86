package node

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
	"github.com/zonefleet/zonefleet/pkg/auth"
	"github.com/zonefleet/zonefleet/pkg/auth/peerdial"
	"github.com/zonefleet/zonefleet/pkg/buildinfo"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/daemon"
	"github.com/zonefleet/zonefleet/pkg/etcdclient"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/pki"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
	"github.com/zonefleet/zonefleet/pkg/zoneowner"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// Options of a node process.
type Options struct {
	Config
	DataDir   string
	Devices   int
	Device    flash.Config
	Clock     string
	TimeScale float64
	Etcd      string // comma-separated endpoints
	LeaseTTL  time.Duration
	Advertise string // address other processes dial; default the listen address
	// RebuildRateMiB is --rebuild-rate: the node's rebuild share in MiB/s
	// (0 = unlimited); Run sets Config.RebuildRate from it.
	RebuildRateMiB float64
	// WritebackKickBytes is --writeback-kick-bytes: the drives start writing
	// their backing file's dirty pages to the disk every this many bytes
	// written (zns.WithWritebackKick; 0 = leave it to the kernel).
	WritebackKickBytes int64
	// FDP are the node's FDP drives (--fdp-*).
	FDP FDPOptions
}

// DefaultOptions are the defaults of the ssdnode flags.
func DefaultOptions() Options {
	return Options{
		Config:  Config{ID: "node-1", Admission: AdmissionConfig{Enabled: true}},
		DataDir: "./data", Devices: 1, Device: flash.Defaults(), Clock: "realtime", TimeScale: 1,
		Etcd: "127.0.0.1:2379", LeaseTTL: 5 * time.Second, RebuildRateMiB: DefaultRebuildRate,
		WritebackKickBytes: zns.DefaultWritebackKick, FDP: DefaultFDPOptions(),
	}
}

// AddFlags registers every node and drive knob as a flag.
func AddFlags(fs *pflag.FlagSet, o *Options) {
	fs.StringVar(&o.ID, "id", o.ID, "node id, unique in the cluster")
	fs.StringVar(&o.DataDir, "data", o.DataDir, "directory of the backing files (dev<N>.zns and its journal)")
	fs.IntVar(&o.Devices, "devices", o.Devices, "number of emulated drives")
	fs.StringVar(&o.Etcd, "etcd-endpoints", o.Etcd, "comma-separated etcd endpoints")
	fs.BoolVar(&o.Standalone, "standalone", o.Standalone, "run without etcd and arbiter: no registration, every namespace may use every zone")
	fs.StringVar(&o.Advertise, "advertise-addr", o.Advertise, "address other processes use to reach this node (default: the listen address)")
	fs.DurationVar(&o.LeaseTTL, "lease-ttl", o.LeaseTTL, "etcd lease of the node's registration")
	fs.BoolVar(&o.Admission.Enabled, "admission-control", o.Admission.Enabled, "eZNS write admission control (pace busy writers by the write-cache latency)")
	fs.IntVar(&o.QueueSlots, "queue-slots", o.QueueSlots, "requests a device serves at once, shared by namespaces round robin (0 = two per chip)")
	fs.StringVar(&o.Clock, "clock", o.Clock, "timing clock: realtime (completions at their modelled time), virtual or off")
	fs.Float64Var(&o.TimeScale, "time-scale", o.TimeScale, "realtime clock: wall time per modelled time (2 = run the model at half speed)")
	fs.Float64Var(&o.RebuildRateMiB, "rebuild-rate", o.RebuildRateMiB, "MiB/s this node's drives read or write for rebuilds (mirror and raid5 legs, as source or target), so tenants keep the rest; 0 = unlimited")

	fs.Int64Var(&o.WritebackKickBytes, "writeback-kick-bytes", o.WritebackKickBytes, "start writing a drive's backing file to the disk (without waiting) every this many bytes written, so that a flush has less left to write; durability does not change (0 = leave it to the kernel's thresholds)")

	AddFDPFlags(fs, &o.FDP)

	c := &o.Device
	fs.IntVar(&c.Channels, "channels", c.Channels, "flash channels")
	fs.IntVar(&c.Ways, "ways", c.Ways, "chips per channel")
	fs.IntVar(&c.PagesPerBlock, "pages-per-block", c.PagesPerBlock, "flash pages per block")
	fs.IntVar(&c.PageSize, "page-size", c.PageSize, "flash page (chunk) size in bytes")
	fs.IntVar(&c.BlockSize, "block-size", c.BlockSize, "logical block size in bytes")
	fs.IntVar(&c.BlocksPerChip, "blocks-per-chip", c.BlocksPerChip, "flash blocks per chip")
	fs.IntVar(&c.SpareBlocksPerChip, "spare-blocks-per-chip", c.SpareBlocksPerChip, "flash blocks per chip kept for LogFBGs and lazy erase")
	fs.IntVar(&c.DZone, "dzone", c.DZone, "zone interleaving degree: chips per zone (1 = single-die zones)")
	fs.IntVar(&c.ZoneCapacity, "zone-capacity", c.ZoneCapacity, "zone capacity in blocks (0 = zone size)")
	fs.IntVar(&c.MaxOpenZones, "max-open-zones", c.MaxOpenZones, "open-zone limit MOR (0 = none)")
	fs.IntVar(&c.MaxActiveZones, "max-active-zones", c.MaxActiveZones, "active-zone limit MAR (0 = none)")
	fs.Int64Var(&c.WriteCacheBytes, "write-cache-bytes", c.WriteCacheBytes, "shared write cache size")
	fs.IntVar(&c.WriteCacheQueues, "write-cache-queues", c.WriteCacheQueues, "split the write cache into this many queues with a lock each; a write uses its zone's queue (zone mod queues) and waits only for that queue to drain (0 = one shared cache)")
	fs.IntVar(&c.IPUBudgetBlocks, "ipu-budget-blocks", c.IPUBudgetBlocks, "in-place-update budget in blocks")
	fs.IntVar(&c.CopybackThreshold, "copyback-threshold", c.CopybackThreshold, "consecutive copybacks of a page before a read-and-program (0 = unlimited)")
	fs.StringVar(&c.Media, "media", c.Media, "media preset: TLC, MLC or ZNAND (ZNS+ Table 2)")
	fs.DurationVar(&c.ReadLatency, "read-latency", c.ReadLatency, "page read latency (0 = preset)")
	fs.DurationVar(&c.ProgramLatency, "program-latency", c.ProgramLatency, "page program latency (0 = preset)")
	fs.DurationVar(&c.DMALatency, "dma-latency", c.DMALatency, "page transfer latency on a channel (0 = preset)")
	fs.DurationVar(&c.EraseLatency, "erase-latency", c.EraseLatency, "block erase latency (0 = preset)")
	fs.Float64Var(&c.CopybackRatio, "copyback-ratio", c.CopybackRatio, "copyback latency / read-and-program latency (0 = preset)")
	fs.Int64Var(&c.HostLinkBytesPerSec, "host-link-bytes-per-second", c.HostLinkBytesPerSec, "host link bandwidth")
}

// DevicePath is the backing file of a node's drive i in its data directory.
func DevicePath(dataDir string, i int) string {
	return filepath.Join(dataDir, fmt.Sprintf("dev%d.zns", i))
}

// OpenDevices opens (or on first start creates) the node's backing files.
func OpenDevices(o Options, clk clock.Clock) ([]*zns.Device, error) {
	if o.Devices < 1 {
		return nil, &zerr.InvalidArgumentError{Field: "devices", Reason: "must be at least 1"}
	}
	if o.WritebackKickBytes < 0 {
		return nil, &zerr.InvalidArgumentError{Field: "writeback-kick-bytes", Reason: fmt.Sprintf("%d: want 0 (off) or a positive number of bytes", o.WritebackKickBytes)}
	}
	if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	var devs []*zns.Device
	for i := 0; i < o.Devices; i++ {
		path := DevicePath(o.DataDir, i)
		d, err := zns.OpenOrCreate(path, o.Device, clk, zns.WithWritebackKick(o.WritebackKickBytes))
		if err != nil {
			for _, d := range devs {
				_ = d.Close()
			}
			return nil, fmt.Errorf("device %d (%s): %w", i, path, err)
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// OpenOwners opens (or creates) the owner file of every device:
// DIR/devN.owners next to DIR/devN.zns.
func OpenOwners(dir string, devs []*zns.Device) ([]*zoneowner.Store, error) {
	var out []*zoneowner.Store
	for i, d := range devs {
		st, err := zoneowner.Open(filepath.Join(dir, fmt.Sprintf("dev%d.owners", i)), uint32(d.Identify().Zones))
		if err != nil {
			for _, o := range out {
				_ = o.Close()
			}
			return nil, fmt.Errorf("device %d owner file: %w", i, err)
		}
		out = append(out, st)
	}
	return out, nil
}

// RebuildRateBytes converts a --rebuild-rate in MiB/s to bytes per second
// (0 = unlimited); a negative, NaN or infinite rate is an error.
func RebuildRateBytes(mib float64) (int64, error) {
	if math.IsNaN(mib) || math.IsInf(mib, 0) || mib < 0 || mib > 1<<20 {
		return 0, &zerr.InvalidArgumentError{Field: "rebuild-rate", Reason: fmt.Sprintf("%v MiB/s: want 0 (unlimited) or a positive rate up to %d MiB/s", mib, 1<<20)}
	}
	b := int64(mib * (1 << 20))
	if mib > 0 && b == 0 {
		b = 1
	}
	return b, nil
}

// Run serves the node on d until ctx ends, then unregisters and closes the devices.
func Run(ctx context.Context, d *daemon.Daemon, o Options, log *slog.Logger) error {
	rate, err := RebuildRateBytes(o.RebuildRateMiB)
	if err != nil {
		return err
	}
	o.Config.RebuildRate = rate
	clk, ok := clock.Parse(o.Clock, o.TimeScale)
	if !ok {
		return &zerr.InvalidArgumentError{Field: "clock", Reason: fmt.Sprintf("%q: want realtime, virtual or off", o.Clock)}
	}
	devs, err := OpenDevices(o, clk)
	if err != nil {
		return err
	}
	defer func() {
		for i, dv := range devs {
			if err := dv.Close(); err != nil {
				log.Error("closing device", "device", i, "err", err)
			}
		}
	}()

	var cli *clientv3.Client
	var grants *Grants
	gctx, stopGrants := context.WithCancel(context.Background())
	defer stopGrants()
	// A revoked grant resets its zone on a per-zone worker (Grants keeps the
	// zone out of reach until it ran, so a new grant's I/O lands after it);
	// shutdown cancels gctx and waits for running resets before closing the
	// devices and owner files they use.
	var svc *Service
	svcReady := make(chan struct{})
	if !o.Standalone {
		etcdTLS, err := d.SecurityConfig().EtcdClientTLS()
		if err != nil {
			return err
		}
		if cli, err = etcdclient.ConnectWith(ctx, o.Etcd, etcdTLS, 30*time.Second); err != nil {
			return err
		}
		defer cli.Close()
		onRevoke := func(dev, zone uint32) {
			select {
			case <-svcReady:
				if gctx.Err() == nil { // shutting down: the devices are about to close
					svc.ResetRevoked(dev, zone)
				}
			case <-gctx.Done():
			}
		}
		if grants, err = WatchGrantsFunc(gctx, cli, o.ID, log, onRevoke); err != nil {
			return err
		}
		if err := d.SecurityConfig().FollowTokenGenerations(gctx, cli, log); err != nil {
			return err
		}
	}
	if cli != nil && o.Peers == nil {
		pool, err := PeerPool(d.SecurityConfig(), cli)
		if err != nil {
			return err
		}
		defer pool.Close()
		o.Peers = pool
	}
	if !o.Standalone {
		owners, err := OpenOwners(o.DataDir, devs)
		if err != nil {
			return err
		}
		defer func() {
			for _, st := range owners {
				_ = st.Close()
			}
		}()
		o.Config.Owners = owners
	}
	if sec := d.SecurityConfig(); sec != nil && !sec.Insecure && sec.Bundle != nil && o.Config.PeerGrants == nil {
		o.Config.PeerGrants = sec.Bundle.Verifier
		if sec.Generations != nil {
			o.Config.PeerRevoked = sec.Generations.Revoked
		}
	}
	if sec := d.SecurityConfig(); sec != nil && sec.Auth != nil && o.Config.Audit == nil {
		o.Config.Audit = sec.Auth
	}
	svc, err = New(o.Config, devs, grants, log)
	if err != nil {
		return err
	}
	if rate > 0 {
		log.Info("rebuild rate limit", "mib_per_second", o.RebuildRateMiB)
	} else {
		log.Warn("rebuild rate unlimited (--rebuild-rate 0): rebuilds compete with tenants at full speed")
	}
	if err := svc.SeedOwners(); err != nil {
		return fmt.Errorf("seeding new owner files: %w", err)
	}
	close(svcReady)
	defer svc.Close()
	defer func() { // before svc.Close and the devices: no reset may run on them
		stopGrants()
		if grants != nil {
			grants.WaitResets()
		}
	}()
	svc.SweepUngranted()
	if cli != nil {
		if err := WatchWeights(gctx, cli, log, svc.SetNamespaceWeight); err != nil {
			return err
		}
	}
	if err := svc.Collector().Register(d.Registry); err != nil {
		return err
	}
	RegisterGRPC(d, svc) // on the unix socket too (daemon.Config.UnixSocket)
	fdpSvc, closeFDP, err := serveFDP(gctx, d, o, clk, devs, svc, cli, log)
	if err != nil {
		return err
	}
	defer closeFDP()
	d.AddHealthCheck("devices", svc.Healthy)

	var reg *Registration
	if !o.Standalone {
		addr := o.Advertise
		if addr == "" {
			addr = d.GRPCAddr()
		}
		rec := svc.Record(addr, buildinfo.Get().Version, time.Now())
		if fdpSvc != nil {
			rec.FDPDevices = fdpSvc.Infos()
		}
		if reg, err = Register(ctx, cli, rec, o.LeaseTTL, log); err != nil {
			return err
		}
		log.Info("registered", "node", o.ID, "addr", addr, "devices", len(devs))
	}
	runErr := d.Run(ctx)
	if reg != nil {
		if err := reg.Close(context.Background()); err != nil {
			log.Warn("unregister", "err", err)
		}
	}
	return runErr
}

// PeerPool is the node's pool of connections to other nodes: resolved by
// node id from the registered node records in etcd (never from a request),
// TLS with this node's certificate, the peer pinned to node:<id>, no bearer
// token. With --insecure it dials plaintext and, when the signing key is at
// hand, presents a short-lived node token (plaintext servers accept those).
func PeerPool(sec *daemon.Security, cli *clientv3.Client) (*peerdial.Pool, error) {
	resolve := func(ctx context.Context, id string) (string, error) {
		resp, err := cli.Get(ctx, cluster.NodeKey(id))
		if err != nil {
			return "", &zerr.UnavailableError{What: "etcd", Reason: err.Error()}
		}
		if len(resp.Kvs) == 0 {
			return "", &zerr.NotFoundError{Kind: "node", Name: id}
		}
		rec, err := cluster.DecodeNode(string(resp.Kvs[0].Key), resp.Kvs[0].Value)
		if err != nil {
			return "", err
		}
		if rec.ID != id {
			return "", &zerr.NotFoundError{Kind: "node", Name: id}
		}
		return rec.Addr, nil
	}
	opts := append(rpcerr.DialOptions(), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(wire.MaxMessageBytes), grpc.MaxCallSendMsgSize(wire.MaxMessageBytes)))
	cfg := peerdial.Config{Resolve: resolve, Options: opts}
	switch {
	case sec == nil || sec.Insecure:
		cfg.Insecure = true
		if sec != nil && sec.Bundle != nil && sec.Bundle.Issuer != nil && sec.Role.Kind == pki.RoleNode {
			iss, name := sec.Bundle.Issuer, sec.Role.Name
			src := auth.NewRefreshingSource(func(context.Context) (string, time.Time, error) {
				tok, c, err := iss.Issue(auth.TokenRoleNode, name, 0, auth.DefaultTokenTTL)
				return tok, c.ExpiresAt, err
			}, nil)
			cfg.Options = append(cfg.Options, grpc.WithPerRPCCredentials(auth.PerRPC(src, true)))
		}
	default:
		if sec.Bundle == nil || sec.Bundle.Cert == nil {
			return nil, fmt.Errorf("node: TLS peers need this node's certificate")
		}
		cfg.Roots, cfg.Cert = sec.Bundle.Roots, sec.Bundle.Cert.Current()
	}
	return peerdial.New(cfg)
}
