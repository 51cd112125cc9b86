package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/daemon"
	"github.com/zonefleet/zonefleet/pkg/fdp"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// FDPService serves a node's FDP drives (pkg/fdp) as the FDP gRPC
// service. Every call is device-level and needs the operator (admin), as
// decided by the zoned service's requireAdmin: the verified identity, or
// without an authenticator the legacy admin token; except the data calls
// (Write, Read, Trim, Flush, LBAStatus) and Configs, which a tenant may
// make within its fdp namespace's grant (fdpgrants.go): its LBAs count
// from the grant's first, its placement handles index the grant's. It holds no lock of its own;
// the drives are safe for concurrent use.
type FDPService struct {
	v1.UnimplementedFDPServer
	devs      []*fdp.Device
	admin     func(ctx context.Context, what string) error
	isAdmin   func(ctx context.Context) bool
	namespace func(ctx context.Context) string
	node      string
	grants    *FDPGrants // nil: tenants are refused
	log       *slog.Logger
	// maxStatusLBAs bounds one LBAStatus response (0: DefaultFDPStatusLBAs)
	maxStatusLBAs uint64
}

// NewFDPService serves devs, authorizing like svc. Tenants are refused
// until FollowGrants.
func NewFDPService(devs []*fdp.Device, svc *Service) *FDPService {
	return &FDPService{devs: devs, admin: svc.requireAdmin, isAdmin: svc.isAdmin, namespace: svc.namespace, node: svc.cfg.ID, log: svc.log}
}

// FollowGrants admits tenants to the fdp grants of this node's drives,
// followed in etcd until ctx ends; a grant that goes is trimmed, and so
// is, once at the start, every LBA no grant holds (namespaces deleted
// while the node was down). Call it before the service serves.
func (f *FDPService) FollowGrants(ctx context.Context, cli *clientv3.Client) error {
	g, err := WatchFDPGrants(ctx, cli, f.log, f.revoke)
	if err != nil {
		return err
	}
	f.grants = g
	return f.sweepUngranted(ctx, g.Extents())
}

// RegisterFDP registers f on s.
func RegisterFDP(s grpc.ServiceRegistrar, f *FDPService) { v1.RegisterFDPServer(s, f) }

func (f *FDPService) dev(ctx context.Context, idx uint32, what string) (*fdp.Device, error) {
	if err := f.admin(ctx, "FDP "+what); err != nil {
		return nil, err
	}
	if int(idx) >= len(f.devs) {
		return nil, &zerr.NotFoundError{Kind: "fdp device", Name: fmt.Sprint(idx)}
	}
	return f.devs[idx], nil
}

func pid(p *v1.PlacementID) (fdp.PlacementID, error) {
	if p.GetGroup() > 0xffff || p.GetHandle() > 0xffff {
		return fdp.PlacementID{}, &zerr.InvalidArgumentError{Field: "placement", Reason: fmt.Sprintf("group %d / handle %d out of range", p.GetGroup(), p.GetHandle())}
	}
	return fdp.PlacementID{Group: uint16(p.GetGroup()), Handle: uint16(p.GetHandle())}, nil
}

func configsResponse(c fdp.ConfigLog) *v1.FDPConfigsResponse {
	r := &v1.FDPConfigsResponse{ReclaimGroups: uint32(c.ReclaimGroups), RuChips: uint32(c.RUChips), ReclaimUnitNominalBytes: c.RUBytes,
		ChipsPerGroup: uint32(c.ChipsPerGroup), BlockSize: uint32(c.BlockSize), Lbas: c.LBAs, PhysicalBytes: c.PhysicalBytes,
		OverProvision: c.OverProvision, Victim: c.Victim.String(), MaxPlacementIds: uint32(c.MaxPlacementIDs), PageSize: uint32(c.PageSize)}
	for _, h := range c.Handles {
		r.HandleTypes = append(r.HandleTypes, h.String())
	}
	return r
}

