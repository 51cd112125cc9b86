package nodebench

import (
	"context"
	"path/filepath"
	"strings"
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

// SmallWrites measures both drives at every client count, with efficiency
// relative to the one-client point (1 at one client by definition) and the
// write path's lock wait read from the mutex profile; bad options are
// refused.
func TestSmallWrites(t *testing.T) {
	res, err := SmallWrites(context.Background(), SmallWriteOptions{Dir: t.TempDir(), Clients: []int{4}, Writes: 1024, Runs: 1, CacheQueues: 4})
	require.NoError(t, err)
	assert.Equal(t, []int{1, 4}, res.Clients)
	assert.Equal(t, 0, res.Single.CacheQueues)
	assert.Equal(t, 4, res.Multi.CacheQueues)
	assert.True(t, res.DriveSingle.Drive)
	assert.Equal(t, 4, res.DriveMulti.CacheQueues)
	for _, s := range []SmallWriteSeries{res.Single, res.Multi, res.DriveSingle, res.DriveMulti} {
		assert.InDelta(t, 1, s.Efficiency[1], 1e-9)
		assert.InDelta(t, 1, s.CPUEfficiency[1], 1e-9)
		for _, n := range res.Clients {
			assert.Positive(t, s.MiBPerSecond[n], "%d clients", n)
			assert.Positive(t, s.Efficiency[n])
			assert.GreaterOrEqual(t, s.WritePathWaitMsPerGiB[n], 0.0)
			assert.Len(t, s.Samples[n], 1)
		}
	}
	var sb strings.Builder
	res.WriteTable(&sb)
	assert.Contains(t, sb.String(), "gRPC, write cache in 4 queues")
	assert.Contains(t, sb.String(), "drive only, one shared write cache")

	_, err = SmallWrites(context.Background(), SmallWriteOptions{Clients: []int{300}})
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
	_, err = SmallWrites(context.Background(), SmallWriteOptions{Clients: []int{32}, Writes: 8})
	assert.ErrorIs(t, err, zerr.ErrInvalidArgument)
}

// A contended lock is attributed to the function that released it (past
// sync and runtime frames), in seconds (cycles / cycles per second x the
// sampling period); only the write path's packages count.
func TestParseMutexProfile(t *testing.T) {
	const prof = `--- mutex:
cycles/second=1000000000
sampling period=2
3000000 10 @ 0x1 0x2 0x3
#	0x1	sync.(*Mutex).Unlock+0x64	/go/src/sync/mutex.go:1
#	0x2	github.com/zonefleet/zonefleet/pkg/flash.(*Model).CacheAdmit+0x1a	/src/pkg/flash/model.go:2
#	0x3	github.com/zonefleet/zonefleet/pkg/zns.(*Device).writeTiming+0x2	/src/pkg/zns/io.go:3

1000000 1 @ 0x4 0x5
#	0x4	sync.(*Mutex).Unlock+0x64	/go/src/sync/mutex.go:1
#	0x5	github.com/zonefleet/zonefleet/pkg/daemon.(*connGuard).conn+0x9	/src/pkg/daemon/x.go:4

500000 1 @ 0x6 0x7 0x8
#	0x6	runtime.unlock+0x1	/go/src/runtime/lock.go:1
#	0x7	sync.(*RWMutex).Unlock+0x1	/go/src/sync/rwmutex.go:1
#	0x8	github.com/zonefleet/zonefleet/pkg/flash.(*Model).CacheAdmit+0x3	/src/pkg/flash/model.go:5
`
	got := parseMutexProfile(strings.NewReader(prof))
	assert.Equal(t, map[string]float64{"flash.(*Model).CacheAdmit": 0.007}, roundMap(got))
}

func roundMap(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		out[k] = float64(int64(v*1e6+0.5)) / 1e6
	}
	return out
}
