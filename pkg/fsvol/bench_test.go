package fsvol_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/client"
	"github.com/zonefleet/zonefleet/pkg/fsvol"
	"github.com/zonefleet/zonefleet/pkg/lfs"
	"github.com/zonefleet/zonefleet/pkg/localcluster"
)

// BenchmarkVolume measures the Volume over a real in-process cluster (three
// nodes, embedded etcd, gRPC over loopback, no modelled device latency; 2 MiB
// v-zones of four 512 KiB zones, the file system's segment size):
// sequential writes that open, fill and finish v-zones as the file system's
// logs do, 128 KiB sequential reads (the kernel's read-ahead unit) and random
// 4 KiB reads. Profile with
//
//	go test -run '^$' -bench Volume -benchtime 2s -cpuprofile cpu.out ./pkg/fsvol/
func BenchmarkVolume(b *testing.B) {
	ctx := context.Background()
	cl, err := localcluster.Start(ctx, localcluster.Config{Dir: b.TempDir(), Nodes: 3, Clock: "off", Device: localcluster.TinyDevice()})
	require.NoError(b, err)
	defer cl.Close()
	admin, err := client.New(ctx, cl.AdminClientConfig())
	require.NoError(b, err)
	_, err = admin.Namespaces().Create(ctx, &v1.CreateNamespaceRequest{Name: "bench", MaxActiveVzones: 8, ZonesPerVzone: 4})
	require.NoError(b, err)
	admin.Close()
	c, err := client.New(ctx, cl.ClientConfig("bench"))
	require.NoError(b, err)
	defer c.Close()
	vol, err := fsvol.New(ctx, c, fsvol.Options{})
	require.NoError(b, err)
	geo := vol.Geometry()
	bs := uint64(geo.BlockSize)

	// The zones written by the write benchmark; the oldest are reset so the
	// namespace never runs out.
	var zones []lfs.ZoneID
	var cur lfs.ZoneID
	var wp uint64
	have := false
	const piece = 256 << 10
	data := make([]byte, piece)
	for i := range data {
		data[i] = byte(i * 7)
	}
	write := func(b *testing.B) {
		if !have || wp+piece/bs > geo.ZoneBlocks {
			z, err := vol.OpenZone(ctx)
			require.NoError(b, err)
			cur, wp, have = z, 0, true
			zones = append(zones, z)
			// Resets are the cleaner's work, not the write path's: untimed.
			b.StopTimer()
			for len(zones) > 4 {
				require.NoError(b, vol.Reset(ctx, zones[0]))
				zones = zones[1:]
			}
			b.StartTimer()
		}
		require.NoError(b, vol.Write(ctx, cur, wp, data, false))
		wp += piece / bs
	}
	b.Run("seqwrite256k", func(b *testing.B) {
		b.SetBytes(piece)
		for i := 0; i < b.N; i++ {
			write(b)
		}
		require.NoError(b, vol.Flush(ctx))
	})
	// A full zone to read from.
	for have && wp+piece/bs <= geo.ZoneBlocks {
		write(b)
	}
	rz := cur
	if wp < 64 {
		write(b)
		rz = cur
	}
	readable := wp
	b.Run("seqread128k", func(b *testing.B) {
		const n = 32
		buf := make([]byte, n*bs)
		b.SetBytes(int64(len(buf)))
		off := uint64(0)
		for i := 0; i < b.N; i++ {
			if off+n > readable {
				off = 0
			}
			require.NoError(b, vol.Read(ctx, rz, off, buf))
			off += n
		}
	})
	b.Run("randread4k", func(b *testing.B) {
		buf := make([]byte, bs)
		b.SetBytes(int64(bs))
		rng := rand.New(rand.NewPCG(1, 2))
		for i := 0; i < b.N; i++ {
			require.NoError(b, vol.Read(ctx, rz, rng.Uint64N(readable), buf))
		}
	})
	// The baseline of the same run: one bare gRPC Read of one block at the
	// node holding block 0 of the zone read above (no client stack).
	b.Run("grpcread4k", func(b *testing.B) {
		loc, err := c.VZone(uint64(rz)).Locate(ctx, 0)
		require.NoError(b, err)
		dev, dctx, err := c.Device(loc.Node, loc.Addr)
		require.NoError(b, err)
		b.SetBytes(int64(bs))
		for i := 0; i < b.N; i++ {
			r, err := dev.Read(dctx, &v1.ReadRequest{Device: loc.Device, Lba: loc.LBA, Blocks: 1})
			require.NoError(b, err)
			require.Len(b, r.GetData(), int(bs))
		}
	})
	b.Run("fsync", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			write(b)
			require.NoError(b, vol.Flush(ctx))
		}
	})
	// fsync after one block in each of four v-zones (as the file system's
	// logs leave them): the same three drives, however many v-zones.
	b.Run("fsync4zones", func(b *testing.B) {
		const k = 4
		var zs [k]lfs.ZoneID
		var wps [k]uint64
		open := func(i int) {
			b.StopTimer()
			z, err := vol.OpenZone(ctx)
			require.NoError(b, err)
			zs[i], wps[i] = z, 0
			b.StartTimer()
		}
		for i := range zs {
			open(i)
		}
		blk := data[:bs]
		for n := 0; n < b.N; n++ {
			for i := range zs {
				if wps[i] == geo.ZoneBlocks {
					open(i) // the full one finished by itself
				}
				require.NoError(b, vol.Write(ctx, zs[i], wps[i], blk, false))
				wps[i]++
			}
			require.NoError(b, vol.Flush(ctx))
		}
		b.StopTimer()
		for _, z := range zs {
			require.NoError(b, vol.Reset(ctx, z))
		}
	})
}
