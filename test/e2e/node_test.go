package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/etcdlocal"
	"github.com/zonefleet/zonefleet/pkg/rpcerr"
	"github.com/zonefleet/zonefleet/pkg/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// smallDrive: 4 chips with single-die zones (D_zone 1) of 512 blocks (2 MiB), 24 zones.
var smallDrive = []string{"--channels=2", "--ways=2", "--pages-per-block=128", "--blocks-per-chip=8", "--dzone=1", "--spare-blocks-per-chip=2"}

func dial(t *testing.T, addr string) v1.ZonedDeviceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, append(rpcerr.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return v1.NewZonedDeviceClient(conn)
}

// block returns the deterministic content of one block: a hash of its address.
func block(zone uint32, lba uint64) []byte {
	b := make([]byte, 4096)
	var seed [12]byte
	binary.LittleEndian.PutUint32(seed[:4], zone)
	binary.LittleEndian.PutUint64(seed[4:], lba)
	for i := 0; i < 4096; i += 32 {
		h := sha256.Sum256(append(seed[:], byte(i/32)))
		copy(b[i:], h[:])
	}
	return b
}

func TestNodeSurvivesKill9UnderConcurrentWriters(t *testing.T) {
	data := t.TempDir()
	args := append([]string{"--standalone", "--data=" + data, "--clock=realtime"}, smallDrive...)
	p := start(t, "ssdnode", args...)
	c := dial(t, p.grpcAddr)
	ctx := wire.WithNamespace(context.Background(), "crash")

	id, err := c.Identify(ctx, &v1.IdentifyRequest{})
	require.NoError(t, err)
	zoneSize := id.GetZoneSize()
	const writers, per = 4, 8 // blocks per write
	acked := make([]atomic.Uint64, writers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			zone := uint32(w)
			start := uint64(zone) * zoneSize
			for off := uint64(0); off+per <= id.GetZoneCapacity(); off += per {
				select {
				case <-stop:
					return
				default:
				}
				var buf bytes.Buffer
				for i := uint64(0); i < per; i++ {
					buf.Write(block(zone, start+off+i))
				}
				if _, err := c.Write(ctx, &v1.WriteRequest{Lba: start + off, Data: buf.Bytes()}); err != nil {
					return // the node is gone
				}
				acked[w].Store(off + per)
			}
		}(w)
	}
	// Kill once every writer has a few acknowledged writes, while they are still writing.
	require.Eventually(t, func() bool {
		for w := range acked {
			if acked[w].Load() < 4*per {
				return false
			}
		}
		return true
	}, 60*time.Second, 5*time.Millisecond)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.done
	close(stop)
	wg.Wait()

	p2 := start(t, "ssdnode", args...)
	c2 := dial(t, p2.grpcAddr)
	rep, err := c2.ReportZones(ctx, &v1.ReportZonesRequest{MaxZones: writers})
	require.NoError(t, err)
	for w := 0; w < writers; w++ {
		zone := uint32(w)
		start := uint64(zone) * zoneSize
		got := acked[w].Load()
		wp := rep.GetZones()[w].GetWritePointer() - start
		// Every acknowledged block survived; at most the one write in flight at the kill may have landed too.
		assert.GreaterOrEqual(t, wp, got, "zone %d: write pointer below the acknowledged extent", zone)
		assert.LessOrEqual(t, wp, got+per, "zone %d: write pointer past the last write in flight", zone)
		for off := uint64(0); off < got; off += 64 {
			n := min(64, got-off)
			r, err := c2.Read(ctx, &v1.ReadRequest{Lba: start + off, Blocks: uint32(n)})
			require.NoError(t, err)
			for i := uint64(0); i < n; i++ {
				require.True(t, bytes.Equal(block(zone, start+off+i), r.GetData()[i*4096:(i+1)*4096]), "zone %d LBA %d", zone, start+off+i)
			}
		}
		t.Logf("zone %d: %d blocks acknowledged, write pointer at +%d after restart", zone, got, wp)
	}
}

func TestNodeRegistersAndUnregisters(t *testing.T) {
	etcd, err := etcdlocal.Start(t.TempDir(), "")
	require.NoError(t, err)
	defer etcd.Close()
	cli, err := etcd.Client()
	require.NoError(t, err)
	defer cli.Close()

	args := append([]string{"--id=e2e-node", "--data=" + t.TempDir(), "--etcd-endpoints=" + etcd.Endpoints()[0], "--lease-ttl=10s", "--clock=off"}, smallDrive...)
	p := start(t, "ssdnode", args...)
	ctx := context.Background()
	var rec cluster.NodeRecord
	require.Eventually(t, func() bool {
		resp, err := cli.Get(ctx, cluster.NodeKey("e2e-node"))
		if err != nil || len(resp.Kvs) != 1 {
			return false
		}
		rec, err = cluster.DecodeNode(string(resp.Kvs[0].Key), resp.Kvs[0].Value)
		return err == nil
	}, 60*time.Second, 20*time.Millisecond)
	assert.Equal(t, p.grpcAddr, rec.Addr)
	require.Len(t, rec.Devices, 1)
	assert.Equal(t, uint32(4), rec.Devices[0].FCGs)
	assert.Equal(t, uint64(512), rec.Devices[0].ZoneSize)

	// Without a grant, a namespace cannot write.
	c := dial(t, p.grpcAddr)
	_, err = c.Write(wire.WithNamespace(ctx, "a"), &v1.WriteRequest{Lba: 0, Data: block(0, 0)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not granted")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, <-p.done)
	resp, err := cli.Get(ctx, cluster.NodeKey("e2e-node"))
	require.NoError(t, err)
	assert.Empty(t, resp.Kvs, "a clean shutdown revokes the lease at once")
}

func TestNodeRefusesOtherGeometry(t *testing.T) {
	data := t.TempDir()
	p := start(t, "ssdnode", append([]string{"--standalone", "--data=" + data, "--clock=off"}, smallDrive...)...)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, <-p.done)
	out, code := run(t, nil, "ssdnode", append([]string{"--insecure", "--insecure-open-access", "--standalone", "--data=" + data, "--listen=127.0.0.1:0", "--http-listen=", "--clock=off"}, append(smallDrive, "--dzone=2")...)...)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "geometry mismatch")
}
