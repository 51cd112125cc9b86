// Package devvol is an lfs.Volume over local emulated ZNS+ drives (pkg/zns):
// one v-zone is one drive zone. With several devices the v-zone IDs of
// device i are i*zonesPerDevice + zone index. It is used by the file system
// tests and benchmarks; the network implementation is pkg/client.
//
// Compact submits zone_compaction to each device and waits for it and
// flushes (the default here; fsvol over the cluster is asynchronous by
// default, fsvol.Options.SyncCompaction). With SetAsyncCompaction it returns
// without waiting for its modelled completion (the drive moves the data at
// submission and replays the flash work on the clock); a later request that
// touches a zone a pending compaction copies from or into, and every Flush,
// waits for it first. The pending list is guarded by the volume's mutex,
// which is never held while waiting.
package devvol

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// Volume is an lfs.Volume over local devices.
type Volume struct {
	devs    []*zns.Device
	per     uint64 // zones per device
	zsize   uint64 // LBAs per zone
	geo     lfs.VolumeGeometry
	mapping []flash.Mapping
	mu      sync.Mutex
	next    int // round-robin device for OpenZone
	tlMode  zns.TLMode
	async   bool           // SetAsyncCompaction
	pending []*pendingComp // submitted zone compactions not yet waited for (mu)
}

// pendingComp is a zone compaction Compact submitted and did not wait for.
type pendingComp struct {
	dev   int
	id    uint64
	zones map[uint64]bool // zone indexes (on dev) it copies from or into
	once  sync.Once
	err   error
}

var _ lfs.Volume = (*Volume)(nil)

// New makes a Volume over devs, which must share one geometry.
func New(devs ...*zns.Device) (*Volume, error) {
	if len(devs) == 0 {
		return nil, &zerr.InvalidArgumentError{Field: "devices", Reason: "none given"}
	}
	id := devs[0].Identify()
	v := &Volume{devs: devs, per: id.Zones, zsize: id.ZoneSize}
	maxOpen := 0
	for i, d := range devs {
		di := d.Identify()
		if di.Zones != id.Zones || di.ZoneSize != id.ZoneSize || di.ZoneCapacity != id.ZoneCapacity || di.BlockSize != id.BlockSize {
			return nil, &zerr.GeometryMismatchError{Field: fmt.Sprintf("device %d geometry", i), Have: fmt.Sprintf("%+v", di), Want: fmt.Sprintf("%+v", id)}
		}
		lim := di.MaxOpen
		if di.MaxActive > 0 && (lim == 0 || di.MaxActive < lim) {
			lim = di.MaxActive
		}
		if lim == 0 {
			lim = int(di.Zones)
		}
		maxOpen += lim
		v.mapping = append(v.mapping, d.IdentifyMapping())
	}
	chunk := id.PageSize / id.BlockSize
	if chunk < 1 {
		chunk = 1
	}
	v.geo = lfs.VolumeGeometry{BlockSize: id.BlockSize, ZoneBlocks: id.ZoneCapacity, ChunkBlocks: chunk,
		SuperpageBlocks: chunk * max(id.DZone, 1), MaxOpen: maxOpen, MaxZones: int(id.Zones) * len(devs)}
	return v, nil
}

// Geometry implements lfs.Volume.
func (v *Volume) Geometry() lfs.VolumeGeometry { return v.geo }

func (v *Volume) split(z lfs.ZoneID) (*zns.Device, int, uint64, error) {
	i := uint64(z) / v.per
	if i >= uint64(len(v.devs)) {
		return nil, 0, 0, &zerr.NotFoundError{Kind: "v-zone", Name: fmt.Sprint(z)}
	}
	return v.devs[i], int(i), (uint64(z) % v.per) * v.zsize, nil
}

