package fsvol

import (
	"context"

	"github.com/zonefleet/zonefleet/pkg/lfs"
)

var _ lfs.Overwriter = (*Volume)(nil)

// Overwrite implements lfs.Overwriter with the v-zone's in-place update
// (client.VZone.Overwrite: the drives' budget-based in-place update, FUA,
// only for stripe groups without redundancy). Nothing is left for a Flush.
func (v *Volume) Overwrite(ctx context.Context, z lfs.ZoneID, off uint64, data []byte) error {
	if err := v.fencedErr(); err != nil {
		return err
	}
	if err := v.settleZone(ctx, z); err != nil {
		return err
	}
	return v.vz(z).Overwrite(ctx, off, data)
}
