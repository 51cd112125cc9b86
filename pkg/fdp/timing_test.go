package fdp

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
)

// TestTimingModel: on the virtual clock a write completes after the host
// link, a FUA write only after its program, a read after its page read, and
// writes that need garbage collection take longer than writes that do not.
func TestTimingModel(t *testing.T) {
	clk := clock.NewVirtual()
	cfg := testConfig()
	d, _ := newMemDevice(t, cfg, clk)
	defer d.Close()
	f := cfg.Flash.Resolved()
	bs := d.BlockSize()
	chunk := f.PageSize / f.BlockSize

	r, err := d.Write(bg, 0, make([]byte, chunk*bs), PlacementID{}, Flags{})
	require.NoError(t, err)
	require.Positive(t, r.Latency())
	require.Less(t, r.Latency(), f.ProgramLatency, "a cached write completes before its program")
	require.Equal(t, r.Completed, clk.Now(), "the call waited for its completion")

	r, err = d.Write(bg, uint64(chunk), make([]byte, chunk*bs), PlacementID{}, Flags{FUA: true})
	require.NoError(t, err)
	require.GreaterOrEqual(t, r.Latency(), f.ProgramLatency, "a FUA write completes at its program")

	clk.Advance(f.ProgramLatency * 4) // let the chips go idle
	_, rr, err := d.Read(bg, 0, 1)
	require.NoError(t, err)
	require.GreaterOrEqual(t, rr.Latency(), f.ReadLatency)
	_, _, err = d.Read(NoWait(bg), 0, 1)
	require.NoError(t, err)

	// Fill the drive, then keep overwriting: the writes that trigger
	// garbage collection carry its copies and erases.
	n := d.Capacity()
	buf := make([]byte, chunk*bs)
	var noGC, withGC int64
	var nNo, nWith int64
	for pass := range 3 {
		for lba := uint64(0); lba+uint64(chunk) <= n; lba += uint64(chunk) {
			before := d.Stats().RUsReclaimed
			r, err := d.Write(bg, lba, buf, PlacementID{Handle: uint16(lba/uint64(chunk)) % 2}, Flags{})
			require.NoError(t, err)
			if pass == 0 {
				continue
			}
			if d.Stats().RUsReclaimed > before {
				withGC += int64(r.Latency())
				nWith++
			} else {
				noGC += int64(r.Latency())
				nNo++
			}
		}
	}
	require.NotZero(t, nWith, "garbage collection ran")
	require.NotZero(t, nNo)
	require.Greater(t, withGC/nWith, noGC/nNo, "a write that collects garbage waits for it")
	require.Greater(t, d.Stats().MediaBytesErased, uint64(0))
	busy := d.Status().ChipBusyNs
	require.Len(t, busy, f.Channels*f.Ways)
	for _, b := range busy {
		require.Greater(t, b, int64(0))
	}
}
