package fdp

import (
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/ondisk"
	"github.com/zonefleet/zonefleet/pkg/vfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mod   func(*Config)
		field string
	}{
		{"no handles", func(c *Config) { c.Handles = nil }, "handles"},
		{"too many handles", func(c *Config) { c.Handles = make([]HandleType, MaxHandles+1) }, "handles"},
		{"unknown handle type", func(c *Config) { c.Handles[0] = 9 }, "handles"},
		{"groups not dividing chips", func(c *Config) { c.ReclaimGroups = 3 }, "reclaim_groups"},
		{"zero groups", func(c *Config) { c.ReclaimGroups = 0 }, "reclaim_groups"},
		{"ru wider than group", func(c *Config) { c.RUChips = 5 }, "ru_chips"},
		{"negative ru", func(c *Config) { c.RUChips = -1 }, "ru_chips"},
		{"no over-provisioning", func(c *Config) { c.OverProvision = 0 }, "over_provision"},
		{"too little over-provisioning", func(c *Config) { c.OverProvision = 0.01 }, "over_provision"},
		{"unknown victim", func(c *Config) { c.Victim = 7 }, "victim"},
		{"bad flash", func(c *Config) { c.Flash.Channels = 0 }, "channels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			err := c.Validate()
			var ia *zerr.InvalidArgumentError
			require.ErrorAs(t, err, &ia)
			require.Equal(t, tc.field, ia.Field)
			_, err = Create("/x", c, clock.Off(), WithFS(vfs.NewCrashableMem()))
			require.ErrorIs(t, err, zerr.ErrInvalidArgument)
		})
	}
	require.NoError(t, DefaultConfig().Validate())
}

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"flash":{"channels":2,"ways":2,"pages_per_block":8,"page_size":16384,"block_size":4096,"blocks_per_chip":64,"spare_blocks_per_chip":2,"d_zone":2,"media":"MLC","host_link_bytes_per_sec":1000000000},
		"reclaim_groups":2,"ru_chips":1,"handles":["ii","persistently-isolated"],"over_provision":0.25,"victim":"cost-benefit"}`))
	require.NoError(t, err)
	require.Equal(t, []HandleType{InitiallyIsolated, PersistentlyIsolated}, c.Handles)
	require.Equal(t, CostBenefit, c.Victim)
	for _, in := range []string{`{`, `{"handles":["nope"]}`, `{"victim":"random"}`, `{"unknown":1}`, `[]`, `{"reclaim_groups":"x"}`} {
		_, err := ParseConfig([]byte(in))
		require.ErrorIs(t, err, zerr.ErrInvalidArgument, in)
	}
}

func TestCommandErrors(t *testing.T) {
	d, _ := newMemDevice(t, testConfig(), clock.Off())
	defer d.Close()
	bs := d.BlockSize()
	n := d.Capacity()
	blk := make([]byte, bs)
	for _, tc := range []struct {
		name string
		run  func() error
		want error
	}{
		{"write past the end", func() error { _, err := d.Write(bg, n, blk, PlacementID{}, Flags{}); return err }, zerr.ErrOutOfRange},
		{"write straddling the end", func() error {
			_, err := d.Write(bg, n-1, make([]byte, 2*bs), PlacementID{}, Flags{})
			return err
		}, zerr.ErrOutOfRange},
		{"write of a partial block", func() error { _, err := d.Write(bg, 0, blk[:100], PlacementID{}, Flags{}); return err }, zerr.ErrInvalidArgument},
		{"empty write", func() error { _, err := d.Write(bg, 0, nil, PlacementID{}, Flags{}); return err }, zerr.ErrInvalidArgument},
		{"unknown handle", func() error { _, err := d.Write(bg, 0, blk, PlacementID{Handle: 4}, Flags{}); return err }, zerr.ErrInvalidArgument},
		{"unknown group", func() error { _, err := d.Write(bg, 0, blk, PlacementID{Group: 1}, Flags{}); return err }, zerr.ErrInvalidArgument},
		{"read past the end", func() error { _, _, err := d.Read(bg, n, 1); return err }, zerr.ErrOutOfRange},
		{"read of nothing", func() error { _, _, err := d.Read(bg, 0, 0); return err }, zerr.ErrInvalidArgument},
		{"read with overflowing count", func() error { _, _, err := d.Read(bg, 1, ^uint64(0)); return err }, zerr.ErrOutOfRange},
		{"trim past the end", func() error { return d.Trim(bg, n-1, 2) }, zerr.ErrOutOfRange},
		{"update unknown handle", func() error { return d.UpdateHandles(bg, []PlacementID{{Handle: 99}}) }, zerr.ErrInvalidArgument},
		{"ru size too large", func() error { return d.SetRUChips(99) }, zerr.ErrInvalidArgument},
		{"unknown victim policy", func() error { return d.SetVictimPolicy(0) }, zerr.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := d.Stats()
			require.ErrorIs(t, tc.run(), tc.want)
			require.Equal(t, before, d.Stats(), "a refused command changes nothing")
		})
	}
	checkInvariants(t, d)
	require.Equal(t, uint64(0), d.Status().MappedLBAs)
}

func TestOpenErrors(t *testing.T) {
	cfg := testConfig()
	mem := vfs.NewCrashableMem()
	d, err := Create("/fdp0", cfg, clock.Off(), WithFS(mem))
	require.NoError(t, err)
	require.NoError(t, d.Close())

	_, err = Create("/fdp0", cfg, clock.Off(), WithFS(mem))
	require.ErrorIs(t, err, zerr.ErrAlreadyExists)
	_, err = Open("/missing", cfg, clock.Off(), WithFS(mem))
	require.ErrorIs(t, err, zerr.ErrNotFound)

	other := cfg
	other.Handles = []HandleType{InitiallyIsolated, InitiallyIsolated, InitiallyIsolated, PersistentlyIsolated}
	_, err = Open("/fdp0", other, clock.Off(), WithFS(mem))
	require.ErrorIs(t, err, zerr.ErrGeometryMismatch)
	other = cfg
	other.OverProvision = 0.3
	_, err = Open("/fdp0", other, clock.Off(), WithFS(mem))
	require.ErrorIs(t, err, zerr.ErrGeometryMismatch)

	patch := func(off int64, b []byte) *vfs.MemFS {
		c := mem.Clone()
		f, err := c.OpenFile("/fdp0", os.O_RDWR, 0)
		require.NoError(t, err)
		_, err = f.WriteAt(b, off)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		return c
	}
	_, err = Open("/fdp0", cfg, clock.Off(), WithFS(patch(0, []byte("NOTADISK"))))
	require.ErrorIs(t, err, zerr.ErrCorrupt)
	_, err = Open("/fdp0", cfg, clock.Off(), WithFS(patch(40, []byte{1})))
	require.ErrorIs(t, err, zerr.ErrCorrupt, "checksum")

	// A header with unknown incompat feature bits, checksum fixed.
	hdr := encodeHeader(cfg, d.uuid, ondisk.Features{Incompat: 1 << 5})
	_, err = Open("/fdp0", cfg, clock.Off(), WithFS(patch(0, hdr)))
	var fe *ondisk.FeatureError
	require.True(t, errors.As(err, &fe))
	require.ErrorIs(t, err, zerr.ErrGeometryMismatch)
	// A journal of another device.
	c := mem.Clone()
	require.NoError(t, vfs.WriteFileAtomic(c, "/fdp0.journal", encodeJournalHeader([16]byte{1})))
	_, err = Open("/fdp0", cfg, clock.Off(), WithFS(c))
	require.ErrorIs(t, err, zerr.ErrCorrupt)
	// Still opens untouched.
	d, err = Open("/fdp0", cfg, clock.Off(), WithFS(mem))
	require.NoError(t, err)
	require.NoError(t, d.Close())
}

func TestClosedAndFailed(t *testing.T) {
	mem := vfs.NewCrashableMem()
	fail := false
	fs := vfs.WithErrors(mem, vfs.InjectorFunc(func(o vfs.Op) error {
		if fail && o.Kind == vfs.OpWrite {
			return vfs.ErrInjected
		}
		return nil
	}))
	d, err := Create("/fdp0", testConfig(), clock.Off(), WithFS(fs), WithLogger(quiet))
	require.NoError(t, err)
	blk := block(d.BlockSize(), 3, 1)
	_, err = d.Write(bg, 3, blk, PlacementID{}, Flags{})
	require.NoError(t, err)
	fail = true
	_, err = d.Write(bg, 4, blk, PlacementID{}, Flags{})
	require.ErrorIs(t, err, zerr.ErrUnavailable)
	fail = false
	_, err = d.Write(bg, 5, blk, PlacementID{}, Flags{})
	require.ErrorIs(t, err, zerr.ErrUnavailable, "read-only after a failed write")
	require.True(t, d.Status().ReadOnly)
	got, _, err := d.Read(bg, 3, 1)
	require.NoError(t, err)
	require.Equal(t, blk, got)
	require.NoError(t, d.Close())
	_, _, err = d.Read(bg, 3, 1)
	require.ErrorIs(t, err, zerr.ErrClosed)
	d, err = Open("/fdp0", testConfig(), clock.Off(), WithFS(mem), WithLogger(quiet))
	require.NoError(t, err)
	got, _, err = d.Read(bg, 3, 1)
	require.NoError(t, err)
	require.Equal(t, blk, got)
	require.NoError(t, d.Close())
}
