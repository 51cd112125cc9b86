package node

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zns"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// FuzzRequests drives the service's handlers with request fields decoded from
// the fuzzer's bytes. Invariants: no panic; every error is typed (never
// Internal or Unknown); a failed write changes no write pointer; a successful
// one moves it by exactly its blocks.
func FuzzRequests(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 1})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 4, 1, 9, 9, 9, 9, 9, 9, 9, 9})
	f.Add([]byte{3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 1, 7, 5, 0, 0, 0, 0, 0, 0, 0, 1, 2, 200})
	f.Fuzz(func(t *testing.T, in []byte) {
		cfg := flash.Small()
		d, err := zns.Create(filepath.Join(t.TempDir(), "dev"), cfg, clock.Off())
		require.NoError(t, err)
		defer d.Close()
		s, err := New(Config{ID: "fz", AdminToken: "tok", Standalone: true, Admission: AdmissionConfig{Enabled: true}}, []*zns.Device{d}, nil, quiet)
		require.NoError(t, err)
		defer s.Close()
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(wire.NamespaceKey, "ns"))
		id := d.Identify()

		wps := func() []uint64 {
			zs, err := d.ReportZones(zns.StateAny, 0, 0)
			require.NoError(t, err)
			out := make([]uint64, len(zs))
			for i, z := range zs {
				out[i] = z.WP
			}
			return out
		}
		check := func(err error) {
			if err == nil {
				return
			}
			code := rpcerr.Code(err)
			require.NotEqual(t, codes.Internal, code, "untyped error: %v", err)
			require.NotEqual(t, codes.Unknown, code, "untyped error: %v", err)
		}
		r := reader{b: in}
		for steps := 0; steps < 32 && r.more(); steps++ {
			op := r.u8() % 7
			dev := uint32(r.u8() % 3) // 0 is real, 1 and 2 do not exist
			lba := r.u64()
			if r.u8()%2 == 0 { // keep most LBAs near real zones
				lba %= id.TotalLBAs + 64
			}
			n := int(r.u16() % 80)
			flags := r.u8()
			before := wps()
			var err error
			switch op {
			case 0, 1: // write (n bytes, possibly unaligned)
				size := n * 512
				_, err = s.Write(ctx, &v1.WriteRequest{Device: dev, Lba: lba, Data: make([]byte, size), Fua: flags&1 != 0, Overwrite: flags&2 != 0})
				after := wps()
				if err != nil && flags&2 == 0 {
					require.Equal(t, before, after, "a failed write changed a write pointer: %v", err)
				}
				if err == nil && flags&2 == 0 {
					z := lba / id.ZoneSize
					require.Equal(t, lba+uint64(size/4096), after[z])
				}
			case 2:
				_, err = s.Read(ctx, &v1.ReadRequest{Device: dev, Lba: lba, Blocks: uint32(n) * uint32(flags)})
				require.Equal(t, before, wps())
			case 3:
				_, err = s.Append(ctx, &v1.AppendRequest{Device: dev, Zone: uint32(lba), Data: make([]byte, n*4096)})
			case 4:
				_, err = s.ZoneManagement(ctx, &v1.ZoneManagementRequest{Device: dev, Zone: uint32(lba), Action: v1.ZoneAction(flags % 8), SelectAll: flags&64 != 0})
			case 5:
				bm := make([]byte, n)
				for i := range bm {
					bm[i] = r.u8()
				}
				_, err = s.TLOpen(ctx, &v1.TLOpenRequest{Device: dev, Zone: uint32(lba), ValidBitmap: bm, Mode: v1.PlugMode(flags % 4)})
			case 6:
				_, err = s.ZoneCompaction(ctx, &v1.ZoneCompactionRequest{Device: dev, Copies: []*v1.CompactionCopy{
					{SrcLba: lba, Blocks: uint32(n), DstLba: r.u64() % (id.TotalLBAs + 8)}}})
			}
			check(err)
		}
	})
}

type reader struct {
	b []byte
	i int
}

func (r *reader) more() bool { return r.i < len(r.b) }
func (r *reader) u8() byte {
	if r.i >= len(r.b) {
		return 0
	}
	r.i++
	return r.b[r.i-1]
}
func (r *reader) u16() uint16 { return uint16(r.u8()) | uint16(r.u8())<<8 }
func (r *reader) u64() uint64 {
	var b [8]byte
	for i := range b {
		b[i] = r.u8()
	}
	return binary.LittleEndian.Uint64(b[:])
}
