package fioengine_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/fioengine"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

const (
	bs       = 4096
	zoneSize = 128 * bs // TinyDevice
	zoneCap  = 96 * bs  // below the size, as set below
)

// startCluster runs a real two-node cluster in this process whose drives'
// zones hold 96 of their 128 blocks.
func startCluster(t *testing.T) *localcluster.Cluster {
	t.Helper()
	dev := localcluster.TinyDevice()
	dev.ZoneCapacity = zoneCap / bs
	c, err := localcluster.Start(context.Background(), localcluster.Config{Dir: t.TempDir(), Nodes: 2, Arbiters: 1,
		Clock: "off", SessionTTL: time.Second, Device: dev})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func openDrive(t *testing.T, c *localcluster.Cluster) fioengine.Target {
	t.Helper()
	cfg := c.ClientConfig("") // the admin certificate
	cfg.Etcd = c.Etcd.Endpoints()
	d, err := fioengine.OpenWith(context.Background(), cfg, fioengine.Options{Node: "node-2", Device: 0})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d
}

func random(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func report(t *testing.T, d fioengine.Target, z uint64) fioengine.Zone {
	t.Helper()
	zs, err := d.Report(context.Background(), z, 1)
	require.NoError(t, err)
	require.Len(t, zs, 1)
	return zs[0]
}

func TestDriveGeometryAndReport(t *testing.T) {
	d := openDrive(t, startCluster(t))
	g := d.Geometry()
	assert.Equal(t, uint64(bs), g.BlockSize)
	assert.Equal(t, uint64(zoneSize), g.ZoneSize)
	assert.Equal(t, uint64(zoneCap), g.ZoneCap, "the drive's capacity, below the size")
	assert.Equal(t, uint32(14), g.MaxOpen, "the drive's MOR")
	assert.Equal(t, g.Zones*g.ZoneSize, g.Size())

	zs, err := d.Report(context.Background(), 3, 5)
	require.NoError(t, err)
	require.Len(t, zs, 5)
	for i, z := range zs {
		start := uint64(3+i) * zoneSize
		assert.Equal(t, fioengine.Zone{Start: start, WP: start, Len: zoneSize, Cap: zoneCap, Cond: fioengine.CondEmpty}, z)
	}
	last, err := d.Report(context.Background(), g.Zones-1, 10)
	require.NoError(t, err)
	assert.Len(t, last, 1, "a report ends at the last zone")
}

// Writes to one zone submitted back to back run in order; a zone written
// to its capacity is full; everything reads back.
func TestQueueOrdersWritesOfAZone(t *testing.T) {
	d := openDrive(t, startCluster(t))
	q := fioengine.NewQueue(d, false)
	t.Cleanup(q.Close)
	data := map[uint64][]byte{}
	n := 0
	for i := uint64(0); i < zoneCap/(8*bs); i++ { // 12 writes of 32 KiB into each of zones 4 and 5, interleaved
		for _, z := range []uint64{4, 5} {
			off := z*zoneSize + i*8*bs
			data[off] = random(8 * bs)
			q.Submit(fioengine.Op{Tag: uintptr(off), Kind: fioengine.KindWrite, Off: off, Buf: data[off]})
			n++
		}
	}
	for got := 0; got < n; {
		cs := q.Wait(1, n, -1)
		require.NotEmpty(t, cs)
		for _, c := range cs {
			require.NoError(t, c.Err, "write at %d", c.Tag)
			assert.Zero(t, c.Errno)
		}
		got += len(cs)
	}
	for _, z := range []uint64{4, 5} {
		r := report(t, d, z)
		assert.Equal(t, fioengine.CondFull, r.Cond)
		assert.Equal(t, z*zoneSize+zoneCap, r.WP)
	}
	for off, want := range data {
		buf := make([]byte, len(want))
		c := q.Do(fioengine.Op{Kind: fioengine.KindRead, Off: off, Buf: buf})
		require.NoError(t, c.Err)
		require.True(t, bytes.Equal(want, buf), "data at %d", off)
	}
}

// A write off the write pointer fails with EIO (a kernel ZNS device's
// errno) and changes nothing; a trim resets whole zones only.
func TestWritePointerAndTrim(t *testing.T) {
	d := openDrive(t, startCluster(t))
	q := fioengine.NewQueue(d, false)
	t.Cleanup(q.Close)
	const z = 7
	c := q.Do(fioengine.Op{Kind: fioengine.KindWrite, Off: z * zoneSize, Buf: random(4 * bs)})
	require.NoError(t, c.Err)
	c = q.Do(fioengine.Op{Kind: fioengine.KindWrite, Off: z*zoneSize + 8*bs, Buf: random(bs)})
	require.ErrorIs(t, c.Err, zerr.ErrWritePointer)
	assert.Equal(t, int(syscall.EIO), c.Errno)
	assert.Equal(t, uint64(z*zoneSize+4*bs), report(t, d, z).WP, "the refused write changed nothing")

	c = q.Do(fioengine.Op{Kind: fioengine.KindTrim, Off: z*zoneSize + bs, Len: zoneSize})
	assert.Equal(t, int(syscall.EINVAL), c.Errno, "a trim inside a zone")
	c = q.Do(fioengine.Op{Kind: fioengine.KindTrim, Off: z * zoneSize, Len: zoneSize})
	require.NoError(t, c.Err)
	r := report(t, d, z)
	assert.Equal(t, fioengine.CondEmpty, r.Cond)
	assert.Equal(t, uint64(z*zoneSize), r.WP)

	c = q.Do(fioengine.Op{Kind: fioengine.KindWrite, Off: d.Geometry().Size(), Buf: random(bs)})
	assert.Equal(t, int(syscall.EINVAL), c.Errno, "past the end")
	c = q.Do(fioengine.Op{Kind: fioengine.KindWrite, Off: z * zoneSize, Buf: random(100)})
	assert.Equal(t, int(syscall.EINVAL), c.Errno, "not whole blocks")
}

// Zone appends land at the write pointer; the engine checks where.
func TestZoneAppend(t *testing.T) {
	d := openDrive(t, startCluster(t))
	q := fioengine.NewQueue(d, true)
	t.Cleanup(q.Close)
	const z = 9
	want := random(16 * bs)
	for i := 0; i < 4; i++ {
		c := q.Do(fioengine.Op{Kind: fioengine.KindWrite, Off: z*zoneSize + uint64(i)*4*bs, Buf: want[i*4*bs : (i+1)*4*bs]})
		require.NoError(t, c.Err)
	}
	c := q.Do(fioengine.Op{Kind: fioengine.KindWrite, Off: z * zoneSize, Buf: random(bs)})
	require.ErrorIs(t, c.Err, zerr.ErrWritePointer, "an append meant for the zone start lands at the write pointer: refused")
	got := make([]byte, len(want))
	require.NoError(t, q.Do(fioengine.Op{Kind: fioengine.KindRead, Off: z * zoneSize, Buf: got}).Err)
	assert.True(t, bytes.Equal(want, got))
}

// A namespace as a zoned device: zone i is v-zone i; writing a zone opens
// the v-zone, filling it finishes it, a reset gives it back.
func TestVZoneTarget(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	admin, err := client.New(ctx, c.ClientConfig(""))
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "demo", MaxActiveVzones: 2, ZonesPerVzone: 2, Vzones: 6})
	require.NoError(t, err)

	v, err := fioengine.OpenWith(ctx, c.ClientConfig("demo"), fioengine.Options{Namespace: "demo"})
	require.NoError(t, err)
	t.Cleanup(v.Close)
	g := v.Geometry()
	assert.Equal(t, uint64(6), g.Zones, "the namespace's quota")
	assert.Equal(t, uint64(2*zoneCap), g.ZoneSize, "a v-zone: two zones' capacity")
	assert.Equal(t, g.ZoneSize, g.ZoneCap)
	assert.Equal(t, uint32(2), g.MaxOpen, "the namespace's grant")

	q := fioengine.NewQueue(v, false)
	t.Cleanup(q.Close)
	const z = 3 // not the lowest empty v-zone: opened by id
	want := random(int(g.ZoneSize))
	for off := 0; off < len(want); off += 64 * bs {
		require.NoError(t, q.Do(fioengine.Op{Kind: fioengine.KindWrite, Off: z*g.ZoneSize + uint64(off), Buf: want[off : off+64*bs]}).Err)
	}
	r := report(t, v, z)
	assert.Equal(t, fioengine.CondFull, r.Cond, "the write that filled it finished the v-zone")
	assert.Equal(t, fioengine.CondEmpty, report(t, v, 0).Cond)
	got := make([]byte, len(want))
	require.NoError(t, q.Do(fioengine.Op{Kind: fioengine.KindRead, Off: z * g.ZoneSize, Buf: got}).Err)
	assert.True(t, bytes.Equal(want, got))

	ns, err := admin.Namespaces().Get(ctx, "demo")
	require.NoError(t, err)
	assert.Zero(t, ns.GetActiveVzones(), "a full v-zone holds no active resources")

	require.NoError(t, q.Do(fioengine.Op{Kind: fioengine.KindTrim, Off: z * g.ZoneSize, Len: g.ZoneSize}).Err)
	assert.Equal(t, fioengine.CondEmpty, report(t, v, z).Cond)
	c2 := q.Do(fioengine.Op{Kind: fioengine.KindWrite, Off: z*g.ZoneSize + bs, Buf: random(bs)})
	assert.Equal(t, int(syscall.EIO), c2.Errno, "a reset v-zone takes writes at its start only")
}