// OpenZone implements lfs.Volume: an empty zone, explicitly opened.
func (v *Volume) OpenZone(ctx context.Context) (lfs.ZoneID, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var lastErr error = &zerr.NoResourcesError{Resource: "empty v-zones", Requested: 1, Available: 0}
	for k := 0; k < len(v.devs); k++ {
		i := (v.next + k) % len(v.devs)
		d := v.devs[i]
		zs, err := d.ReportZones(zns.StateEmpty, 0, 0)
		if err != nil {
			return 0, err
		}
		// An empty zone takes a flash block group of its chip group when
		// opened; TL-opened zones hold a second one (their LogFBG) until
		// threaded logging ends, so one chip group may have none left
		// while another has: try the empty zones of every chip group.
		tried := map[int]bool{}
		for _, z := range zs {
			fcg := d.Geometry().FCG(z.Index)
			if tried[fcg] {
				continue
			}
			tried[fcg] = true
			if _, err := d.ZoneMgmt(ctx, z.Index, zns.ActionOpen, false); err != nil {
				if errors.Is(err, zerr.ErrTooManyOpen) || errors.Is(err, zerr.ErrTooManyActive) {
					lastErr = err
					break
				}
				if errors.Is(err, zerr.ErrNoResources) {
					lastErr = err
					continue
				}
				return 0, err
			}
			v.next = i + 1
			return lfs.ZoneID(uint64(i)*v.per + z.Index), nil
		}
	}
	return 0, lastErr
}

// Zones implements lfs.Volume.
func (v *Volume) Zones(ctx context.Context) ([]lfs.ZoneInfo, error) {
	var out []lfs.ZoneInfo
	for i, d := range v.devs {
		zs, err := d.ReportZones(zns.StateAny, 0, 0)
		if err != nil {
			return nil, err
		}
		for _, z := range zs {
			st := lfs.ZoneOpen
			switch z.State {
			case zns.StateEmpty, zns.StateOffline:
				continue
			case zns.StateFull, zns.StateReadOnly:
				st = lfs.ZoneFull
			}
			out = append(out, lfs.ZoneInfo{ID: lfs.ZoneID(uint64(i)*v.per + z.Index), WP: z.WP - z.Start, Capacity: z.Capacity, State: st})
		}
	}
	return out, nil
}

// settle waits for the pending compactions of device dev that copy from or
// into zone zi (all of dev's with zi < 0; every device's with dev < 0) and
// forgets them. Nothing is held while waiting: on the virtual clock the
// wait drives the clock.
func (v *Volume) settle(ctx context.Context, dev int, zi int64) error {
	v.mu.Lock()
	var due []*pendingComp
	keep := v.pending[:0]
	for _, p := range v.pending {
		if (dev < 0 || p.dev == dev) && (zi < 0 || p.zones[uint64(zi)]) {
			due = append(due, p)
		} else {
			keep = append(keep, p)
		}
	}
	for i := len(keep); i < len(v.pending); i++ {
		v.pending[i] = nil
	}
	v.pending = keep
	v.mu.Unlock()
	var first error
	for _, p := range due {
		p.once.Do(func() { _, p.err = v.devs[p.dev].WaitCompaction(ctx, p.id) })
		if p.err != nil && first == nil {
			first = p.err
		}
	}
	return first
}

// settleZone waits for the pending compactions touching v-zone z.
func (v *Volume) settleZone(ctx context.Context, z lfs.ZoneID) error {
	_, i, start, err := v.split(z)
	if err != nil {
		return err
	}
	return v.settle(ctx, i, int64(start/v.zsize))
}

// Write implements lfs.Volume (the device writes all or nothing).
func (v *Volume) Write(ctx context.Context, z lfs.ZoneID, off uint64, data []byte, fua bool) error {
	return v.WriteV(ctx, z, off, [][]byte{data}, fua)
}

// WriteV implements lfs.VectorWriter: the drive writes bufs with one
// pwritev (zns.Device.WriteV).
func (v *Volume) WriteV(ctx context.Context, z lfs.ZoneID, off uint64, bufs [][]byte, fua bool) error {
	d, _, start, err := v.split(z)
	if err != nil {
		return err
	}
	if err := v.settleZone(ctx, z); err != nil {
		return err
	}
	_, err = d.WriteV(ctx, start+off, bufs, zns.Flags{FUA: fua})
	return err
}

