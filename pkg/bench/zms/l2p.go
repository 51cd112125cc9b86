package zms

import (
	"context"
	"fmt"
	"math/rand"
	"time"

	"github.com/zonefleet/zonefleet/pkg/bench/paper/scratch"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/vfs"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// L2PConfig is the random-read figure.
type L2PConfig struct {
	RangeMiB []int // read ranges (the paper: 1 GiB and 8 GiB)
	CacheKiB int   // the controller's L2P cache (the paper: 1 MiB, 1/8 of the 8 GiB range's page map)
	Reads    int   // measured 4 KiB random reads per run (one outstanding)
	Warmup   int   // reads before the measurement (to fill the cache)
	Seed     int64
}

// DefaultL2P is the full figure: the paper's ranges and cache scaled down
// by 8 (the cache holds the page map of the small range, 1/8 of the large).
func DefaultL2P() L2PConfig {
	return L2PConfig{RangeMiB: []int{128, 1024}, CacheKiB: 128, Reads: 20000, Warmup: 4000, Seed: 1}
}

// L2PRow is one range and granularity.
type L2PRow struct {
	RangeMiB    int     `json:"range_mib"`
	Granularity string  `json:"granularity"`
	MissRate    float64 `json:"l2p_miss_rate"`
	KIOPS       float64 `json:"kiops"` // modelled
	MeanMicros  float64 `json:"mean_latency_us"`
}

// L2PResult is the figure's output.
type L2PResult struct {
	Config L2PConfig `json:"config"`
	Model  string    `json:"model"`
	Rows   []L2PRow  `json:"rows"`
}

func runL2P(ctx context.Context, short bool) (any, []Line, error) {
	c := DefaultL2P()
	if short {
		c.RangeMiB, c.CacheKiB, c.Reads, c.Warmup = []int{16, 128}, 16, 2000, 500
	}
	r, err := RunL2P(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	var lines []Line
	for i, rm := range c.RangeMiB {
		page, chunk, zone := r.Rows[3*i], r.Rows[3*i+1], r.Rows[3*i+2]
		p := "~1 (the map fits)"
		if i == len(c.RangeMiB)-1 {
			p = "1.37-1.44"
		}
		lines = append(lines,
			Line{Label: fmt.Sprintf("zone_over_page, %d MiB range", rm), Ours: round3(zone.KIOPS / page.KIOPS), Paper: p},
			Line{Label: fmt.Sprintf("chunk_over_page, %d MiB range", rm), Ours: round3(chunk.KIOPS / page.KIOPS), Paper: "(not in the paper)"})
	}
	return r, lines, nil
}

// RunL2P fills a drive, then reads it at random with each mapping
// granularity (the drive reopened with another L2P cache model each time).
func RunL2P(ctx context.Context, c L2PConfig) (*L2PResult, error) {
	maxMiB := 0
	for _, m := range c.RangeMiB {
		maxMiB = max(maxMiB, m)
	}
	zones := (maxMiB + 7) / 8
	cfg := MobileConfig(zones + 2)
	fsys := scratch.New()
	d, err := zns.Create("/zms/drive", cfg, clock.NewVirtual(), zns.WithFS(fsys))
	if err != nil {
		return nil, err
	}
	g := d.Geometry()
	// fill the range (one 1 MiB write at a time)
	chunk := make([]byte, 1<<20)
	for z := uint64(0); z < uint64(zones); z++ {
		for off := uint64(0); off < g.ZoneCap; off += 256 {
			if _, err := d.Write(ctx, z*g.ZoneSize+off, chunk, zns.Flags{}); err != nil {
				_ = d.Close()
				return nil, err
			}
		}
	}
	if err := d.Close(); err != nil {
		return nil, err
	}
	res := &L2PResult{Config: c, Model: fmt.Sprintf("%d KiB L2P cache of 4 KiB map pages, 4-byte entries, LRU; a miss reads the map page from flash first; chunk = 4 MiB; one read outstanding; device time only", c.CacheKiB)}
	for _, rm := range c.RangeMiB {
		for _, gr := range []zns.L2PGranularity{zns.L2PPage, zns.L2PChunk, zns.L2PZone} {
			row, err := l2pRun(ctx, cfg, fsys, c, rm, gr)
			if err != nil {
				return nil, fmt.Errorf("%d MiB, %s mapping: %w", rm, gr, err)
			}
			res.Rows = append(res.Rows, row)
		}
	}
	return res, nil
}

func l2pRun(ctx context.Context, cfg flash.Config, fsys vfs.FS, c L2PConfig, rangeMiB int, gr zns.L2PGranularity) (L2PRow, error) {
	clk := clock.NewVirtual()
	d, err := zns.Open("/zms/drive", cfg, clk, zns.WithFS(fsys), zns.WithL2P(zns.L2PConfig{Granularity: gr, CacheBytes: c.CacheKiB << 10}))
	if err != nil {
		return L2PRow{}, err
	}
	defer func() { _ = d.Close() }()
	g := d.Geometry()
	blocks := uint64(rangeMiB) << 8
	rng := rand.New(rand.NewSource(c.Seed))
	buf := make([]byte, g.BlockSize)
	read := func() error {
		b := uint64(rng.Int63n(int64(blocks)))
		lba := b/g.ZoneCap*g.ZoneSize + b%g.ZoneCap
		_, err := d.ReadInto(ctx, lba, buf)
		return err
	}
	for i := 0; i < c.Warmup; i++ {
		if err := read(); err != nil {
			return L2PRow{}, err
		}
	}
	l0, t0 := d.Log(), clk.Now()
	for i := 0; i < c.Reads; i++ {
		if err := read(); err != nil {
			return L2PRow{}, err
		}
	}
	el := clk.Now() - t0
	l1 := d.Log()
	row := L2PRow{RangeMiB: rangeMiB, Granularity: gr.String(), KIOPS: round3(perSec(c.Reads, el) / 1000),
		MeanMicros: round3(float64(el) / float64(c.Reads) / float64(time.Microsecond))}
	if n := l1.L2PLookups - l0.L2PLookups; n > 0 {
		row.MissRate = round3(float64(l1.L2PMisses-l0.L2PMisses) / float64(n))
	}
	return row, nil
}
