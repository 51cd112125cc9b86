package zns

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// refZone / refModel: the simple reference model of NVMe ZNS semantics.
type refZone struct {
	state ZoneState
	wp    uint64
	data  map[uint64][]byte
}

type refModel struct {
	zones          []*refZone
	zsize, cap     uint64
	mor, mar       int
	nOpen, nActive int
	bs             int
}

func newRef(cfg flash.Config) *refModel {
	g := cfg.Geometry()
	m := &refModel{zsize: g.ZoneSize, cap: g.ZoneCap, mor: cfg.MaxOpenZones, mar: cfg.MaxActiveZones, bs: g.BlockSize}
	for i := uint64(0); i < g.Zones; i++ {
		m.zones = append(m.zones, &refZone{data: map[uint64][]byte{}})
	}
	return m
}

func (m *refModel) set(z *refZone, to ZoneState) error {
	dO := b2i(to.open()) - b2i(z.state.open())
	dA := b2i(to.active()) - b2i(z.state.active())
	if dA > 0 && m.mar > 0 && m.nActive+dA > m.mar {
		return zerr.ErrTooManyActive
	}
	if dO > 0 && m.mor > 0 && m.nOpen+dO > m.mor {
		return zerr.ErrTooManyOpen
	}
	m.nOpen += dO
	m.nActive += dA
	z.state = to
	return nil
}

func (m *refModel) write(lba uint64, data []byte) error {
	n := uint64(len(data) / m.bs)
	zi := lba / m.zsize
	if zi >= uint64(len(m.zones)) {
		return zerr.ErrOutOfRange
	}
	if lba+n > (zi+1)*m.zsize {
		return zerr.ErrOutOfRange
	}
	z := m.zones[zi]
	off := lba - zi*m.zsize
	switch z.state {
	case StateReadOnly, StateOffline:
		return zerr.ErrZoneState
	case StateFull:
		return zerr.ErrZoneFull
	}
	if off != z.wp {
		return zerr.ErrWritePointer
	}
	if off+n > m.cap {
		return zerr.ErrZoneFull
	}
	if z.state == StateEmpty || z.state == StateClosed {
		if err := m.set(z, StateImplicitOpen); err != nil {
			return err
		}
	}
	for i := uint64(0); i < n; i++ {
		z.data[off+i] = data[int(i)*m.bs : int(i+1)*m.bs]
	}
	z.wp += n
	if z.wp == m.cap {
		_ = m.set(z, StateFull)
	}
	return nil
}

func (m *refModel) appendTo(zi uint64, data []byte) (uint64, error) {
	z := m.zones[zi]
	switch z.state {
	case StateReadOnly, StateOffline:
		return 0, zerr.ErrZoneState
	case StateFull:
		return 0, zerr.ErrZoneFull
	}
	if z.wp+uint64(len(data)/m.bs) > m.cap {
		return 0, zerr.ErrZoneFull
	}
	lba := zi*m.zsize + z.wp
	return lba, m.write(lba, data)
}

func (m *refModel) mgmt(zi uint64, a Action) error {
	z := m.zones[zi]
	switch a {
	case ActionOpen:
		switch z.state {
		case StateExplicitOpen:
			return nil
		case StateImplicitOpen:
			z.state = StateExplicitOpen
			return nil
		case StateEmpty, StateClosed:
			return m.set(z, StateExplicitOpen)
		}
		return zerr.ErrZoneState
	case ActionClose:
		switch z.state {
		case StateClosed:
			return nil
		case StateImplicitOpen, StateExplicitOpen:
			if z.wp == 0 {
				return m.set(z, StateEmpty)
			}
			return m.set(z, StateClosed)
		}
		return zerr.ErrZoneState
	case ActionFinish:
		switch z.state {
		case StateFull:
			return nil
		case StateEmpty, StateImplicitOpen, StateExplicitOpen, StateClosed:
			z.wp = m.cap
			return m.set(z, StateFull)
		}
		return zerr.ErrZoneState
	case ActionReset:
		switch z.state {
		case StateEmpty:
			return nil
		case StateReadOnly, StateOffline:
			return zerr.ErrZoneState
		}
		z.wp = 0
		z.data = map[uint64][]byte{}
		return m.set(z, StateEmpty)
	}
	return nil
}

func (m *refModel) reopen() {
	m.nOpen = 0
	for _, z := range m.zones {
		if z.state.open() {
			z.state = StateClosed
		}
		if z.state == StateClosed && z.wp == 0 {
			z.state = StateEmpty
		}
	}
	m.nActive = 0
	for _, z := range m.zones {
		if z.state.active() {
			m.nActive++
		}
	}
}

func (m *refModel) read(lba, n uint64) []byte {
	out := make([]byte, int(n)*m.bs)
	for i := uint64(0); i < n; i++ {
		zi := (lba + i) / m.zsize
		z := m.zones[zi]
		off := (lba + i) % m.zsize
		if b, ok := z.data[off]; ok && off < z.wp {
			copy(out[int(i)*m.bs:], b)
		}
	}
	return out
}

