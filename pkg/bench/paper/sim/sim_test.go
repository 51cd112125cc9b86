package sim

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// trace runs actors that sleep different amounts and logs who ran when.
func trace() string {
	s := New()
	var b strings.Builder
	c := s.NewCond()
	for i := 0; i < 5; i++ {
		s.Go(func(ctx context.Context) {
			for j := 0; j < 4; j++ {
				if err := s.WaitUntil(ctx, s.Now()+time.Duration(i+1)*time.Millisecond); err != nil {
					return
				}
				fmt.Fprintf(&b, "%d@%v ", i, s.Now())
			}
			c.Broadcast()
		})
	}
	s.Go(func(ctx context.Context) {
		_ = c.Wait(ctx)
		fmt.Fprintf(&b, "cond@%v ", s.Now())
	})
	s.AfterFunc(3*time.Millisecond, func() { fmt.Fprintf(&b, "cb@%v ", s.Now()) })
	s.Run(10 * time.Millisecond)
	s.Stop()
	return b.String()
}

func TestOrderAndTime(t *testing.T) {
	out := trace()
	require.True(t, strings.HasPrefix(out, "0@1ms 1@2ms 0@2ms cb@3ms 2@3ms 0@3ms "), out)
	require.Contains(t, out, "cond@4ms") // actor 0 finishes at 4ms and broadcasts
	for i := 0; i < 20; i++ {
		require.Equal(t, out, trace())
	}
}

func TestStopCancelsParked(t *testing.T) {
	s := New()
	errs := make(chan error, 1)
	s.Go(func(ctx context.Context) { errs <- s.WaitUntil(ctx, time.Hour) })
	s.Run(time.Second)
	require.Equal(t, time.Second, s.Now())
	s.Stop()
	require.ErrorIs(t, <-errs, context.Canceled)
}

func TestOutsideRunAdvances(t *testing.T) {
	s := New()
	require.NoError(t, s.WaitUntil(context.Background(), 5*time.Millisecond))
	require.Equal(t, 5*time.Millisecond, s.Now())
}
