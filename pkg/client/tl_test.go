package client_test

import (
	"bytes"
	"context"
	"errors"
	mrand "math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/internal/testcluster"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

const bs = 4096

// tlModel is what a TL-opened v-zone must read back: the valid blocks keep
// their data, written blocks have the new data, the rest is undefined.
type tlModel struct {
	data  []byte
	known []bool
}

func (m *tlModel) check(t *testing.T, ctx context.Context, vz *client.VZone, when string) {
	t.Helper()
	got, err := vz.Read(ctx, 0, uint64(len(m.known)))
	require.NoError(t, err, when)
	bad := 0
	for b, k := range m.known {
		if k && !bytes.Equal(got[b*bs:(b+1)*bs], m.data[b*bs:(b+1)*bs]) {
			if bad == 0 {
				t.Errorf("%s: block %d differs from the model", when, b)
			}
			bad++
		}
	}
	require.Zero(t, bad, "%s: %d blocks differ", when, bad)
}

// fullVZone opens a v-zone, fills it with random data and finishes it.
func fullVZone(t *testing.T, ctx context.Context, cl *client.Client, rng *mrand.Rand) (*client.VZone, []byte) {
	t.Helper()
	vz, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	l, err := vz.Layout(ctx)
	require.NoError(t, err)
	data := make([]byte, l.GetCapacity()*bs)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for off := uint64(0); off < l.GetCapacity(); off += 64 {
		require.NoError(t, vz.Write(ctx, off, data[off*bs:(off+64)*bs]))
	}
	require.NoError(t, vz.Finish(ctx))
	return vz, data
}

// randomBitmap marks about half the blocks valid, in runs.
func randomBitmap(rng *mrand.Rand, blocks uint64) ([]byte, []bool) {
	bm := make([]byte, (blocks+7)/8)
	valid := make([]bool, blocks)
	for b := uint64(0); b < blocks; {
		run := 1 + rng.Uint64N(12)
		v := rng.IntN(2) == 0
		for ; run > 0 && b < blocks; run, b = run-1, b+1 {
			if v {
				valid[b] = true
				bm[b/8] |= 1 << (b % 8)
			}
		}
	}
	return bm, valid
}

// holes lists the runs of invalid blocks.
func holes(valid []bool) [][2]uint64 {
	var out [][2]uint64
	for b := 0; b < len(valid); {
		if valid[b] {
			b++
			continue
		}
		e := b
		for e < len(valid) && !valid[e] {
			e++
		}
		out = append(out, [2]uint64{uint64(b), uint64(e)})
		b = e
	}
	return out
}

// TL_open of a written, finished v-zone over real nodes: the arbiter counts
// it, writes go into the holes (sparse sequential overwrite, skipping some),
// reads match the model at every step, a write over a valid block is a typed
// error that changes nothing, Finish ends it and everything reads back.
func TestTLOpenOverTheCluster(t *testing.T) {
	t.Parallel()
	for _, mode := range []v1.PlugMode{v1.PlugMode_PLUG_MODE_PPA_ORDERED, v1.PlugMode_PLUG_MODE_LBA_ORDERED} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			c := startCluster(t, 3, 1)
			createNS(t, c, "tl", 4)
			cl := newClient(t, c, "tl")
			ctx := context.Background()
			rng := mrand.New(mrand.NewPCG(7, uint64(mode)))
			vz, data := fullVZone(t, ctx, cl, rng)
			blocks := uint64(len(data) / bs)
			bm, valid := randomBitmap(rng, blocks)
			m := &tlModel{data: data, known: valid}

			require.NoError(t, vz.TLOpen(ctx, bm, mode))
			info, err := vz.ReportZone(ctx)
			require.NoError(t, err)
			assert.True(t, info.ThreadedLog)
			assert.Equal(t, "open", info.State)
			ns, err := cl.GetNamespace(ctx)
			require.NoError(t, err)
			assert.Equal(t, uint32(1), ns.GetActiveVzones(), "the arbiter counts the TL-open v-zone as active")
			m.check(t, ctx, vz, "right after TL_open")

			// A write over a valid block: typed error, nothing changes.
			var firstValid uint64
			for firstValid = 0; !valid[firstValid]; firstValid++ {
			}
			err = vz.Write(ctx, firstValid, bytes.Repeat([]byte{0xEE}, bs))
			require.Error(t, err)
			assert.True(t, errors.Is(err, zerr.ErrTLViolation), "%v", err)
			m.check(t, ctx, vz, "after the refused write")

			written := 0
			for i, h := range holes(valid) {
				if rng.IntN(4) == 0 {
					continue // left unwritten: the drives skip it
				}
				a := h[0] + rng.Uint64N(h[1]-h[0])
				n := h[1] - a
				buf := make([]byte, n*bs)
				for j := range buf {
					buf[j] = byte(rng.Uint32())
				}
				require.NoError(t, vz.Write(ctx, a, buf), "hole %d at %d+%d", i, a, n)
				copy(m.data[a*bs:], buf)
				for b := a; b < a+n; b++ {
					m.known[b] = true
				}
				written += int(n)
				if i%7 == 0 {
					m.check(t, ctx, vz, "while writing the holes")
					wp, err := vz.WritePointer(ctx)
					require.NoError(t, err)
					assert.GreaterOrEqual(t, wp, a+n)
				}
				if i == 3 {
					err := vz.Write(ctx, 0, make([]byte, bs))
					assert.True(t, errors.Is(err, zerr.ErrWritePointer), "a write below the write pointer: %v", err)
				}
			}
			require.Positive(t, written)
			m.check(t, ctx, vz, "after the holes")

			require.NoError(t, vz.Finish(ctx))
			info, err = vz.ReportZone(ctx)
			require.NoError(t, err)
			assert.False(t, info.ThreadedLog)
			assert.Equal(t, "full", info.State)
			ns, err = cl.GetNamespace(ctx)
			require.NoError(t, err)
			assert.Zero(t, ns.GetActiveVzones(), "finish gave the active v-zone back")
			m.check(t, ctx, vz, "after finish")
			// A second client (no cache) reads the same.
			m.check(t, ctx, newClient(t, c, "tl").VZone(vz.ID()), "from another client")
		})
	}
}

