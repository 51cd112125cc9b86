// Package fdpnet is the fdpvol.Drive of a tenant's fdp namespace served
// over the network (client.FDPNamespace): the log-structured file system
// over an FDP namespace of a node's drive, as fdpvol runs it over a drive
// in the process.
//
// It lives apart from fdpvol so that fdpvol, like the drive library, links
// no gRPC. The Drive holds no state of its own. Lease is the namespace's
// mount lease (the arbiter's, as for a zoned namespace's mount), whose
// Fence stops a volume (fdpvol.Options.Fence) that lost the namespace to
// another mount.
//
// # Geometry
//
// Info comes from the node's Configs for the namespace's drive (a tenant
// sees its namespace's view: its capacity, its placement handles) and the
// grant (block size): the reclaim unit size is the drive's current one, so
// a volume's zones are as large as when mkfs ran only while the operator
// leaves the drive's reclaim unit size alone (lfs refuses a mount whose
// zone size differs from its superblock's).
//
// # Failure
//
// Every call goes to the one node of the namespace's drive with the
// client's retries; an error is the node's typed error (pkg/rpcerr), or
// UNAVAILABLE past the client's retry deadline. A write is all or nothing
// on the drive (a write larger than one message is sent in pieces, see
// Write); one whose answer was lost may have been applied (fdpvol's next
// Open finds it in the mapping).
package fdpnet

import (
	"context"
	"fmt"

	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/fdp"
	"github.com/zonefleet/zonefleet/pkg/fdpvol"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Drive is the fdpvol.Drive of ns.
func Drive(ns *client.FDPNamespace) fdpvol.Drive { return drive{ns} }

type drive struct{ ns *client.FDPNamespace }

func (d drive) Info(ctx context.Context) (fdpvol.DriveInfo, error) {
	c, err := d.ns.Configs(ctx)
	if err != nil {
		return fdpvol.DriveInfo{}, err
	}
	bs := uint64(d.ns.BlockSize())
	if bs == 0 || c.GetBlockSize() != uint32(bs) || c.GetPageSize() == 0 || uint64(c.GetPageSize())%bs != 0 || c.GetReclaimUnitNominalBytes()%bs != 0 {
		return fdpvol.DriveInfo{}, &zerr.GeometryMismatchError{Field: "fdp namespace geometry",
			Have: fmt.Sprintf("block %d, page %d, reclaim unit %d bytes", c.GetBlockSize(), c.GetPageSize(), c.GetReclaimUnitNominalBytes()),
			Want: fmt.Sprintf("the grant's block size %d dividing page and reclaim unit", bs)}
	}
	return fdpvol.DriveInfo{Capacity: d.ns.Blocks(), BlockSize: int(bs), ChunkBlocks: int(uint64(c.GetPageSize()) / bs),
		RUBlocks: c.GetReclaimUnitNominalBytes() / bs, RUChips: int(c.GetRuChips()), ReclaimGroups: int(c.GetReclaimGroups()),
		Handles: d.ns.Handles()}, nil
}

// Write sends data in pieces of at most maxRead bytes (the node's message
// bound), in order: a failure leaves the pieces before it written, past
// the volume's write pointer, where the volume's next write overwrites
// them (fdpvol's package doc says what a restart makes of them).
func (d drive) Write(ctx context.Context, lba uint64, data []byte, p fdp.PlacementID, fua bool) error {
	pl := client.Placement{Group: uint32(p.Group), Handle: uint32(p.Handle)}
	bs := int(d.ns.BlockSize())
	if bs == 0 || len(data) <= maxRead {
		return d.ns.Write(ctx, lba, data, pl, fua)
	}
	step := maxRead / bs * bs
	for len(data) > 0 {
		k := min(len(data), step)
		if err := d.ns.Write(ctx, lba, data[:k], pl, fua); err != nil {
			return err
		}
		lba, data = lba+uint64(k/bs), data[k:]
	}
	return nil
}

func (d drive) Read(ctx context.Context, lba, n uint64) ([]byte, error) {
	bs := uint64(d.ns.BlockSize())
	if n == 0 || n > maxRead/bs {
		// one call per bounded piece (the node caps a read's bytes)
		return d.readPieces(ctx, lba, n, bs)
	}
	return d.ns.Read(ctx, lba, n)
}

// maxRead is the bytes one Read asks of the node (the node's bound).
const maxRead = 4 << 20

func (d drive) readPieces(ctx context.Context, lba, n, bs uint64) ([]byte, error) {
	if n == 0 {
		return d.ns.Read(ctx, lba, 0)
	}
	out := make([]byte, 0, n*bs)
	for step := maxRead / bs; n > 0; {
		k := min(n, step)
		b, err := d.ns.Read(ctx, lba, k)
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
		lba, n = lba+k, n-k
	}
	return out, nil
}

func (d drive) Trim(ctx context.Context, lba, n uint64) error { return d.ns.Trim(ctx, lba, n) }

func (d drive) Flush(ctx context.Context) error { return d.ns.Flush(ctx) }

func (d drive) LBAStatus(ctx context.Context, lba, n uint64) ([]fdp.LBARange, error) {
	rs, err := d.ns.LBAStatus(ctx, lba, n)
	if err != nil {
		return nil, err
	}
	out := make([]fdp.LBARange, len(rs))
	for i, r := range rs {
		out[i] = fdp.LBARange{LBA: r.LBA, Count: r.Count}
	}
	return out, nil
}
