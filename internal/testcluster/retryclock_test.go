package testcluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetryClockCountsBackoffPerGoroutine(t *testing.T) {
	r := NewRetryClock()
	ctx := context.Background()
	other := func() time.Duration {
		ch := make(chan time.Duration)
		go func() { ch <- r.Now() }()
		return <-ch
	}

	require.NoError(t, r.WaitUntil(MustFail(ctx), time.Hour))
	require.Equal(t, FailScale*time.Hour, r.Now(), "a must-fail wait moves its caller's time by the scaled backoff at once")
	require.Zero(t, other(), "another goroutine's time did not move")

	now := r.Now()
	wall := time.Now()
	require.NoError(t, r.WaitUntil(ctx, now+20*time.Millisecond))
	require.GreaterOrEqual(t, time.Since(wall), 20*time.Millisecond, "a must-succeed wait sleeps its backoff on the wall clock")
	require.Equal(t, now+20*time.Millisecond, r.Now(), "and its time moves by the backoff only")
	require.NoError(t, r.WaitUntil(ctx, now), "a time already reached returns at once")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, r.WaitUntil(cctx, r.Now()+time.Hour), context.Canceled)
	require.Equal(t, now+20*time.Millisecond, r.Now(), "a cancelled wait does not move the time")
}
