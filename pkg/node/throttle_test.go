package node

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/clock"
)

// secs is the clock time n bytes take at rate bytes/s.
func secs(n, rate int64) time.Duration {
	return time.Duration(float64(n) / float64(rate) * float64(time.Second))
}

// On a virtual clock the bucket's waits are advanced time: a sequence of
// takes ends exactly when the rate says, bytes beyond the burst wait, and
// the bucket never holds more than its burst however long it idled.
func TestBucketRate(t *testing.T) {
	const KiB = 1 << 10
	for _, tc := range []struct {
		name         string
		rate, burst  int64
		piece, count int
	}{
		{"pieces smaller than the burst", 64 * KiB, 16 * KiB, 4 * KiB, 100},
		{"pieces larger than the burst (lent)", 64 * KiB, 16 * KiB, 40 * KiB, 10},
		{"one byte pieces", 1000, 10, 1, 500},
		{"MiB/s and 1 MiB pieces", 64 << 20, 8 << 20, 1 << 20, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vc := clock.NewVirtual()
			b := NewBucket(vc, tc.rate, tc.burst)
			total := int64(tc.piece * tc.count)
			for i := 0; i < tc.count; i++ {
				require.NoError(t, b.Wait(context.Background(), tc.piece))
				// never ahead of the rate: what passed by now is at most
				// the burst plus the rate times the elapsed time
				passed := int64(tc.piece * (i + 1))
				assert.LessOrEqual(t, passed, tc.burst+int64(vc.Now().Seconds()*float64(tc.rate))+1, "piece %d", i)
			}
			want := secs(total-tc.burst, tc.rate)
			assert.InDelta(t, float64(want), float64(vc.Now()), float64(time.Millisecond), "the rate over the window")
			n, waited, waits := b.Stats()
			assert.Equal(t, uint64(total), n)
			assert.InDelta(t, float64(want), float64(waited), float64(time.Millisecond))
			assert.Positive(t, waits)

			// idle for long: the bucket refills to its burst, not beyond
			vc.Advance(time.Hour)
			start := vc.Now()
			free := int64(0)
			for vc.Now() == start {
				require.NoError(t, b.Wait(context.Background(), tc.piece))
				free += int64(tc.piece)
			}
			assert.LessOrEqual(t, free-int64(tc.piece), tc.burst, "what passes without waiting after an idle hour is the burst")
		})
	}
}

// Concurrent takers share the rate: the last one is admitted when the
// bytes of all of them (less the burst) have taken their time.
func TestBucketConcurrent(t *testing.T) {
	vc := clock.NewVirtual()
	const rate, burst, piece, each, workers = 1 << 20, 64 << 10, 64 << 10, 16, 4
	b := NewBucket(vc, rate, burst)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				assert.NoError(t, b.Wait(context.Background(), piece))
			}
		}()
	}
	wg.Wait()
	total := int64(piece * each * workers)
	assert.GreaterOrEqual(t, vc.Now(), secs(total-burst, rate)-time.Millisecond)
	n, _, _ := b.Stats()
	assert.Equal(t, uint64(total), n)
}

// A cancelled wait returns the context's error and gives its bytes back;
// an unlimited bucket counts and never waits.
func TestBucketCancelAndUnlimited(t *testing.T) {
	vc := clock.NewVirtual()
	b := NewBucket(vc, 1000, 1000)
	require.NoError(t, b.Wait(context.Background(), 1000)) // the burst
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, b.Wait(ctx, 5000), context.Canceled)
	assert.Zero(t, vc.Now(), "a cancelled wait does not move the clock")
	require.NoError(t, b.Wait(context.Background(), 500))
	assert.Equal(t, 500*time.Millisecond, vc.Now(), "the cancelled bytes were given back: only these 500 wait")
	n, _, _ := b.Stats()
	assert.Equal(t, uint64(1500), n, "cancelled bytes are not counted")

	// a wait parked on a real clock ends when its context does
	rc := clock.Realtime(1)
	defer rc.Stop()
	slow := NewBucket(rc, 1, 1)
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- slow.Wait(ctx, 1<<30) }() // a wait of about 34 years
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)

	un := NewBucket(vc, 0, 0)
	before := vc.Now()
	for i := 0; i < 100; i++ {
		require.NoError(t, un.Wait(context.Background(), 1<<30))
	}
	assert.Equal(t, before, vc.Now())
	n, waited, _ := un.Stats()
	assert.Equal(t, uint64(100<<30), n)
	assert.Zero(t, waited)
	assert.Zero(t, un.Rate())
}

func TestDefaultRebuildBurst(t *testing.T) {
	for _, tc := range []struct{ rate, want int64 }{
		{0, 64 << 10}, {100 << 10, 64 << 10}, {1 << 20, 128 << 10}, {8 << 20, 1 << 20}, {DefaultRebuildRate << 20, 1 << 20},
	} {
		assert.Equal(t, tc.want, DefaultRebuildBurst(tc.rate), "rate %d", tc.rate)
	}
	b := NewBucket(clock.NewVirtual(), 64<<20, 0)
	assert.Equal(t, float64(1<<20), b.burst)
}
