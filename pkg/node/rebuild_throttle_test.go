package node

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/flagenv"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"github.com/zonefleet/zonefleet/pkg/zns"
	"google.golang.org/grpc/codes"
)

func TestRebuildRateFlag(t *testing.T) {
	for _, tc := range []struct {
		mib  float64
		want int64
		bad  bool
	}{
		{0, 0, false}, {DefaultRebuildRate, DefaultRebuildRate << 20, false}, {0.5, 1 << 19, false},
		{-1, 0, true}, {1 << 21, 0, true},
	} {
		got, err := RebuildRateBytes(tc.mib)
		if tc.bad {
			require.ErrorIs(t, err, zerr.ErrInvalidArgument, "%v", tc.mib)
			assert.Contains(t, err.Error(), "rebuild-rate")
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, tc.want, got)
	}
	_, err := New(Config{Standalone: true, RebuildRate: -5}, nil, nil, quiet)
	require.Error(t, err)
}

// A raid5 leg rebuilt under a small rate on a virtual clock: every byte is
// rebuilt, the target's writes and each survivor's reads are charged to
// their node's limit, and the clock shows they took their time.
func TestRebuildParityLegThrottled(t *testing.T) {
	vc := clock.NewVirtual()
	const rate, burst = 64 << 10, 16 << 10
	g := newRaidGroupCfg(t, "rbt", func(c *Config) { c.Clock, c.RebuildRate, c.RebuildBurst = vc, rate, burst })
	const lost = 0
	resp, err := g.t.client.RebuildParityLeg(arbiter(), g.req(lost, 0))
	require.NoError(t, err)
	want := g.legs[lost]
	n := uint64(len(want) / rbBS)
	require.Equal(t, n, resp.GetWrittenBlocks())
	assert.True(t, bytes.Equal(want, readZone(t, g.t, 0, n)), "every byte rebuilt under the limit")

	tb, tw := g.t.svc.RebuildStats()
	assert.Equal(t, uint64(len(want)), tb, "the target charges what it writes")
	assert.Positive(t, tw)
	// the target wrote 256 KiB at 64 KiB/s after a 16 KiB burst
	assert.GreaterOrEqual(t, vc.Now(), secs(int64(len(want))-burst, rate))
	db, dw := g.d1.svc.RebuildStats()
	pulledRows := (g.rows + 1) * g.S * rbBS // the parity rows and the open row
	assert.Equal(t, pulledRows, db, "the surviving data leg charges the rows it served")
	assert.Positive(t, dw)
	pb, _ := g.p.svc.RebuildStats()
	assert.Equal(t, pulledRows+(2*(1+g.S)+1)*rbBS, pb, "the parity node charges its rows and the PP log it served")
	ob, _ := g.d0.svc.RebuildStats()
	assert.Zero(t, ob, "the lost leg's node served nothing")
	assert.Contains(t, scrape(t, g.t.http), "zonefleet_node_rebuild_throttled_seconds_total")
	assert.Contains(t, scrape(t, g.t.http), "zonefleet_node_rebuild_rate_limit_bytes_per_second 65536")
}

