package fdp

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// runsOf turns a reference map of the LBAs [lba, lba+n) into runs.
func runsOf(ref map[uint64]bool, lba, n uint64) []LBARange {
	var out []LBARange
	for l := lba; l < lba+n; l++ {
		if !ref[l] {
			continue
		}
		if k := len(out) - 1; k >= 0 && out[k].LBA+out[k].Count == l {
			out[k].Count++
		} else {
			out = append(out, LBARange{LBA: l, Count: 1})
		}
	}
	return out
}

// TestLBAStatus checks the mapped runs against a reference after random
// writes and trims (with garbage collection moving data), and after a
// clean reopen; bad ranges are typed errors.
func TestLBAStatus(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig()
	d, mem := newMemDevice(t, cfg, clock.Off())
	bs := d.BlockSize()
	lbas := d.Capacity()
	rng := rand.New(rand.NewPCG(7, 9))
	ref := map[uint64]bool{}
	for i := 0; i < 4000; i++ {
		lba := rng.Uint64N(lbas - 8)
		n := 1 + rng.Uint64N(8)
		if rng.IntN(5) == 0 {
			require.NoError(t, d.Trim(ctx, lba, n))
			for l := lba; l < lba+n; l++ {
				delete(ref, l)
			}
			continue
		}
		data := make([]byte, int(n)*bs)
		for k := range n {
			copy(data[int(k)*bs:], block(bs, lba+k, uint64(i)))
		}
		_, err := d.Write(ctx, lba, data, PlacementID{Handle: uint16(rng.IntN(len(cfg.Handles)))}, Flags{})
		require.NoError(t, err)
		for l := lba; l < lba+n; l++ {
			ref[l] = true
		}
	}
	require.NotZero(t, d.Stats().GCCopies, "garbage collection never ran")
	check := func(d *Device) {
		got, err := d.LBAStatus(0, lbas)
		require.NoError(t, err)
		require.Equal(t, runsOf(ref, 0, lbas), got)
		got, err = d.LBAStatus(100, 37)
		require.NoError(t, err)
		require.Equal(t, runsOf(ref, 100, 37), got)
	}
	check(d)
	require.NoError(t, d.Close())
	d, err := Open("/fdp0", cfg, clock.Off(), WithFS(mem), WithLogger(quiet))
	require.NoError(t, err)
	check(d)

	_, err = d.LBAStatus(lbas, 1)
	require.True(t, errors.Is(err, zerr.ErrOutOfRange), "%v", err)
	_, err = d.LBAStatus(0, 0)
	require.True(t, errors.Is(err, zerr.ErrInvalidArgument), "%v", err)
	require.NoError(t, d.Close())
	_, err = d.LBAStatus(0, 1)
	require.True(t, errors.Is(err, zerr.ErrClosed), "%v", err)
}
