package zns

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/ondisk"
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

// BenchmarkSeqWrite1M: 1 MiB writes into the zones of a drive of the
// default geometry (16 dies per zone, 32 MiB zones; clock off) on the real
// file system, in both backing-file layouts: interleaved (a zone is
// contiguous in the file: one pwrite per write) and the older chip-major
// one (a pwrite per 16 KiB flash page). It reports the process's CPU per
// MiB written (getrusage: the host file system's work included) beside
// the throughput. Zones are reset untimed when the drive has cycled.
//
//	go test -run x -bench SeqWrite1M -count 4 ./pkg/zns
func BenchmarkSeqWrite1M(b *testing.B) {
	for _, tc := range []struct {
		name string
		feat ondisk.Features
	}{{"interleaved", ondisk.Features{Incompat: featFBGInterleaved}}, {"chip-major", ondisk.Features{}}} {
		b.Run(tc.name, func(b *testing.B) {
			saved := newFeatures
			newFeatures = tc.feat
			defer func() { newFeatures = saved }()
			cfg := flash.Defaults()
			cfg.MaxOpenZones, cfg.MaxActiveZones = 0, 0
			d, err := Create(filepath.Join(b.TempDir(), "dev"), cfg, clock.Off())
			require.NoError(b, err)
			defer d.Close()
			g := d.g
			const piece = 1 << 20
			n := uint64(piece / g.BlockSize)
			data := pattern(g.BlockSize, 0, int(n), 3)
			zones := min(g.Zones, 16)
			zi, wp := uint64(0), uint64(0)
			b.SetBytes(piece)
			var ru0, ru1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if wp+n > g.ZoneCap {
					zi, wp = zi+1, 0
					if zi == zones {
						b.StopTimer()
						for z := uint64(0); z < zones; z++ {
							_, err := d.ZoneMgmt(bg, z, ActionReset, false)
							require.NoError(b, err)
						}
						zi = 0
						b.StartTimer()
					}
				}
				if _, err := d.Write(bg, zi*g.ZoneSize+wp, data, Flags{}); err != nil {
					b.Fatal(err)
				}
				wp += n
			}
			b.StopTimer()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/MiB")
		})
	}
}