// Configs serves the configurations log page: the drive's to the
// operator; to a tenant its namespace's view (its capacity, its placement
// handles), which a file system over the namespace sizes its zones by.
func (f *FDPService) Configs(ctx context.Context, req *v1.FDPDeviceRequest) (*v1.FDPConfigsResponse, error) {
	t, err := f.tenant(ctx, req.GetDevice(), "Configs")
	if err != nil {
		return nil, err
	}
	c := t.dev.Configs()
	if t.ext != nil {
		hs := make([]fdp.HandleType, len(t.ext.Handles))
		for i, h := range t.ext.Handles {
			if int(h) < len(c.Handles) {
				hs[i] = c.Handles[h]
			}
		}
		c.Handles, c.LBAs, c.MaxPlacementIDs = hs, t.ext.LBAs, c.ReclaimGroups*len(hs)
		c.PhysicalBytes = 0 // the drive's, not the namespace's
	}
	return configsResponse(c), nil
}

// Usage serves the reclaim unit handle usage log page.
func (f *FDPService) Usage(ctx context.Context, req *v1.FDPDeviceRequest) (*v1.FDPUsageResponse, error) {
	d, err := f.dev(ctx, req.GetDevice(), "Usage")
	if err != nil {
		return nil, err
	}
	r := &v1.FDPUsageResponse{}
	for _, u := range d.Usage() {
		r.Handles = append(r.Handles, &v1.HandleUsage{Group: uint32(u.Group), Handle: uint32(u.Handle), Type: u.Type.String(), ReclaimUnit: u.RU,
			AvailableBytes: u.Available, HostBytesWritten: u.HostBytes, GcBytesMoved: u.GCBytes, ReclaimUnitsUsed: u.RUsUsed,
			ValidLbas: u.ValidLBAs, GcReclaimUnit: u.GCUnitRU})
	}
	return r, nil
}

// Stats serves the statistics log page.
func (f *FDPService) Stats(ctx context.Context, req *v1.FDPDeviceRequest) (*v1.FDPStatsResponse, error) {
	d, err := f.dev(ctx, req.GetDevice(), "Stats")
	if err != nil {
		return nil, err
	}
	s := d.Stats()
	return &v1.FDPStatsResponse{HostBytesWithMetadataWritten: s.HostBytesWritten, MediaBytesWithMetadataWritten: s.MediaBytesWritten,
		MediaBytesErased: s.MediaBytesErased, GcCopies: s.GCCopies, Copybacks: s.Copybacks, ReclaimUnitsReclaimed: s.RUsReclaimed,
		TrimmedBytes: s.TrimmedBytes, Waf: s.WAF()}, nil
}

// Events serves the events log.
func (f *FDPService) Events(ctx context.Context, req *v1.FDPEventsRequest) (*v1.FDPEventsResponse, error) {
	d, err := f.dev(ctx, req.GetDevice(), "Events")
	if err != nil {
		return nil, err
	}
	r := &v1.FDPEventsResponse{}
	for _, e := range d.Events(req.GetAfterSeq()) {
		r.Events = append(r.Events, &v1.FDPEvent{Seq: e.Seq, Type: e.Type.String(), Group: uint32(e.Group), Handle: int32(e.Handle),
			ReclaimUnit: e.RU, Count: e.Count, TimeNs: uint64(e.Time)})
	}
	return r, nil
}

// Status serves the drive's state.
func (f *FDPService) Status(ctx context.Context, req *v1.FDPDeviceRequest) (*v1.FDPStatusResponse, error) {
	d, err := f.dev(ctx, req.GetDevice(), "Status")
	if err != nil {
		return nil, err
	}
	s := d.Status()
	r := &v1.FDPStatusResponse{Enabled: s.Enabled, ClosedReclaimUnits: uint32(s.ClosedRUs), MappedLbas: s.MappedLBAs, Waf: s.WAF,
		ReadOnly: s.ReadOnly, ModelledTimeNs: uint64(s.ModelledTime)}
	for i := range s.FreeRUs {
		r.FreeReclaimUnits = append(r.FreeReclaimUnits, uint32(s.FreeRUs[i]))
		r.FreeBlocks = append(r.FreeBlocks, uint32(s.FreeBlocks[i]))
	}
	for _, b := range s.ChipBusyNs {
		r.ChipBusyNs = append(r.ChipBusyNs, uint64(b))
	}
	return r, nil
}