// TL_open is an active v-zone for the arbiter: over max_active_vzones it is
// refused with TOO_MANY_OPEN and nothing changes.
func TestTLOpenCountedAgainstMaxActive(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, 1)
	createNS(t, c, "tlmax", 2) // max_active_vzones 2
	cl := newClient(t, c, "tlmax")
	ctx := context.Background()
	rng := mrand.New(mrand.NewPCG(1, 2))
	victim, data := fullVZone(t, ctx, cl, rng)
	bm, _ := randomBitmap(rng, uint64(len(data)/bs))
	a, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	b, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	err = victim.TLOpen(ctx, bm, v1.PlugMode_PLUG_MODE_PPA_ORDERED)
	require.Error(t, err)
	assert.True(t, errors.Is(err, zerr.ErrTooManyOpen), "%v", err)
	info, err := victim.ReportZone(ctx)
	require.NoError(t, err)
	assert.Equal(t, "full", info.State)
	assert.False(t, info.ThreadedLog)
	// The read path is unaffected and a finish frees a slot for it.
	got, err := victim.Read(ctx, 0, 8)
	require.NoError(t, err)
	assert.Equal(t, data[:8*bs], got)
	require.NoError(t, a.Finish(ctx))
	require.NoError(t, victim.TLOpen(ctx, bm, v1.PlugMode_PLUG_MODE_PPA_ORDERED))
	_, err = cl.OpenVZone(ctx)
	assert.True(t, errors.Is(err, zerr.ErrTooManyActive), "the TL v-zone holds its slot: %v", err)
	require.NoError(t, victim.Finish(ctx))
	require.NoError(t, b.Finish(ctx))
	// A stale generation is refused (the bitmap was computed from another
	// layout), typed, and changes nothing; so is an empty v-zone.
	l, err := victim.Layout(ctx)
	require.NoError(t, err)
	arb, err := cl.Arbiter(ctx)
	require.NoError(t, err)
	_, err = arb.TLOpenVZone(ctx, &v1.TLOpenVZoneRequest{Namespace: "tlmax", Id: victim.ID(), Generation: l.GetGeneration() - 1})
	assert.True(t, errors.Is(rpcerr.FromError(err), zerr.ErrStaleLayout), "%v", err)
	_, err = arb.TLOpenVZone(ctx, &v1.TLOpenVZoneRequest{Namespace: "tlmax", Id: 7})
	assert.True(t, errors.Is(rpcerr.FromError(err), zerr.ErrZoneState), "%v", err)
	info, err = victim.ReportZone(ctx)
	require.NoError(t, err)
	assert.Equal(t, "full", info.State)
	assert.False(t, info.ThreadedLog)
	ns, err := cl.GetNamespace(ctx)
	require.NoError(t, err)
	assert.Zero(t, ns.GetActiveVzones())
}

