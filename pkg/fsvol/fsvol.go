// Package fsvol is the file system's Volume (pkg/lfs) over a ZoneFleet
// cluster: one namespace's v-zones through pkg/client. Bytes go between this
// process and the nodes; compaction is offloaded to the drives.
package fsvol

import (
	"context"
	"errors"
	"sync"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Volume implements lfs.Volume with a client bound to one namespace.
type Volume struct {
	c   *client.Client
	geo lfs.VolumeGeometry

	mu      sync.Mutex
	written map[lfs.ZoneID]bool // v-zones written since the last Flush
}

var _ lfs.Volume = (*Volume)(nil)

// Options of a volume.
type Options struct {
	// MaxZones caps the v-zones the file system may hold; 0 derives it from
	// the cluster's capacity shared equally by its namespaces.
	MaxZones int
}

// New derives the geometry from the namespace and the nodes' drives.
func New(ctx context.Context, c *client.Client, o Options) (*Volume, error) {
	ns, err := c.GetNamespace(ctx)
	if err != nil {
		return nil, err
	}
	nodes, err := c.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	var zoneCap uint64
	var bs, page uint32
	for _, n := range nodes {
		for _, d := range n.GetDevices() {
			if zoneCap == 0 || d.GetZoneCapacity() < zoneCap {
				zoneCap = d.GetZoneCapacity()
			}
			bs, page = d.GetBlockSize(), d.GetPageSize()
		}
	}
	if zoneCap == 0 || bs == 0 {
		return nil, &zerr.UnavailableError{What: "cluster", Reason: "no node with a drive is registered"}
	}
	zoneBlocks := uint64(ns.GetZonesPerVzone()) * zoneCap
	maxZones := o.MaxZones
	if maxZones <= 0 {
		st, err := c.ClusterStatus(ctx)
		if err != nil {
			return nil, err
		}
		maxZones = int(st.GetCapacityBlocks() / zoneBlocks / uint64(max(st.GetNamespaces(), 1)))
	}
	chunk := 1
	if page > bs && page%bs == 0 {
		chunk = int(page / bs)
	}
	return &Volume{c: c, written: map[lfs.ZoneID]bool{}, geo: lfs.VolumeGeometry{
		BlockSize: int(bs), ZoneBlocks: zoneBlocks, ChunkBlocks: chunk,
		MaxOpen: int(ns.GetMaxActiveVzones()), MaxZones: maxZones,
	}}, nil
}

// Geometry implements lfs.Volume.
func (v *Volume) Geometry() lfs.VolumeGeometry { return v.geo }

func (v *Volume) vz(z lfs.ZoneID) *client.VZone { return v.c.VZone(uint64(z)) }

// OpenZone implements lfs.Volume.
func (v *Volume) OpenZone(ctx context.Context) (lfs.ZoneID, error) {
	vz, err := v.c.OpenVZone(ctx)
	if err != nil {
		return 0, err
	}
	return lfs.ZoneID(vz.ID()), nil
}

// Zones implements lfs.Volume: every non-empty v-zone with its write pointer.
func (v *Volume) Zones(ctx context.Context) ([]lfs.ZoneInfo, error) {
	list, err := v.c.ListVZones(ctx)
	if err != nil {
		return nil, err
	}
	var out []lfs.ZoneInfo
	for _, l := range list {
		var st lfs.ZoneState
		switch l.GetState() {
		case v1.VZoneState_VZONE_STATE_OPEN:
			st = lfs.ZoneOpen
		case v1.VZoneState_VZONE_STATE_FULL:
			st = lfs.ZoneFull
		default:
			continue
		}
		wp, err := v.vz(lfs.ZoneID(l.GetId())).WritePointer(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, lfs.ZoneInfo{ID: lfs.ZoneID(l.GetId()), WP: wp, Capacity: l.GetCapacity(), State: st})
	}
	return out, nil
}

// Write implements lfs.Volume.
func (v *Volume) Write(ctx context.Context, z lfs.ZoneID, off uint64, data []byte, fua bool) error {
	vz := v.vz(z)
	if err := vz.Write(ctx, off, data); err != nil {
		var we *client.WriteError
		if errors.As(err, &we) && we.Written > 0 {
			return &lfs.PartialWriteError{Zone: z, Off: off, Written: we.Written, Err: err}
		}
		return err
	}
	if fua {
		if err := vz.Flush(ctx); err != nil {
			return err
		}
	} else {
		v.mu.Lock()
		v.written[z] = true
		v.mu.Unlock()
	}
	return v.finishIfFull(ctx, z, off+uint64(len(data))/uint64(v.geo.BlockSize))
}

// finishIfFull finishes a v-zone written to capacity: a drive's zone becomes
// full by itself, a v-zone keeps its active resources at the arbiter until
// finished, and the file system counts a full zone as no longer open.
func (v *Volume) finishIfFull(ctx context.Context, z lfs.ZoneID, end uint64) error {
	if end < v.geo.ZoneBlocks {
		return nil
	}
	return v.vz(z).Finish(ctx)
}

// Read implements lfs.Volume; the range must lie below the write pointer.
func (v *Volume) Read(ctx context.Context, z lfs.ZoneID, off uint64, buf []byte) error {
	bs := uint64(v.geo.BlockSize)
	if len(buf) == 0 || uint64(len(buf))%bs != 0 {
		return &zerr.InvalidArgumentError{Field: "buffer", Reason: "not a positive multiple of the block size"}
	}
	n := uint64(len(buf)) / bs
	vz := v.vz(z)
	wp, err := vz.WritePointer(ctx)
	if err != nil {
		return err
	}
	if off+n > wp {
		return &zerr.OutOfRangeError{LBA: off, Count: n, Limit: wp}
	}
	data, err := vz.Read(ctx, off, n)
	if err != nil {
		return err
	}
	copy(buf, data)
	return nil
}

// Finish implements lfs.Volume.
func (v *Volume) Finish(ctx context.Context, z lfs.ZoneID) error { return v.vz(z).Finish(ctx) }

// Reset implements lfs.Volume.
func (v *Volume) Reset(ctx context.Context, z lfs.ZoneID) error {
	v.mu.Lock()
	delete(v.written, z)
	v.mu.Unlock()
	return v.vz(z).Reset(ctx)
}

// Compact implements lfs.Volume with the drives' zone_compaction.
func (v *Volume) Compact(ctx context.Context, copies []lfs.Copy) (lfs.CompactStats, error) {
	cc := make([]client.Copy, len(copies))
	for i, c := range copies {
		cc[i] = client.Copy{Src: uint64(c.Src), SrcOff: c.SrcOff, Dst: uint64(c.Dst), DstOff: c.DstOff, Blocks: c.Blocks}
	}
	st, err := v.c.Compact(ctx, cc)
	out := lfs.CompactStats{Copyback: st.Copyback, Local: st.ReadProgram + st.HostCopy, Remote: st.Remote}
	if err != nil {
		return out, err
	}
	// The copies must be durable when Compact returns; a destination filled
	// to capacity is finished.
	end := map[lfs.ZoneID]uint64{}
	for _, c := range copies {
		end[c.Dst] = max(end[c.Dst], c.DstOff+c.Blocks)
	}
	for z, e := range end {
		if err := v.vz(z).Flush(ctx); err != nil {
			return out, err
		}
		if err := v.finishIfFull(ctx, z, e); err != nil {
			return out, err
		}
	}
	return out, nil
}

// Locate implements lfs.Volume.
func (v *Volume) Locate(ctx context.Context, z lfs.ZoneID, off uint64) (lfs.Location, error) {
	l, err := v.vz(z).Locate(ctx, off)
	if err != nil {
		return lfs.Location{}, err
	}
	return lfs.Location{Node: l.Node, Device: l.Device, Zone: l.Zone, Chip: l.Chip}, nil
}

// Flush implements lfs.Volume: fdatasync on every drive written since the last Flush.
func (v *Volume) Flush(ctx context.Context) error {
	v.mu.Lock()
	zones := make([]lfs.ZoneID, 0, len(v.written))
	for z := range v.written {
		zones = append(zones, z)
	}
	v.written = map[lfs.ZoneID]bool{}
	v.mu.Unlock()
	for _, z := range zones {
		if err := v.vz(z).Flush(ctx); err != nil {
			return err
		}
	}
	return nil
}
