package node

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/fdp"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
)

// FuzzFDPLBAStatus drives the LBAStatus admission with arbitrary ranges,
// bounds and grants, for the operator (the whole drive) and a tenant (a
// grant of the drive). Invariants: no panic; every error is typed (never
// Internal or Unknown); a range not inside the caller's addressing is
// refused; an answer covers between 1 and min(count, bound) LBAs, its
// runs lie in that window in the caller's addressing, in increasing
// order, and match the drive's mapping (blocks 2, 3 and 9 of the drive
// are written).
func FuzzFDPLBAStatus(f *testing.F) {
	dir := f.TempDir()
	o := DefaultOptions()
	o.DataDir = dir
	o.Device = testGeometry()
	o.Device.BlocksPerChip = 64
	o.FDP.Devices = 1
	o.FDP.Handles = []string{"ii"}
	devs, err := OpenFDPDevices(o, clock.Off())
	require.NoError(f, err)
	d := devs[0]
	f.Cleanup(func() { _ = d.Close() })
	for _, lba := range []uint64{2, 3, 9} {
		_, err := d.Write(f.Context(), lba, make([]byte, d.BlockSize()), fdp.PlacementID{}, fdp.Flags{})
		require.NoError(f, err)
	}
	mapped := map[uint64]bool{2: true, 3: true, 9: true}
	capacity := d.Capacity()

	seed := func(lba, count, limit, first, lbas uint64, tenant bool) []byte {
		b := binary.LittleEndian.AppendUint64(nil, lba)
		b = binary.LittleEndian.AppendUint64(b, count)
		b = binary.LittleEndian.AppendUint64(b, limit)
		b = binary.LittleEndian.AppendUint64(b, first)
		b = binary.LittleEndian.AppendUint64(b, lbas)
		if tenant {
			b = append(b, 1)
		}
		return append(b, 0)
	}
	f.Add(seed(0, 16, 5, 0, 0, false))
	f.Add(seed(0, 8, 3, 2, 8, true))
	f.Add(seed(7, 2, 0, 2, 8, true))
	f.Add(seed(1, ^uint64(0), 4, 0, 0, false))
	f.Add(seed(0, 0, 4, 0, 0, false))
	f.Add(seed(0, 1<<20, 1<<30, 0, 0, false))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 41 {
			return
		}
		u := func(i int) uint64 { return binary.LittleEndian.Uint64(in[8*i:]) }
		lba, count, limit := u(0), u(1), u(2)
		if in[40]&2 == 0 { // keep most ranges near the drive
			lba, count = lba%(capacity+8), count%(capacity+8)
		}
		tn := fdpTenant{dev: d}
		base, size := uint64(0), capacity
		if in[40]&1 != 0 {
			e := cluster.FDPExtent{FirstLBA: u(3) % capacity}
			e.LBAs = u(4) % (capacity - e.FirstLBA + 1)
			tn.ext, base, size = &e, e.FirstLBA, e.LBAs
		}
		r, err := tn.lbaStatus(lba, count, limit)
		if err != nil {
			code := rpcerr.Code(err)
			require.NotEqual(t, codes.Internal, code, "untyped error: %v", err)
			require.NotEqual(t, codes.Unknown, code, "untyped error: %v", err)
			return
		}
		require.Positive(t, count)
		require.LessOrEqual(t, lba, size)
		require.LessOrEqual(t, count, size-lba, "a range past the caller's addressing was admitted")
		n := r.GetCount()
		require.GreaterOrEqual(t, n, uint64(1))
		require.LessOrEqual(t, n, count)
		if limit > 0 {
			require.LessOrEqual(t, n, limit)
		}
		var want []uint64
		for l := lba; l < lba+n; l++ {
			if mapped[base+l] {
				want = append(want, l)
			}
		}
		var got []uint64
		next := lba
		for _, x := range r.GetRuns() {
			require.GreaterOrEqual(t, x.GetLba(), next, "runs in order, within the window")
			require.Positive(t, x.GetCount())
			require.LessOrEqual(t, x.GetLba()+x.GetCount(), lba+n)
			for l := x.GetLba(); l < x.GetLba()+x.GetCount(); l++ {
				got = append(got, l)
			}
			next = x.GetLba() + x.GetCount()
		}
		require.Equal(t, want, got)
	})
}
