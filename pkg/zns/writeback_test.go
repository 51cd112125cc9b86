package zns

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/vfs"
)

// The data file's write-back is started every WithWritebackKick bytes on
// the operating system's files (never on test file systems, never with 0),
// at most as often as asked, and changes nothing of what is stored.
func TestWritebackKick(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mem      bool  // on vfs.NewCrashableMem (no write-back to start)
		kick     int64 // WithWritebackKick; -1: the option not given
		minKicks uint64
	}{
		{name: "every 64 KiB", kick: 64 << 10, minKicks: 1},
		{name: "off", kick: 0},
		{name: "negative is off", kick: -5},
		{name: "default (4 MiB) not reached", kick: -1},
		{name: "test file system", mem: true, kick: 64 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testCfgNoLimits()
			p := filepath.Join(t.TempDir(), "dev0")
			var opts []Option
			if tc.mem {
				p = "/dev0"
				opts = append(opts, WithFS(vfs.NewCrashableMem()))
			}
			if tc.kick != -1 {
				opts = append(opts, WithWritebackKick(tc.kick))
			}
			d, err := Create(p, cfg, clock.Off(), opts...)
			require.NoError(t, err)
			g := d.Geometry()
			bs := g.BlockSize
			written := 0
			zones := min(4, int(g.Zones))
			for z := 0; z < zones; z++ {
				lba := uint64(z) * g.ZoneSize
				for off := uint64(0); off < g.ZoneCap; off += 4 {
					n := int(min(4, g.ZoneCap-off))
					_, err := d.Write(bg, lba+off, pattern(bs, lba+off, n, byte(z)), Flags{})
					require.NoError(t, err)
					written += n * bs
				}
			}
			require.Greater(t, written, 4*(64<<10), "the test writes several kicks' worth")
			kicks := d.Log().WritebackKicks
			require.GreaterOrEqual(t, kicks, tc.minKicks)
			if tc.minKicks == 0 {
				require.Zero(t, kicks)
			} else {
				require.LessOrEqual(t, kicks, uint64(written)/uint64(tc.kick), "at most one kick per kick-size written")
			}
			_, err = d.Flush(bg)
			require.NoError(t, err)
			check := func(d *Device) {
				for z := 0; z < zones; z++ {
					lba := uint64(z) * g.ZoneSize
					got, _, err := d.Read(bg, lba, g.ZoneCap)
					require.NoError(t, err)
					require.Equal(t, pattern(bs, lba, int(g.ZoneCap), byte(z)), got, "zone %d", z)
				}
			}
			check(d)
			if tc.mem {
				require.NoError(t, d.Close())
				return
			}
			require.NoError(t, d.Close())
			d, err = Open(p, cfg, clock.Off(), opts...)
			require.NoError(t, err)
			defer d.Close()
			check(d)
		})
	}
}