// Write writes through a placement identifier.
func (f *FDPService) Write(ctx context.Context, req *v1.FDPWriteRequest) (*v1.FDPWriteResponse, error) {
	t, err := f.tenant(ctx, req.GetDevice(), "Write")
	if err != nil {
		return nil, err
	}
	p, err := pid(req.GetPlacement())
	if err != nil {
		return nil, err
	}
	if p, err = t.placement(p); err != nil {
		return nil, err
	}
	bs := uint64(t.dev.BlockSize())
	lba, err := t.lbas(req.GetLba(), (uint64(len(req.GetData()))+bs-1)/bs)
	if err != nil {
		return nil, err
	}
	res, err := t.dev.Write(ctx, lba, req.GetData(), p, fdp.Flags{FUA: req.GetFua()})
	if err != nil {
		return nil, err
	}
	return &v1.FDPWriteResponse{LatencyNs: uint64(res.Latency())}, nil
}

// maxFDPRead bounds a unary read (the gRPC message limit).
const maxFDPRead = 4 << 20

// Read reads blocks.
func (f *FDPService) Read(ctx context.Context, req *v1.FDPReadRequest) (*v1.FDPReadResponse, error) {
	t, err := f.tenant(ctx, req.GetDevice(), "Read")
	if err != nil {
		return nil, err
	}
	d := t.dev
	if req.GetCount() > maxFDPRead/uint64(d.BlockSize()) {
		return nil, &zerr.InvalidArgumentError{Field: "count", Reason: "a read returns at most " + strconv.Itoa(maxFDPRead) + " bytes"}
	}
	lba, err := t.lbas(req.GetLba(), req.GetCount())
	if err != nil {
		return nil, err
	}
	b, res, err := d.Read(ctx, lba, req.GetCount())
	if err != nil {
		return nil, err
	}
	return &v1.FDPReadResponse{Data: b, LatencyNs: uint64(res.Latency())}, nil
}

// Trim deallocates blocks.
func (f *FDPService) Trim(ctx context.Context, req *v1.FDPTrimRequest) (*v1.FDPTrimResponse, error) {
	t, err := f.tenant(ctx, req.GetDevice(), "Trim")
	if err != nil {
		return nil, err
	}
	lba, err := t.lbas(req.GetLba(), req.GetCount())
	if err != nil {
		return nil, err
	}
	return &v1.FDPTrimResponse{}, t.dev.Trim(ctx, lba, req.GetCount())
}

// DefaultFDPStatusLBAs bounds the LBAs one LBAStatus call covers: at most
// half as many runs (alternating mapped and unmapped blocks), about 1.5 MiB
// of response, within gRPC's default 4 MiB message limit.
const DefaultFDPStatusLBAs = 1 << 18

// LBAStatus reports the mapped runs of a range, admitted like Read. It
// covers at most the service's status bound of LBAs from the request's
// first (the response's count); the caller pages.
func (f *FDPService) LBAStatus(ctx context.Context, req *v1.FDPLBAStatusRequest) (*v1.FDPLBAStatusResponse, error) {
	t, err := f.tenant(ctx, req.GetDevice(), "LBAStatus")
	if err != nil {
		return nil, err
	}
	return t.lbaStatus(req.GetLba(), req.GetCount(), f.statusLBAs())
}

