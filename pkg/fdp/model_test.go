package fdp

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/vfs"
)

var (
	bg    = context.Background()
	quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
)

// block makes one recognisable block: lba, version, filler.
func block(bs int, lba, ver uint64) []byte {
	b := make([]byte, bs)
	binary.LittleEndian.PutUint64(b, lba)
	binary.LittleEndian.PutUint64(b[8:], ver)
	for i := 16; i < bs; i++ {
		b[i] = byte(lba*31 + ver*7 + uint64(i))
	}
	return b
}

func testConfig() Config {
	c := DefaultConfig()
	c.Handles = []HandleType{InitiallyIsolated, InitiallyIsolated, PersistentlyIsolated, PersistentlyIsolated}
	c.RUChips = 2
	return c
}

func newMemDevice(t *testing.T, cfg Config, clk clock.Clock) (*Device, *vfs.MemFS) {
	t.Helper()
	mem := vfs.NewCrashableMem()
	d, err := Create("/fdp0", cfg, clk, WithFS(mem), WithLogger(quiet))
	require.NoError(t, err)
	return d, mem
}

// checkInvariants cross-checks the FTL's maps and counters.
func checkInvariants(t *testing.T, d *Device) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	validPerRU := map[*ru]int{}
	for l, s := range d.l2p {
		if s < 0 {
			continue
		}
		require.Equal(t, int32(l), d.p2l[s], "p2l of LBA %d's slot", l)
		r := d.blkRU[d.blockOf(int(s))]
		require.NotNil(t, r, "LBA %d maps to a free block", l)
		validPerRU[r]++
	}
	mapped := 0
	for s, l := range d.p2l {
		if l >= 0 {
			mapped++
			require.Equal(t, int32(s), d.l2p[l])
		}
	}
	require.Equal(t, uint64(mapped), d.mapped, "mapped LBA counter")
	for _, r := range d.rus {
		require.Equal(t, validPerRU[r], r.valid, "valid count of RU %d", r.id)
		require.LessOrEqual(t, r.written, r.cap(d.g))
		for _, b := range r.blocks {
			require.Same(t, r, d.blkRU[b])
		}
	}
	for gi := range d.g.groups {
		n := 0
		for c := gi * d.g.chipsPerGroup; c < (gi+1)*d.g.chipsPerGroup; c++ {
			for _, b := range d.free[c] {
				require.Nil(t, d.blkRU[b], "free block %d owned", b)
				require.Equal(t, c, d.chipOf(b))
			}
			n += len(d.free[c])
		}
		require.Equal(t, n, d.nfree[gi])
	}
}

// TestModelAgainstReferenceMap runs random writes, trims and reads across
// placement identifiers on a drive small enough that garbage collection
// runs all the time, checks every read against a reference map, and
// reopens the drive (clean close) now and then.
func TestModelAgainstReferenceMap(t *testing.T) {
	for _, pol := range []VictimPolicy{Greedy, CostBenefit} {
		t.Run(pol.String(), func(t *testing.T) {
			cfg := testConfig()
			cfg.Victim = pol
			d, mem := newMemDevice(t, cfg, clock.Off())
			ref := map[uint64][]byte{}
			ver := map[uint64]uint64{}
			bs := d.BlockSize()
			n := d.Capacity()
			rng := rand.New(rand.NewPCG(1, uint64(pol)))
			readCheck := func(lba, k uint64) {
				got, _, err := d.Read(bg, lba, k)
				require.NoError(t, err)
				for i := range k {
					want := ref[lba+i]
					if want == nil {
						want = make([]byte, bs)
					}
					require.True(t, bytes.Equal(want, got[int(i)*bs:int(i+1)*bs]), "LBA %d", lba+i)
				}
			}
			ops := 6000
			var gcCopies uint64
			for op := range ops {
				switch x := rng.IntN(100); {
				case x < 70:
					k := uint64(1 + rng.IntN(8))
					lba := rng.Uint64N(n - k + 1)
					// hot/cold skew: a quarter of the LBAs get most writes
					if rng.IntN(4) != 0 {
						lba = rng.Uint64N(n/4 - k)
					}
					pid := PlacementID{Handle: uint16(rng.IntN(len(cfg.Handles)))}
					buf := make([]byte, 0, int(k)*bs)
					for i := range k {
						ver[lba+i]++
						b := block(bs, lba+i, ver[lba+i])
						ref[lba+i] = b
						buf = append(buf, b...)
					}
					_, err := d.Write(bg, lba, buf, pid, Flags{FUA: rng.IntN(50) == 0})
					require.NoError(t, err)
				case x < 78:
					k := uint64(1 + rng.IntN(16))
					lba := rng.Uint64N(n - k + 1)
					require.NoError(t, d.Trim(bg, lba, k))
					for i := range k {
						delete(ref, lba+i)
					}
				case x < 79:
					require.NoError(t, d.UpdateHandles(bg, []PlacementID{{Handle: uint16(rng.IntN(len(cfg.Handles)))}}))
				default:
					k := uint64(1 + rng.IntN(8))
					readCheck(rng.Uint64N(n-k+1), k)
				}
				if op%1500 == 1499 {
					checkInvariants(t, d)
					gcCopies += d.Stats().GCCopies
					require.NoError(t, d.Close())
					var err error
					d, err = Open("/fdp0", cfg, clock.Off(), WithFS(mem), WithLogger(quiet))
					require.NoError(t, err)
					checkInvariants(t, d)
				}
			}
			for lba := uint64(0); lba < n; lba += 64 {
				readCheck(lba, min(64, n-lba))
			}
			st := d.Stats()
			require.Greater(t, gcCopies+st.GCCopies, uint64(0), "garbage collection never ran")
			require.Greater(t, st.MediaBytesErased, uint64(0))
			require.GreaterOrEqual(t, st.MediaBytesWritten, st.HostBytesWritten)
			require.NotEmpty(t, d.Events(0))
			require.NoError(t, d.Close())
		})
	}
}
