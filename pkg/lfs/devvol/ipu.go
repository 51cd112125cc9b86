package devvol

import (
	"context"
	"fmt"

	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// Overwrite implements lfs.Overwriter with the drive's budget-based
// in-place update (zns.Flags.Overwrite, durable when it returns); a spent
// budget is the drive's zerr.IPUBudgetError.
func (v *Volume) Overwrite(ctx context.Context, z lfs.ZoneID, off uint64, data []byte) error {
	d, _, start, err := v.split(z)
	if err != nil {
		return err
	}
	bs := uint64(v.geo.BlockSize)
	if len(data) == 0 || uint64(len(data))%bs != 0 {
		return &zerr.InvalidArgumentError{Field: "data", Reason: fmt.Sprintf("length %d is not a positive multiple of %d", len(data), bs)}
	}
	if n := uint64(len(data)) / bs; off+n > v.geo.ZoneBlocks {
		return &zerr.OutOfRangeError{LBA: start + off, Count: n, Limit: start + v.geo.ZoneBlocks}
	}
	if err := v.settleZone(ctx, z); err != nil {
		return err
	}
	_, err = d.Write(ctx, start+off, data, zns.Flags{Overwrite: true, FUA: true})
	return err
}
