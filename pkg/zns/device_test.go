package zns

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name  string
		mod   func(*flash.Config)
		field string
	}{
		{"defaults ok", func(*flash.Config) {}, ""},
		{"zero channels", func(c *flash.Config) { c.Channels = 0 }, "channels"},
		{"bad media", func(c *flash.Config) { c.Media = "QLC" }, "media"},
		{"dzone not divisor", func(c *flash.Config) { c.DZone = 3 }, "d_zone"},
		{"capacity too big", func(c *flash.Config) { c.ZoneCapacity = 1 << 30 }, "zone_capacity"},
		{"page not multiple", func(c *flash.Config) { c.PageSize = 5000 }, "page_size"},
		{"no spares", func(c *flash.Config) { c.SpareBlocksPerChip = 0 }, "spare_blocks_per_chip"},
		{"MOR > MAR", func(c *flash.Config) { c.MaxOpenZones, c.MaxActiveZones = 5, 4 }, "max_open_zones"},
		{"bad copyback ratio", func(c *flash.Config) { c.CopybackRatio = 2 }, "copyback_ratio"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := flash.Defaults()
			tc.mod(&c)
			err := c.Validate()
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			var ia *zerr.InvalidArgumentError
			require.ErrorAs(t, err, &ia)
			require.Equal(t, tc.field, ia.Field)
		})
	}
	g := flash.Defaults().Geometry()
	require.Equal(t, uint64(8192), g.ZoneSize) // 32 MiB zones of 4 KiB blocks
	require.Equal(t, 16, g.Chips)
}

func TestMappingBitFields(t *testing.T) {
	for _, dz := range []int{1, 2, 4} {
		c := flash.Small()
		c.DZone = dz
		require.NoError(t, c.Validate())
		g := c.Geometry()
		m := g.Mapping()
		for lba := uint64(0); lba < g.TotalLBAs; lba += 3 {
			require.Equal(t, g.ChipOfLBA(lba), m.Chip(lba), "dz %d lba %d", dz, lba)
		}
	}
}

func TestZoneStateMachine(t *testing.T) {
	d, _ := newDev(t, testCfg(), clock.Off())
	bs := d.g.BlockSize
	zs := d.g.ZoneSize
	// write not at WP
	_, err := d.Write(bg, 1, pattern(bs, 1, 1, 0), Flags{})
	var wpe *zerr.WritePointerError
	require.ErrorAs(t, err, &wpe)
	require.Equal(t, uint64(0), wpe.Expected)
	require.Equal(t, uint64(1), wpe.Got)
	// implicit open
	_, err = d.Write(bg, 0, pattern(bs, 0, 2, 0), Flags{})
	require.NoError(t, err)
	zs0, _ := d.ReportZones(StateAny, 0, 1)
	require.Equal(t, StateImplicitOpen, zs0[0].State)
	require.Equal(t, uint64(2), zs0[0].WP)
	// append returns LBA
	lba, _, err := d.Append(bg, 0, pattern(bs, 2, 1, 0), Flags{})
	require.NoError(t, err)
	require.Equal(t, uint64(2), lba)
	// close / open explicit
	_, err = d.ZoneMgmt(bg, 0, ActionClose, false)
	require.NoError(t, err)
	zs0, _ = d.ReportZones(StateClosed, 0, 0)
	require.Len(t, zs0, 1)
	_, err = d.ZoneMgmt(bg, 0, ActionOpen, false)
	require.NoError(t, err)
	// MOR: 4 open allowed
	for z := uint64(1); z < 4; z++ {
		_, err = d.Write(bg, z*zs, pattern(bs, z*zs, 1, 0), Flags{})
		require.NoError(t, err)
	}
	_, err = d.Write(bg, 4*zs, pattern(bs, 4*zs, 1, 0), Flags{})
	require.ErrorIs(t, err, zerr.ErrTooManyOpen)
	// MAR: close two, then the 6-active limit
	_, err = d.ZoneMgmt(bg, 1, ActionClose, false)
	require.NoError(t, err)
	_, err = d.ZoneMgmt(bg, 2, ActionClose, false)
	require.NoError(t, err)
	_, err = d.Write(bg, 4*zs, pattern(bs, 4*zs, 1, 0), Flags{})
	require.NoError(t, err)
	_, err = d.Write(bg, 5*zs, pattern(bs, 5*zs, 1, 0), Flags{})
	require.NoError(t, err)
	_, err = d.ZoneMgmt(bg, 6, ActionOpen, false)
	require.ErrorIs(t, err, zerr.ErrTooManyActive)
	// finish, full errors, reads zero past WP
	_, err = d.ZoneMgmt(bg, 0, ActionFinish, false)
	require.NoError(t, err)
	_, _, err = d.Append(bg, 0, pattern(bs, 0, 1, 0), Flags{})
	require.ErrorIs(t, err, zerr.ErrZoneFull)
	got, _, err := d.Read(bg, 0, 5)
	require.NoError(t, err)
	require.Equal(t, pattern(bs, 0, 3, 0), got[:3*bs])
	require.Equal(t, make([]byte, 2*bs), got[3*bs:])
	// reset is cheap and empties
	_, err = d.ZoneMgmt(bg, 0, ActionReset, false)
	require.NoError(t, err)
	got, _, err = d.Read(bg, 0, 1)
	require.NoError(t, err)
	require.Equal(t, make([]byte, bs), got)
	// select all reset
	_, err = d.ZoneMgmt(bg, 0, ActionReset, true)
	require.NoError(t, err)
	all, _ := d.ReportZones(StateEmpty, 0, 0)
	require.Len(t, all, int(d.g.Zones))
	// read-only / offline
	_, err = d.ZoneMgmt(bg, 7, ActionReadOnly, false)
	require.NoError(t, err)
	_, err = d.Write(bg, 7*zs, pattern(bs, 0, 1, 0), Flags{})
	require.ErrorIs(t, err, zerr.ErrZoneState)
	_, err = d.ZoneMgmt(bg, 0, ActionOffline, true)
	require.NoError(t, err)
	_, _, err = d.Read(bg, 7*zs, 1)
	require.ErrorIs(t, err, zerr.ErrZoneState)
	_, err = d.ZoneMgmt(bg, 7, ActionReset, false)
	require.ErrorIs(t, err, zerr.ErrZoneState)
	// bad inputs
	_, err = d.Write(bg, 0, make([]byte, 100), Flags{})
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)
	_, _, err = d.Read(bg, d.g.TotalLBAs, 1)
	require.ErrorIs(t, err, zerr.ErrOutOfRange)
	_, err = d.Write(bg, zs-1, pattern(bs, 0, 2, 0), Flags{})
	require.ErrorIs(t, err, zerr.ErrOutOfRange)
	_, _, err = d.Append(bg, 3, pattern(bs, 0, 1, 0), Flags{})
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)
	_, err = d.ZoneMgmt(bg, d.g.Zones, ActionOpen, false)
	require.ErrorIs(t, err, zerr.ErrOutOfRange)
	// capacity < size
	_, err = d.Write(bg, 8*zs, pattern(bs, 0, 60, 0), Flags{})
	require.NoError(t, err)
	zs8, _ := d.ReportZones(StateAny, 8, 1)
	require.Equal(t, StateFull, zs8[0].State)
}

