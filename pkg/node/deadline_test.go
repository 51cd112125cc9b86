package node

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/clock"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"github.com/zonefleet/zonefleet/pkg/zerr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// A client that opens a ReadStream and stops reading (its flow-control
// window is full after the first bytes) holds nothing: the grant of the
// zone it reads is revoked and the zone reset while it stalls, another
// tenant's I/O on the same device goes on, and the stalled call ends after
// the send deadline with its sender goroutine gone (real gRPC server, real
// etcd grants). The send deadline runs on a virtual clock: the call stalls
// until the test moves it, however slow the machine.
func TestStalledReaderBlocksNothing(t *testing.T) {
	const timeout = 500 * time.Millisecond
	clk := clock.NewVirtual()
	n := startNodeCfg(t, "stall", true, true, true, func(c *Config) { c.SendTimeout, c.Clock = timeout, clk })
	grant(t, "stall", 0, "a")
	grant(t, "stall", 2, "b")
	waitGrant(t, n, 0, "a")
	waitGrant(t, n, 2, "b")
	data := randBlocks(t, 256)
	for i := uint64(0); i < 8; i++ { // zone 0 full: 8 MiB
		_, err := n.client.Write(asNS("a"), &v1.WriteRequest{Lba: i * 256, Data: data})
		require.NoError(t, err)
	}

	// The stalled reader: a small fixed window (no BDP growth) and no Recv.
	conn, err := grpc.NewClient(n.addr, append(rpcerr.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10),
		grpc.WithDefaultCallOptions(append(wire.CallOptions(), grpc.MaxCallRecvMsgSize(wire.MaxMessageBytes))...))...)
	require.NoError(t, err)
	defer conn.Close()
	rctx, cancel := context.WithCancel(asNS("a"))
	defer cancel()
	stream, err := v1.NewZonedDeviceClient(conn).ReadStream(rctx, &v1.ReadRequest{Lba: 0, Blocks: 2048})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return n.svc.sending.Load() == 1 }, 30*time.Second, time.Millisecond, "the node is sending")

	// The revocation reset of the zone being read runs at once.
	_, err = etcdClient(t).Delete(context.Background(), cluster.GrantKey("stall", 0, 0))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return zoneWP(t, n.client, 0) == 0 }, 30*time.Second, 5*time.Millisecond,
		"the revocation reset waits for a reader that does not read")
	// Another tenant's I/O on the device is served meanwhile.
	_, err = n.client.Write(asNS("b"), &v1.WriteRequest{Lba: 4096, Data: data})
	require.NoError(t, err)
	r, err := n.client.Read(asNS("b"), &v1.ReadRequest{Lba: 4096, Blocks: 256})
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, r.GetData()))

	// The stalled call ends at the send deadline; no sender is left. The
	// clock moves until the handler's deadline timer (armed when it began
	// waiting for the stalled send) has fired.
	assert.Zero(t, testutil.ToFloat64(n.svc.m.sendTimeouts.WithLabelValues("read_stream")), "no deadline before the clock moved")
	require.Eventually(t, func() bool {
		clk.Advance(timeout)
		return testutil.ToFloat64(n.svc.m.sendTimeouts.WithLabelValues("read_stream")) == 1 && n.svc.sending.Load() == 0
	}, 30*time.Second, 5*time.Millisecond)
	var got int
	for {
		m, err := stream.Recv()
		if err != nil {
			assert.NotErrorIs(t, rpcerr.FromError(err), context.Canceled)
			break
		}
		got += len(m.GetData())
	}
	assert.Less(t, got, 2048*4096, "the stream did not complete")
}

// A ReadStream that is read to the end still delivers every block in order
// with the pipelined sender (the next piece is read while one is sent).
func TestReadStreamPipelinedDeliversAll(t *testing.T) {
	n := startNode(t, "pipe", false)
	data := randBlocks(t, 2048)
	for i := uint64(0); i < 8; i++ {
		_, err := n.client.Write(asAdmin(), &v1.WriteRequest{Lba: i * 256, Data: data[i*256*4096 : (i+1)*256*4096]})
		require.NoError(t, err)
	}
	stream, err := n.client.ReadStream(asAdmin(), &v1.ReadRequest{Lba: 0, Blocks: 2048})
	require.NoError(t, err)
	var got []byte
	for {
		m, err := stream.Recv()
		if err != nil {
			break
		}
		assert.Equal(t, uint64(len(got)/4096), m.GetLba())
		got = append(got, m.GetData()...)
	}
	assert.True(t, bytes.Equal(data, got))
	assert.Zero(t, n.svc.sending.Load())
}