// Read implements lfs.Volume.
func (v *Volume) Read(ctx context.Context, z lfs.ZoneID, off uint64, buf []byte) error {
	d, _, start, err := v.split(z)
	if err != nil {
		return err
	}
	bs := uint64(v.geo.BlockSize)
	if len(buf) == 0 || uint64(len(buf))%bs != 0 {
		return &zerr.InvalidArgumentError{Field: "buf", Reason: fmt.Sprintf("length %d is not a positive multiple of %d", len(buf), bs)}
	}
	n := uint64(len(buf)) / bs
	if off+n > v.geo.ZoneBlocks {
		return &zerr.OutOfRangeError{LBA: start + off, Count: n, Limit: start + v.geo.ZoneBlocks}
	}
	if err := v.settleZone(ctx, z); err != nil {
		return err
	}
	b, _, err := d.Read(ctx, start+off, n)
	if err != nil {
		return err
	}
	copy(buf, b)
	return nil
}

// Finish implements lfs.Volume.
func (v *Volume) Finish(ctx context.Context, z lfs.ZoneID) error {
	d, _, start, err := v.split(z)
	if err != nil {
		return err
	}
	if err := v.settleZone(ctx, z); err != nil {
		return err
	}
	_, err = d.ZoneMgmt(ctx, start/v.zsize, zns.ActionFinish, false)
	return err
}

// Reset implements lfs.Volume.
func (v *Volume) Reset(ctx context.Context, z lfs.ZoneID) error {
	d, _, start, err := v.split(z)
	if err != nil {
		return err
	}
	if err := v.settleZone(ctx, z); err != nil {
		return err
	}
	_, err = d.ZoneMgmt(ctx, start/v.zsize, zns.ActionReset, false)
	return err
}

// Compact implements lfs.Volume with zone_compaction per device; a copy
// between two devices is read and written here (the "remote" path).
//
// With SetAsyncCompaction, zone_compaction is asynchronous (ZNS+ §3.2.1):
// the copies of every device are submitted, their data is on the device when
// ZoneCompaction returns (the drive moves it at submission; only the flash
// work is replayed on the clock), and Compact returns without waiting for
// the modelled completion,
// so the host's next requests (the checkpoint's node writes) overlap the
// copies. A later request touching a zone a pending compaction copies from
// or into waits for that compaction first (the drive refuses host writes
// into a compacting zone), and Flush waits for all of them: the checkpoint
// record that names the destinations is written after its Flush, so it
// never covers copies that are not complete (and flushed) on the drives.
func (v *Volume) Compact(ctx context.Context, copies []lfs.Copy) (lfs.CompactStats, error) {
	var st lfs.CompactStats
	per := map[int][]zns.Copy{}
	zones := map[int]map[uint64]bool{}
	var order []int
	for _, c := range copies {
		sd, si, ss, err := v.split(c.Src)
		if err != nil {
			return st, err
		}
		dd, di, ds, err := v.split(c.Dst)
		if err != nil {
			return st, err
		}
		// earlier compactions that copy from or into these zones end first
		if err := v.settle(ctx, si, int64(ss/v.zsize)); err != nil {
			return st, err
		}
		if err := v.settle(ctx, di, int64(ds/v.zsize)); err != nil {
			return st, err
		}
		if si != di {
			b, _, err := sd.Read(ctx, ss+c.SrcOff, c.Blocks)
			if err != nil {
				return st, err
			}
			if _, err := dd.Write(ctx, ds+c.DstOff, b, zns.Flags{}); err != nil {
				return st, err
			}
			st.Remote += c.Blocks
			continue
		}
		if _, ok := per[si]; !ok {
			order = append(order, si)
			zones[si] = map[uint64]bool{}
		}
		zones[si][ss/v.zsize], zones[si][ds/v.zsize] = true, true
		per[si] = append(per[si], zns.Copy{Src: ss + c.SrcOff, Dst: ds + c.DstOff, Count: c.Blocks})
	}
	for _, i := range order {
		id, err := v.devs[i].ZoneCompaction(ctx, per[i])
		if err != nil {
			return st, err
		}
		cb, rp, ok := v.devs[i].CompactionCounts(id)
		if !ok {
			return st, fmt.Errorf("devvol: compaction %d of device %d is unknown right after its submission", id, i)
		}
		st.Copyback += cb
		st.Local += rp
		v.mu.Lock()
		v.pending = append(v.pending, &pendingComp{dev: i, id: id, zones: zones[i]})
		v.mu.Unlock()
	}
	if v.async {
		return st, nil
	}
	// Synchronous (the default): the copies are complete
	// and durable on return.
	for _, i := range order {
		if err := v.settle(ctx, i, -1); err != nil {
			return st, err
		}
		if _, err := v.devs[i].Flush(ctx); err != nil {
			return st, err
		}
	}
	return st, nil
}