// lbaStatus answers LBAStatus for count LBAs at lba in t's addressing,
// covering at most limit of them.
func (t fdpTenant) lbaStatus(lba, count, limit uint64) (*v1.FDPLBAStatusResponse, error) {
	if count == 0 {
		return nil, &zerr.InvalidArgumentError{Field: "count", Reason: "must be positive"}
	}
	dlba, err := t.lbas(lba, count)
	if err != nil {
		return nil, err
	}
	// the whole range, not only the part this answer covers (the drive
	// checks the operator's there)
	if c := t.dev.Capacity(); dlba > c || count > c-dlba {
		return nil, &zerr.OutOfRangeError{LBA: lba, Count: count, Limit: c}
	}
	n := min(count, max(limit, 1), fdp.MaxStatusLBAs)
	runs, err := t.dev.LBAStatus(dlba, n)
	if err != nil {
		return nil, err
	}
	base := dlba - lba
	r := &v1.FDPLBAStatusResponse{Count: n, Runs: make([]*v1.FDPLBARange, len(runs))}
	for i, x := range runs {
		r.Runs[i] = &v1.FDPLBARange{Lba: x.LBA - base, Count: x.Count}
	}
	return r, nil
}

func (f *FDPService) statusLBAs() uint64 {
	if f.maxStatusLBAs > 0 {
		return f.maxStatusLBAs
	}
	return DefaultFDPStatusLBAs
}

// SetMaxStatusLBAs bounds the LBAs one LBAStatus call covers (0: the
// default, DefaultFDPStatusLBAs). Call it before the service serves.
func (f *FDPService) SetMaxStatusLBAs(n uint64) { f.maxStatusLBAs = n }

// Flush makes acknowledged writes durable.
func (f *FDPService) Flush(ctx context.Context, req *v1.FDPDeviceRequest) (*v1.FDPFlushResponse, error) {
	t, err := f.tenant(ctx, req.GetDevice(), "Flush")
	if err != nil {
		return nil, err
	}
	return &v1.FDPFlushResponse{}, t.dev.Flush(ctx)
}

// UpdateHandles points handles at fresh reclaim units.
func (f *FDPService) UpdateHandles(ctx context.Context, req *v1.FDPUpdateHandlesRequest) (*v1.FDPUpdateHandlesResponse, error) {
	d, err := f.dev(ctx, req.GetDevice(), "UpdateHandles")
	if err != nil {
		return nil, err
	}
	ps := make([]fdp.PlacementID, 0, len(req.GetPlacements()))
	for _, p := range req.GetPlacements() {
		x, err := pid(p)
		if err != nil {
			return nil, err
		}
		ps = append(ps, x)
	}
	return &v1.FDPUpdateHandlesResponse{}, d.UpdateHandles(ctx, ps)
}

// SetConfig changes the victim policy and the reclaim unit size; both are
// checked before either changes.
func (f *FDPService) SetConfig(ctx context.Context, req *v1.FDPSetConfigRequest) (*v1.FDPConfigsResponse, error) {
	d, err := f.dev(ctx, req.GetDevice(), "SetConfig")
	if err != nil {
		return nil, err
	}
	var pol fdp.VictimPolicy
	if req.GetVictim() != "" {
		if pol, err = fdp.ParseVictimPolicy(req.GetVictim()); err != nil {
			return nil, err
		}
	}
	if req.RuChips != nil {
		if req.GetRuChips() > 1<<16 {
			return nil, &zerr.InvalidArgumentError{Field: "ru_chips", Reason: "too large"}
		}
		if err := d.SetRUChips(int(req.GetRuChips())); err != nil {
			return nil, err
		}
	}
	if pol != 0 {
		if err := d.SetVictimPolicy(pol); err != nil {
			return nil, err
		}
	}
	return configsResponse(d.Configs()), nil
}

// FDPCollector exports the FDP drives' counters as zonefleet_fdp_*
// metrics, labelled by device index (bounded by the node's drives).
func (f *FDPService) FDPCollector() prometheus.Collector { return fdpCollector{f} }