// A node restart in the middle of threaded logging: the drive finishes TL on
// reopen; the client TL_opens the zone again on the next write (with the
// bitmap plus what it wrote) and the writes go on; reads are right before,
// across and after the restart, and after Finish.
func TestTLOpenNodeRestart(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, 1)
	createNS(t, c, "tlr", 4)
	cl := newClient(t, c, "tlr")
	ctx := context.Background()
	rng := mrand.New(mrand.NewPCG(3, 4))
	vz, data := fullVZone(t, ctx, cl, rng)
	blocks := uint64(len(data) / bs)
	bm, valid := randomBitmap(rng, blocks)
	m := &tlModel{data: data, known: valid}
	require.NoError(t, vz.TLOpen(ctx, bm, v1.PlugMode_PLUG_MODE_PPA_ORDERED))
	hs := holes(valid)
	write := func(h [2]uint64) {
		n := h[1] - h[0]
		buf := make([]byte, n*bs)
		for j := range buf {
			buf[j] = byte(rng.Uint32())
		}
		require.NoError(t, vz.Write(ctx, h[0], buf), "hole at %d+%d", h[0], n)
		copy(m.data[h[0]*bs:], buf)
		for b := h[0]; b < h[1]; b++ {
			m.known[b] = true
		}
	}
	half := len(hs) / 2
	for _, h := range hs[:half] {
		write(h)
	}
	m.check(t, ctx, vz, "before the restart")
	before := tlZones(t, ctx, cl, vz)
	require.NoError(t, c.StopNode(0))
	require.NoError(t, c.StartNode(ctx, 0))
	require.NoError(t, c.WaitReady(ctx))
	m.check(t, ctx, vz, "after the restart (the drive finished threaded logging)")
	after := tlZones(t, ctx, cl, vz)
	require.Less(t, after, before, "the restarted node's drive ended threaded logging on its zones")
	for _, h := range hs[half:] {
		write(h)
	}
	m.check(t, ctx, vz, "after writing the rest")
	require.NoError(t, vz.Finish(ctx))
	m.check(t, ctx, vz, "after finish")
}

// tlZones counts the physical zones of vz that their drives report TL_opened.
func tlZones(t *testing.T, ctx context.Context, cl *client.Client, vz *client.VZone) int {
	t.Helper()
	l, err := vz.Layout(ctx)
	require.NoError(t, err)
	n := 0
	for _, g := range l.GetGroups() {
		for _, z := range g.GetZones() {
			dev, dctx, err := cl.Device(z.GetNode(), z.GetAddr())
			require.NoError(t, err)
			rep, err := dev.ReportZones(dctx, &v1.ReportZonesRequest{Device: z.GetDevice(), StartZone: z.GetZone(), MaxZones: 1})
			require.NoError(t, err)
			if rep.GetZones()[0].GetThreadedLogging() {
				n++
			}
		}
	}
	return n
}

// TL_open of an open, partly written v-zone: physical zones never written
// (empty, they cannot be TL_opened) are written with zeros up to the write's
// offset; writes past the allocated stripe groups are ZoneFull (no group is
// added in threaded logging); everything reads back.
func TestTLOpenPartlyWritten(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, 1)
	createNS(t, c, "tlp", 4)
	cl := newClient(t, c, "tlp")
	ctx := context.Background()
	rng := mrand.New(mrand.NewPCG(9, 10))
	vz, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	l, err := vz.Layout(ctx)
	require.NoError(t, err)
	blocks := l.GetCapacity()
	m := &tlModel{data: make([]byte, blocks*bs), known: make([]bool, blocks)}
	for i := range m.data[:8*bs] {
		m.data[i] = byte(rng.Uint32())
	}
	require.NoError(t, vz.Write(ctx, 0, m.data[:8*bs]))
	bm := make([]byte, (blocks+7)/8)
	for b := 0; b < 4; b++ {
		bm[b/8] |= 1 << (b % 8)
		m.known[b] = true
	}
	bad := append([]byte(nil), bm...)
	bad[1] = 1 // block 8: at the write pointer
	err = vz.TLOpen(ctx, bad, v1.PlugMode_PLUG_MODE_LBA_ORDERED)
	assert.True(t, errors.Is(err, zerr.ErrInvalidBitmap), "a valid bit at or past the write pointer: %v", err)
	require.NoError(t, vz.TLOpen(ctx, bm, v1.PlugMode_PLUG_MODE_LBA_ORDERED))
	info, err := vz.ReportZone(ctx)
	require.NoError(t, err)
	end := info.AllocatedUpTo
	require.Greater(t, end, uint64(64))
	write := func(off, n uint64) {
		buf := make([]byte, n*bs)
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		require.NoError(t, vz.Write(ctx, off, buf), "at %d+%d", off, n)
		copy(m.data[off*bs:], buf)
		for b := off; b < off+n; b++ {
			m.known[b] = true
		}
	}
	write(4, 4)
	m.check(t, ctx, vz, "after the first hole")
	write(end/2+3, 5) // on zones never written before: padded
	m.check(t, ctx, vz, "after a write into empty zones")
	write(end-2, 2)
	m.check(t, ctx, vz, "at the end of the allocated groups")
	if end < blocks {
		err := vz.Write(ctx, end, make([]byte, bs))
		assert.True(t, errors.Is(err, zerr.ErrZoneFull), "past the allocated groups: %v", err)
	}
	require.NoError(t, vz.Finish(ctx))
	m.check(t, ctx, vz, "after finish")
}

