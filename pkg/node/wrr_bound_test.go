package node

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/auth/limit"
)

// Queues of namespaces that stopped waiting are dropped: callers inventing
// namespace names leave no state behind, whether their requests were served
// or gave up.
func TestWRRForgetsIdleNamespaces(t *testing.T) {
	w := NewWRR(1)
	require.NoError(t, w.Acquire(context.Background(), "holder")) // the only slot
	waiting := func() int {
		n := 0
		for _, k := range w.Waiting() {
			n += k
		}
		return n
	}
	giveUp, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx := context.Background()
			if i%2 == 0 { // half give up
				ctx = giveUp
			}
			if w.Acquire(ctx, fmt.Sprintf("ns-%d", i)) == nil {
				w.Release()
			}
		}(i)
	}
	require.Eventually(t, func() bool { return waiting() == 200 }, time.Minute, time.Millisecond, "every caller queued")
	cancel()
	require.Eventually(t, func() bool { return waiting() == 100 }, time.Minute, time.Millisecond, "the callers that gave up left their queues")
	assert.Len(t, w.Waiting(), 100, "and their namespaces")
	w.Release()
	wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	assert.Empty(t, w.queues, "no queue outlives its waiters")
	assert.Empty(t, w.order)
}

// The I/O metrics' namespace label is bounded: past MaxNamespaceLabels
// distinct namespaces, the series are counted under "other".
func TestNamespaceLabelsBounded(t *testing.T) {
	m := newMetrics(nil)
	for i := 0; i < MaxNamespaceLabels+100; i++ {
		m.observe(0, fmt.Sprint("ns-", i), "write", 4096, time.Microsecond, nil)
	}
	ch := make(chan prometheus.Metric, 2*MaxNamespaceLabels)
	m.ops.Collect(ch)
	close(ch)
	assert.Len(t, ch, MaxNamespaceLabels+1, "one series per admitted namespace, plus other")
	var other dto.Metric
	require.NoError(t, m.ops.WithLabelValues("0", limit.OtherLabel, "write").Write(&other))
	assert.Equal(t, 100.0, other.GetCounter().GetValue())
}

// TestWRRConcurrentSlots: requests of several namespaces take and give
// back slots concurrently, mixing the lock-free idle path with queued
// grants; no more than the slots ever run at once, and every request gets
// its slot (a lost wake-up would leave one waiting forever).
func TestWRRConcurrentSlots(t *testing.T) {
	const slots, workers, per = 2, 8, 500
	w := NewWRR(slots)
	var held, peak atomic.Int64
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ns := fmt.Sprintf("ns%d", i%3)
			for range per {
				if err := w.Acquire(context.Background(), ns); err != nil {
					t.Error(err)
					return
				}
				h := held.Add(1)
				for {
					p := peak.Load()
					if h <= p || peak.CompareAndSwap(p, h) {
						break
					}
				}
				held.Add(-1)
				w.Release()
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, peak.Load(), int64(slots))
	require.Equal(t, int64(0), w.running.Load())
	require.Equal(t, int64(0), w.waiting.Load())
	require.Empty(t, w.Waiting())
}
