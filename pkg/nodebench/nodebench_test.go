package nodebench

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// A small run: every figure is produced and the table and JSON carry it.
func TestRunSmall(t *testing.T) {
	res, err := Run(context.Background(), Options{Dir: t.TempDir(), WriteBytes: 8 << 20, TCPBytes: 16 << 20, RandomReads: 50,
		Clients: []int{1, 2}, Admission: true, AdmissionWall: 300 * time.Millisecond, TimeScale: 4, RegularWriters: 2})
	require.NoError(t, err)
	assert.Positive(t, res.TCPMiBPerSecond)
	assert.Positive(t, res.GRPCWriteMiBPerSecond)
	assert.InDelta(t, res.GRPCWriteMiBPerSecond/res.TCPMiBPerSecond, res.GRPCvsTCPRatio, 1e-9)
	assert.Positive(t, res.RandomReadIOPS)
	assert.Len(t, res.WriteMiBPerSecond, 2)
	require.NotNil(t, res.Admission)
	assert.Positive(t, res.Admission.Off.Regular)
	assert.Positive(t, res.Admission.On.Busy)

	var buf bytes.Buffer
	require.NoError(t, res.WriteTable(&buf))
	assert.Contains(t, buf.String(), "grpc_vs_tcp_ratio")
	assert.Contains(t, buf.String(), "regular_writer_gain")
	js, err := json.Marshal(res)
	require.NoError(t, err)
	assert.Contains(t, string(js), `"grpc_vs_tcp_ratio"`)
}

func TestRunRejectsBadOptions(t *testing.T) {
	_, err := Run(context.Background(), Options{Clients: []int{64}})
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
	_, err = Run(context.Background(), Options{RegularWriters: 9})
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
}
