package fdp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/vfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// typed reports whether err is one of pkg/zerr's typed errors.
func typed(err error) bool {
	for _, s := range []error{zerr.ErrOutOfRange, zerr.ErrInvalidArgument, zerr.ErrNoResources, zerr.ErrUnavailable,
		zerr.ErrClosed, zerr.ErrCorrupt, zerr.ErrGeometryMismatch, zerr.ErrNotFound, zerr.ErrAlreadyExists} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// FuzzParseConfig: any input is a valid configuration or a typed error,
// never a panic; a valid one makes a drive that takes a write.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"flash":{"channels":2,"ways":2,"pages_per_block":8,"page_size":16384,"block_size":4096,"blocks_per_chip":64,"spare_blocks_per_chip":2,"d_zone":2,"media":"MLC","host_link_bytes_per_sec":1000000000},"reclaim_groups":1,"handles":["ii","pi"],"over_provision":0.2,"victim":"greedy"}`))
	f.Add([]byte(`{"reclaim_groups":2,"ru_chips":1,"handles":["persistently-isolated"],"over_provision":0.5,"victim":"cb"}`))
	f.Add([]byte(`{"handles":["bogus"]}`))
	f.Add([]byte(`{"over_provision":1e309}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := ParseConfig(in)
		if err != nil {
			if !typed(err) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		if g := c.geometry(); g.slots > 1<<16 {
			return // valid but too large to build in a fuzz iteration
		}
		d, err := Create("/f", c, clock.Off(), WithFS(vfs.NewCrashableMem()), WithLogger(quiet))
		if err != nil {
			t.Fatalf("valid config refused by Create: %v", err)
		}
		defer d.Close()
		if _, err := d.Write(bg, 0, make([]byte, d.BlockSize()), PlacementID{}, Flags{}); err != nil {
			t.Fatalf("write: %v", err)
		}
	})
}

// FuzzCommands decodes the input as a command sequence (op, LBA, count,
// placement id: 13 bytes each) against a small drive and a reference map:
// every refused command is a typed error and changes nothing, every read
// matches the reference.
func FuzzCommands(f *testing.F) {
	enc := func(cmds ...[4]uint64) []byte {
		var b []byte
		for _, c := range cmds {
			b = append(b, byte(c[0]))
			b = binary.LittleEndian.AppendUint32(b, uint32(c[1]))
			b = binary.LittleEndian.AppendUint32(b, uint32(c[2]))
			b = binary.LittleEndian.AppendUint32(b, uint32(c[3]))
		}
		return b
	}
	f.Add(enc([4]uint64{0, 1, 2, 0}, [4]uint64{1, 0, 4, 0}, [4]uint64{2, 1, 1, 0}, [4]uint64{1, 0, 4, 0}))
	f.Add(enc([4]uint64{0, 1 << 31, 1, 0}, [4]uint64{0, 5, 1, 1<<16 | 0}, [4]uint64{0, 5, 1, 77}))
	f.Add(enc([4]uint64{3, 0, 0, 2}, [4]uint64{4, 0, 0, 0}, [4]uint64{5, 0, 3, 0}, [4]uint64{6, 0, 1, 0}))
	f.Fuzz(func(t *testing.T, in []byte) {
		cfg := testConfig()
		cfg.Flash.BlocksPerChip = 48
		cfg.Flash.PagesPerBlock = 4
		cfg.OverProvision = 0.35
		mem := vfs.NewCrashableMem()
		d, err := Create("/f", cfg, clock.Off(), WithFS(mem), WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		bs := d.BlockSize()
		ref := map[uint64]uint64{}
		ver := uint64(0)
		check := func(lba, n uint64) {
			got, _, err := d.Read(bg, lba, n)
			if err != nil {
				if !typed(err) {
					t.Fatalf("read: untyped %v", err)
				}
				return
			}
			for i := range n {
				want := make([]byte, bs)
				if v := ref[lba+i]; v != 0 {
					want = block(bs, lba+i, v)
				}
				if !bytes.Equal(want, got[int(i)*bs:int(i+1)*bs]) {
					t.Fatalf("LBA %d differs from the reference", lba+i)
				}
			}
		}
		for len(in) >= 13 && ver < 4000 {
			op, lba, n, pid := in[0]%8, uint64(binary.LittleEndian.Uint32(in[1:])), uint64(binary.LittleEndian.Uint32(in[5:])), binary.LittleEndian.Uint32(in[9:])
			in = in[13:]
			// keep most commands in range so that they do something
			if lba&0x80000000 == 0 {
				lba %= d.Capacity() + 2
			}
			if n&0x80000000 == 0 {
				n %= 64
			}
			before := d.Stats()
			var err error
			switch op {
			case 0, 1, 2:
				if n > 0 && n <= 64 {
					buf := make([]byte, 0, int(n)*bs)
					for i := range n {
						buf = append(buf, block(bs, lba+i, ver+i+1)...)
					}
					if _, err = d.Write(bg, lba, buf, DecodePlacementID(pid), Flags{FUA: op == 2}); err == nil {
						for i := range n {
							ver++
							ref[lba+i] = ver
						}
					}
				} else {
					_, err = d.Write(bg, lba, make([]byte, int(n%3)*bs+int(pid%2)), DecodePlacementID(pid), Flags{})
				}
			case 3:
				if err = d.Trim(bg, lba, n); err == nil {
					for i := range n {
						delete(ref, lba+i)
					}
				}
			case 4:
				err = d.Flush(bg)
			case 5:
				err = d.UpdateHandles(bg, []PlacementID{DecodePlacementID(pid)})
			case 6:
				err = d.SetRUChips(int(int32(pid)))
			case 7:
				check(lba, n)
			}
			if err != nil {
				if !typed(err) {
					t.Fatalf("op %d: untyped error %T: %v", op, err, err)
				}
				if after := d.Stats(); after != before {
					t.Fatalf("op %d: refused command changed the counters", op)
				}
			}
		}
		checkInvariants(t, d)
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		d, err = Open("/f", cfg, clock.Off(), WithFS(mem), WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		check(0, d.Capacity())
	})
}

// FuzzOpenDamaged writes garbage over part of a drive's files (the
// out-of-band table, the journal or the header) and opens it: a typed
// error or a consistent drive, never a panic.
func FuzzOpenDamaged(f *testing.F) {
	f.Add(uint8(0), uint32(0), []byte{0xff, 0xff})
	f.Add(uint8(1), uint32(64), []byte("FDPO garbage record"))
	f.Add(uint8(2), uint32(64), []byte{1, 0, 0, 0, 5, 0, 0, 0})
	f.Add(uint8(1), uint32(130), make([]byte, 64))
	cfg := crashConfig()
	base := vfs.NewCrashableMem()
	d, err := Create("/f", cfg, clock.Off(), WithFS(base), WithLogger(quiet))
	if err != nil {
		f.Fatal(err)
	}
	bs := d.BlockSize()
	for i := range uint64(200) {
		if _, err := d.Write(bg, (i*7)%d.Capacity(), block(bs, (i*7)%d.Capacity(), i+1), PlacementID{Handle: uint16(i % 4)}, Flags{}); err != nil {
			f.Fatal(err)
		}
	}
	if err := d.Trim(bg, 3, 5); err != nil {
		f.Fatal(err)
	}
	if err := d.Close(); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, where uint8, off uint32, junk []byte) {
		if len(junk) > 4096 {
			junk = junk[:4096]
		}
		fs := base.Clone()
		name, at := "/f", int64(0)
		switch where % 3 {
		case 0: // header
			at = int64(off % headerSize)
		case 1: // out-of-band table
			at = headerSize + int64(off)%(int64(cfg.geometry().slots)*oobSize)
		case 2: // journal
			name = "/f.journal"
			at = int64(off % 4096)
		}
		fh, err := fs.OpenFile(name, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fh.WriteAt(junk, at); err != nil {
			t.Fatal(err)
		}
		fh.Close()
		d, err := Open("/f", cfg, clock.Off(), WithFS(fs), WithLogger(quiet))
		if err != nil {
			if !typed(err) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		defer d.Close()
		checkInvariants(t, d)
		if _, _, err := d.Read(bg, 0, d.Capacity()); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Write(bg, 0, make([]byte, bs), PlacementID{}, Flags{}); err != nil {
			t.Fatal(err)
		}
	})
}
