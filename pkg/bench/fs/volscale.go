package fsbench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/zonefleet/zonefleet/pkg/bench/benchstat"
	"github.com/zonefleet/zonefleet/pkg/lfs"
)

// volumeBatch is the size of the volume writes of volumeScaling: the file
// system's largest write-back batch (lfs writes a file's dirty pages back in
// batches of at most 4 MiB).
const volumeBatch = 4 << 20

// VolumeScaling is the parallel write point measured on the volume under the
// mount alone — no FUSE, no file system — in the same run: o.Parallel
// streams against one, each moving what one thread of parallel_write_scaling
// moves (passes of the thread's file size, each pass written in 4 MiB
// volume writes to the stream's own v-zone and ended by a Flush, as an
// fsync ends it). The file system cannot scale better than the cluster it
// writes through, so Scaling is the ceiling parallel_write_scaling is read
// against; CPUCeiling is its own CPU ceiling (the CPUs over the cores one
// stream kept busy).
type VolumeScaling struct {
	OneMiBPerSecond  float64 `json:"one_stream_mib_per_second"`
	ManyMiBPerSecond float64 `json:"many_streams_mib_per_second"`
	Streams          int     `json:"streams"`
	Scaling          float64 `json:"scaling"`
	CPUCeiling       float64 `json:"cpu_ceiling"`
}

// volumeScaling measures VolumeScaling on vol (before the file system is
// made on it: it leaves every zone it wrote reset), o.Runs times,
// alternating one stream and o.Parallel; medians.
func volumeScaling(ctx context.Context, vol lfs.Volume, o Options) (*VolumeScaling, error) {
	geo := vol.Geometry()
	bs := int64(geo.BlockSize)
	size := int64(max(1, o.SeqMiB/o.Parallel)) << 20
	size = max(bs, size/bs*bs)
	passes := max(1, (o.SeqTotalMiB+o.SeqMiB-1)/o.SeqMiB)
	zoneBytes := int64(geo.ZoneBlocks) * bs
	data := make([]byte, min(volumeBatch, size, zoneBytes))
	for i := range data {
		data[i] = byte(i * 11)
	}
	// stream writes passes × size bytes to its own v-zones.
	stream := func() (err error) {
		var z lfs.ZoneID
		have := false
		var wp uint64 // blocks
		defer func() {
			if have {
				err = errors.Join(err, vol.Reset(ctx, z))
			}
		}()
		for p := 0; p < passes; p++ {
			for left := size; left > 0; {
				n := min(int64(len(data)), left)
				if !have || int64(wp)*bs+n > zoneBytes {
					if have {
						have = false
						if err := vol.Reset(ctx, z); err != nil {
							return err
						}
					}
					var err error
					if z, err = vol.OpenZone(ctx); err != nil {
						return err
					}
					have, wp = true, 0
				}
				if err := vol.Write(ctx, z, wp, data[:n], false); err != nil {
					return err
				}
				wp += uint64(n / bs)
				left -= n
			}
			if err := vol.Flush(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	run := func(n int) (mibps, cores float64, err error) {
		errs := make([]error, n)
		var wg sync.WaitGroup
		t0, c0 := time.Now(), benchstat.ProcessCPU()
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = stream()
			}()
		}
		wg.Wait()
		d, cpu := time.Since(t0).Seconds(), benchstat.ProcessCPU()-c0
		if err := errors.Join(errs...); err != nil {
			return 0, 0, err
		}
		return float64(int64(n*passes)*size) / (1 << 20) / d, cpu.Seconds() / d, nil
	}
	var ones, manys, ratios, ceils []float64
	for r := 0; r < o.Runs && ctx.Err() == nil; r++ {
		one, cores, err := run(1)
		if err != nil {
			return nil, fmt.Errorf("volume, 1 stream: %w", err)
		}
		many, _, err := run(o.Parallel)
		if err != nil {
			return nil, fmt.Errorf("volume, %d streams: %w", o.Parallel, err)
		}
		ones, manys, ratios = append(ones, one), append(manys, many), append(ratios, many/one)
		if cores > 0 {
			ceils = append(ceils, float64(runtime.NumCPU())/cores)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &VolumeScaling{OneMiBPerSecond: benchstat.Median(ones), ManyMiBPerSecond: benchstat.Median(manys), Streams: o.Parallel,
		Scaling: benchstat.Median(ratios), CPUCeiling: benchstat.Median(ceils)}, nil
}
