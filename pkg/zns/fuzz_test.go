package zns

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/ondisk"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

var allSentinels = []error{zerr.ErrWritePointer, zerr.ErrZoneFull, zerr.ErrZoneState, zerr.ErrTooManyOpen,
	zerr.ErrTooManyActive, zerr.ErrOutOfRange, zerr.ErrInvalidArgument, zerr.ErrInvalidBitmap, zerr.ErrIPUBudget,
	zerr.ErrNotFound, zerr.ErrNoResources, zerr.ErrTLViolation}

func typed(err error) bool {
	for _, s := range allSentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

func checkInvariants(t *testing.T, d *Device) []Zone {
	rep, err := d.ReportZones(StateAny, 0, 0)
	require.NoError(t, err)
	open, active := 0, 0
	for _, z := range rep {
		require.LessOrEqual(t, z.WP, z.Start+z.Capacity, "zone %d", z.Index)
		switch z.State {
		case StateEmpty:
			require.Equal(t, z.Start, z.WP, "empty zone %d", z.Index)
		case StateFull:
			require.Equal(t, z.Start+z.Capacity, z.WP, "full zone %d", z.Index)
		}
		open += b2i(z.State.open())
		active += b2i(z.State.active())
	}
	l := d.Log()
	require.Equal(t, open, l.OpenZones)
	require.Equal(t, active, l.ActiveZones)
	c := d.Config()
	require.LessOrEqual(t, open, c.MaxOpenZones)
	require.LessOrEqual(t, active, c.MaxActiveZones)
	require.LessOrEqual(t, l.IPUUsed, uint64(c.IPUBudgetBlocks))
	return rep
}

// FuzzCommands decodes bytes into device commands (4 bytes each: op, zone,
// two arguments) including TL_open, zone_compaction and in-place updates,
// and checks: no panic, only typed errors, zone invariants, and that a
// crash-reopen preserves every write pointer.
func FuzzCommands(f *testing.F) {
	f.Add([]byte{0, 0, 4, 0, 1, 0, 4, 0, 7, 0, 0, 0, 2, 0, 0, 0})
	f.Add([]byte{0, 1, 60, 0, 8, 1, 0x55, 0, 0, 1, 3, 0, 9, 1, 2, 0})
	f.Add([]byte{0, 2, 20, 0, 10, 2, 4, 0, 0, 2, 4, 1, 11, 2, 4, 3})
	f.Add([]byte{0, 3, 16, 0, 12, 3, 1, 4, 6, 3, 0, 0, 5, 3, 2, 0})
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 400 {
			prog = prog[:400]
		}
		cfg := testCfg()
		cfg.IPUBudgetBlocks = 8
		p := filepath.Join(t.TempDir(), "dev")
		d, err := Create(p, cfg, clock.NewVirtual())
		require.NoError(t, err)
		g := d.g
		bs := g.BlockSize
		for i := 0; i+4 <= len(prog); i += 4 {
			op, zi, a, b := prog[i]%13, uint64(prog[i+1])%(g.Zones+1), uint64(prog[i+2]), uint64(prog[i+3])
			zs := zi * g.ZoneSize
			var err error
			switch op {
			case 0: // write at the WP
				rep, _ := d.ReportZones(StateAny, min(zi, g.Zones-1), 1)
				n := 1 + int(a%12)
				_, err = d.Write(bg, rep[0].WP, pattern(bs, rep[0].WP, n, byte(i)), Flags{})
			case 1:
				_, err = d.Write(bg, zs+a, pattern(bs, 0, 1+int(b%4), byte(i)), Flags{FUA: b&0x80 != 0})
			case 2:
				_, _, err = d.Append(bg, zs, pattern(bs, 0, 1+int(a%8), byte(i)), Flags{})
			case 3:
				_, _, err = d.Read(bg, zs+a, 1+b)
			case 4, 5, 6, 7:
				_, err = d.ZoneMgmt(bg, zi, Action(a%6), b == 0xff)
			case 8: // TL_open with a bitmap derived from a
				bm := make([]byte, (g.ZoneCap+7)/8)
				for j := range bm {
					bm[j] = byte(a * uint64(j+1))
				}
				_, err = d.TLOpen(bg, zi, bm, TLMode(b%2))
			case 9, 10: // sparse write in a TL zone or overwrite
				_, err = d.Write(bg, zs+a%g.ZoneSize, pattern(bs, 0, 1+int(b%4), byte(i)), Flags{Overwrite: op == 10})
			case 11:
				var id uint64
				id, err = d.ZoneCompaction(bg, []Copy{{Src: zs + a%g.ZoneSize, Dst: (b % g.Zones) * g.ZoneSize, Count: 1 + a%16}})
				if err == nil {
					_, err = d.WaitCompaction(bg, id)
				}
			case 12:
				_, err = d.SimpleCopy(bg, []Range{{LBA: zs + a, Count: 1 + b%8}}, (b%g.Zones)*g.ZoneSize)
			}
			if err != nil {
				require.True(t, typed(err), "untyped error %v (op %d)", err, op)
			}
		}
		before := checkInvariants(t, d)
		d.abandon()
		d2, err := Open(p, cfg, clock.NewVirtual())
		require.NoError(t, err)
		defer d2.Close()
		after := checkInvariants(t, d2)
		for i := range before {
			if before[i].State == StateOffline || before[i].TL || after[i].TL {
				continue
			}
			require.Equal(t, before[i].WP, after[i].WP, "zone %d write pointer after crash", i)
		}
	})
}

