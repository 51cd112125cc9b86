package node

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const zoneBlocks = 2048 // testGeometry: 8 MiB zones of 4 KiB blocks

// writeStream writes data at lba through a WriteStream of namespace ns.
func writeStream(ctx context.Context, c v1.ZonedDeviceClient, lba uint64, data []byte) error {
	ws, err := c.WriteStream(ctx)
	if err != nil {
		return err
	}
	if err := ws.Send(&v1.WriteRequest{Lba: lba, Data: data}); err != nil {
		_, err = ws.CloseAndRecv()
		return err
	}
	_, err = ws.CloseAndRecv()
	return err
}

// One namespace's streams past its limit are refused at once with a typed
// RESOURCE_EXHAUSTED; another namespace's streams are not affected, and
// the namespace is served again once one of its streams ended.
func TestNamespaceStreamLimit(t *testing.T) {
	const limit = 4
	n := startNodeCfg(t, "cap", false, true, true, func(c *Config) { c.MaxNamespaceStreams = limit })
	ctx, cancel := context.WithCancel(asNS("a"))
	defer cancel()
	var open []v1.ZonedDevice_WriteStreamClient
	for range limit {
		ws, err := n.client.WriteStream(ctx)
		require.NoError(t, err)
		open = append(open, ws)
	}
	require.Eventually(t, func() bool { s, _ := n.svc.nsUsage("a"); return s == limit }, 10*time.Second, time.Millisecond)

	data := randBlocks(t, 4)
	err := writeStream(asNS("a"), n.client, 0, data)
	var le *zerr.LimitError
	require.ErrorAs(t, rpcerr.FromError(err), &le, "the stream past the limit is refused")
	assert.Equal(t, uint64(limit), le.Limit)
	assert.Contains(t, err.Error(), "concurrent streams of namespace a")
	rs, err := n.client.ReadStream(asNS("a"), &v1.ReadRequest{Lba: 0, Blocks: 1})
	require.NoError(t, err)
	_, err = rs.Recv()
	require.ErrorAs(t, rpcerr.FromError(err), &le, "read streams count too")

	require.NoError(t, writeStream(asNS("b"), n.client, zoneBlocks, data), "another namespace is served")

	require.NoError(t, open[0].Send(&v1.WriteRequest{Lba: 2 * zoneBlocks, Data: data}))
	_, err = open[0].CloseAndRecv()
	require.NoError(t, err)
	require.NoError(t, writeStream(asNS("a"), n.client, 3*zoneBlocks, data), "a slot is free again")
	assert.Equal(t, 2.0, testutil.ToFloat64(n.svc.m.limitRefusals.WithLabelValues("streams")))
}

// A WriteStream whose client stops sending — having sent a message, or in
// the middle of one: the handler waits for the next either way — is ended
// with DEADLINE_EXCEEDED once the idle deadline passes (virtual time), and
// gives back its stream slot and bytes.
func TestStalledWriteStreamEnds(t *testing.T) {
	clk := clock.NewVirtual()
	n := startNodeCfg(t, "idle", false, true, true, func(c *Config) {
		c.Clock, c.StreamIdleTimeout, c.MaxNamespaceStreams = clk, time.Minute, 1
	})
	ctx, cancel := context.WithCancel(asNS("a"))
	defer cancel()
	ws, err := n.client.WriteStream(ctx)
	require.NoError(t, err)
	require.NoError(t, ws.Send(&v1.WriteRequest{Lba: 0, Data: randBlocks(t, 64)}))
	require.Eventually(t, func() bool { return n.svc.receiving.Load() == 1 }, 10*time.Second, time.Millisecond,
		"the node waits for the next message")
	s, _ := n.svc.nsUsage("a")
	require.Equal(t, 1, s)

	clk.Advance(time.Minute)
	err = ws.RecvMsg(new(v1.WriteResponse))
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded, "got %v", err)
	assert.Equal(t, 1.0, testutil.ToFloat64(n.svc.m.recvTimeouts.WithLabelValues("write_stream")))
	s, b := n.svc.nsUsage("a")
	assert.Zero(t, s, "the slot is given back")
	assert.Zero(t, b, "the bytes are given back")
	// (the stalled stream's 64 blocks were held, not written: less than a piece)
	require.NoError(t, writeStream(asNS("a"), n.client, 0, randBlocks(t, 4)), "the namespace is served again")
}

