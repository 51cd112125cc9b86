package fdp

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
)

// TestConcurrentWriters: writers on disjoint LBA ranges, each on its own
// handle, with readers of the same ranges and garbage collection running
// under them; every writer's reads see its own last writes.
func TestConcurrentWriters(t *testing.T) {
	d, _ := newMemDevice(t, testConfig(), clock.Off())
	defer d.Close()
	bs := d.BlockSize()
	const workers = 4
	span := d.Capacity() / workers
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			base := uint64(w) * span
			ver := map[uint64]uint64{}
			for i := range 4000 {
				lba := base + rng.Uint64N(span*9/10)
				switch {
				case i%7 == 6:
					got, _, err := d.Read(context.Background(), lba, 1)
					if err != nil {
						errs <- err
						return
					}
					want := make([]byte, bs)
					if v := ver[lba]; v != 0 {
						want = block(bs, lba, v)
					}
					if !bytes.Equal(want, got) {
						errs <- &mismatch{lba}
						return
					}
				case i%13 == 12:
					if err := d.Trim(context.Background(), lba, 1); err != nil {
						errs <- err
						return
					}
					ver[lba] = 0
				default:
					ver[lba] = uint64(i + 1)
					if _, err := d.Write(context.Background(), lba, block(bs, lba, uint64(i+1)), PlacementID{Handle: uint16(w)}, Flags{}); err != nil {
						errs <- err
						return
					}
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Greater(t, d.Stats().GCCopies, uint64(0))
	checkInvariants(t, d)
}

type mismatch struct{ lba uint64 }

func (m *mismatch) Error() string { return "read mismatch" }