type fdpCollector struct{ f *FDPService }

var (
	fdpHost     = prometheus.NewDesc("zonefleet_fdp_host_bytes_total", "Bytes the hosts wrote to the FDP drive.", []string{"device"}, nil)
	fdpMedia    = prometheus.NewDesc("zonefleet_fdp_media_bytes_total", "Bytes the FDP drive wrote to flash (host writes and GC copies).", []string{"device"}, nil)
	fdpErased   = prometheus.NewDesc("zonefleet_fdp_media_erased_bytes_total", "Bytes of flash the FDP drive erased.", []string{"device"}, nil)
	fdpCopies   = prometheus.NewDesc("zonefleet_fdp_gc_copies_total", "Logical blocks garbage collection moved since the drive opened.", []string{"device"}, nil)
	fdpRuns     = prometheus.NewDesc("zonefleet_fdp_gc_reclaimed_units_total", "Reclaim units garbage collection reclaimed (one per collection) since the drive opened.", []string{"device"}, nil)
	fdpFreeRUs  = prometheus.NewDesc("zonefleet_fdp_free_reclaim_units", "Free reclaim units (of the current size) per reclaim group.", []string{"device", "group"}, nil)
	fdpWAF      = prometheus.NewDesc("zonefleet_fdp_write_amplification_ratio", "Media bytes over host bytes.", []string{"device"}, nil)
	fdpReadOnly = prometheus.NewDesc("zonefleet_fdp_read_only", "1 when a failed file operation made the drive read-only.", []string{"device"}, nil)
)

func (c fdpCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{fdpHost, fdpMedia, fdpErased, fdpCopies, fdpRuns, fdpFreeRUs, fdpWAF, fdpReadOnly} {
		ch <- d
	}
}

func (c fdpCollector) Collect(ch chan<- prometheus.Metric) {
	for i, d := range c.f.devs {
		dev := strconv.Itoa(i)
		s := d.Stats()
		st := d.Status()
		ch <- prometheus.MustNewConstMetric(fdpHost, prometheus.CounterValue, float64(s.HostBytesWritten), dev)
		ch <- prometheus.MustNewConstMetric(fdpMedia, prometheus.CounterValue, float64(s.MediaBytesWritten), dev)
		ch <- prometheus.MustNewConstMetric(fdpErased, prometheus.CounterValue, float64(s.MediaBytesErased), dev)
		ch <- prometheus.MustNewConstMetric(fdpCopies, prometheus.CounterValue, float64(s.GCCopies), dev)
		ch <- prometheus.MustNewConstMetric(fdpRuns, prometheus.CounterValue, float64(s.RUsReclaimed), dev)
		ch <- prometheus.MustNewConstMetric(fdpWAF, prometheus.GaugeValue, s.WAF(), dev)
		ro := 0.0
		if st.ReadOnly {
			ro = 1
		}
		ch <- prometheus.MustNewConstMetric(fdpReadOnly, prometheus.GaugeValue, ro, dev)
		for g, n := range st.FreeRUs {
			ch <- prometheus.MustNewConstMetric(fdpFreeRUs, prometheus.GaugeValue, float64(n), dev, strconv.Itoa(g))
		}
	}
}

// FDPOptions are the ssdnode's FDP drives: Devices drives on the node's
// flash geometry and timings (Options.Device), each with this FDP
// configuration. Their backing files are DIR/fdp<N>.fdp.
type FDPOptions struct {
	Devices       int
	Handles       []string
	ReclaimGroups int
	RUChips       int
	OverProvision float64
	Victim        string
	// OnZoned (--fdp-on-zoned): FDP drive i books its reads, writes,
	// garbage-collection copies and erases on the flash timing model of
	// zoned drive i (fdp.WithModel), as an FDP namespace beside zoned ones
	// on one drive: they contend for its chips, channels, host link and
	// write cache. The flash blocks and the collector stay each drive's
	// own. Needs a zoned drive per FDP drive, of the same chips, channels
	// and chunk size.
	OnZoned bool
	// StatusLBAs bounds the LBAs one LBAStatus call covers (0:
	// DefaultFDPStatusLBAs); no flag: tests lower it to page.
	StatusLBAs uint64
}