// Stream data held for a namespace past its in-flight limit is refused.
func TestNamespaceInflightLimit(t *testing.T) {
	n := startNodeCfg(t, "inflight", false, true, true, func(c *Config) { c.MaxNamespaceInflightBytes = 1 << 20 })
	err := writeStream(asNS("a"), n.client, 0, randBlocks(t, 512)) // 2 MiB in one message
	var le *zerr.LimitError
	require.ErrorAs(t, rpcerr.FromError(err), &le)
	assert.Contains(t, err.Error(), "in-flight stream bytes of namespace a")
	_, b := n.svc.nsUsage("a")
	assert.Zero(t, b)
	require.NoError(t, writeStream(asNS("a"), n.client, 0, randBlocks(t, 128)), "within the limit")
}

// A minimum revision far past the node's view of etcd is refused at once
// (it cannot be reached; waiting for it cost seconds and etcd requests per
// call), and calls waiting for a reachable one are bounded in number; a
// reachable revision is served.
func TestMinRevisionBounded(t *testing.T) {
	n := startNode(t, "minrev", true)
	grant(t, "minrev", 0, "a")
	waitGrant(t, n, 0, "a")
	resp, err := etcdClient(t).Get(context.Background(), "minrev-probe")
	require.NoError(t, err)
	cur := resp.Header.Revision

	read := func(rev int64) error {
		_, err := n.client.Read(wire.WithMinRevision(asNS("a"), rev), &v1.ReadRequest{Lba: 0, Blocks: 1})
		return rpcerr.FromError(err)
	}
	err = read(math.MaxInt64)
	var le *zerr.LimitError
	require.ErrorAs(t, err, &le)
	assert.Contains(t, err.Error(), "minimum revision")
	assert.Equal(t, 1.0, testutil.ToFloat64(n.svc.m.limitRefusals.WithLabelValues("revision_lead")))

	n.svc.grants.maxWaiters = 1
	waited := make(chan error, 1)
	go func() { waited <- read(cur + 1000) }() // reachable, not reached: waits
	require.Eventually(t, func() bool { return n.svc.grants.waiters.Load() == 1 }, 10*time.Second, time.Millisecond)
	err = read(cur + 1000)
	require.ErrorAs(t, err, &le, "a second waiter is refused at once")
	assert.Contains(t, err.Error(), "waiting for a minimum revision")
	require.ErrorIs(t, <-waited, zerr.ErrUnavailable, "the waiter gives up after the bounded wait")

	require.NoError(t, read(cur), "a revision the node has seen is served")
}

// A WriteStream whose first message stops in the middle — its length
// prefix promises 1 MiB, 1000 bytes come — is ended with DEADLINE_EXCEEDED
// after the idle deadline (virtual time). Written frame by frame over
// HTTP/2, as a hostile client would.
func TestPartialWriteStreamMessageEnds(t *testing.T) {
	clk := clock.NewVirtual()
	n := startNodeCfg(t, "partial", false, true, true, func(c *Config) { c.Clock, c.StreamIdleTimeout = clk, time.Minute })
	c, err := net.Dial("tcp", n.addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, http2.ClientPreface)
	require.NoError(t, err)
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	require.NoError(t, fr.WriteSettings())
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", v1.ZonedDevice_WriteStream_FullMethodName},
		{":authority", "node"}, {"content-type", "application/grpc"}, {"te", "trailers"}, {wire.NamespaceKey, "a"}} {
		require.NoError(t, enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}))
	}
	require.NoError(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}))
	msg := make([]byte, 5+1000)
	binary.BigEndian.PutUint32(msg[1:5], 1<<20)
	require.NoError(t, fr.WriteData(1, false, msg))
	require.Eventually(t, func() bool { return n.svc.receiving.Load() == 1 }, 10*time.Second, time.Millisecond,
		"the node waits for the rest of the message")

	clk.Advance(time.Minute)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
	for {
		f, err := fr.ReadFrame()
		require.NoError(t, err)
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			_ = fr.WriteSettingsAck()
		}
		mh, ok := f.(*http2.MetaHeadersFrame)
		if !ok || f.Header().StreamID != 1 {
			continue
		}
		fields := map[string]string{}
		for _, hf := range mh.RegularFields() {
			fields[hf.Name] = hf.Value
		}
		if st := fields["grpc-status"]; st != "" {
			assert.Equal(t, "4", st, "DEADLINE_EXCEEDED: %s", fields["grpc-message"])
			break
		}
	}
	assert.Equal(t, 1.0, testutil.ToFloat64(n.svc.m.recvTimeouts.WithLabelValues("write_stream")))
	s, b := n.svc.nsUsage("a")
	assert.Zero(t, s)
	assert.Zero(t, b)
}
