package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/client"
)

func activityReports(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "zonefleet_client_activity_reports_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// Activity reports are fire-and-forget (DESIGN §1: the control plane is
// never on the byte path): with no arbiter at all, writes inside an
// allocated stripe group go on, each returning long before its context's
// deadline, while the due reports fail in the background.
func TestActivityReportsNeverBlockWrites(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, 1)
	createNS(t, c, "a", 4)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	cfg := c.ClientConfig("a")
	cfg.RetryDeadline, cfg.Registerer = time.Hour, reg // a synchronous report would retry for an hour
	cl, err := client.New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	vz, err := cl.OpenVZone(ctx)
	require.NoError(t, err)
	block := random(4096)
	require.NoError(t, vz.Write(ctx, 0, block))
	require.Eventually(t, func() bool { return activityReports(t, reg, "ok") == 1 }, 20*time.Second, 10*time.Millisecond,
		"the first write reports activity")

	require.NoError(t, c.StopArbiter(0))
	for i := uint64(1); i <= 3; i++ {
		// each write is due to report (the interval is backdated, no
		// report in flight): the report goes out to a stopped arbiter
		require.Eventually(t, func() bool { return client.ActivityIdle(cl) }, 20*time.Second, 5*time.Millisecond,
			"the previous report ended")
		client.MakeActivityDue(cl)
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		require.NoError(t, vz.Write(wctx, i, block))
		assert.NoError(t, wctx.Err(), "write %d returned before its deadline: it did not wait for the arbiter", i)
		cancel()
	}
	require.Eventually(t, func() bool { return activityReports(t, reg, "error") >= 3 }, 20*time.Second, 50*time.Millisecond,
		"the three reports due while the arbiter was down failed in the background")
	got, err := vz.Read(ctx, 0, 4)
	require.NoError(t, err)
	assert.Equal(t, block, got[3*4096:])
}
