package arbiter

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMetrics(t *testing.T) {
	tc, a := oneLeader(t, 2)
	ctx := context.Background()
	for _, n := range []string{"a", "b"} {
		_, err := a.CreateNamespace(ctx, NamespaceSpec{Name: n, MARLogical: 2, ZonesPerVZone: 1024})
		require.NoError(t, err)
	}
	_, err := a.OpenVZone(ctx, "a", 0)
	require.NoError(t, err)
	for i := 0; i < 4; i++ { // until b lends
		_, err = a.NextStripeGroup(ctx, "a", 0)
		require.NoError(t, err)
	}
	info, err := a.GetNamespace(ctx, "b")
	require.NoError(t, err)
	require.Positive(t, info.SparesLent)

	m := a.m
	assert.Equal(t, 1.0, val(t, m.leader))
	assert.Equal(t, 16.0, val(t, m.essentials.WithLabelValues("a")))
	assert.Equal(t, 16.0, val(t, m.spares.WithLabelValues("b", "provisioned")))
	assert.Equal(t, float64(info.SparesLent), val(t, m.spares.WithLabelValues("b", "lent")))
	assert.Equal(t, float64(info.SparesLent), val(t, m.spares.WithLabelValues("a", "borrowed")))
	assert.Equal(t, 16-float64(info.SparesLent), val(t, m.spares.WithLabelValues("b", "owned")))
	assert.Equal(t, 1.0, val(t, m.activeVZones.WithLabelValues("a")))
	assert.Equal(t, 5.0, val(t, m.allocations.WithLabelValues("a")))
	assert.Positive(t, val(t, m.overdrive.WithLabelValues("local")))
	assert.Positive(t, val(t, m.overdrive.WithLabelValues("lend")))
	assert.Equal(t, 2.0, val(t, m.nodes.WithLabelValues("available")))
	lay, err := a.Layout(ctx, "a", 0)
	require.NoError(t, err)
	assert.Equal(t, 1.0, val(t, m.openGroups.WithLabelValues(widthLabel(lay.Groups[len(lay.Groups)-1].Width))))

	// Every family is registered on the given registry under zonefleet_arbiter_.
	mfs, err := a.reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		assert.Regexp(t, `^zonefleet_arbiter_`, mf.GetName())
	}
	for _, n := range []string{"zonefleet_arbiter_is_leader", "zonefleet_arbiter_allocations_total",
		"zonefleet_arbiter_allocation_duration_seconds", "zonefleet_arbiter_stripe_width_zones",
		"zonefleet_arbiter_overdrive_events_total", "zonefleet_arbiter_namespace_spare_zones"} {
		assert.True(t, names[n], n)
	}
	var hm dto.Metric
	require.NoError(t, m.allocLatency.Write(&hm))
	assert.Equal(t, uint64(5), hm.GetHistogram().GetSampleCount())

	// Deleting a namespace drops its series; a second arbiter on the same registry is refused.
	require.NoError(t, a.DeleteNamespace(ctx, "b", true))
	ch := make(chan prometheus.Metric, 16)
	m.essentials.Collect(ch)
	close(ch)
	assert.Len(t, ch, 1, "only a's essentials remain")
	_, err = New(Config{Addr: "x", Registerer: a.reg}, tc.cli, nil)
	require.Error(t, err)
	_, err = New(Config{Addr: "y", Registerer: prometheus.NewRegistry()}, tc.cli, nil)
	require.NoError(t, err)
}

func val(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	require.NoError(t, m.Write(&d))
	switch {
	case d.Gauge != nil:
		return d.GetGauge().GetValue()
	case d.Counter != nil:
		return d.GetCounter().GetValue()
	}
	t.Fatalf("not a gauge or counter")
	return 0
}