// DefaultFDPOptions: no FDP drive; when enabled, one reclaim group, four
// initially isolated handles, 20 % over-provisioning, greedy victims.
func DefaultFDPOptions() FDPOptions {
	return FDPOptions{Handles: []string{"ii", "ii", "ii", "ii"}, ReclaimGroups: 1, OverProvision: 0.2, Victim: "greedy"}
}

// AddFDPFlags registers the FDP drive flags.
func AddFDPFlags(fs interface {
	IntVar(*int, string, int, string)
	StringSliceVar(*[]string, string, []string, string)
	Float64Var(*float64, string, float64, string)
	StringVar(*string, string, string, string)
	BoolVar(*bool, string, bool, string)
}, o *FDPOptions) {
	fs.IntVar(&o.Devices, "fdp-devices", o.Devices, "number of emulated FDP (flexible data placement) drives, served by the FDP service (0 = none)")
	fs.StringSliceVar(&o.Handles, "fdp-handles", o.Handles, "FDP reclaim unit handles: ii (initially isolated) or pi (persistently isolated), one per handle")
	fs.IntVar(&o.ReclaimGroups, "fdp-reclaim-groups", o.ReclaimGroups, "FDP reclaim groups (divides channels x ways)")
	fs.IntVar(&o.RUChips, "fdp-ru-chips", o.RUChips, "FDP reclaim unit size in chips, one flash block each (0 = the whole reclaim group)")
	fs.Float64Var(&o.OverProvision, "fdp-over-provision", o.OverProvision, "fraction of an FDP drive's flash not exposed as LBAs")
	fs.StringVar(&o.Victim, "fdp-victim", o.Victim, "FDP garbage collection victim policy: greedy or cost-benefit")
	fs.BoolVar(&o.OnZoned, "fdp-on-zoned", o.OnZoned, "FDP drive N shares the chips' timing (chips, channels, host link, write cache) of zoned drive N, so that its I/O and garbage collection contend with the zoned I/O; blocks stay separate")
}

// FDPConfig is the drive configuration of o on the flash config f.
func (o FDPOptions) FDPConfig(f flash.Config) (fdp.Config, error) {
	c := fdp.Config{Flash: f, ReclaimGroups: o.ReclaimGroups, RUChips: o.RUChips, OverProvision: o.OverProvision}
	for _, h := range o.Handles {
		t, err := fdp.ParseHandleType(h)
		if err != nil {
			return c, err
		}
		c.Handles = append(c.Handles, t)
	}
	v, err := fdp.ParseVictimPolicy(o.Victim)
	if err != nil {
		return c, err
	}
	c.Victim = v
	return c, c.Validate()
}

// FDPDevicePath is the backing file of a node's FDP drive i.
func FDPDevicePath(dataDir string, i int) string {
	return filepath.Join(dataDir, fmt.Sprintf("fdp%d.fdp", i))
}

// OpenFDPDevices opens (or on first start creates) the node's FDP drives,
// each on a timing model of its own (without o.FDP.OnZoned).
func OpenFDPDevices(o Options, clk clock.Clock) ([]*fdp.Device, error) {
	return OpenFDPDevicesBeside(o, clk, nil)
}

