// Package zms reproduces the ZMS paper's mechanisms (USENIX ATC'24, seeds/003)
// on the simulated drive, deterministically: budget-based in-place update
// for tiny fsyncs (pkg/lfs ipu.go over the drive's Flags.Overwrite),
// multi-granularity L2P mapping against a page-mapped baseline under an
// L2P cache (pkg/zns WithL2P), and IOTailor's superpage-aligned write-back
// against the drive's write-buffer model (pkg/zns WithWriteBuffers).
//
// # What runs
//
// Each figure builds its drives on an in-memory sparse file system
// (pkg/bench/paper/scratch) and a clock.Virtual: one goroutine issues every
// request and waits on the virtual clock, so a run's modelled times and
// counters are the same on every machine and every run. The drive is a
// mobile-class device (MobileConfig: 2 channels x 2 ways of TLC, 16 KiB
// pages, a superpage of 4 pages), the file system pkg/lfs over
// pkg/lfs/devvol. Nothing reads the wall clock; host CPU time is not
// modelled (only the drive and its link).
//
// The paper compares a zoned UFS against the same device's block-interface
// firmware; there is no block-interface firmware here, so each figure
// compares the mechanism on and off on the same zoned drive and quotes the
// paper's claim in the form it takes for that comparison.
//
// # Concurrency and failure
//
// A figure's runs are sequential; an error of the drive or the file system
// stops the run and is returned.
package zms

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/zonefleet/zonefleet/pkg/bench/paper/scratch"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// Line is one row of a figure's table: a label, our ratio, the paper's claim.
type Line struct {
	Label string  `json:"label"`
	Ours  float64 `json:"ours"`
	Paper string  `json:"paper"`
}

// Figure is one reproducible figure; Run returns its result (JSON-encodable)
// and its table rows. short runs a reduced configuration (tests).
type Figure struct {
	ID    string
	Title string
	Paper string
	Run   func(ctx context.Context, short bool) (any, []Line, error)
}

// Figures lists the figures in order.
func Figures() []Figure {
	return []Figure{
		{ID: "zms_ipu", Title: "ZMS Fig. 11 (random write + fsync), Fig. 14a (SQLite rollback journal): tiny fsyncs logged vs updated in place",
			Paper: "w/o IPU 50 % (4 KiB write+fsync) and 35 % (SQLite delete journal) below the block-interface baseline; w/ IPU on par", Run: runIPU},
		{ID: "zms_l2p", Title: "ZMS Fig. 11 (random read): page vs chunk vs zone L2P mapping under a 1/8-range L2P cache",
			Paper: "zone mapping +37-44 % over page mapping on the 8x range; similar when the map fits", Run: runL2P},
		{ID: "zms_iotailor", Title: "ZMS Fig. 13b: share of host writes buffered in SLC, without and with IOTailor",
			Paper: "60 % (1 buffer), 30 % (2 buffers) without IOTailor; 5 % with it", Run: runIOTailor},
	}
}

// IDs lists the figure ids.
func IDs() []string {
	var out []string
	for _, f := range Figures() {
		out = append(out, f.ID)
	}
	return out
}

// Lookup finds a figure by id.
func Lookup(id string) (Figure, error) {
	for _, f := range Figures() {
		if f.ID == id {
			return f, nil
		}
	}
	return Figure{}, &zerr.InvalidArgumentError{Field: "figure", Reason: fmt.Sprintf("unknown figure %q (have %v)", id, IDs())}
}

// MobileConfig is the simulated mobile flash device: 2 channels x 2 ways
// of TLC (the ZMS device has four chips on two channels), 16 KiB pages,
// zones striped over all four chips (a superpage of 64 KiB), zones of
// zoneMiB MiB, zones zones, a 128 KiB write cache (two superpages) and the
// default in-place update budget (256 blocks, 1 MiB).
func MobileConfig(zones int) flash.Config {
	c := flash.Defaults()
	c.Channels, c.Ways, c.DZone = 2, 2, 4
	c.Media = "TLC"
	c.PageSize, c.PagesPerBlock = 16384, 128 // 8 MiB zones
	c.SpareBlocksPerChip = 4
	c.BlocksPerChip = zones + c.SpareBlocksPerChip
	c.MaxOpenZones, c.MaxActiveZones = 14, 14
	c.WriteCacheBytes = 128 << 10
	return c
}

// newDrive creates a drive on a fresh scratch file system.
func newDrive(c flash.Config, opts ...zns.Option) (*zns.Device, *clock.Virtual, error) {
	clk := clock.NewVirtual()
	d, err := zns.Create("/zms/drive", c, clk, append([]zns.Option{zns.WithFS(scratch.New())}, opts...)...)
	return d, clk, err
}

func round3(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return math.Round(x*1000) / 1000
}

func perSec(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
