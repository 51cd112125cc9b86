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
			d := defaultDrive(b)
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

// BenchmarkLogWrite1M: a log on a drive of the default geometry (clock
// off, the real file system), as a log-structured host writes one: 1 MiB
// writes fill zone after zone, and each time the head reaches a half of the
// drive that half is reset, as a cleaner frees segments ahead of the log
// (timed: the resets' syncs and the first writes of the zones' next
// generations are the point).
//
//	go test -run x -bench LogWrite1M -count 4 ./pkg/zns
func BenchmarkLogWrite1M(b *testing.B) {
	d := defaultDrive(b)
	g := d.g
	const piece = 1 << 20
	n := uint64(piece / g.BlockSize)
	data := pattern(g.BlockSize, 0, int(n), 3)
	zones := min(g.Zones, 16)
	zi, wp := uint64(0), uint64(0)
	b.SetBytes(piece)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if wp+n > g.ZoneCap {
			zi, wp = (zi+1)%zones, 0
			if zi%(zones/2) == 0 { // the cleaner frees the half of the drive written longest ago
				for z := zi; z < zi+zones/2; z++ {
					if _, err := d.ZoneMgmt(bg, z, ActionReset, false); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		if _, err := d.Write(bg, zi*g.ZoneSize+wp, data, Flags{}); err != nil {
			b.Fatal(err)
		}
		wp += n
	}
}

// BenchmarkZoneCompaction: zone_compaction of one zone's worth of blocks on a
// drive of the default geometry (clock off, the real file system), as a
// file system's recycling issues it: "whole" copies a full zone in one copy
// (every chunk by copyback), "scattered" copies every other block of two
// source zones (copies of one block: read and program). It reports the
// process's CPU per MiB moved beside the throughput.
//
//	go test -run x -bench ZoneCompaction -count 4 ./pkg/zns
func BenchmarkZoneCompaction(b *testing.B) {
	for _, tc := range []struct {
		name   string
		stride uint64 // a copy of one block every stride blocks (1: one copy of the zone)
	}{{"whole", 1}, {"scattered", 2}} {
		b.Run(tc.name, func(b *testing.B) {
			d := defaultDrive(b)
			g := d.g
			require.GreaterOrEqual(b, g.Zones, uint64(4))
			// sources: zones 0 and 1, full
			n := uint64(1 << 20 / g.BlockSize)
			for z := uint64(0); z < 2; z++ {
				for wp := uint64(0); wp < g.ZoneCap; wp += n {
					k := min(n, g.ZoneCap-wp)
					_, err := d.Write(bg, z*g.ZoneSize+wp, pattern(g.BlockSize, wp, int(k), byte(z)), Flags{})
					require.NoError(b, err)
				}
			}
			var copies []Copy
			if tc.stride == 1 {
				copies = []Copy{{Src: 0, Count: g.ZoneCap}}
			} else {
				for i := uint64(0); i < g.ZoneCap; i++ {
					copies = append(copies, Copy{Src: (i*tc.stride)/g.ZoneCap*g.ZoneSize + (i*tc.stride)%g.ZoneCap, Count: 1})
				}
			}
			b.SetBytes(int64(g.ZoneCap) * int64(g.BlockSize))
			var ru0, ru1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				dz := 2 + uint64(i)%2
				for k := range copies {
					copies[k].Dst = dz*g.ZoneSize + uint64(k)
				}
				id, err := d.ZoneCompaction(bg, copies)
				require.NoError(b, err)
				_, err = d.WaitCompaction(bg, id)
				require.NoError(b, err)
				b.StopTimer()
				_, err = d.ZoneMgmt(bg, dz, ActionReset, false)
				require.NoError(b, err)
				b.StartTimer()
			}
			b.StopTimer()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
			b.ReportMetric(float64(cpu.Microseconds())/1000/(float64(b.N)*float64(g.ZoneCap)*float64(g.BlockSize)/(1<<20)), "cpu-ms/MiB")
		})
	}
}

// defaultDrive is a drive of the default geometry without open or active
// limits, clock off, on the real file system, closed with b.
func defaultDrive(b *testing.B) *Device {
	cfg := flash.Defaults()
	cfg.MaxOpenZones, cfg.MaxActiveZones = 0, 0
	d, err := Create(filepath.Join(b.TempDir(), "dev"), cfg, clock.Off())
	require.NoError(b, err)
	b.Cleanup(func() { _ = d.Close() })
	return d
}
