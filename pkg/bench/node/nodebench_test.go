package nodebench

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/zns"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zonefleet/zonefleet/pkg/zerr"

	"github.com/zonefleet/zonefleet/pkg/bench/benchstat"
)

func keys(m map[int]float64) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestMedianAndPlan(t *testing.T) {
	tests := []struct {
		xs   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{5}, 5}, {[]float64{4, 1, 3, 2}, 2.5}, {nil, 0}}
	for _, tt := range tests {
		assert.Equal(t, tt.want, benchstat.Median(tt.xs), "%v", tt.xs)
	}
	// Writers of a point take disjoint zones and together write the total.
	seen := map[uint64]bool{}
	var sum int64
	for i := 0; i < 3; i++ {
		zones, b := plan(200<<20, i, 3)
		sum += b
		assert.Len(t, zones, int((b+zoneBytes-1)/zoneBytes))
		for _, z := range zones {
			assert.False(t, seen[z], "zone %d twice", z)
			seen[z] = true
		}
	}
	assert.Equal(t, int64(198<<20), sum, "rounded down to MiB per writer")
}

func TestRunRejectsBadOptions(t *testing.T) {
	_, err := Run(context.Background(), Options{Clients: []int{64}})
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
	_, err = Run(context.Background(), Options{RegularWriters: 9})
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
	_, err = Run(context.Background(), Options{WritebackKickBytes: -1})
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
}

// With the kick off (the zero Options) the drives start no write-back.
func TestRunKickOff(t *testing.T) {
	res, err := Run(context.Background(), Options{Dir: t.TempDir(), WriteBytes: 16 << 20, Runs: 1, RandomReads: 10, Clients: []int{1}})
	require.NoError(t, err)
	assert.Equal(t, "0", res.Config["writeback_kick_bytes"])
	assert.Zero(t, res.WritebackKicks)
}

// The raw baseline moves every byte of every stream into the drive: eight
// receivers, each into its own zones, and the drive's write pointers say so.
func TestTCPRunWritesEveryStream(t *testing.T) {
	dev, err := zns.Create(filepath.Join(t.TempDir(), "d.zns"), throughputDrive(64<<20, 8), clock.Off())
	require.NoError(t, err)
	defer dev.Close()
	payload := make([]byte, mib)
	v, err := tcpRun(context.Background(), 64<<20, payload, dev, 8)
	require.NoError(t, err)
	assert.Positive(t, v)
	zs, err := dev.ReportZones(zns.StateAny, 0, 16)
	require.NoError(t, err)
	var written uint64
	for i, z := range zs {
		if i < 8 {
			assert.Equal(t, uint64(8<<20)/4096, z.WP-z.Start, "zone %d: writer %d's 8 MiB", i, i)
		}
		written += z.WP - z.Start
	}
	assert.Equal(t, uint64(64<<20)/4096, written)
}