var sentinels = []error{zerr.ErrWritePointer, zerr.ErrZoneFull, zerr.ErrZoneState, zerr.ErrTooManyOpen,
	zerr.ErrTooManyActive, zerr.ErrOutOfRange, zerr.ErrInvalidArgument}

func kindOf(err error) error {
	if err == nil {
		return nil
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s
		}
	}
	return err
}

// runModel drives a device and the reference with random commands from r,
// comparing every result and read byte. crash: reopen without closing.
func runModel(t testing.TB, d *Device, path string, cfg flash.Config, r *rand.Rand, steps int) *Device {
	m := newRef(cfg)
	g := cfg.Geometry()
	bs := g.BlockSize
	nz := g.Zones
	for step := 0; step < steps; step++ {
		zi := uint64(r.Intn(int(nz)))
		zs := zi * g.ZoneSize
		op := r.Intn(100)
		ctx := fmt.Sprintf("step %d op %d zone %d", step, op, zi)
		switch {
		case op < 40: // write near the WP
			wp := m.zones[zi].wp
			lba := zs + wp
			if r.Intn(8) == 0 {
				lba = zs + uint64(r.Intn(int(g.ZoneSize)))
			}
			n := 1 + r.Intn(9)
			data := pattern(bs, lba, n, byte(step))
			_, err := d.Write(bg, lba, data, Flags{FUA: r.Intn(10) == 0})
			require.Equal(t, kindOf(m.write(lba, data)), kindOf(err), ctx)
		case op < 55: // append
			n := 1 + r.Intn(6)
			data := pattern(bs, zs, n, byte(step))
			lba, _, err := d.Append(bg, zs, data, Flags{})
			mlba, merr := m.appendTo(zi, data)
			require.Equal(t, kindOf(merr), kindOf(err), ctx)
			if err == nil {
				require.Equal(t, mlba, lba, ctx)
			}
		case op < 80: // read
			lba := uint64(r.Intn(int(g.TotalLBAs)))
			n := 1 + uint64(r.Intn(int(g.ZoneSize)))
			if lba+n > g.TotalLBAs {
				n = g.TotalLBAs - lba
			}
			got, _, err := d.Read(bg, lba, n)
			require.NoError(t, err, ctx)
			want := m.read(lba, n)
			if !bytes.Equal(want, got) {
				for i := 0; i < int(n); i++ {
					require.Equal(t, want[i*bs:(i+1)*bs], got[i*bs:(i+1)*bs], "%s lba %d", ctx, lba+uint64(i))
				}
			}
		case op < 95:
			a := []Action{ActionOpen, ActionClose, ActionFinish, ActionReset}[r.Intn(4)]
			_, err := d.ZoneMgmt(bg, zi, a, false)
			require.Equal(t, kindOf(m.mgmt(zi, a)), kindOf(err), "%s %s", ctx, a)
		case op < 97: // clean reopen
			require.NoError(t, d.Close())
			var err error
			d, err = Open(path, cfg, d.clk)
			require.NoError(t, err, ctx)
			m.reopen()
		default: // crash: abandon without closing
			d.abandon()
			var err error
			d, err = Open(path, cfg, d.clk)
			require.NoError(t, err, ctx)
			m.reopen()
		}
		if step%50 == 0 {
			rep, err := d.ReportZones(StateAny, 0, 0)
			require.NoError(t, err)
			for i, z := range rep {
				require.Equal(t, m.zones[i].state, z.State, "%s: zone %d state", ctx, i)
				require.Equal(t, uint64(i)*g.ZoneSize+m.zones[i].wp, z.WP, "%s: zone %d wp", ctx, i)
			}
			l := d.Log()
			require.Equal(t, m.nOpen, l.OpenZones, ctx)
			require.Equal(t, m.nActive, l.ActiveZones, ctx)
		}
	}
	return d
}

func TestModelBased(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*flash.Config)
		clk  func() clock.Clock
	}{
		{"small-off", func(*flash.Config) {}, clock.Off},
		{"dzone1-virtual", func(c *flash.Config) { c.DZone = 1; c.ZoneCapacity = 30 }, func() clock.Clock { return clock.NewVirtual() }},
		{"full-stripe-virtual", func(c *flash.Config) { c.DZone = 4; c.ZoneCapacity = 0; c.MaxOpenZones = 0; c.MaxActiveZones = 0 }, func() clock.Clock { return clock.NewVirtual() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testCfg()
			tc.mod(&cfg)
			for seed := int64(1); seed <= 3; seed++ {
				d, p := newDev(t, cfg, tc.clk())
				d = runModel(t, d, p, cfg, rand.New(rand.NewSource(seed)), 1500)
				require.NoError(t, d.Close())
			}
		})
	}
}
