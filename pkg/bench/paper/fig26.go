package paper

import (
	"context"
	"fmt"
	"time"

	"github.com/zonefleet/zonefleet/pkg/flash"
)

// Fig26Config is eZNS Fig. 26 (local overdrive): N writers, each writing
// 512 KiB sequentially at QD 1 to its own logical zone, statically striped
// (width 4, 16 KiB stripes) versus v-zones overdriven to width 8 (8 KiB
// stripes: the stripe halves when the width doubles, DESIGN §4).
type Fig26Config struct {
	Writers      []int         `json:"writers"`
	IOBytes      int           `json:"io_bytes"`
	StaticWidth  int           `json:"static_width"`
	StaticStripe int           `json:"static_stripe_bytes"`
	VZoneWidth   int           `json:"vzone_width"`
	VZoneStripe  int           `json:"vzone_stripe_bytes"`
	Warmup       time.Duration `json:"warmup_ns"`
	Run          time.Duration `json:"run_ns"`
	Drive        flash.Config  `json:"drive"`
}

// Fig26Drive is the drive of Fig. 26: 32 single-die chip groups (8 channels x
// 4 ways, D_zone 1, MLC: about 42 MB/s of programs per die), 16 MiB zones,
// 16 MiB write cache, 1.2 GB/s host link, no MAR limit (the arbiter's
// essentials/spares split is the experiment's variable, not the drive's).
func Fig26Drive() flash.Config {
	c := flash.Defaults()
	c.Channels, c.Ways, c.DZone = 8, 4, 1
	c.PagesPerBlock, c.BlocksPerChip, c.SpareBlocksPerChip = 1024, 6, 1
	c.MaxOpenZones, c.MaxActiveZones = 0, 0
	return c
}

// DefaultFig26 is the paper's configuration at a length that runs in seconds.
func DefaultFig26() Fig26Config {
	return Fig26Config{Writers: []int{4, 8, 16}, IOBytes: 512 << 10, StaticWidth: 4, StaticStripe: 16 << 10,
		VZoneWidth: 8, VZoneStripe: 8 << 10, Warmup: 50 * time.Millisecond, Run: 100 * time.Millisecond, Drive: Fig26Drive()}
}

// Fig26Row is one writer count.
type Fig26Row struct {
	Writers         int     `json:"writers"`
	StaticMBps      float64 `json:"static_mb_per_second"`
	VZoneMBps       float64 `json:"vzone_mb_per_second"`
	VZoneOverStatic float64 `json:"vzone_over_static"`
}

// Fig26Result is the figure.
type Fig26Result struct {
	Config Fig26Config `json:"config"`
	Rows   []Fig26Row  `json:"rows"`
	// VZoneOverStatic per writer count (the ratio the paper quotes).
	VZoneOverStatic map[string]float64 `json:"vzone_over_static"`
}

// RunFig26 runs both layouts at every writer count.
func RunFig26(ctx context.Context, dir string, c Fig26Config) (*Fig26Result, error) {
	res := &Fig26Result{Config: c, VZoneOverStatic: map[string]float64{}}
	for _, n := range c.Writers {
		st, err := fig26Run(ctx, dir, c, n, c.StaticWidth, c.StaticStripe)
		if err != nil {
			return nil, fmt.Errorf("fig26 static, %d writers: %w", n, err)
		}
		vz, err := fig26Run(ctx, dir, c, n, c.VZoneWidth, c.VZoneStripe)
		if err != nil {
			return nil, fmt.Errorf("fig26 v-zones, %d writers: %w", n, err)
		}
		row := Fig26Row{Writers: n, StaticMBps: round(st), VZoneMBps: round(vz), VZoneOverStatic: ratio(vz, st)}
		res.Rows = append(res.Rows, row)
		res.VZoneOverStatic[fmt.Sprint(n)] = row.VZoneOverStatic
	}
	return res, nil
}

// fig26Run returns the aggregate MB/s of n writers on logical zones of the
// given width and stripe.
func fig26Run(ctx context.Context, dir string, c Fig26Config, n, width, stripe int) (float64, error) {
	d, err := subdir(dir)
	if err != nil {
		return 0, err
	}
	defer removeAll(d)
	r, err := newRig(d, c.Drive, false)
	if err != nil {
		return 0, err
	}
	defer r.close()
	m := &meter{from: c.Warmup, to: c.Warmup + c.Run}
	var firstErr error
	for i := 0; i < n; i++ {
		lz, err := r.newLZone(width, stripe)
		if err != nil {
			return 0, err
		}
		r.s.Go(func(ctx context.Context) {
			for r.s.Now() < m.to {
				if err := lz.write(ctx, c.IOBytes); err != nil {
					if firstErr == nil && ctx.Err() == nil {
						firstErr = err
					}
					return
				}
				m.add(r.s.Now(), c.IOBytes)
			}
		})
	}
	r.s.Run(m.to)
	if firstErr != nil {
		return 0, firstErr
	}
	return m.mbps(), nil
}