// A compaction nobody waits for is dropped after its time to live: the
// operation and the device's record of it are released, a metric counts
// it, and a late WaitCompaction finds nothing. The time to live runs on a
// virtual clock: nothing expires before the test moves it.
func TestAbandonedCompactionExpires(t *testing.T) {
	const ttl = time.Minute
	clk := clock.NewVirtual()
	n := startNodeCfg(t, "expire", false, true, true, func(c *Config) { c.CompactionTTL, c.Clock = ttl, clk })
	_, err := n.client.Write(asAdmin(), &v1.WriteRequest{Lba: 0, Data: randBlocks(t, 64)})
	require.NoError(t, err)
	op, err := n.client.ZoneCompaction(asAdmin(), &v1.ZoneCompactionRequest{Copies: []*v1.CompactionCopy{{SrcLba: 0, Blocks: 64, DstLba: 2048}}})
	require.NoError(t, err)
	n.svc.opsMu.Lock()
	localID := n.svc.ops[op.GetOperationId()].localID
	n.svc.opsMu.Unlock()
	assert.Equal(t, 1, n.svc.OpenCompactions())

	clk.Advance(ttl)
	require.Eventually(t, func() bool {
		return n.svc.OpenCompactions() == 0 && testutil.ToFloat64(n.svc.m.compactionsExpired) == 1
	}, 30*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := n.devs[0].WaitCompaction(ctx, localID)
		return errors.Is(err, zerr.ErrNotFound)
	}, 30*time.Second, 10*time.Millisecond, "the device's record is released")
	_, err = n.client.WaitCompaction(asAdmin(), &v1.WaitCompactionRequest{OperationId: op.GetOperationId()})
	assert.ErrorIs(t, err, zerr.ErrNotFound)

	// One that is waited for is not dropped: its expiry, when it comes,
	// finds it taken and counts nothing.
	op, err = n.client.ZoneCompaction(asAdmin(), &v1.ZoneCompactionRequest{Copies: []*v1.CompactionCopy{{SrcLba: 0, Blocks: 64, DstLba: 4096}}})
	require.NoError(t, err)
	res, err := n.client.WaitCompaction(asAdmin(), &v1.WaitCompactionRequest{OperationId: op.GetOperationId()})
	require.NoError(t, err)
	assert.Equal(t, uint64(64), res.GetCopybackBlocks()+res.GetReadProgramBlocks())
	clk.Advance(ttl)
	assert.Equal(t, float64(1), testutil.ToFloat64(n.svc.m.compactionsExpired))
}

// stuckPeer accepts PeerWrite streams and never reads them.
type stuckPeer struct {
	v1.UnimplementedZonedDeviceServer
	stop chan struct{}
}

func (p *stuckPeer) PeerWrite(stream v1.ZonedDevice_PeerWriteServer) error {
	select {
	case <-p.stop:
	case <-stream.Context().Done():
	}
	return nil
}

// A peer that stops reading does not hang the pusher: the push fails with
// DeadlineExceeded at the send deadline, WaitCompaction reports it, and a
// metric counts it.
func TestPeerPushDeadline(t *testing.T) {
	n := startNodeCfg(t, "pusher", false, true, true, func(c *Config) { c.SendTimeout = 300 * time.Millisecond })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	peer := &stuckPeer{stop: make(chan struct{})}
	srv := grpc.NewServer(grpc.InitialWindowSize(64<<10), grpc.InitialConnWindowSize(64<<10))
	v1.RegisterZonedDeviceServer(srv, peer)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		close(peer.stop)
		srv.Stop()
	})

	data := randBlocks(t, 256)
	for i := uint64(0); i < 8; i++ {
		_, err := n.client.Write(asAdmin(), &v1.WriteRequest{Lba: i * 256, Data: data})
		require.NoError(t, err)
	}
	op, err := n.client.ZoneCompaction(asAdmin(), &v1.ZoneCompactionRequest{Copies: []*v1.CompactionCopy{
		{SrcLba: 0, Blocks: 2048, DstLba: 0, Peer: &v1.PeerTarget{NodeId: "stuck", Addr: lis.Addr().String()}},
	}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(asAdmin(), 30*time.Second) // far beyond the deadline: a hang fails here
	defer cancel()
	_, err = n.client.WaitCompaction(ctx, &v1.WaitCompactionRequest{OperationId: op.GetOperationId()})
	require.Error(t, err)
	assert.ErrorIs(t, rpcerr.FromError(err), context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "took no message")
	assert.Equal(t, float64(1), testutil.ToFloat64(n.svc.m.sendTimeouts.WithLabelValues("peer_push")))
}