// OpenFDPDevicesBeside opens (or on first start creates) the node's FDP
// drives; with o.FDP.OnZoned, drive i books on the timing model of
// zoned[i] (zns.Device.Model), on that drive's clock. A missing zoned
// drive, or one whose chips, channels or chunk size differ from the FDP
// drives', is refused before any FDP drive opens.
func OpenFDPDevicesBeside(o Options, clk clock.Clock, zoned []*zns.Device) ([]*fdp.Device, error) {
	if o.FDP.Devices <= 0 {
		return nil, nil
	}
	cfg, err := o.FDP.FDPConfig(o.Device)
	if err != nil {
		return nil, err
	}
	if o.FDP.OnZoned {
		if err := checkFDPOnZoned(o.FDP.Devices, cfg.Flash.Geometry(), zoned); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	var devs []*fdp.Device
	for i := range o.FDP.Devices {
		path := FDPDevicePath(o.DataDir, i)
		dclk, opts := clk, []fdp.Option(nil)
		if o.FDP.OnZoned {
			dclk = zoned[i].Clock()
			if m := zoned[i].Model(); m != nil { // nil with the off clock: nothing is timed
				opts = append(opts, fdp.WithModel(m))
			}
		}
		d, err := fdp.Open(path, cfg, dclk, opts...)
		if errors.Is(err, zerr.ErrNotFound) {
			d, err = fdp.Create(path, cfg, dclk, opts...)
		}
		if err != nil {
			for _, d := range devs {
				_ = d.Close()
			}
			return nil, fmt.Errorf("fdp device %d (%s): %w", i, path, err)
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// checkFDPOnZoned refuses --fdp-on-zoned when an FDP drive has no zoned
// drive of the same index or its zoned drive's chips, channels, chunk or
// LBA size differ from g (a model's bookings are per chip and chunk).
func checkFDPOnZoned(n int, g flash.Geometry, zoned []*zns.Device) error {
	if n > len(zoned) {
		return &zerr.InvalidArgumentError{Field: "fdp-on-zoned", Reason: fmt.Sprintf(
			"%d FDP drives but %d zoned drives: FDP drive N shares the timing of zoned drive N (raise --devices or lower --fdp-devices)", n, len(zoned))}
	}
	for i := range n {
		zg := zoned[i].Geometry()
		for _, f := range []struct {
			name       string
			have, want int
		}{
			{"chips", zg.Chips, g.Chips},
			{"channels", zg.Channels, g.Channels},
			{"page_size", zg.PageSize, g.PageSize},
			{"block_size", zg.BlockSize, g.BlockSize},
		} {
			if f.have != f.want {
				return &zerr.GeometryMismatchError{Field: fmt.Sprintf("%s of zoned drive %d (--fdp-on-zoned)", f.name, i),
					Have: strconv.Itoa(f.have), Want: strconv.Itoa(f.want)}
			}
		}
	}
	return nil
}

// serveFDP opens the FDP drives, registers their service and metrics on
// d, admits tenants to their grants when cli is set (followed until ctx
// ends), and returns the service (nil without drives) and what closes the
// drives.
func serveFDP(ctx context.Context, d *daemon.Daemon, o Options, clk clock.Clock, zoned []*zns.Device, svc *Service, cli *clientv3.Client, log *slog.Logger) (*FDPService, func(), error) {
	devs, err := OpenFDPDevicesBeside(o, clk, zoned)
	if err != nil || len(devs) == 0 {
		return nil, func() {}, err
	}
	f := NewFDPService(devs, svc)
	f.SetMaxStatusLBAs(o.FDP.StatusLBAs)
	fail := func(err error) (*FDPService, func(), error) {
		for _, dv := range devs {
			_ = dv.Close()
		}
		return nil, func() {}, err
	}
	if err := d.Registry.Register(f.FDPCollector()); err != nil {
		return fail(err)
	}
	if cli != nil {
		if err := f.FollowGrants(ctx, cli); err != nil {
			return fail(err)
		}
	}
	RegisterFDP(d, f)
	log.Info("fdp drives", "devices", len(devs), "on_zoned", o.FDP.OnZoned)
	return f, func() {
		for i, dv := range devs {
			if err := dv.Close(); err != nil {
				log.Error("closing fdp device", "device", i, "err", err)
			}
		}
	}, nil
}