// SetAsyncCompaction makes Compact return after submitting (see Compact),
// the contract fsvol implements by default over the cluster; by default it
// waits for the copies' modelled completion and flushes. The ZNS+ benchmark
// uses it; TestCrashRecovery runs zns+ both ways. Call it before the volume
// is used.
func (v *Volume) SetAsyncCompaction(on bool) { v.async = on }

// Locate implements lfs.Volume.
func (v *Volume) Locate(ctx context.Context, z lfs.ZoneID, off uint64) (lfs.Location, error) {
	_, i, start, err := v.split(z)
	if err != nil {
		return lfs.Location{}, err
	}
	if off >= v.geo.ZoneBlocks {
		return lfs.Location{}, &zerr.OutOfRangeError{LBA: start + off, Count: 1, Limit: start + v.geo.ZoneBlocks}
	}
	return lfs.Location{Device: uint32(i), Zone: uint32(start / v.zsize), Chip: uint32(v.mapping[i].Chip(start + off))}, nil
}

// Flush implements lfs.Volume: it waits for the compactions Compact
// submitted (the checkpoint that follows a compaction waits for its
// persistent completion, ZNS+ §3.2.1) and flushes every device.
func (v *Volume) Flush(ctx context.Context) error {
	if err := v.settle(ctx, -1, -1); err != nil {
		return err
	}
	for _, d := range v.devs {
		if _, err := d.Flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// TestConfig is a small drive for tests: zones zones of 8*pagesPerBlock
// blocks (2 channels x 2 ways, D_zone 2, 16 KiB pages, 4 KiB blocks), 16
// open zones.
func TestConfig(zones, pagesPerBlock int) flash.Config {
	c := flash.Small()
	c.PagesPerBlock = pagesPerBlock
	c.BlocksPerChip = zones/2 + c.SpareBlocksPerChip
	c.MaxOpenZones, c.MaxActiveZones = 16, 16
	c.ZoneCapacity = 0
	return c
}

var _ lfs.TLOpener = (*Volume)(nil)

// SetTLMode selects the internal plugging order TLOpen asks the drives for
// (zns.LBAOrdered by default). Call it before the volume is used.
func (v *Volume) SetTLMode(m zns.TLMode) { v.tlMode = m }

// TLOpen implements lfs.TLOpener with the drive's TL_open: the v-zone is one
// drive zone, and the lfs bitmap layout (bit i%8 of byte i/8 = block i, one
// bit per block of the capacity) is the drive's.
func (v *Volume) TLOpen(ctx context.Context, z lfs.ZoneID, valid []byte) error {
	d, _, start, err := v.split(z)
	if err != nil {
		return err
	}
	if need := (v.geo.ZoneBlocks + 7) / 8; uint64(len(valid)) != need {
		return &zerr.InvalidBitmapError{Zone: start / v.zsize, Reason: fmt.Sprintf("has %d bytes, v-zone needs %d", len(valid), need)}
	}
	if err := v.settleZone(ctx, z); err != nil {
		return err
	}
	_, err = d.TLOpen(ctx, start/v.zsize, valid, v.tlMode)
	return err
}
