package fdp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/flash"
	"github.com/zonefleet/zonefleet/pkg/vfs"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// sharedRun runs a fill and two overwrite passes on an FDP device, one
// write at a time on idle chips (the clock advanced past every booking
// first). With zoned set, the device books on a timing model that a zoned
// namespace's load shares: at each write's arrival, before it, one program
// on every chip (a stripe across the chips, booked as pkg/zns books its
// programs), and after it the zoned namespace's next stripe at the same
// arrival time. It returns the mean latency of the overwrites that
// collected garbage and of the zoned programs issued with a collecting and
// with a non-collecting write.
func sharedRun(t *testing.T, zoned bool) (gcWrite, zonedGC, zonedNoGC time.Duration) {
	clk := clock.NewVirtual()
	cfg := testConfig()
	f := cfg.Flash.Resolved()
	var opts []Option
	m := flash.NewModel(cfg.Flash)
	if zoned {
		opts = append(opts, WithModel(m))
	}
	d, err := Create("/fdp0", cfg, clk, append(opts, WithFS(vfs.NewCrashableMem()), WithLogger(quiet))...)
	require.NoError(t, err)
	defer d.Close()
	chips := f.Channels * f.Ways
	chunk := uint64(f.PageSize / f.BlockSize)
	buf := make([]byte, int(chunk)*d.BlockSize())
	var nGC, nZGC, nZ int64
	var sumGC, sumZGC, sumZ time.Duration
	for pass := range 3 {
		for lba := uint64(0); lba+chunk <= d.Capacity(); lba += chunk {
			idle := clk.Now()
			for c := range chips {
				idle = max(idle, d.model.ChipFree(c))
			}
			clk.AdvanceTo(idle)
			if zoned {
				for c := range chips {
					m.Program(clk.Now(), c)
				}
			}
			before := d.Stats().RUsReclaimed
			r, err := d.Write(bg, lba, buf, PlacementID{Handle: uint16(lba/chunk) % 2}, Flags{})
			require.NoError(t, err)
			if pass == 0 {
				continue
			}
			collected := d.Stats().RUsReclaimed > before
			if collected {
				nGC++
				sumGC += r.Latency()
			}
			if !zoned {
				continue
			}
			// The zoned namespace's next stripe, issued with the write.
			for c := range chips {
				lat := m.Program(r.Submitted, c) - r.Submitted
				if collected {
					sumZGC += lat
					nZGC++
				} else {
					sumZ += lat
					nZ++
				}
			}
		}
	}
	require.Positive(t, nGC, "garbage collection ran")
	gcWrite = sumGC / time.Duration(nGC)
	if zoned {
		require.Positive(t, nZGC)
		require.Positive(t, nZ)
		zonedGC, zonedNoGC = sumZGC/time.Duration(nZGC), sumZ/time.Duration(nZ)
	}
	return gcWrite, zonedGC, zonedNoGC
}

// TestSharedModelContention: an FDP device booking on a zoned drive's
// timing model contends with the zoned I/O for the chips, both ways: its
// writes that collect garbage take longer than on chips of its own, and a
// zoned program issued with a collection waits behind its copies and
// erases. A FUA write waits for the zoned programs queued on its chip.
func TestSharedModelContention(t *testing.T) {
	f := testConfig().Flash.Resolved()
	alone, _, _ := sharedRun(t, false)
	shared, zonedGC, zonedNoGC := sharedRun(t, true)
	t.Logf("collecting write: %v alone, %v beside zoned I/O; zoned program issued with a collecting write %v, with another write %v (program %v)",
		alone, shared, zonedGC, zonedNoGC, f.ProgramLatency)
	require.Greater(t, shared, alone, "collecting writes wait for the zoned I/O on their chips")
	require.Greater(t, zonedGC, 2*zonedNoGC, "zoned programs wait behind the collection's copies and erases")

	// A FUA write completes at its program, queued behind the zoned
	// programs already booked on every chip.
	for _, share := range []bool{false, true} {
		clk := clock.NewVirtual()
		cfg := testConfig()
		m := flash.NewModel(cfg.Flash)
		opts := []Option{WithFS(vfs.NewCrashableMem()), WithLogger(quiet)}
		if share {
			opts = append(opts, WithModel(m))
		}
		d, err := Create("/fdp0", cfg, clk, opts...)
		require.NoError(t, err)
		const queued = 5
		for c := range f.Channels * f.Ways {
			for range queued {
				m.Program(clk.Now(), c)
			}
		}
		chunk := f.PageSize / f.BlockSize
		r, err := d.Write(bg, 0, make([]byte, chunk*d.BlockSize()), PlacementID{}, Flags{FUA: true})
		require.NoError(t, err)
		if share {
			require.GreaterOrEqual(t, r.Latency(), (queued+1)*f.ProgramLatency, "FUA behind %d zoned programs", queued)
			require.GreaterOrEqual(t, d.Status().ChipBusyNs[0], int64(queued*f.ProgramLatency), "chip busy time counts both devices")
		} else {
			require.Less(t, r.Latency(), 2*f.ProgramLatency, "a private model has idle chips")
		}
		require.NoError(t, d.Close())
	}
}

// TestSharedModelGeometry: a shared model must have the device's chips,
// channels and chunk size; the off clock ignores it.
func TestSharedModelGeometry(t *testing.T) {
	cfg := testConfig()
	other := cfg.Flash
	other.Ways *= 2
	_, err := Create("/fdp0", cfg, clock.NewVirtual(), WithModel(flash.NewModel(other)), WithFS(vfs.NewCrashableMem()), WithLogger(quiet))
	var ia *zerr.InvalidArgumentError
	require.ErrorAs(t, err, &ia)
	require.Equal(t, "model", ia.Field)
	mem := vfs.NewCrashableMem()
	_, err = Create("/fdp0", cfg, clock.NewVirtual(), WithModel(flash.NewModel(other)), WithFS(mem), WithLogger(quiet))
	require.ErrorAs(t, err, &ia)
	_, err = mem.Stat("/fdp0")
	require.Error(t, err, "a refused Create leaves no file")

	d, err := Create("/fdp0", cfg, clock.Off(), WithModel(flash.NewModel(other)), WithFS(vfs.NewCrashableMem()), WithLogger(quiet))
	require.NoError(t, err)
	require.NoError(t, d.Close())
}
