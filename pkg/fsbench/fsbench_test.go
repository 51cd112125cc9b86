package fsbench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zonefleet/zonefleet/pkg/fsbench"
)

// A small run of every part: the keys are there and the numbers make sense.
func TestRunSmall(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	res, err := fsbench.Run(context.Background(), fsbench.Options{Dir: t.TempDir(), SeqMiB: 4, RandOps: 256, Utils: []int{80}, Churn: 0.3, Threads: 2, TimeScale: 0.25})
	require.NoError(t, err)
	require.Len(t, res.Throughput, 4)
	for _, tp := range res.Throughput {
		assert.Positive(t, tp.ZoneFleet, tp.Workload)
		assert.Positive(t, tp.Loopback, tp.Workload)
		assert.InDelta(t, tp.ZoneFleet/tp.Loopback, res.VsFuseLoopback[tp.Workload], 1e-9)
	}
	require.Len(t, res.Recycling, 2)
	for _, r := range res.Recycling {
		assert.Positive(t, r.GCRuns, "%s: segments recycled", r.Method)
		assert.GreaterOrEqual(t, r.WAF, 1.0, r.Method)
		assert.InDelta(t, r.AvgGCMs, r.AvgReadMs+r.AvgCopyMs+r.AvgWriteCPMs, r.AvgGCMs*0.01+0.01, "%s: phases add up", r.Method)
	}
	assert.Positive(t, res.Recycling[0].MovedHost, "host copy moves through the host")
	assert.Positive(t, res.Recycling[1].MovedIZC, "IZC moves on the drives")
	assert.Contains(t, res.IZCvsHostCopy, "util_80")
	var buf bytes.Buffer
	require.NoError(t, res.WriteTable(&buf))
	assert.Contains(t, buf.String(), "vs_fuse_loopback")
	js, err := json.Marshal(res)
	require.NoError(t, err)
	assert.Contains(t, string(js), `"vs_fuse_loopback":{`)
}
