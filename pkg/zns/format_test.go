package zns

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/ondisk"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func resealHeader(b []byte) {
	binary.LittleEndian.PutUint32(b[headerSize-4:], crc(b[:headerSize-4]))
}

func resealJournalHeader(b []byte) {
	binary.LittleEndian.PutUint32(b[jHeaderSize-4:], crc(b[:jHeaderSize-4]))
}

// writeV1 turns a closed device into the version 1 format (no feature
// bits, unsequenced journal frames) holding the same records.
func writeV1(t *testing.T, p string, uuid [16]byte) {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	hdr := make([]byte, headerSize)
	_, err = f.ReadAt(hdr, 0)
	require.NoError(t, err)
	binary.LittleEndian.PutUint32(hdr[8:], 1)
	clear(hdr[featOff : featOff+ondisk.Size])
	resealHeader(hdr)
	_, err = f.WriteAt(hdr, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	jb, err := os.ReadFile(p + ".journal")
	require.NoError(t, err)
	jc, err := parseJournal(p, jb, uuid)
	require.NoError(t, err)
	out := make([]byte, jHeaderSize)
	copy(out, journalMagic)
	binary.LittleEndian.PutUint32(out[8:], 1)
	copy(out[12:28], uuid[:])
	resealJournalHeader(out)
	for _, r := range jc.recs {
		fr := make([]byte, 8)
		binary.LittleEndian.PutUint32(fr, uint32(len(r)))
		binary.LittleEndian.PutUint32(fr[4:], crc(r))
		out = append(append(out, fr...), r...)
	}
	out = append(out, make([]byte, 40)...) // a zero-filled tail, as a v1 crash could leave
	require.NoError(t, os.WriteFile(p+".journal", out, 0o644))
}

func TestFormatV1Upgrade(t *testing.T) {
	// a version 1 drive has the older, chip-major layout
	saved := newFeatures
	newFeatures = ondisk.Features{}
	t.Cleanup(func() { newFeatures = saved })
	cfg := testCfg()
	d, p := newDev(t, cfg, clock.Off())
	bs := d.g.BlockSize
	_, _, err := d.Append(bg, 0, pattern(bs, 0, 5, 1), Flags{})
	require.NoError(t, err)
	_, err = d.ZoneMgmt(bg, 2, ActionFinish, false)
	require.NoError(t, err)
	uuid := d.uuid
	require.NoError(t, d.Close())
	writeV1(t, p, uuid)

	d2, err := Open(p, cfg, clock.Off())
	require.NoError(t, err, "a version 1 device opens")
	got, _, err := d2.Read(bg, 0, 5)
	require.NoError(t, err)
	require.Equal(t, pattern(bs, 0, 5, 1), got)
	zs, _ := d2.ReportZones(StateAny, 0, 3)
	require.Equal(t, StateClosed, zs[0].State)
	require.Equal(t, StateFull, zs[2].State)
	require.NoError(t, d2.Close())
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, uint32(formatVersion), binary.LittleEndian.Uint32(b[8:]), "header upgraded")
	jb, err := os.ReadFile(p + ".journal")
	require.NoError(t, err)
	require.Equal(t, uint32(formatVersion), binary.LittleEndian.Uint32(jb[8:]), "journal upgraded")
}

func TestFeatureBits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		journal bool
		feat    ondisk.Features
		class   ondisk.Class // "" = opens
	}{
		{"device: unknown compat accepted", false, ondisk.Features{Compat: 1 << 5}, ""},
		{"device: unknown ro_compat refused for writing", false, ondisk.Features{ROCompat: 1 << 7}, ondisk.ClassROCompat},
		{"device: unknown incompat refused", false, ondisk.Features{Incompat: 1 << 1}, ondisk.ClassIncompat},
		{"journal: unknown compat accepted", true, ondisk.Features{Compat: 1}, ""},
		{"journal: unknown ro_compat refused for writing", true, ondisk.Features{ROCompat: 1 << 60}, ondisk.ClassROCompat},
		{"journal: unknown incompat refused", true, ondisk.Features{Incompat: 1 << 33}, ondisk.ClassIncompat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testCfg()
			p := filepath.Join(t.TempDir(), "dev")
			d, err := Create(p, cfg, clock.Off())
			require.NoError(t, err)
			_, _, err = d.Append(bg, 0, pattern(d.g.BlockSize, 0, 2, 1), Flags{})
			require.NoError(t, err)
			require.NoError(t, d.Close())
			file, size, off, seal := p, headerSize, featOff, resealHeader
			if tc.journal {
				file, size, off, seal = p+".journal", jHeaderSize, jFeatOff, resealJournalHeader
			}
			b, err := os.ReadFile(file)
			require.NoError(t, err)
			tc.feat.Encode(b[off:])
			seal(b[:size])
			require.NoError(t, os.WriteFile(file, b, 0o644))
			before, _ := os.ReadFile(p)

			d2, err := Open(p, cfg, clock.Off())
			if tc.class == "" {
				require.NoError(t, err)
				got, _, err := d2.Read(bg, 0, 2)
				require.NoError(t, err)
				require.Equal(t, pattern(d2.g.BlockSize, 0, 2, 1), got)
				require.NoError(t, d2.Close())
				return
			}
			var fe *ondisk.FeatureError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tc.class, fe.Class)
			require.ErrorIs(t, err, zerr.ErrGeometryMismatch)
			require.Contains(t, err.Error(), "newer build")
			after, _ := os.ReadFile(p)
			require.Equal(t, before, after, "a refused open changes nothing")
		})
	}
}