// A mirror copy marked rebuild is charged on both nodes (and throttled);
// an unmarked one (a reclaim's, a tenant's) is not; only the operator or
// the arbiter may mark one.
func TestCrossNodeCompactionRebuildThrottled(t *testing.T) {
	vc := clock.NewVirtual()
	const rate, burst = 256 << 10, 64 << 10
	tune := func(c *Config) { c.Clock, c.RebuildRate, c.RebuildBurst = vc, rate, burst }
	src := startNodeCfg(t, "rsrc", true, true, true, tune)
	dst := startNodeCfg(t, "rdst", true, true, true, tune)
	grant(t, "rsrc", 0, "a")
	grant(t, "rdst", 1, "a")
	grant(t, "rdst", 2, "a")
	waitGrant(t, src, 0, "a")
	waitGrant(t, dst, 1, "a")
	waitGrant(t, dst, 2, "a")
	data := randBlocks(t, 512) // 2 MiB
	_, err := src.client.Write(asNS("a"), &v1.WriteRequest{Lba: 0, Data: data})
	require.NoError(t, err)
	copyTo := func(ctx context.Context, dstLBA uint64, rebuild bool) error {
		op, err := src.client.ZoneCompaction(ctx, &v1.ZoneCompactionRequest{Rebuild: rebuild, Copies: []*v1.CompactionCopy{
			{SrcLba: 0, Blocks: 512, DstLba: dstLBA, Peer: &v1.PeerTarget{NodeId: "rdst", Addr: dst.addr}},
		}})
		if err != nil {
			return err
		}
		_, err = src.client.WaitCompaction(ctx, &v1.WaitCompactionRequest{OperationId: op.GetOperationId()})
		return err
	}

	err = copyTo(asNS("a"), 2048, true)
	require.Error(t, err, "a tenant cannot mark its copy a rebuild")
	assert.Equal(t, codes.Unauthenticated, rpcerr.Code(err))

	require.NoError(t, copyTo(asNS("a"), 2048, false))
	sb, _ := src.svc.RebuildStats()
	db, _ := dst.svc.RebuildStats()
	assert.Zero(t, sb+db, "a copy that is not a rebuild is not charged")
	assert.Zero(t, vc.Now())

	require.NoError(t, copyTo(arbiter(), 4096, true))
	r, err := dst.client.Read(asNS("a"), &v1.ReadRequest{Lba: 4096, Blocks: 512})
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, r.GetData()))
	sb, sw := src.svc.RebuildStats()
	db, dw := dst.svc.RebuildStats()
	assert.Equal(t, uint64(len(data)), sb, "the source charges what it reads and pushes")
	assert.Equal(t, uint64(len(data)), db, "the target charges what it receives and writes")
	assert.Positive(t, sw+dw)
	assert.GreaterOrEqual(t, vc.Now(), secs(int64(len(data))-burst, rate), "2 MiB at 256 KiB/s")
}

// parseFlags parses ssdnode's flags (and their ZONEFLEET_ twins) into the
// default options.
func parseFlags(args ...string) (Options, error) {
	o := DefaultOptions()
	fs := pflag.NewFlagSet("ssdnode", pflag.ContinueOnError)
	AddFlags(fs, &o)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	return o, flagenv.Apply(fs)
}

// --rebuild-rate and its ZONEFLEET_REBUILD_RATE twin; a bad value stops
// Run before it opens anything.
func TestRebuildRateFlagAndEnv(t *testing.T) {
	o, err := parseFlags()
	require.NoError(t, err)
	assert.Equal(t, float64(DefaultRebuildRate), o.RebuildRateMiB)
	t.Setenv("ZONEFLEET_REBUILD_RATE", "12.5")
	o, err = parseFlags()
	require.NoError(t, err)
	assert.Equal(t, 12.5, o.RebuildRateMiB)
	o, err = parseFlags("--rebuild-rate=0")
	require.NoError(t, err)
	assert.Zero(t, o.RebuildRateMiB, "the flag wins over the variable")
	t.Setenv("ZONEFLEET_REBUILD_RATE", "fast")
	_, err = parseFlags()
	require.ErrorContains(t, err, "ZONEFLEET_REBUILD_RATE")

	o = DefaultOptions()
	o.RebuildRateMiB = -3
	err = Run(context.Background(), nil, o, quiet)
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "rebuild-rate")
}

// --writeback-kick-bytes and its ZONEFLEET_WRITEBACK_KICK_BYTES twin; a
// negative value stops the node before it opens or creates anything.
func TestWritebackKickFlag(t *testing.T) {
	o, err := parseFlags()
	require.NoError(t, err)
	assert.Equal(t, int64(zns.DefaultWritebackKick), o.WritebackKickBytes)
	t.Setenv("ZONEFLEET_WRITEBACK_KICK_BYTES", "0")
	o, err = parseFlags()
	require.NoError(t, err)
	assert.Zero(t, o.WritebackKickBytes)
	o, err = parseFlags("--writeback-kick-bytes=1048576")
	require.NoError(t, err)
	assert.Equal(t, int64(1<<20), o.WritebackKickBytes, "the flag wins over the variable")

	o = DefaultOptions()
	o.DataDir = filepath.Join(t.TempDir(), "data")
	o.WritebackKickBytes = -1
	_, err = OpenDevices(o, clock.Off())
	require.ErrorIs(t, err, zerr.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "writeback-kick-bytes")
	_, statErr := os.Stat(o.DataDir)
	assert.True(t, os.IsNotExist(statErr), "nothing created")
}
