package zns

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
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
	data  map[uint64][]byte // below the WP (for a TL zone: the new content)
	ipu   map[uint64]bool
	fbgs  int // flash block groups held (device-internal resource)
	tl    bool
	mode  TLMode
	valid []bool
	old   map[uint64][]byte // TL: content of the original FBG
}

type refModel struct {
	zones          []*refZone
	zsize, cap     uint64
	mor, mar       int
	nOpen, nActive int
	bs             int
	budget, used   int
	nfcg, perFCG   int
}

func newRef(cfg flash.Config) *refModel {
	g := cfg.Geometry()
	m := &refModel{zsize: g.ZoneSize, cap: g.ZoneCap, mor: cfg.MaxOpenZones, mar: cfg.MaxActiveZones, bs: g.BlockSize, budget: cfg.IPUBudgetBlocks,
		nfcg: g.NFCG, perFCG: g.FBGsPerFCG}
	for i := uint64(0); i < g.Zones; i++ {
		m.zones = append(m.zones, &refZone{data: map[uint64][]byte{}, ipu: map[uint64]bool{}})
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

func (m *refModel) freeFBGs(zi int) int {
	free := m.perFCG
	for i, z := range m.zones {
		if i%m.nfcg == zi%m.nfcg {
			free -= z.fbgs
		}
	}
	return free
}

// fbgLess counts the zones of zi's chip group that hold no FBG.
func (m *refModel) fbgLess(zi int) int {
	n := 0
	for i, z := range m.zones {
		if i%m.nfcg == zi%m.nfcg && z.fbgs == 0 {
			n++
		}
	}
	return n
}

func (m *refModel) idx(z *refZone) int {
	for i, x := range m.zones {
		if x == z {
			return i
		}
	}
	panic("zone")
}

// openTo moves z from empty/closed to an open state, allocating flash for an empty zone.
func (m *refModel) openTo(z *refZone, to ZoneState) error {
	from := z.state
	if err := m.set(z, to); err != nil {
		return err
	}
	if from == StateEmpty {
		if m.freeFBGs(m.idx(z)) == 0 {
			_ = m.set(z, from)
			return zerr.ErrNoResources
		}
		z.fbgs = 1
	}
	return nil
}

func (m *refModel) dropIPU(z *refZone, off uint64) {
	if z.ipu[off] {
		delete(z.ipu, off)
		m.used--
	}
}

// tlFinalize: plug the valid blocks up to the last one, zero the skipped
// invalid ones, the LogFBG becomes the zone's FBG.
func (m *refModel) tlFinalize(z *refZone) {
	last := z.wp
	for o := z.wp; o < m.cap; o++ {
		if z.valid[o] {
			last = o + 1
		}
	}
	for o := z.wp; o < last; o++ {
		if z.valid[o] {
			z.data[o] = z.old[o]
		} else {
			delete(z.data, o)
		}
	}
	z.wp = last
	z.tl = false
	z.old, z.valid = nil, nil
	m.used -= len(z.ipu)
	z.ipu = map[uint64]bool{}
	z.fbgs = 1
}

// tlPlugForward: LBA-ordered plugging of the valid run at the WP.
func (m *refModel) tlPlugForward(z *refZone) {
	for z.wp < m.cap && z.valid[z.wp] {
		z.data[z.wp] = z.old[z.wp]
		z.wp++
	}
}

func (m *refModel) tlOpen(zi uint64, bm []byte, mode TLMode) error {
	z := m.zones[zi]
	if uint64(len(bm)) != (m.cap+7)/8 {
		return zerr.ErrInvalidBitmap
	}
	if z.tl {
		return zerr.ErrZoneState
	}
	switch z.state {
	case StateFull, StateClosed, StateImplicitOpen, StateExplicitOpen:
	default:
		return zerr.ErrZoneState
	}
	valid := make([]bool, m.cap)
	for o := uint64(0); o < uint64(len(bm))*8; o++ {
		if bm[o/8]&(1<<(o%8)) != 0 {
			if o >= z.wp {
				return zerr.ErrInvalidBitmap
			}
			valid[o] = true
		}
	}
	if free := m.freeFBGs(int(zi)); free == 0 || z.fbgs > 0 && free <= m.fbgLess(int(zi)) {
		return zerr.ErrNoResources // the LogFBG would take the FBG a zone without one opens on
	}
	if err := m.set(z, StateExplicitOpen); err != nil {
		return err
	}
	z.fbgs++
	z.tl, z.mode, z.valid = true, mode, valid
	z.old = map[uint64][]byte{}
	for o, b := range z.data {
		if o < z.wp {
			z.old[o] = b
		}
	}
	z.data = map[uint64][]byte{}
	z.wp = 0
	if mode == LBAOrdered {
		m.tlPlugForward(z)
	}
	return nil
}

func (m *refModel) tlWrite(z *refZone, off uint64, data []byte) error {
	n := uint64(len(data) / m.bs)
	if z.state == StateFull {
		return zerr.ErrZoneFull
	}
	if off < z.wp {
		return zerr.ErrTLViolation
	}
	if off+n > m.cap {
		return zerr.ErrZoneFull
	}
	for o := off; o < off+n; o++ {
		if z.valid[o] {
			return zerr.ErrTLViolation
		}
	}
	if z.state == StateClosed {
		if err := m.openTo(z, StateImplicitOpen); err != nil {
			return err
		}
	}
	for o := z.wp; o < off; o++ {
		if z.valid[o] {
			z.data[o] = z.old[o]
		}
	}
	for i := uint64(0); i < n; i++ {
		z.data[off+i] = data[int(i)*m.bs : int(i+1)*m.bs]
		m.dropIPU(z, off+i)
	}
	z.wp = off + n
	if z.mode == LBAOrdered {
		m.tlPlugForward(z)
	}
	if z.wp == m.cap {
		m.tlFinalize(z)
		_ = m.set(z, StateFull)
	}
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
	}
	if z.tl {
		return m.tlWrite(z, off, data)
	}
	if z.state == StateFull {
		return zerr.ErrZoneFull
	}
	if off != z.wp {
		return zerr.ErrWritePointer
	}
	if off+n > m.cap {
		return zerr.ErrZoneFull
	}
	if z.state == StateEmpty || z.state == StateClosed {
		if err := m.openTo(z, StateImplicitOpen); err != nil {
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

// overwrite: a write flagged Overwrite (in-place update below the WP).
func (m *refModel) overwrite(lba uint64, data []byte) error {
	n := uint64(len(data) / m.bs)
	zi := lba / m.zsize
	if zi >= uint64(len(m.zones)) || lba+n > (zi+1)*m.zsize {
		return zerr.ErrOutOfRange
	}
	z := m.zones[zi]
	off := lba - zi*m.zsize
	if z.state == StateReadOnly || z.state == StateOffline {
		return zerr.ErrZoneState
	}
	if z.tl || off >= z.wp {
		return m.write(lba, data)
	}
	if off+n > z.wp {
		return zerr.ErrInvalidArgument
	}
	fresh := 0
	for i := uint64(0); i < n; i++ {
		if !z.ipu[off+i] {
			fresh++
		}
	}
	if m.used+fresh > m.budget {
		return zerr.ErrIPUBudget
	}
	m.used += fresh
	for i := uint64(0); i < n; i++ {
		z.ipu[off+i] = true
		z.data[off+i] = data[int(i)*m.bs : int(i+1)*m.bs]
	}
	return nil
}

func (m *refModel) openForWrite(z *refZone) error {
	switch z.state {
	case StateEmpty, StateClosed:
		return m.openTo(z, StateImplicitOpen)
	case StateImplicitOpen, StateExplicitOpen:
		return nil
	}
	return zerr.ErrZoneState
}

// compact: one zone_compaction copy of n blocks src -> dst.
func (m *refModel) compact(src, dst, n uint64) error {
	for _, l := range []uint64{src, dst} {
		if l/m.zsize >= uint64(len(m.zones)) || l+n > (l/m.zsize+1)*m.zsize {
			return zerr.ErrOutOfRange
		}
	}
	sz := m.zones[src/m.zsize]
	if !sz.tl && src%m.zsize+n > sz.wp {
		return zerr.ErrInvalidArgument
	}
	dz := m.zones[dst/m.zsize]
	doff := dst % m.zsize
	switch {
	case dz.tl:
		return zerr.ErrZoneState
	case dz.state == StateFull:
		return zerr.ErrZoneFull
	case doff < dz.wp:
		return zerr.ErrWritePointer
	case doff+n > m.cap:
		return zerr.ErrZoneFull
	}
	if err := m.openForWrite(dz); err != nil {
		return err
	}
	data := m.read(src, n)
	for i := uint64(0); i < n; i++ {
		dz.data[doff+i] = data[int(i)*m.bs : int(i+1)*m.bs]
	}
	dz.wp = doff + n
	if dz.wp == m.cap {
		_ = m.set(dz, StateFull)
	}
	return nil
}

func (m *refModel) simpleCopy(src, n, dst uint64) error {
	zi := dst / m.zsize
	if zi >= uint64(len(m.zones)) || dst+n > (zi+1)*m.zsize {
		return zerr.ErrOutOfRange
	}
	if m.zones[zi].tl {
		return zerr.ErrZoneState
	}
	return m.write(dst, m.read(src, n))
}

func (m *refModel) appendTo(zi uint64, data []byte) (uint64, error) {
	z := m.zones[zi]
	if z.tl {
		return 0, zerr.ErrZoneState
	}
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
			return m.openTo(z, StateExplicitOpen)
		}
		return zerr.ErrZoneState
	case ActionClose:
		switch z.state {
		case StateClosed:
			return nil
		case StateImplicitOpen, StateExplicitOpen:
			if z.tl {
				m.tlFinalize(z)
			}
			if z.wp == 0 && len(z.ipu) == 0 {
				z.fbgs = 0
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
			if z.tl {
				m.tlFinalize(z)
			}
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
		m.used -= len(z.ipu)
		z.ipu = map[uint64]bool{}
		z.fbgs, z.tl, z.old, z.valid = 0, false, nil, nil
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
		if z.tl && z.state == StateClosed {
			m.tlFinalize(z)
		}
		if z.state == StateClosed && z.wp == 0 && len(z.ipu) == 0 {
			z.state = StateEmpty
			z.fbgs = 0
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
		if z.tl && off >= z.wp {
			if b, ok := z.old[off]; ok {
				copy(out[int(i)*m.bs:], b)
			}
		} else if b, ok := z.data[off]; ok && off < z.wp {
			copy(out[int(i)*m.bs:], b)
		}
	}
	return out
}

var sentinels = []error{zerr.ErrWritePointer, zerr.ErrZoneFull, zerr.ErrZoneState, zerr.ErrTooManyOpen,
	zerr.ErrTooManyActive, zerr.ErrOutOfRange, zerr.ErrInvalidArgument, zerr.ErrIPUBudget, zerr.ErrInvalidBitmap,
	zerr.ErrTLViolation, zerr.ErrNoResources}

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
		case op < 72: // TL_open with a random bitmap of written blocks
			z := m.zones[zi]
			bm := make([]byte, (g.ZoneCap+7)/8)
			for o := uint64(0); o < z.wp && o < g.ZoneCap; o++ {
				if r.Intn(3) == 0 || (o/4)%3 == 0 {
					bm[o/8] |= 1 << (o % 8)
				}
			}
			if r.Intn(20) == 0 {
				bm = bm[:len(bm)-1]
			}
			mode := TLMode(r.Intn(2))
			_, err := d.TLOpen(bg, zi, bm, mode)
			require.Equal(t, kindOf(m.tlOpen(zi, bm, mode)), kindOf(err), ctx)
		case op < 76: // sparse write in a TL zone: skip a few blocks, write an invalid run
			z := m.zones[zi]
			if !z.tl {
				continue
			}
			o := z.wp + uint64(r.Intn(3))
			for o < g.ZoneCap && z.valid[o] && r.Intn(8) != 0 {
				o++
			}
			if o >= g.ZoneCap {
				continue
			}
			n := 1 + r.Intn(3)
			if o+uint64(n) > g.ZoneSize {
				n = int(g.ZoneSize - o)
			}
			data := pattern(bs, zs+o, n, byte(step))
			_, err := d.Write(bg, zs+o, data, Flags{})
			require.Equal(t, kindOf(m.write(zs+o, data)), kindOf(err), ctx)
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
		case op < 85: // in-place update, sometimes reaching past the WP
			wp := m.zones[zi].wp
			lba := zs + uint64(r.Intn(int(wp)+1))
			if lba == zs+g.ZoneSize {
				lba--
			}
			n := 1 + r.Intn(4)
			if lba+uint64(n) > zs+g.ZoneSize {
				n = int(zs + g.ZoneSize - lba)
			}
			data := pattern(bs, lba, n, byte(step))
			_, err := d.Write(bg, lba, data, Flags{Overwrite: true})
			require.Equal(t, kindOf(m.overwrite(lba, data)), kindOf(err), ctx)
		case op < 88: // simple copy to another zone's WP
			sz := uint64(r.Intn(int(nz)))
			src := sz*g.ZoneSize + uint64(r.Intn(int(m.zones[sz].wp)+1))
			n := uint64(1 + r.Intn(6))
			if src+n > g.TotalLBAs {
				src = g.TotalLBAs - n
			}
			dst := zs + m.zones[zi].wp
			_, err := d.SimpleCopy(bg, []Range{{LBA: src, Count: n}}, dst)
			merr := m.simpleCopy(src, n, dst)
			require.Equal(t, kindOf(merr), kindOf(err), ctx)
		case op < 91: // zone_compaction with a small gap
			sz := uint64(r.Intn(int(nz)))
			swp := m.zones[sz].wp
			if swp == 0 {
				continue
			}
			n := uint64(1 + r.Intn(int(min(swp, 12))))
			src := sz*g.ZoneSize + uint64(r.Intn(int(swp-n)+1))
			dst := zs + m.zones[zi].wp + uint64(r.Intn(3))
			merr := m.compact(src, dst, n)
			id, err := d.ZoneCompaction(bg, []Copy{{Src: src, Dst: dst, Count: n}})
			if err == nil {
				_, err = d.WaitCompaction(bg, id)
			}
			require.Equal(t, kindOf(merr), kindOf(err), ctx)
		case op < 97:
			a := []Action{ActionOpen, ActionClose, ActionFinish, ActionReset}[r.Intn(4)]
			_, err := d.ZoneMgmt(bg, zi, a, false)
			require.Equal(t, kindOf(m.mgmt(zi, a)), kindOf(err), "%s %s", ctx, a)
		case op < 98: // clean reopen
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
			seeds := int64(3)
			if v, err := strconv.Atoi(os.Getenv("ZNS_MODEL_SEEDS")); err == nil {
				seeds = int64(v) // longer local runs: ZNS_MODEL_SEEDS=50
			}
			for seed := int64(1); seed <= seeds; seed++ {
				d, p := newDev(t, cfg, tc.clk())
				d = runModel(t, d, p, cfg, rand.New(rand.NewSource(seed)), 1500)
				require.NoError(t, d.Close())
			}
		})
	}
}