func TestOptionsNeedOneTarget(t *testing.T) {
	for _, o := range []fioengine.Options{{}, {Node: "node-1", Namespace: "demo"}, {Addr: "127.0.0.1:1", Namespace: "x"}} {
		_, err := fioengine.OpenWith(context.Background(), client.Config{}, o)
		assert.ErrorIs(t, err, zerr.ErrInvalidArgument, "%+v", o)
	}
}

func TestErrno(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want syscall.Errno
	}{
		{&zerr.WritePointerError{}, syscall.EIO},
		{&zerr.ZoneFullError{}, syscall.EIO},
		{&zerr.TooManyOpenError{}, syscall.ETOOMANYREFS},
		{&zerr.TooManyActiveError{}, syscall.EOVERFLOW},
		{&zerr.InvalidArgumentError{}, syscall.EINVAL},
		{&zerr.OutOfRangeError{}, syscall.EINVAL},
		{&zerr.NotOwnerError{}, syscall.EACCES},
		{&zerr.UnavailableError{}, syscall.EAGAIN},
		{fmt.Errorf("wrapped: %w", &zerr.WritePointerError{}), syscall.EIO},
		{context.Canceled, syscall.ECANCELED},
		{errors.New("anything else"), syscall.EIO},
	} {
		assert.Equal(t, int(tc.want), fioengine.Errno(tc.err), "%v", tc.err)
	}
	assert.Zero(t, fioengine.Errno(nil))
}
