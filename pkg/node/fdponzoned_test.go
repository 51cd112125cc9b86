package node

import (
	"context"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/fdp"
	"github.com/zonefleet/zonefleet/pkg/flagenv"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
)

// onZonedOptions: one zoned and one FDP drive on a small geometry with
// two-chip reclaim units, so that overwriting the FDP drive collects
// garbage soon.
func onZonedOptions(t *testing.T, onZoned bool) Options {
	o := DefaultOptions()
	o.DataDir = t.TempDir()
	o.Device = flash.Small()
	o.Device.BlocksPerChip = 64
	o.Devices = 1
	o.FDP.Devices = 1
	o.FDP.RUChips = 2
	o.FDP.OnZoned = onZoned
	return o
}

// onZonedRun is each device's modelled time from the start of the
// measured load to the completion of its last command there (zero for a
// device given no load), and the FDP drive's GC copies in the measured
// load, all of them and those made while the zoned writes were issued.
type onZonedRun struct {
	zoned, fdp         time.Duration
	gcCopies, gcBeside uint64
}

// runOnZoned opens a node's zoned and FDP drives on a virtual clock. It
// fills the FDP drive and overwrites its even chunks until garbage
// collection starts, then lets the clock pass every booking. The measured
// load follows, all of it submitted at that time (NoWait) and alternating
// while both have work: zonedZones whole zones of sequential zoned writes
// and, with fdpGC, the rest of the overwrites (the even chunks, then the
// odd ones), which leave every reclaim unit partly valid, so each
// collection copies.
func runOnZoned(t *testing.T, onZoned bool, zonedZones int, fdpGC bool) onZonedRun {
	o := onZonedOptions(t, onZoned)
	clk := clock.NewVirtual()
	zdevs, err := OpenDevices(o, clk)
	require.NoError(t, err)
	defer func() { require.NoError(t, zdevs[0].Close()) }()
	fdevs, err := OpenFDPDevicesBeside(o, clk, zdevs)
	require.NoError(t, err)
	defer func() { require.NoError(t, fdevs[0].Close()) }()
	zd, fd := zdevs[0], fdevs[0]

	g := zd.Geometry()
	chunk := uint64(g.ChunkBlocks)
	buf := make([]byte, int(chunk)*g.BlockSize)
	zctx, fctx := zns.NoWait(context.Background()), fdp.NoWait(context.Background())
	var fdpNext []uint64
	for _, p := range []struct{ first, step uint64 }{{0, 1}, {0, 2}, {1, 2}} {
		for c := p.first; (c+1)*chunk <= fd.Capacity(); c += p.step {
			fdpNext = append(fdpNext, c*chunk)
		}
	}
	var last time.Duration
	fdpWrite := func() time.Duration {
		lba := fdpNext[0]
		fdpNext = fdpNext[1:]
		res, err := fd.Write(fctx, lba, buf, fdp.PlacementID{}, fdp.Flags{})
		require.NoError(t, err)
		return res.Completed
	}
	for fd.Stats().GCCopies == 0 {
		require.NotEmpty(t, fdpNext, "garbage collection starts before the overwrites end")
		last = max(last, fdpWrite())
	}
	// Past every booking of the warm-up (a write's completion covers its
	// collection; an erase takes milliseconds).
	t0 := last + time.Second
	clk.AdvanceTo(t0)
	copies0 := fd.Stats().GCCopies
	if !fdpGC {
		fdpNext = nil
	}

	var zonedNext []uint64 // LBAs of the zoned writes, in order
	for z := range uint64(zonedZones) {
		for off := uint64(0); off < g.ZoneCap; off += chunk {
			zonedNext = append(zonedNext, z*g.ZoneSize+off)
		}
	}
	var r onZonedRun
	for len(zonedNext) > 0 || len(fdpNext) > 0 {
		if len(fdpNext) > 0 {
			r.fdp = max(r.fdp, fdpWrite()-t0)
		}
		if len(zonedNext) > 0 {
			lba := zonedNext[0]
			zonedNext = zonedNext[1:]
			res, err := zd.Write(zctx, lba, buf, zns.Flags{})
			require.NoError(t, err)
			r.zoned = max(r.zoned, res.Completed-t0)
			if len(zonedNext) == 0 {
				r.gcBeside = fd.Stats().GCCopies - copies0
			}
		}
	}
	r.gcCopies = fd.Stats().GCCopies - copies0
	require.Equal(t, t0, clk.Now(), "NoWait: the clock did not move")
	return r
}

