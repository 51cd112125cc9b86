package node

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/auth/limit"
)

// Queues of namespaces that stopped waiting are dropped: callers inventing
// namespace names leave no state behind, whether their requests
// were served or gave up.
func TestWRRForgetsIdleNamespaces(t *testing.T) {
	w := NewWRR(1)
	require.NoError(t, w.Acquire(context.Background(), "holder")) // the only slot
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx := context.Background()
			if i%2 == 0 { // half give up
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 20*time.Millisecond)
				defer cancel()
			}
			if w.Acquire(ctx, fmt.Sprintf("ns-%d", i)) == nil {
				w.Release()
			}
		}(i)
	}
	time.Sleep(50 * time.Millisecond)
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