// A zero-filled, torn or garbage journal tail is the end of the log.
func TestJournalTails(t *testing.T) {
	cfg := testCfg()
	for _, tc := range []struct {
		name string
		tail func(valid []byte) []byte
	}{
		{"zeros", func([]byte) []byte { return make([]byte, 4096) }},
		{"torn frame", func(v []byte) []byte { return v[:len(v)-3] }},
		{"garbage", func([]byte) []byte {
			g := make([]byte, 300)
			for i := range g {
				g[i] = byte(i*7 + 3)
			}
			return g
		}},
		{"frame of an earlier epoch", func(v []byte) []byte { return v }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, p := newDev(t, cfg, clock.Off())
			_, _, err := d.Append(bg, 0, pattern(d.g.BlockSize, 0, 2, 1), Flags{})
			require.NoError(t, err)
			require.NoError(t, d.Close())
			b, err := os.ReadFile(p + ".journal")
			require.NoError(t, err)
			jc, err := parseJournal(p, b, d.uuid)
			require.NoError(t, err)
			// a well-formed record of the previous epoch with the next sequence number
			prev := frame(jc.epoch-1, jc.seq+1, zoneRec{zone: 1, state: StateFull, wp: cfg.Geometry().ZoneCap, fbg: 0, logFBG: -1}.encode())
			tail := tc.tail(prev)
			require.NoError(t, os.WriteFile(p+".journal", append(b, tail...), 0o644))
			jc2, err := parseJournal(p, append(b, tail...), d.uuid)
			require.NoError(t, err)
			require.Equal(t, len(jc.recs), len(jc2.recs))
			d2, err := Open(p, cfg, clock.Off())
			require.NoError(t, err)
			require.Equal(t, uint64(1), d2.Log().JournalTailsDropped)
			zs, _ := d2.ReportZones(StateAny, 1, 1)
			require.Equal(t, StateEmpty, zs[0].State, "the tail record must not apply")
			require.NoError(t, d2.Close())
		})
	}
}

// FuzzParseJournal: any bytes after a valid journal header parse without a
// panic; the valid records are a prefix of a well-formed log (their frames
// re-encode to the same bytes) and everything else is counted as dropped.
func FuzzParseJournal(f *testing.F) {
	var uuid [16]byte
	uuid[3] = 7
	const epoch = 5
	hdr := journalHeader(uuid, epoch)
	rec := zoneRec{zone: 1, state: StateFull, wp: 60, fbg: 2, logFBG: -1}.encode()
	f.Add(frame(epoch, 1, rec))
	f.Add(append(frame(epoch, 1, rec), make([]byte, 64)...))
	f.Add(append(frame(epoch, 1, rec), frame(epoch-1, 2, rec)...))
	f.Add([]byte{0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, tail []byte) {
		b := append(append([]byte(nil), hdr...), tail...)
		jc, err := parseJournal("j", b, uuid)
		require.NoError(t, err)
		var re []byte
		for i, r := range jc.recs {
			re = append(re, frame(epoch, uint64(i+1), r)...)
		}
		require.True(t, bytes.Equal(tail[:len(re)], re), "valid records must re-encode to the bytes they came from")
		require.Equal(t, int64(len(b)), jc.end+jc.dropped)
		require.Equal(t, uint64(len(jc.recs)), jc.seq)
		_, _ = decodeAll("j", jc) // typed error or records, never a panic
	})
}

// ReadGeometry gives back the geometry a file was created with over any
// base, so that the file opens with it, and refuses what is not a device.
func TestReadGeometry(t *testing.T) {
	dir := t.TempDir()
	created := testCfg()
	created.BlocksPerChip, created.ZoneCapacity = created.BlocksPerChip+3, 0
	p := filepath.Join(dir, "dev")
	d, err := Create(p, created, clock.Off())
	require.NoError(t, err)
	require.NoError(t, d.Close())

	base := testCfg()
	base.Media, base.MaxOpenZones = "TLC", 3 // run-time knobs: kept
	got, err := ReadGeometry(p, base)
	require.NoError(t, err)
	require.Equal(t, "TLC", got.Media)
	require.Equal(t, 3, got.MaxOpenZones)
	require.Equal(t, created.BlocksPerChip, got.BlocksPerChip)
	for i, f := range geomFields(got.Resolved()) {
		require.Equal(t, geomFields(created.Resolved())[i], f, "field %s", f.name)
	}
	_, err = Open(p, base, clock.Off())
	require.ErrorIs(t, err, zerr.ErrGeometryMismatch, "the base alone does not open it")
	d, err = Open(p, got, clock.Off())
	require.NoError(t, err, "the geometry read back opens it")
	require.NoError(t, d.Close())

	good, err := os.ReadFile(p)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		mut  func(b []byte) []byte
		want error
	}{
		{"missing", nil, zerr.ErrNotFound},
		{"short", func(b []byte) []byte { return b[:100] }, zerr.ErrCorrupt},
		{"bad magic", func(b []byte) []byte { b[0] ^= 1; resealHeader(b); return b }, zerr.ErrCorrupt},
		{"bad checksum", func(b []byte) []byte { b[40] ^= 1; return b }, zerr.ErrCorrupt},
		{"impossible geometry", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[28:], 3); resealHeader(b); return b }, zerr.ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := filepath.Join(t.TempDir(), "dev")
			if tc.mut != nil {
				require.NoError(t, os.WriteFile(q, tc.mut(bytes.Clone(good[:headerSize])), 0o644))
			}
			c, err := ReadGeometry(q, base)
			require.ErrorIs(t, err, tc.want)
			require.Equal(t, base, c, "a refused file gives the base back")
		})
	}
}