// TestFDPOnZonedContention: with --fdp-on-zoned an FDP drive books on the
// zoned drive's timing model, so the zoned drive's writes and the FDP
// drive's writes and garbage collection queue behind each other on the
// shared chips: each device's modelled completion grows when both run
// against each alone, and so does the modelled time of the whole load.
// Without the option each device's timing is the same as alone.
func TestFDPOnZonedContention(t *testing.T) {
	const zones = 24
	for _, on := range []bool{false, true} {
		zAlone := runOnZoned(t, on, zones, false)
		fAlone := runOnZoned(t, on, 0, true)
		both := runOnZoned(t, on, zones, true)
		t.Logf("fdp-on-zoned=%v: zoned writes take %v alone, %v beside FDP GC (%d copies while they are issued); FDP overwrites %v alone, %v beside zoned writes (%d GC copies)",
			on, zAlone.zoned, both.zoned, both.gcBeside, fAlone.fdp, both.fdp, both.gcCopies)
		require.Positive(t, both.gcBeside, "the FDP drive collects garbage while the zoned writes are issued")
		require.Equal(t, fAlone.gcCopies, both.gcCopies, "the placement and collection do not depend on the timing")
		require.Positive(t, zAlone.zoned)
		if on {
			require.Greater(t, both.zoned, zAlone.zoned, "zoned writes wait behind the FDP drive's writes, copies and erases")
			require.Greater(t, both.fdp, fAlone.fdp, "FDP writes and collection wait behind the zoned writes")
			require.Greater(t, max(both.zoned, both.fdp), max(zAlone.zoned, fAlone.fdp), "the whole load takes longer on shared chips")
		} else {
			require.Equal(t, zAlone.zoned, both.zoned, "separate models: the zoned drive's timing is its own")
			require.Equal(t, fAlone.fdp, both.fdp, "separate models: the FDP drive's timing is its own")
		}
	}
}

// TestFDPOnZonedRefused: --fdp-on-zoned needs a zoned drive per FDP drive
// with the same chips, channels and chunk size; a mismatch is a typed
// error and no FDP drive is created. The off clock has no model to share.
func TestFDPOnZonedRefused(t *testing.T) {
	o := onZonedOptions(t, true)
	o.FDP.Devices = 2
	zdevs, err := OpenDevices(o, clock.NewVirtual())
	require.NoError(t, err)
	defer zdevs[0].Close()
	_, err = OpenFDPDevicesBeside(o, clock.NewVirtual(), zdevs)
	var ia *zerr.InvalidArgumentError
	require.ErrorAs(t, err, &ia)
	require.Equal(t, "fdp-on-zoned", ia.Field)
	require.NoFileExists(t, FDPDevicePath(o.DataDir, 0))

	for _, tc := range []struct {
		name  string
		edit  func(c *flash.Config)
		field string
	}{
		{"chips", func(c *flash.Config) { c.Ways *= 2 }, "chips"},
		{"channels", func(c *flash.Config) { c.Channels, c.Ways = c.Channels*2, c.Ways/2 }, "channels"},
		{"page size", func(c *flash.Config) { c.PageSize *= 2 }, "page_size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := onZonedOptions(t, true)
			zo := o
			tc.edit(&zo.Device)
			zdevs, err := OpenDevices(zo, clock.NewVirtual())
			require.NoError(t, err)
			defer zdevs[0].Close()
			_, err = OpenFDPDevicesBeside(o, clock.NewVirtual(), zdevs)
			var gm *zerr.GeometryMismatchError
			require.ErrorAs(t, err, &gm)
			require.Contains(t, gm.Field, tc.field)
			require.ErrorIs(t, err, zerr.ErrGeometryMismatch)
			require.NoFileExists(t, FDPDevicePath(o.DataDir, 0))
		})
	}

	o = onZonedOptions(t, true)
	zdevs, err = OpenDevices(o, clock.Off())
	require.NoError(t, err)
	defer zdevs[0].Close()
	require.Nil(t, zdevs[0].Model(), "the off clock times nothing")
	fdevs, err := OpenFDPDevicesBeside(o, clock.Off(), zdevs)
	require.NoError(t, err)
	require.NoError(t, fdevs[0].Close())
}

// TestFDPOnZonedFlag: --fdp-on-zoned is off by default and set by the
// flag or its environment twin.
func TestFDPOnZonedFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want bool
	}{
		{nil, "", false},
		{[]string{"--fdp-on-zoned"}, "", true},
		{nil, "true", true},
	} {
		o := DefaultOptions()
		fs := pflag.NewFlagSet("ssdnode", pflag.ContinueOnError)
		AddFlags(fs, &o)
		if tc.env != "" {
			t.Setenv(flagenv.Name("fdp-on-zoned"), tc.env)
		}
		require.NoError(t, fs.Parse(tc.args))
		require.NoError(t, flagenv.Apply(fs))
		require.Equal(t, tc.want, o.FDP.OnZoned, "args %v env %q", tc.args, tc.env)
	}
	require.Equal(t, "ZONEFLEET_FDP_ON_ZONED", flagenv.Name("fdp-on-zoned"))
}
