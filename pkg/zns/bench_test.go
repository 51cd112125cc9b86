package zns

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
)

// BenchmarkZoneCycle: fill a zone with 4-block appends, Flush, reset it, on
// the real file system: the per-zone cost of the durability syncs (FBG
// scrub at allocation, journal sync for a new generation, data sync before
// a reset) against the data written.
//
//	go test -run x -bench ZoneCycle -count 6 ./pkg/zns
func BenchmarkZoneCycle(b *testing.B) {
	cfg := testCfgNoLimits()
	d, err := Create(filepath.Join(b.TempDir(), "dev"), cfg, clock.Off())
	require.NoError(b, err)
	defer d.Close()
	g := d.g
	data := pattern(g.BlockSize, 0, 4, 1)
	b.SetBytes(int64(g.ZoneCap) * int64(g.BlockSize))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		zi := uint64(i) % g.Zones
		for w := uint64(0); w+4 <= g.ZoneCap; w += 4 {
			if _, _, err := d.Append(bg, zi*g.ZoneSize, data, Flags{}); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := d.Flush(bg); err != nil {
			b.Fatal(err)
		}
		if _, err := d.ZoneMgmt(bg, zi, ActionReset, false); err != nil {
			b.Fatal(err)
		}
	}
}