// A drive that cannot TL_open (no spare flash block group left in the
// chip group, or no open zone left on the drive) refuses after the arbiter
// already moved the v-zone to threaded logging. TLOpen rolls back: the error
// is the drive's refusal, the v-zone is full again with every block where
// it was, the arbiter no longer counts it, and a later TL_open (once the
// others ended threaded logging) works. Before the rollback the v-zone
// stayed in threaded logging and the file system, told "refused", met it
// there at its next TL_open and turned read-only (fio at 75 %).
func TestTLOpenRefusedByADriveRollsBack(t *testing.T) {
	t.Parallel()
	// One tenant fills the whole drive: no default share.
	c := testcluster.Start(t, localcluster.Config{Nodes: 1, Arbiters: 1, MaxShare: 1})
	testcluster.CreateNamespace(t, c, &v1.CreateNamespaceRequest{Name: "tlnr", MaxActiveVzones: 8, ZonesPerVzone: 1})
	cl := newClient(t, c, "tlnr")
	ctx := context.Background()
	rng := mrand.New(mrand.NewPCG(5, 6))
	type full struct {
		vz   *client.VZone
		data []byte
	}
	var vzs []full
	for {
		vz, err := cl.OpenVZone(ctx)
		if err != nil {
			t.Logf("the drive is full: %v", err)
			break
		}
		l, err := vz.Layout(ctx)
		require.NoError(t, err)
		d := make([]byte, l.GetCapacity()*bs)
		for i := range d {
			d[i] = byte(rng.Uint32())
		}
		require.NoError(t, vz.Write(ctx, 0, d))
		require.NoError(t, vz.Finish(ctx))
		vzs = append(vzs, full{vz, d})
	}
	require.Greater(t, len(vzs), 20, "the drive holds more v-zones than it has spare flash block groups")
	// Zones of one chip group (a drive's zone z is in chip group z mod 8
	// here, with two spare flash block groups each): the third TL_open
	// there finds no spare.
	byFCG := map[uint32][]full{}
	var fcg uint32
	for _, f := range vzs {
		l, err := f.vz.Layout(ctx)
		require.NoError(t, err)
		g := l.GetGroups()[0].GetZones()[0].GetZone() % 8
		byFCG[g] = append(byFCG[g], f)
		if len(byFCG[g]) > len(byFCG[fcg]) {
			fcg = g
		}
	}
	require.GreaterOrEqual(t, len(byFCG[fcg]), 3)
	var opened []full
	var victim full
	var bm []byte
	var m *tlModel
	for _, f := range byFCG[fcg] {
		b, valid := randomBitmap(rng, uint64(len(f.data)/bs))
		err := f.vz.TLOpen(ctx, b, v1.PlugMode_PLUG_MODE_PPA_ORDERED)
		if err == nil {
			opened = append(opened, f)
			continue
		}
		t.Logf("TL_open %d after %d: %v", f.vz.ID(), len(opened), err)
		assert.True(t, errors.Is(err, zerr.ErrNoResources), "the drive's refusal: %v", err)
		victim, bm, m = f, b, &tlModel{data: f.data, known: valid}
		break
	}
	require.NotNil(t, victim.vz, "a drive refused a TL_open")
	info, err := victim.vz.ReportZone(ctx)
	require.NoError(t, err)
	assert.False(t, info.ThreadedLog, "rolled back")
	assert.Equal(t, "full", info.State)
	ns, err := cl.GetNamespace(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint32(len(opened)), ns.GetActiveVzones(), "the arbiter no longer counts the refused v-zone")
	m.check(t, ctx, victim.vz, "after the refused TL_open")
	m.check(t, ctx, newClient(t, c, "tlnr").VZone(victim.vz.ID()), "from another client")

	for _, f := range opened {
		require.NoError(t, f.vz.Finish(ctx))
	}
	require.NoError(t, victim.vz.TLOpen(ctx, bm, v1.PlugMode_PLUG_MODE_PPA_ORDERED), "not left in threaded logging")
	m.check(t, ctx, victim.vz, "TL-opened")
	require.NoError(t, victim.vz.Finish(ctx))
	m.check(t, ctx, victim.vz, "finished")
}