// FuzzOpenJournal: Open on an arbitrary journal must not panic; it either
// opens or fails with a typed error.
func FuzzOpenJournal(f *testing.F) {
	f.Add([]byte{1, 2, 3})
	f.Add(frame(2, 1, zoneRec{zone: 1, state: StateFull, wp: 60, fbg: 2, logFBG: -1}.encode()))
	f.Add(frame(2, 1, ipuRec{1, 0, 3, 4}.encode()))
	f.Fuzz(func(t *testing.T, tail []byte) {
		cfg := testCfg()
		p := filepath.Join(t.TempDir(), "dev")
		d, err := Create(p, cfg, clock.Off())
		require.NoError(t, err)
		require.NoError(t, d.Close())
		hdr := make([]byte, jHeaderSize)
		jf, err := os.Open(p + ".journal")
		require.NoError(t, err)
		_, err = jf.Read(hdr)
		require.NoError(t, err)
		jf.Close()
		require.NoError(t, os.WriteFile(p+".journal", append(hdr, tail...), 0o644))
		d2, err := Open(p, cfg, clock.Off())
		if err != nil {
			require.True(t, errors.Is(err, zerr.ErrCorrupt), "untyped error %v", err)
			return
		}
		checkInvariants(t, d2)
		require.NoError(t, d2.Close())
	})
}

// ReadGeometry on any header bytes: a typed error, or a geometry that
// validates and that the header round-trips (the seed is a real header with
// its checksum; the fuzzer's geometry words are resealed so that they reach
// the validation).
func FuzzReadGeometry(f *testing.F) {
	p := filepath.Join(f.TempDir(), "dev")
	d, err := Create(p, testCfg(), clock.Off())
	require.NoError(f, err)
	require.NoError(f, d.Close())
	good, err := os.ReadFile(p)
	require.NoError(f, err)
	f.Add(good[28:68], true)
	f.Add(good[:40], false)
	f.Fuzz(func(t *testing.T, b []byte, reseal bool) {
		hdr := b
		if reseal { // b is the geometry words of a good header
			hdr = append([]byte(nil), good[:headerSize]...)
			copy(hdr[28:68], b)
			resealHeader(hdr)
		}
		q := filepath.Join(t.TempDir(), "dev")
		require.NoError(t, os.WriteFile(q, hdr, 0o644))
		base := testCfg()
		c, err := ReadGeometry(q, base)
		if err != nil {
			require.ErrorIs(t, err, zerr.ErrCorrupt)
			require.Equal(t, base, c)
			return
		}
		require.NoError(t, c.Validate())
		require.Equal(t, encodeHeader(c.Resolved(), [16]byte(hdr[12:28]), ondisk.Decode(hdr[featOff:]))[28:68], hdr[28:68])
	})
}
