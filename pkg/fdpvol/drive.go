package fdpvol

import (
	"context"
	"fmt"

	"github.com/zonefleet/zonefleet/pkg/fdp"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// Drive is what a Volume needs of an FDP namespace: a range of LBAs from
// 0 written through placement identifiers, with the drive's mapping to
// recover write pointers from. Local adapts a drive in this process
// (pkg/fdp); package fdpvol/fdpnet adapts a tenant's fdp namespace served
// by a node (pkg/client). Implementations are safe for concurrent use.
type Drive interface {
	// Info is the namespace's geometry.
	Info(ctx context.Context) (DriveInfo, error)
	// Write writes whole blocks at lba through placement p, all or
	// nothing; with fua they are durable when Write returns.
	Write(ctx context.Context, lba uint64, data []byte, p fdp.PlacementID, fua bool) error
	// Read returns the n blocks at lba (unmapped blocks read as zeros).
	Read(ctx context.Context, lba, n uint64) ([]byte, error)
	// Trim deallocates n blocks at lba.
	Trim(ctx context.Context, lba, n uint64) error
	// Flush makes every acknowledged write and trim durable.
	Flush(ctx context.Context) error
	// LBAStatus is the mapped runs of the n blocks at lba, in increasing
	// order, however many calls to the drive that takes.
	LBAStatus(ctx context.Context, lba, n uint64) ([]fdp.LBARange, error)
}

// DriveInfo is a namespace's geometry as a Volume sizes its zones by.
type DriveInfo struct {
	Capacity      uint64 // LBAs
	BlockSize     int    // bytes per LBA
	ChunkBlocks   int    // LBAs per flash page
	RUBlocks      uint64 // LBAs of one reclaim unit of the current size
	RUChips       int    // chips one reclaim unit stripes over
	ReclaimGroups int
	Handles       int // placement handles the namespace may write through
}

func (i DriveInfo) check() error {
	switch {
	case i.BlockSize <= 0 || i.ChunkBlocks <= 0 || i.RUChips <= 0 || i.RUBlocks == 0:
		return &zerr.InvalidArgumentError{Field: "drive", Reason: fmt.Sprintf("geometry without sizes: block %d bytes, page %d blocks, reclaim unit %d blocks on %d chips",
			i.BlockSize, i.ChunkBlocks, i.RUBlocks, i.RUChips)}
	case i.ReclaimGroups <= 0 || i.ReclaimGroups > 1<<16:
		return &zerr.InvalidArgumentError{Field: "drive", Reason: fmt.Sprintf("%d reclaim groups", i.ReclaimGroups)}
	case i.Handles <= 0 || i.Handles > 1<<16:
		return &zerr.InvalidArgumentError{Field: "drive", Reason: fmt.Sprintf("%d placement handles", i.Handles)}
	}
	return nil
}

// Local is the Drive of an FDP drive in this process: the whole drive,
// its handles and its current reclaim unit size.
func Local(d *fdp.Device) Drive { return localDrive{d} }

type localDrive struct{ d *fdp.Device }

func (l localDrive) Info(context.Context) (DriveInfo, error) {
	cfg := l.d.Config()
	f := cfg.Flash.Resolved()
	chips := f.Channels * f.Ways / cfg.ReclaimGroups
	ruChips := cfg.RUChips
	if ruChips == 0 {
		ruChips = chips
	}
	chunk := max(f.PageSize/f.BlockSize, 1)
	return DriveInfo{Capacity: l.d.Capacity(), BlockSize: l.d.BlockSize(), ChunkBlocks: chunk,
		RUBlocks: uint64(ruChips * f.PagesPerBlock * chunk), RUChips: ruChips, ReclaimGroups: cfg.ReclaimGroups, Handles: len(cfg.Handles)}, nil
}

func (l localDrive) Write(ctx context.Context, lba uint64, data []byte, p fdp.PlacementID, fua bool) error {
	_, err := l.d.Write(ctx, lba, data, p, fdp.Flags{FUA: fua})
	return err
}

func (l localDrive) Read(ctx context.Context, lba, n uint64) ([]byte, error) {
	b, _, err := l.d.Read(ctx, lba, n)
	return b, err
}

func (l localDrive) Trim(ctx context.Context, lba, n uint64) error { return l.d.Trim(ctx, lba, n) }

func (l localDrive) Flush(ctx context.Context) error { return l.d.Flush(ctx) }

func (l localDrive) LBAStatus(ctx context.Context, lba, n uint64) ([]fdp.LBARange, error) {
	var out []fdp.LBARange
	for end := lba + n; lba < end; lba += min(fdp.MaxStatusLBAs, end-lba) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r, err := l.d.LBAStatus(lba, min(fdp.MaxStatusLBAs, end-lba))
		if err != nil {
			return nil, err
		}
		out = append(out, r...)
	}
	return out, nil
}
