package fsvol_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
)

// Several writers drive their own v-zones through the whole life cycle at
// once — open (mostly from the spares), write (some FUA), read back, flush,
// finish or fill, reset — while another goroutine lists the zones and
// flushes. Under the race detector nothing fails, every read returns what
// was written, and every v-zone handed out is distinct from the others in
// use.
func TestConcurrentLifeCycles(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 10*time.Second)
	vol, err := fsvol.New(ctx, e.c, fsvol.Options{MaxZones: 28, OpenAhead: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = vol.Close(ctx) })
	geo := vol.Geometry()
	bs := uint64(geo.BlockSize)

	var inUse sync.Map // ZoneID → writer
	var stop atomic.Bool
	var wg sync.WaitGroup
	const writers, rounds = 3, 4
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for r := 0; r < rounds; r++ {
				z, err := vol.OpenZone(ctx)
				if !assert.NoError(t, err) {
					return
				}
				if prev, loaded := inUse.LoadOrStore(z, w); loaded {
					t.Errorf("v-zone %d handed to writer %d while writer %v uses it", z, w, prev)
					return
				}
				var ref []byte
				fill := r%2 == 0 // fill to capacity (finished by itself) or finish early
				for uint64(len(ref))/bs < geo.ZoneBlocks {
					n := min(1+rng.Uint64N(64), geo.ZoneBlocks-uint64(len(ref))/bs)
					if !fill && uint64(len(ref))/bs+n > geo.ZoneBlocks/2 {
						break
					}
					data := []byte(fmt.Sprintf("%d/%d/%d|", w, r, len(ref)))
					data = bytes.Repeat(data, int(n*bs)/len(data)+1)[:n*bs]
					if !assert.NoError(t, vol.Write(ctx, z, uint64(len(ref))/bs, data, rng.IntN(4) == 0)) {
						return
					}
					ref = append(ref, data...)
					if rng.IntN(3) == 0 {
						assert.NoError(t, vol.Flush(ctx))
					}
				}
				if !fill {
					assert.NoError(t, vol.Finish(ctx, z))
				}
				got := make([]byte, len(ref))
				if assert.NoError(t, vol.Read(ctx, z, 0, got)) {
					assert.True(t, bytes.Equal(ref, got), "writer %d round %d: v-zone %d reads back", w, r, z)
				}
				inUse.Delete(z)
				assert.NoError(t, vol.Reset(ctx, z))
			}
		}()
	}
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		for !stop.Load() {
			_, err := vol.Zones(ctx)
			assert.NoError(t, err)
			assert.NoError(t, vol.Flush(ctx))
			time.Sleep(20 * time.Millisecond) // pacing of the background flusher, not a wait for anything
		}
	}()
	wg.Wait()
	stop.Store(true)
	bg.Wait()
	require.NoError(t, vol.Flush(ctx))
	zs, err := vol.Zones(ctx)
	require.NoError(t, err)
	assert.Empty(t, zs, "every v-zone was reset")
}
