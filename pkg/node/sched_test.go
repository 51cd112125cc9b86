package node

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/clock"
)

func TestWRRGrantOrderFollowsWeights(t *testing.T) {
	w := NewWRR(1)
	w.SetWeight("a", 2)
	ctx := context.Background()
	require.NoError(t, w.Acquire(ctx, "holder"))

	granted := make(chan string, 12)
	var wg sync.WaitGroup
	enqueue := func(ns string) {
		before := w.Waiting()[ns]
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Acquire(ctx, ns); err == nil {
				granted <- ns
			}
		}()
		require.Eventually(t, func() bool { return w.Waiting()[ns] == before+1 }, 30*time.Second, time.Millisecond)
	}
	for i := 0; i < 6; i++ {
		enqueue("a")
	}
	for i := 0; i < 6; i++ {
		enqueue("b")
	}
	var got []string
	w.Release() // the holder's slot
	for i := 0; i < 12; i++ {
		got = append(got, <-granted)
		w.Release()
	}
	wg.Wait()
	assert.Equal(t, "a a b a a b a a b b b b", strings.Join(got, " "))
	assert.Empty(t, w.Waiting())
}

func TestWRRCancelledWaiterLeavesNoTrace(t *testing.T) {
	w := NewWRR(1)
	require.NoError(t, w.Acquire(context.Background(), "a"))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Acquire(ctx, "b") }()
	require.Eventually(t, func() bool { return w.Waiting()["b"] == 1 }, 30*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	assert.Empty(t, w.Waiting())
	w.Release()
	// The slot is free again: an acquire passes at once.
	require.NoError(t, w.Acquire(context.Background(), "c"))
	w.Release()
}

func TestWRRLoneNamespaceUsesAllSlots(t *testing.T) {
	w := NewWRR(4)
	for i := 0; i < 4; i++ {
		require.NoError(t, w.Acquire(context.Background(), "a"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, w.Acquire(ctx, "a"), context.DeadlineExceeded, "a fifth request waits")
}

func TestAdmissionOffPassesEverything(t *testing.T) {
	clk := clock.NewVirtual()
	a := NewAdmission(clk, AdmissionConfig{Enabled: false})
	defer a.Close()
	a.Complete(4, time.Millisecond)
	clk.Advance(20 * time.Millisecond)
	for i := 0; i < 10; i++ {
		wait, err := a.Admit(context.Background(), 0, 1, 1024)
		require.NoError(t, err)
		assert.Zero(t, wait)
	}
}

func TestAdmissionPacesBusyWritersOnly(t *testing.T) {
	clk := clock.NewVirtual()
	a := NewAdmission(clk, AdmissionConfig{Enabled: true, BurstBlocks: 256})
	defer a.Close()
	ctx := context.Background()

	// No latency measured yet: no pacing.
	wait, err := a.Admit(ctx, 0, 7, 1024)
	require.NoError(t, err)
	assert.Zero(t, wait)

	// Two monitor windows of writes at 100 µs per block.
	for w := 0; w < 2; w++ {
		for i := 0; i < 10; i++ {
			a.Complete(4, 400*time.Microsecond)
		}
		clk.Advance(10 * time.Millisecond)
	}
	assert.Equal(t, 100*time.Microsecond, a.Rate(), "rate = (avg(t-1)+avg(t))/2")

	// A busy writer: its banked burst passes, the next batch waits for its tokens.
	wait, err = a.Admit(ctx, 0, 1, 256)
	require.NoError(t, err)
	assert.Zero(t, wait, "a fresh zone starts with a full burst")
	start := clk.Now()
	wait, err = a.Admit(ctx, 0, 1, 256)
	require.NoError(t, err)
	assert.Equal(t, 256*100*time.Microsecond, wait)
	assert.Equal(t, start+wait, clk.Now(), "the virtual clock moved to the admission time")

	// A small writer on another zone is not held behind the busy one.
	wait, err = a.Admit(ctx, 0, 2, 8)
	require.NoError(t, err)
	assert.Zero(t, wait)

	n, total := a.Stalls()
	assert.Equal(t, uint64(1), n)
	assert.Equal(t, 256*100*time.Microsecond, total)

	// With no writes for two windows the rate decays to zero and pacing stops.
	clk.Advance(30 * time.Millisecond)
	assert.Zero(t, a.Rate())
}

func TestAdmissionCancelReturnsTokens(t *testing.T) {
	clk := clock.NewVirtual()
	a := NewAdmission(clk, AdmissionConfig{Enabled: true, BurstBlocks: 16})
	defer a.Close()
	for w := 0; w < 2; w++ {
		a.Complete(1, time.Millisecond)
		clk.Advance(10 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := a.Admit(context.Background(), 0, 1, 16)
	require.NoError(t, err)
	_, err = a.Admit(ctx, 0, 1, 16)
	require.ErrorIs(t, err, context.Canceled)
	a.Forget(0, 1)
	wait, err := a.Admit(context.Background(), 0, 1, 16)
	require.NoError(t, err)
	assert.Zero(t, wait, "a forgotten zone starts over with a full burst")
}