func TestPersistenceAndForeignFiles(t *testing.T) {
	cfg := testCfg()
	d, p := newDev(t, cfg, clock.Off())
	bs := d.g.BlockSize
	_, err := d.Write(bg, 0, pattern(bs, 0, 5, 1), Flags{FUA: true})
	require.NoError(t, err)
	_, err = d.ZoneMgmt(bg, 1, ActionFinish, false)
	require.NoError(t, err)
	require.NoError(t, d.Close())
	require.ErrorIs(t, d.Close(), zerr.ErrClosed)
	_, _, err = d.Read(bg, 0, 1)
	require.ErrorIs(t, err, zerr.ErrClosed)

	// geometry mismatch
	c2 := cfg
	c2.DZone = 4
	_, err = Open(p, c2, clock.Off())
	var gm *zerr.GeometryMismatchError
	require.ErrorAs(t, err, &gm)
	require.Equal(t, "d_zone", gm.Field)

	d2, err := Open(p, cfg, clock.Off())
	require.NoError(t, err)
	got, _, err := d2.Read(bg, 0, 6)
	require.NoError(t, err)
	require.Equal(t, pattern(bs, 0, 5, 1), got[:5*bs])
	zs, _ := d2.ReportZones(StateAny, 0, 2)
	require.Equal(t, StateClosed, zs[0].State)
	require.Equal(t, uint64(5), zs[0].WP-zs[0].Start)
	require.Equal(t, StateFull, zs[1].State)
	require.NoError(t, d2.Close())

	// half-written trailing journal record is discarded
	jf, err := os.OpenFile(p+".journal", os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = jf.Write([]byte{40, 0, 0, 0, 1, 2, 3, 4, 1, 2})
	require.NoError(t, err)
	require.NoError(t, jf.Close())
	d3, err := Open(p, cfg, clock.Off())
	require.NoError(t, err)
	require.NoError(t, d3.Close())

	// a bad record in the middle ends the log: what follows it cannot have
	// been flushed before it (a power loss may write back pages in any
	// order), so it is dropped, not treated as corruption
	b, err := os.ReadFile(p + ".journal")
	require.NoError(t, err)
	jc, err := parseJournal(p, b, d3.uuid)
	require.NoError(t, err)
	require.Greater(t, len(jc.recs), 1)
	b2 := append([]byte(nil), b...)
	b2[jHeaderSize+frameHdr+len(jc.recs[0])+9] ^= 0xff // second record
	require.NoError(t, os.WriteFile(p+".journal", b2, 0o644))
	jc2, err := parseJournal(p, b2, d3.uuid)
	require.NoError(t, err)
	require.Len(t, jc2.recs, 1)
	d4, err := Open(p, cfg, clock.Off())
	require.NoError(t, err)
	require.Equal(t, uint64(1), d4.Log().JournalTailsDropped)
	require.NoError(t, d4.Close())
	// a record whose checksum holds but does not decode is corruption
	bad := append(append([]byte(nil), b[:jHeaderSize]...), frame(binary.LittleEndian.Uint64(b[jEpochOff:]), 1, []byte{99, 1, 2})...)
	require.NoError(t, os.WriteFile(p+".journal", bad, 0o644))
	_, err = Open(p, cfg, clock.Off())
	require.ErrorIs(t, err, zerr.ErrCorrupt)
	require.NoError(t, os.WriteFile(p+".journal", b, 0o644))

	// foreign file
	require.NoError(t, os.WriteFile(p+".x", make([]byte, 8192), 0o644))
	_, err = Open(p+".x", cfg, clock.Off())
	require.ErrorIs(t, err, zerr.ErrCorrupt)
	// journal of another device
	_, p2 := newDev(t, cfg, clock.Off())
	require.NoError(t, os.Rename(p2+".journal", p+".journal"))
	_, err = Open(p, cfg, clock.Off())
	require.ErrorIs(t, err, zerr.ErrCorrupt)
	require.True(t, errors.Is(err, zerr.ErrCorrupt))
	_, err = Open(p+".missing", cfg, clock.Off())
	require.ErrorIs(t, err, zerr.ErrNotFound)
	_, err = Create(p, cfg, clock.Off())
	require.ErrorIs(t, err, zerr.ErrAlreadyExists)
}

func TestJournalCheckpoint(t *testing.T) {
	cfg := testCfgNoLimits()
	d, p := newDev(t, cfg, clock.Off())
	d.j.mu.Lock()
	d.j.limit = 2048
	d.j.mu.Unlock()
	bs := d.g.BlockSize
	for i := 0; i < 200; i++ {
		zi := uint64(i % 7)
		_, _, err := d.Append(bg, zi*d.g.ZoneSize, pattern(bs, 0, 2, byte(i)), Flags{})
		require.NoError(t, err)
		if i%3 != 0 {
			_, err = d.ZoneMgmt(bg, zi, ActionReset, false)
			require.NoError(t, err)
		}
	}
	before, _ := d.ReportZones(StateAny, 0, 0)
	d.bg.Wait()
	require.Greater(t, d.Log().JournalCheckpoints, uint64(0))
	st, err := os.Stat(p + ".journal")
	require.NoError(t, err)
	require.Less(t, st.Size(), int64(8192))
	d.abandon()
	d2, err := Open(p, cfg, clock.Off())
	require.NoError(t, err)
	defer d2.Close()
	after, _ := d2.ReportZones(StateAny, 0, 0)
	for i := range before {
		require.Equal(t, before[i].WP, after[i].WP)
	}
}

func TestParse(t *testing.T) {
	for _, s := range []ZoneState{StateEmpty, StateImplicitOpen, StateExplicitOpen, StateClosed, StateFull, StateReadOnly, StateOffline, StateAny} {
		got, err := ParseZoneState(s.String())
		require.NoError(t, err)
		require.Equal(t, s, got)
	}
	_, err := ParseZoneState("bogus")
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)
	for _, s := range []string{"open", "close", "finish", "reset", "offline", "read-only"} {
		_, err := ParseAction(s)
		require.NoError(t, err)
	}
	_, err = ParseAction("x")
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)
	m, err := ParseTLMode("ppa-ordered")
	require.NoError(t, err)
	require.Equal(t, PPAOrdered, m)
	require.Equal(t, "action(9)", Action(9).String())
	d, _ := newDev(t, testCfg(), clock.Off())
	_, err = d.ZoneMgmt(bg, 0, Action(9), false)
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)
	_, err = d.TLOpen(bg, 0, nil, TLMode(7))
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)
	_, err = d.ReportZones(ZoneState(77), 0, 0)
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)
	id := d.Identify()
	require.Equal(t, uint64(16), id.Zones)
	require.Equal(t, uint64(60), id.ZoneCapacity)
	require.NoError(t, d.SetConfig(func() flash.Config { c := d.Config(); c.MaxOpenZones = 2; return c }()))
	require.Equal(t, 2, d.Identify().MaxOpen)
	bad := d.Config()
	bad.DZone = 4
	require.ErrorIs(t, d.SetConfig(bad), zerr.ErrGeometryMismatch)
}
